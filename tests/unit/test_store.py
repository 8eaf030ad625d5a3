"""The queue's verbs on a real SQLite file, with an injected clock: claim order, races, retry policy, user moves."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sweepq.cli.main import main
from sweepq.queue.records import Claim, Outcome, WorkerInfo
from sweepq.queue.states import CellState, CheckpointState, Reason
from sweepq.queue.store import Store
from unit.support import T0, WORKER, FakeClock, Launch, sweep_from

ALL = [f"1.{i}" for i in range(1, 12)] + ["2.1", "2.2"]


def claim(store: Store, cell: str) -> Claim:
    won = store.claim(cell, WORKER)
    assert won is not None, f"could not claim {cell}"
    return won


def end(store: Store, cell: str, reason: Reason | str, **fields: Any) -> CellState | None:
    """Close the cell's current attempt with `reason`."""
    return store.finish(cell, store.cell(cell).attempts, Outcome(reason=str(reason), **fields))


def attempt_ending(store: Store, cell: str, reason: Reason | str, **fields: Any) -> CellState | None:
    claim(store, cell)
    return end(store, cell, reason, **fields)


# -- a fresh root and the claim order -------------------------------------------------


def test_launch_queues_every_cell_in_numeric_order(store: Store) -> None:
    cells = store.cells()
    assert [c.id for c in cells] == ALL  # 1.10 after 1.9
    assert {c.state for c in cells} == {CellState.QUEUED}
    assert [c.attempts for c in cells] == [0] * 13
    assert store.cell("1.10").cfg == {"epochs": 3, "lr": 10}
    assert store.unsettled() == 13


def test_claimable_is_cell_order_numerically(store: Store) -> None:
    assert store.claimable() == ALL


def test_interrupted_cells_are_claimed_first_each_by_cell_order(store: Store) -> None:
    attempt_ending(store, "2.2", Reason.PREEMPTED)  # interrupted first...
    attempt_ending(store, "1.10", Reason.LOST)
    attempt_ending(store, "1.9", Reason.PREEMPTED)
    claim(store, "1.1")  # running: not claimable
    queued = [c for c in ALL if c not in ("1.1", "1.9", "1.10", "2.2")]
    assert store.claimable() == ["1.9", "1.10", "2.2", *queued]


def test_a_claim_is_won_once(store: Store) -> None:
    won = claim(store, "1.2")
    assert (won.cell, won.number, won.cfg, won.nan_step, won.previous_reason) == (
        "1.2",
        1,
        {"epochs": 3, "lr": 2},
        None,
        None,
    )
    assert store.claim("1.2", WorkerInfo("host-b:7", "host-b", 7)) is None
    cell = store.cell("1.2")
    assert (cell.state, cell.attempts) == (CellState.RUNNING, 1)
    assert [a.worker for a in store.attempts("1.2")] == ["host-a:100"]


def test_terminal_cells_cannot_be_claimed(store: Store) -> None:
    attempt_ending(store, "1.1", Reason.COMPLETED)
    attempt_ending(store, "1.2", Reason.ERROR)  # error: 0 -> failed
    store.cancel(["1.3"])
    assert [store.claim(c, WORKER) for c in ("1.1", "1.2", "1.3")] == [None, None, None]
    assert store.claimable()[:2] == ["1.4", "1.5"]


def test_two_stores_racing_from_threads_claim_every_cell_once(store: Store, clock: FakeClock) -> None:
    other = Store.open(store.root, clock=clock)  # a second worker on the same SQLite file
    won: list[list[str]] = [[], []]
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def worker(s: Store, mine: list[str], info: WorkerInfo) -> None:
        try:
            start.wait()
            while cells := s.claimable():
                for cell in cells:
                    if s.claim(cell, info) is not None:
                        mine.append(cell)
                        break
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=worker, args=(s, won[i], WorkerInfo(f"w{i}", "h", i)))
        for i, s in enumerate((store, other))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    other.close()
    assert errors == []
    assert sorted(won[0] + won[1]) == sorted(ALL)  # every cell once: no double claim, none missed
    assert [c.attempts for c in store.cells()] == [1] * 13
    assert len(store.attempts()) == 13


# -- finishing an attempt: where each reason moves the cell ----------------------------

# The sweep's retries: {lost: 2, oom: 1, nan: 1, error: 0, data_error: 0, timeout: 1}, back-off 30 s.
FIRST_ENDING = [
    (Reason.COMPLETED, CellState.DONE, None),
    (Reason.PREEMPTED, CellState.INTERRUPTED, None),
    (Reason.LOST, CellState.INTERRUPTED, None),  # no back-off: a machine that died is not the cell's fault
    (Reason.OOM, CellState.QUEUED, 30),
    (Reason.NAN, CellState.QUEUED, 30),
    (Reason.TIMEOUT, CellState.QUEUED, 30),
    (Reason.ERROR, CellState.FAILED, None),  # error: 0 -> no retry
    (Reason.DATA_ERROR, CellState.FAILED, None),
    (Reason.CANCELLED, CellState.CANCELLED, None),
]


@pytest.mark.parametrize(("reason", "state", "backoff"), FIRST_ENDING)
def test_finish_moves_the_cell_by_reason(store: Store, reason: Reason, state: CellState, backoff: int | None) -> None:
    assert attempt_ending(store, "1.1", reason, end_step=7) is state
    cell = store.cell("1.1")
    assert (cell.state, cell.last_reason, cell.step) == (state, str(reason), 7)
    assert cell.retry_after == (None if backoff is None else T0 + timedelta(seconds=backoff))
    if state is not CellState.CANCELLED:  # see test_cancelled_cells_record_when_they_finished_either_way
        assert cell.finished_at == (T0 if state in (CellState.DONE, CellState.FAILED) else None)
    assert store.attempts("1.1")[0].reason == str(reason)


def test_cancelled_cells_record_when_they_finished_either_way(store: Store, clock: FakeClock) -> None:
    """Cancelled while queued (a user move) or while running (the worker's finish): both are terminal now."""
    clock.advance(60)
    store.cancel(["1.1"])
    claim(store, "1.2")
    store.cancel(["1.2"])
    end(store, "1.2", Reason.CANCELLED)
    assert store.cell("1.1").finished_at == T0 + timedelta(seconds=60)
    assert store.cell("1.2").finished_at == T0 + timedelta(seconds=60)


def test_an_attempt_is_closed_once(store: Store) -> None:
    claim(store, "1.1")
    assert store.finish("1.1", 1, Outcome(reason="lost")) is CellState.INTERRUPTED
    assert store.finish("1.1", 1, Outcome(reason="completed")) is None  # a worker and a reaper raced
    assert store.cell("1.1").state is CellState.INTERRUPTED
    closed = store.attempt("1.1", 1)
    assert closed is not None and closed.reason == "lost"


def test_completed_merges_final_metrics(store: Store) -> None:
    claim(store, "1.1")
    store.progress("1.1", 1, metrics={"val_acc": 0.5, "loss": 1.0})
    end(store, "1.1", Reason.COMPLETED, metrics={"val_acc": 0.7})
    assert store.cell("1.1").metrics == {"val_acc": 0.7, "loss": 1.0}


def test_nan_budget_of_one_allows_two_attempts_ending_nan(store: Store, clock: FakeClock) -> None:
    assert attempt_ending(store, "1.1", Reason.NAN, nan_step=70) is CellState.QUEUED
    clock.advance(30)
    again = claim(store, "1.1")
    assert (again.nan_step, again.previous_reason) == (70, "nan")  # the next attempt rolls back before step 70
    assert end(store, "1.1", Reason.NAN) is CellState.FAILED
    assert [a.reason for a in store.attempts("1.1")] == ["nan", "nan"]


def test_lost_spends_its_own_budget_without_back_off(store: Store) -> None:
    assert attempt_ending(store, "1.1", Reason.LOST) is CellState.INTERRUPTED
    assert attempt_ending(store, "1.1", Reason.LOST) is CellState.INTERRUPTED  # lost: 2, clock never moved
    assert attempt_ending(store, "1.1", Reason.LOST) is CellState.FAILED
    assert store.cell("1.1").attempts == 3


def test_preemption_never_spends_a_budget(store: Store) -> None:
    for _ in range(5):
        assert attempt_ending(store, "1.1", Reason.PREEMPTED) is CellState.INTERRUPTED
    assert attempt_ending(store, "1.1", Reason.NAN) is CellState.QUEUED  # nan: 1 still has its retry
    assert store.cell("1.1").attempts == 6


def test_budgets_are_kept_per_reason(store: Store, clock: FakeClock) -> None:
    assert attempt_ending(store, "1.1", Reason.NAN) is CellState.QUEUED
    clock.advance(1000)
    assert attempt_ending(store, "1.1", Reason.OOM) is CellState.QUEUED  # oom: 1 untouched by the nan
    clock.advance(1000)
    assert attempt_ending(store, "1.1", Reason.LOST) is CellState.INTERRUPTED
    assert attempt_ending(store, "1.1", Reason.OOM) is CellState.FAILED  # the second oom


def test_back_off_waits_on_the_injected_clock(store: Store, clock: FakeClock) -> None:
    attempt_ending(store, "1.1", Reason.OOM)
    assert store.cell("1.1").retry_after == T0 + timedelta(seconds=30)
    assert "1.1" not in store.claimable()
    assert store.claim("1.1", WORKER) is None
    clock.advance(29.999)
    assert "1.1" not in store.claimable()
    assert store.claim("1.1", WORKER) is None
    clock.advance(0.001)
    assert store.claimable()[0] == "1.1"
    assert claim(store, "1.1").number == 2
    assert store.cell("1.1").retry_after is None


def test_back_off_doubles_up_to_its_maximum(tmp_path: Path, clock: FakeClock, launch: Launch) -> None:
    text = "name: b\ntrain: m:f\nretries: {nan: 5, backoff_seconds: 30, backoff_max_seconds: 100}\ngrid: {lr: [1]}\n"
    store = launch(tmp_path / "root", sweep_from(text, tmp_path))
    delays = []
    for _ in range(4):
        claim(store, "1.1")
        start = clock.now
        end(store, "1.1", Reason.NAN)
        after = store.cell("1.1").retry_after
        assert after is not None
        delays.append((after - start).total_seconds())
        clock.now = after
    assert delays == [30, 60, 100, 100]


# -- user moves ---------------------------------------------------------------------


def test_cancel_moves_waiting_cells_and_asks_running_ones(store: Store) -> None:
    claim(store, "1.2")
    attempt_ending(store, "1.3", Reason.COMPLETED)
    attempt_ending(store, "1.4", Reason.LOST)
    assert store.cancel(["1.1", "1.2", "1.3", "1.4"]) == (["1.1", "1.4"], ["1.2"])
    assert store.cell("1.1").state is CellState.CANCELLED
    assert store.cell("1.1").last_reason == "cancelled"
    assert store.cell("1.3").state is CellState.DONE  # terminal: untouched
    running = store.cell("1.2")
    assert (running.state, running.cancel_requested) == (CellState.RUNNING, True)
    assert store.cancel_requested("1.2")
    assert end(store, "1.2", Reason.CANCELLED) is CellState.CANCELLED
    assert not store.cancel_requested("1.2")
    assert [e.kind for e in store.events("1.2")] == ["cancel_requested"]


def test_retry_requeues_failed_and_cancelled_cells_with_a_fresh_budget(store: Store, clock: FakeClock) -> None:
    attempt_ending(store, "1.1", Reason.NAN)
    clock.advance(30)
    assert attempt_ending(store, "1.1", Reason.NAN) is CellState.FAILED
    store.cancel(["1.2"])
    assert store.retry(["1.1", "1.2", "1.3"]) == ["1.1", "1.2"]  # 1.3 is queued already
    assert [store.cell(c).state for c in ("1.1", "1.2")] == [CellState.QUEUED, CellState.QUEUED]
    assert store.claimable()[:2] == ["1.1", "1.2"]  # no back-off left over
    assert attempt_ending(store, "1.1", Reason.NAN) is CellState.QUEUED  # nan: 1 counts again from here
    assert store.cell("1.1").attempts == 3


def test_reset_starts_a_cell_over(store: Store) -> None:
    claim(store, "1.1")
    store.progress("1.1", 1, step=30, total_steps=30, metrics={"val_acc": 0.9}, best=0.9, best_step=30)
    store.record_checkpoint("1.1", 30, path="cells/1.1/checkpoints/step-30")
    end(store, "1.1", Reason.COMPLETED, end_step=30)
    claim(store, "1.2")
    assert store.reset(["1.1", "1.2"]) == ["1.1"]  # a running cell must be cancelled first
    cell = store.cell("1.1")
    assert (cell.state, cell.step, cell.metrics, cell.best, cell.last_reason, cell.finished_at) == (
        CellState.QUEUED,
        None,
        {},
        None,
        None,
        None,
    )
    assert [k.state for k in store.checkpoints("1.1")] == [CheckpointState.SUPERSEDED]
    assert store.cell("1.2").state is CellState.RUNNING


# -- the records: progress, checkpoints, attempts round trip --------------------------


def test_progress_round_trips_and_ignores_a_stale_attempt(store: Store, clock: FakeClock) -> None:
    claim(store, "1.1")
    clock.advance(100)
    store.progress(
        "1.1", 1, step=50, total_steps=200, epoch=1.5, total_epochs=6, metrics={"val_acc": 0.5}, best=0.5, best_step=40
    )
    store.progress("1.1", 7, step=999)  # not the running attempt
    store.progress("1.2", 1, step=999)  # not running
    cell = store.cell("1.1")
    assert (cell.step, cell.total_steps, cell.epoch, cell.total_epochs) == (50, 200, 1.5, 6)
    assert (cell.metrics, cell.best, cell.best_step, cell.progress) == ({"val_acc": 0.5}, 0.5, 40, 0.25)
    assert store.cell("1.2").step is None
    assert store.etas() == {"1.1": 300.0}  # 50 steps in 100 s of the fake clock, 150 to go


def test_record_checkpoint_round_trips(store: Store, clock: FakeClock) -> None:
    store.record_checkpoint("1.1", 200, path="cells/1.1/checkpoints/step-200", epoch=2.0, metrics={"val_acc": 0.6})
    clock.advance(5)
    store.record_checkpoint("1.1", 100, path="cells/1.1/checkpoints/step-100", attempt=1, size_bytes=4096)
    store.record_checkpoint("1.1", 200, path="cells/1.1/checkpoints/step-200", manifest_sha256="ab" * 32)
    store.set_checkpoint_state("1.1", [100], CheckpointState.SUPERSEDED, note="retention")
    first, second = store.checkpoints("1.1")
    assert (first.step, first.state, first.note, first.size_bytes, first.created_at) == (
        100,
        "superseded",
        "retention",
        4096,
        T0 + timedelta(seconds=5),
    )
    assert (second.step, second.state, second.epoch, second.metrics) == (200, "committed", 2.0, {"val_acc": 0.6})
    assert (second.manifest_sha256, second.created_at) == ("ab" * 32, T0)  # updated in place, not a second row
    assert store.checkpoints("1.2") == []


def test_attempt_receipt_round_trips(store: Store, clock: FakeClock) -> None:
    claim(store, "1.1")
    store.attempt_started("1.1", 1, pid=4242, start_step=100, gpus=[0], ignored="x")
    running = store.attempt("1.1", 1)
    assert running is not None
    assert (running.reason, running.ended_at, running.start_step, running.pid) == (None, None, 100, 4242)
    clock.advance(90)
    end(store, "1.1", Reason.PREEMPTED, end_step=180, exit_code=0, note="SIGTERM")
    a = store.attempt("1.1", 1)
    assert a is not None
    assert (a.cell, a.number, a.worker, a.host, a.worker_pid) == ("1.1", 1, "host-a:100", "host-a", 100)
    assert (a.started_at, a.ended_at, a.wall_seconds, a.gpu_seconds) == (T0, T0 + timedelta(seconds=90), 90, 90)
    assert (a.start_step, a.end_step, a.reason, a.exit_code, a.note, a.gpus) == (
        100,
        180,
        "preempted",
        0,
        "SIGTERM",
        [0],
    )
    assert store.cell("1.1").step == 180
    assert store.attempt("1.1", 2) is None


def test_attempts_filter_and_order(store: Store, clock: FakeClock) -> None:
    attempt_ending(store, "1.2", Reason.LOST)
    clock.advance(1)
    attempt_ending(store, "1.1", Reason.PREEMPTED)
    clock.advance(1)
    attempt_ending(store, "1.2", Reason.COMPLETED)
    assert [(a.cell, a.number) for a in store.attempts()] == [("1.2", 1), ("1.1", 1), ("1.2", 2)]
    assert [(a.cell, a.number) for a in store.attempts(newest_first=True)] == [("1.2", 2), ("1.1", 1), ("1.2", 1)]
    assert [(a.cell, a.number) for a in store.attempts(reason="lost")] == [("1.2", 1)]
    assert [a.number for a in store.attempts("1.2")] == [1, 2]


# -- the JSON contract of status --json and show --json ----------------------------


def _iso_utc(text: Any) -> datetime:
    assert isinstance(text, str) and (text.endswith("Z") or text.endswith("+00:00")), text
    return datetime.fromisoformat(text)


def test_cell_json_has_the_contract_fields(store: Store) -> None:
    claim(store, "1.1")
    store.progress("1.1", 1, step=50, total_steps=200, epoch=1.0, metrics={"val_acc": 0.5}, best=0.5)
    d = store.cell("1.1").to_json()
    contract = {"cell": "1.1", "state": "running", "step": 50, "epoch": 1.0, "progress": 0.25, "attempts": 1}
    assert {k: d[k] for k in contract} == contract
    assert (d["last_reason"], d["metrics"], d["best"]) == (None, {"val_acc": 0.5}, 0.5)
    fresh = store.cell("1.2").to_json()
    assert (fresh["step"], fresh["epoch"], fresh["progress"], fresh["attempts"]) == (None, None, None, 0)
    json.dumps(d, allow_nan=False)


def test_attempt_json_has_the_contract_fields(store: Store, clock: FakeClock) -> None:
    claim(store, "1.1")
    store.attempt_started("1.1", 1, start_step=40)
    clock.advance(61.5)
    end(store, "1.1", Reason.OOM, end_step=55)
    assert store.claim("1.1", WORKER) is None  # the back-off holds the second attempt
    clock.advance(30)
    claim(store, "1.1")
    done, running = (a.to_json() for a in store.attempts("1.1"))
    assert {k: done[k] for k in ("number", "reason", "start_step", "end_step")} == {
        "number": 1,
        "reason": "oom",
        "start_step": 40,
        "end_step": 55,
    }
    assert _iso_utc(done["started_at"]) == T0
    assert _iso_utc(done["ended_at"]) == T0 + timedelta(seconds=61.5)
    assert (running["number"], running["reason"], running["start_step"], running["ended_at"]) == (2, None, 0, None)
    assert _iso_utc(running["started_at"]) == T0 + timedelta(seconds=91.5)


def _cli(*args: str) -> Any:
    result = CliRunner().invoke(main, [*args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_status_json_through_the_cli(store: Store) -> None:
    attempt_ending(store, "1.10", Reason.LOST, end_step=12)
    rows = _cli("status", "--root", str(store.root))
    assert [r["cell"] for r in rows] == ALL
    for key in ("cell", "state", "step", "epoch", "progress", "attempts", "last_reason", "metrics", "best"):
        assert all(key in r for r in rows), key
    lost = rows[ALL.index("1.10")]
    assert (lost["state"], lost["step"], lost["attempts"], lost["last_reason"]) == ("interrupted", 12, 1, "lost")


def test_show_json_through_the_cli(store: Store, clock: FakeClock) -> None:
    claim(store, "2.1")
    store.record_checkpoint("2.1", 10, path="cells/2.1/checkpoints/step-10", metrics={"val_acc": 0.25})
    clock.advance(10)
    end(store, "2.1", Reason.PREEMPTED, end_step=12)
    d = _cli("show", "2.1", "--root", str(store.root))
    assert (d["cell"], d["state"], d["cfg"]) == ("2.1", "interrupted", {"epochs": 3, "lr": 0.5})
    [a] = d["attempts"]
    assert (a["number"], a["reason"], a["start_step"], a["end_step"]) == (1, "preempted", 0, 12)
    assert (_iso_utc(a["started_at"]), _iso_utc(a["ended_at"])) == (T0, T0 + timedelta(seconds=10))
    [k] = d["checkpoints"]
    assert {f: k[f] for f in ("step", "state", "metrics", "path")} == {
        "step": 10,
        "state": "committed",
        "metrics": {"val_acc": 0.25},
        "path": "cells/2.1/checkpoints/step-10",
    }


def test_schema_head_is_the_migration_scripts_head(store: Store) -> None:
    """Read commands compare with SCHEMA_HEAD instead of loading alembic: it must be the scripts' head."""
    from sweepq.queue import database as db

    assert db.head_revision() == db.SCHEMA_HEAD
    assert db.current_revision(store.engine) == db.SCHEMA_HEAD  # what a migrated root records
