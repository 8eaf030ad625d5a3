"""`status` on a large sweep: the cells that need attention and the best few, a footer; `--json` streamed."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from sweepq.cli import json_stream, read_commands, render
from sweepq.cli.read_commands import Listing, attention, status_json, status_view
from sweepq.errors import UsageError
from sweepq.queue.liveness import FileLockLiveness
from sweepq.queue.opening import Reader
from sweepq.queue.records import AttemptRecord, CheckpointRecord, EventRecord, Outcome, cell_record, orm_record
from sweepq.queue.schema import AttemptRow, CellRow, CheckpointRow, EventRow
from sweepq.queue.states import CellState, Reason
from sweepq.queue.store import Store
from unit.support import WORKER, FakeClock, Launch, sweep_from

SEEDS = 150  # x 2 lrs: 300 cells
BIG = f"""\
name: big
train: trainers:train
metric: {{name: score, goal: max}}
retries: {{error: 1, backoff_seconds: 60}}
params: {{opt: {{name: "sgd é", extra: [1, {{b: 2, a: 1}}], none: {{}}}}}}
grid: {{seed: {list(range(1, SEEDS + 1))}, lr: [0.1, 0.2]}}
"""
LISTING = Listing(whole_up_to=50, troubled=5, best=3)
DONE = [f"1.{i}" for i in range(1, 11)]  # score i/100: the best are 1.10, 1.9, 1.8
TROUBLED = ["1.30", "1.31", "1.32", "1.33", "1.40", "1.41", "1.42", "1.50"]  # interrupted, failed, backing off


def run(store: Store, cell: str, reason: Reason | None, score: float | None = None, **outcome: Any) -> None:
    claim = store.claim(cell, WORKER)
    assert claim is not None
    store.attempt_started(cell, claim.number, pid=1, start_step=0)
    metrics = None if score is None else {"score": score, "loss": 1 - score}
    store.progress(cell, claim.number, step=5, total_steps=10, metrics=metrics, best=score, best_step=5)
    if reason is not None:
        usage = {"samples": 3, "cpu_percent_mean": 50.0, "rss_peak_bytes": 2**20}
        store.finish(cell, claim.number, Outcome(reason, end_step=5, wall_seconds=10.0, usage=usage, **outcome))


@pytest.fixture
def big(tmp_path: Path, launch: Launch, clock: FakeClock) -> Store:
    store = launch(tmp_path / "root", sweep_from(BIG, tmp_path))
    for i, cell in enumerate(DONE, start=1):
        run(store, cell, Reason.COMPLETED, score=i / 100)
        clock.advance(1)
    for cell in TROUBLED[:4]:
        run(store, cell, Reason.PREEMPTED)
    for cell in TROUBLED[4:]:  # an error with one retry left: queued in its back-off; a second one fails it
        run(store, cell, Reason.ERROR, error_tail="Traceback (most recent call last):\nValueError: bad é")
        if cell != "1.50":
            clock.advance(3600)
            run(store, cell, Reason.ERROR, error_tail="Traceback (most recent call last):\nValueError: worse")
    for cell in ("1.20", "1.21"):
        run(store, cell, None)
        (store.root / "cells" / cell).mkdir(parents=True, exist_ok=True)
    assert [store.cell(c).state for c in ("1.30", "1.40", "1.50")] == [
        CellState.INTERRUPTED,
        CellState.FAILED,
        CellState.QUEUED,
    ]
    return store


def rows_of(shown: str) -> list[str]:
    """The cell ids of a status table's rows, in order."""
    lines = shown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("cell "))
    return [line.split()[0] for line in lines[start + 1 :] if line[:2] in ("1.", "2.")]


def test_a_large_sweep_shows_the_cells_that_need_attention_then_the_best(big: Store) -> None:
    owner = FileLockLiveness(big.root).take("1.20")  # 1.20's worker lives; 1.21's died
    assert owner is not None
    try:
        cells, _ = attention(big, LISTING)
        expected = ["1.20", "1.21", *TROUBLED[:5], "1.10", "1.9", "1.8"]
        assert [c.id for c in cells] == expected
        shown = render.to_text(status_view(big, all_rows=False, all_params=False, listing=LISTING), width=400)
    finally:
        owner.release()
    assert rows_of(shown) == expected
    footer = (
        "290 of 300 cells not shown (shown: every running cell, the first 5 interrupted, failed or waiting to "
        "retry, the 3 best done by score): --all shows every row"
    )
    lines = shown.splitlines()
    assert lines[-2:] == [footer, "300 cells: 281 queued, 2 running, 4 interrupted, 10 done, 3 failed"]
    assert "281 queued · 2 running · 4 interrupted · 10 done · 3 failed" in lines[0]  # the header: every cell
    row = {line.split()[0]: line for line in lines if line[:2] == "1."}
    assert render.DEAD_NOTE in row["1.21"] and render.DEAD_NOTE not in row["1.20"]
    assert "ValueError: worse (see sweepq logs 1.40" in row["1.40"]
    assert "cpu 50% 1MiB" in row["1.40"]  # usage read for the rows shown
    assert "same in every cell" not in shown  # a claim about the rows shown only: not made


def test_without_a_metric_the_last_done_are_shown(big: Store) -> None:
    cells = big.best_done(None, 2)
    assert [c.id for c in cells] == ["1.10", "1.9"]  # finished last, first


def test_all_shows_every_row_and_a_small_sweep_lists_every_cell(big: Store) -> None:
    every = render.to_text(status_view(big, all_rows=True, all_params=False, listing=LISTING), width=400)
    assert rows_of(every) == [c.id for c in big.cells()]
    assert every.splitlines()[-1] == "300 cells: 281 queued, 2 running, 4 interrupted, 10 done, 3 failed"
    assert "not shown" not in every
    whole = Listing(whole_up_to=300, troubled=5, best=3)
    assert render.to_text(status_view(big, all_rows=False, all_params=False, listing=whole), width=400) == every


def old_status_json(store: Store) -> str:
    """`status --json` as it was made before streaming: records, then json.dumps of the whole list."""
    from sweepq.worker import usage_text

    fc, stalls = store.forecast(read_commands.status_workers(store)[0]), store.stalls()
    usages = usage_text.latest_by_cell(store.attempts())
    rows = [
        c.to_json()
        | {
            "cfg": c.result_cfg,
            "new_cfg": c.new_cfg,
            "alive": read_commands.Owners(store).alive(c.id) if c.state == "running" else None,
            "eta_seconds": fc.cell_seconds_left(c.id),
            "rate_steps_per_second": fc.steps_per_second(c.id),
            "no_progress_seconds": stalls.get(c.id),
            "usage": usages.get(c.id),
        }
        for c in store.cells()
    ]
    return json.dumps(rows, indent=2, default=str, allow_nan=False) + "\n"


def test_the_streamed_json_is_byte_for_byte_the_old_one(big: Store, tmp_path: Path) -> None:
    # A time stored on a whole second (isoformat leaves the microseconds out) and cfgs and metrics
    # written by another program (a NaN token: spelt again, or refused as before).
    with big.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE cells SET updated_at = '2026-01-02 03:04:05.000000' WHERE id = '1.2'")
        conn.exec_driver_sql("""UPDATE cells SET metrics = '{"score":\n  0.5, "n": "NaN é"}' WHERE id = '1.3'""")
        conn.exec_driver_sql("""UPDATE cells SET cfg = '{"a":\n  [1,2]}' WHERE id = '1.5'""")
        conn.exec_driver_sql("UPDATE cells SET metrics = 'null', cfg = 'null' WHERE id = '1.4'")
        conn.exec_driver_sql("UPDATE cells SET step = 5.5, best_step = 'x' WHERE id = '1.6'")  # a foreign writer's
        # a done cell kept under the cfg it ran with (launch --accept-changed): "cfg" is that one
        conn.exec_driver_sql("""UPDATE cells SET ran_cfg = '{"epochs": 2}' WHERE id = '1.7'""")
    indented, lines = tmp_path / "indented.json", tmp_path / "lines.json"
    with indented.open("w") as file:
        json_stream.write_texts(status_json(big), file, lines=False)
    with lines.open("w") as file:
        json_stream.write_texts(status_json(big), file, lines=True)
    old = old_status_json(big)
    assert indented.read_text() == old  # in a terminal: as print_json writes the whole list
    rows = json.loads(old)
    one_a_line = "[\n" + ",\n".join(json.dumps(r, default=str, allow_nan=False) for r in rows) + "\n]\n"
    assert lines.read_text() == one_a_line
    assert len(rows) == 300 and rows[0]["metrics"]["loss"] == 0.99 and rows[0]["cfg"]["opt"]["none"] == {}
    assert rows[1]["updated_at"] == "2026-01-02T03:04:05Z" and rows[2]["metrics"] == {"score": 0.5, "n": "NaN é"}
    assert (rows[3]["metrics"], rows[3]["cfg"], rows[4]["cfg"]) == ({}, {}, {"a": [1, 2]})
    assert (rows[5]["step"], rows[5]["best_step"]) == (5.5, "x")
    assert rows[6]["cfg"] == {"epochs": 2} and rows[6]["new_cfg"] == big.cell("1.7").cfg != {"epochs": 2}
    assert rows[7]["new_cfg"] is None
    with big.engine.begin() as conn:
        conn.exec_driver_sql("""UPDATE cells SET metrics = '{"score": NaN}' WHERE id = '1.3'""")
    with pytest.raises(ValueError, match="not JSON compliant"):
        list(status_json(big))


def test_cells_read_as_driver_tuples_are_the_records_the_orm_reads(big: Store) -> None:
    """Store.cells reads converted tuples by position (records.cell_records): every field of every record is
    the one read through the ORM, odd stored values too (a whole-second time, NULL and 'null' JSON)."""
    with big.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE cells SET updated_at = '2026-01-02 03:04:05.000000' WHERE id = '1.2'")
        conn.exec_driver_sql("UPDATE cells SET metrics = 'null', cfg = 'null' WHERE id = '1.4'")
        conn.exec_driver_sql("UPDATE cells SET metrics = NULL, removed = 1 WHERE id = '1.6'")
    with big.tx.read() as s:
        orm = [cell_record(r) for r in s.scalars(select(CellRow).order_by(CellRow.group_number, CellRow.index))]
    cells = big.cells()
    assert cells == orm and len(cells) == 300
    assert {c.state for c in cells} >= {CellState.DONE, CellState.RUNNING, CellState.FAILED, CellState.QUEUED}
    assert cells[3].cfg == {} and cells[5].removed and cells[1].updated_at == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert big.cells(include_removed=False) == [c for c in orm if not c.removed]


def test_the_reader_answers_status_as_the_store_does(big: Store) -> None:
    """`status` reads through a Reader (sqlite3 alone, a connection per read, the read-only recipe): the same
    table, the same JSON, the same records as the Store's, and its attempts are those the ORM reads."""
    reader = Reader.open(big.root, clock=big.clock)
    assert reader.revision() == big.database.revision()
    assert reader.cells() == big.cells() and len(reader.cells()) == 300
    assert reader.census(3) == big.census(3) and reader.forecast(2) == big.forecast(2)
    for all_rows in (False, True):
        view = status_view(reader, all_rows=all_rows, all_params=False, listing=LISTING)
        assert render.to_text(view, width=400) == render.to_text(
            status_view(big, all_rows=all_rows, all_params=False, listing=LISTING), width=400
        )
    assert list(status_json(reader)) == list(status_json(big))
    troubled = [c.id for c in reader.cells_in([CellState.FAILED, CellState.INTERRUPTED], backing_off=True)]
    assert troubled == TROUBLED
    with big.tx.read() as s:
        newest = [
            orm_record(AttemptRecord, a)
            for a in s.scalars(select(AttemptRow).join(CellRow, CellRow.id == AttemptRow.cell_id))
            if a.number == s.get(CellRow, a.cell_id).attempts and a.cell_id in troubled  # type: ignore[union-attr]
        ]
    last = reader.last_attempts(troubled)
    assert sorted(last, key=lambda a: a.cell) == sorted(newest, key=lambda a: a.cell) and len(last) == len(TROUBLED)
    assert {a.reason for a in last} == {"preempted", "error"} and all(a.usage for a in last)


def test_what_show_and_attempts_read_is_what_the_orm_reads(big: Store) -> None:
    """One cell, its attempts, checkpoints and history, and every attempt filtered and ordered, read in SQL
    text (queries.py) through the Store and through a Reader: field for field the ORM's records, odd
    stored values too (NULL JSON, a corrupt checkpoint beside a committed one of the same step)."""
    cell = TROUBLED[0]
    big.record_checkpoint(cell, 4, path="cells/x/4", epoch=0.5, metrics={"score": 0.25}, attempt=1, size_bytes=9)
    big.record_checkpoint(cell, 2, path="cells/x/2")  # NULL metrics, epoch, size
    big.set_checkpoint_state(cell, [4], "corrupt", note="sha256 mismatch é")
    big.record_checkpoint(cell, 4, path="cells/x/4b", attempt=1)
    big.add_event(cell, "retried", {"by": "user", "n": [1, 2.5]})
    big.add_event(None, "planned")
    with big.engine.begin() as conn:
        late = "2099-01-01 00:00:00.000000"
        conn.exec_driver_sql("INSERT INTO events (cell_id, at, kind, detail) VALUES (?, ?, 'odd', NULL)", (cell, late))
    with big.tx.read() as s:
        orm_cell = cell_record(s.get(CellRow, cell))  # type: ignore[arg-type]
        by_start = select(AttemptRow).order_by(AttemptRow.started_at)
        orm_attempts = [orm_record(AttemptRecord, a) for a in s.scalars(by_start)]
        q = select(CheckpointRow).where(CheckpointRow.cell_id == cell).order_by(CheckpointRow.step)
        orm_checkpoints = [orm_record(CheckpointRecord, c) for c in s.scalars(q)]
        by_time = select(EventRow).order_by(EventRow.at, EventRow.id)
        orm_events = [orm_record(EventRecord, e) for e in s.scalars(by_time)]
    assert [c.step for c in orm_checkpoints] == [2, 4, 4] and orm_events[-1].detail == {}
    for store in (big, Reader.open(big.root)):
        assert store.cell(cell) == orm_cell
        assert store.checkpoints(cell) == orm_checkpoints and store.checkpoints("9.9") == []
        assert store.events() == orm_events and store.events(cell) == [e for e in orm_events if e.cell == cell]
        assert store.attempts() == orm_attempts and len(orm_attempts) > len(DONE + TROUBLED)
        assert store.attempts(newest_first=True) == orm_attempts[::-1]
        assert store.attempts(cell) == [a for a in orm_attempts if a.cell == cell]
        assert store.attempt(cell, 1) == next(a for a in orm_attempts if a.cell == cell and a.number == 1)
        assert store.attempt(cell, 99) is None and store.attempt("9.9", 1) is None
        errors = [a for a in orm_attempts if a.reason == "error"]
        assert store.attempts(reason="error") == errors and len(errors) >= 4
        assert store.attempts(cell, "error") == []
        assert store.attempts(TROUBLED[4], "error") == [a for a in errors if a.cell == TROUBLED[4]] != []
        with pytest.raises(UsageError, match=r"no cell '9\.9' in the sweep at"):
            store.cell("9.9")


@pytest.mark.parametrize(
    "value",
    [
        [],
        [{}, []],
        [{"a": [1, 2.5, -0.0, 1e-7, 10**30, True, None, 'é\n"x'], "b": {}, "c": []}],
        [{1: "int key", 2.5: "float key", None: "none", False: "bool"}],
        [(1, 2), {"t": (3, {"u": datetime(2025, 1, 1, tzinfo=UTC)})}],
        [{"s": {"x"}}],  # a set: written by default=str
    ],
)
def test_the_encoder_writes_what_json_dumps_writes(value: list[Any], tmp_path: Path) -> None:
    out = tmp_path / "x.json"
    with out.open("w") as file:
        json_stream.write_list(value, file)
    assert out.read_text() == json.dumps(value, indent=2, default=str, allow_nan=False) + "\n"


def test_a_non_finite_float_is_refused_as_json_dumps_refuses_it() -> None:
    with pytest.raises(ValueError) as dumps:
        json.dumps([{"x": math.inf}], indent=2, allow_nan=False)
    with pytest.raises(ValueError) as streamed:
        json_stream.encode({"x": math.inf}, "  ")
    assert str(streamed.value) == str(dumps.value)


def test_settings_another_program_wrote_are_refused_by_name(big: Store) -> None:
    """A sweep row whose settings do not read as this sweepq's: an error that says what to do, no traceback."""
    with big.engine.begin() as conn:
        conn.exec_driver_sql("""UPDATE sweep SET settings = '{"metric": {"name": "x"}}'""")
    for store in (big, Reader.open(big.root)):
        with pytest.raises(UsageError, match=r"settings in the database of .* cannot be read .*sweepq repair"):
            store.settings()
