"""The sweep's ETA (queue/forecast/model.py): hand-built cells with known speeds give exact ETAs; then the same
read from a real SQLite queue (queue/forecast/reads.py) with an injected clock."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from alembic import command

from sweepq.queue import database as db
from sweepq.queue import queries
from sweepq.queue.forecast.model import (
    MIN_SPAN_S,
    UNSETTLED,
    AttemptSeen,
    CellSeen,
    Forecast,
    Point,
    Settled,
    forecast,
    span,
)
from sweepq.queue.forecast.reads import every_cell as _cells
from sweepq.queue.forecast.reads import settled as _settled
from sweepq.queue.queries import UNSETTLED_CELLS as _UNSETTLED_CELLS
from sweepq.queue.reads import stall_floor
from sweepq.queue.records import Outcome
from sweepq.queue.states import CellState, CheckpointState
from sweepq.queue.store import Store
from unit.support import T0, WORKER, FakeClock, Launch, sweep_from

NOW = T0 + timedelta(hours=1)


def at(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


def measured(cid: str, total: int | None = 100, startup: float = 10.0, spp: float = 1.0) -> CellSeen:
    """A done cell whose one attempt took `startup` seconds before its first step, then `spp` a step:
    first checkpoint at step 10, end at its last step."""
    group, index = (int(x) for x in cid.split("."))
    steps = total or 100
    a = AttemptSeen(
        started_at=T0,
        start_step=0,
        first=Point(T0 + at(startup + 10 * spp), 10),
        last=Point(T0 + at(startup + steps * spp), steps),
        ended_at=T0 + at(startup + steps * spp),
    )
    return CellSeen(cid, group, index, CellState.DONE, total, resume_step=steps, attempts=(a,))


def waiting(cid: str, state: CellState = CellState.QUEUED, **fields: object) -> CellSeen:
    group, index = (int(x) for x in cid.split("."))
    return CellSeen(cid, group, index, state, None, **fields)  # type: ignore[arg-type]


def ends(fc: object, *cells: str) -> list[float | None]:
    return [fc.cell_seconds_left(c) for c in cells]  # type: ignore[attr-defined]


def test_an_attempt_speed_leaves_out_its_startup() -> None:
    s = span(measured("1.1", startup=25.0, spp=0.5).attempts[0])
    assert s is not None and s.steps == 90 and s.seconds == 45.0 and s.startup == 25.0


def test_queued_cells_take_their_group_speed_length_and_startup() -> None:
    fc = forecast([measured("1.1"), waiting("1.2"), waiting("1.3")], workers=1, now=NOW)
    assert fc.complete and fc.why == "" and fc.startup_seconds == 10.0
    assert ends(fc, "1.2", "1.3") == [110.0, 220.0]  # one after the other: 10 s start-up + 100 steps at 1 s
    assert fc.seconds_left == 220.0 and fc.cell_seconds_left("1.1") is None  # a done cell has no ETA
    assert fc.steps_per_second("1.1") == 1.0 and fc.steps_per_second("1.2") is None  # only what was measured


def test_two_workers_run_two_cells_at_once() -> None:
    cells = [measured("1.1"), waiting("1.2"), waiting("1.3"), waiting("1.4")]
    one, two = forecast(cells, workers=1, now=NOW), forecast(cells, workers=2, now=NOW)
    assert (one.seconds_left, two.seconds_left) == (330.0, 220.0)
    assert ends(two, "1.2", "1.3", "1.4") == [110.0, 110.0, 220.0]


def test_a_running_cell_ends_its_remaining_steps_and_holds_its_worker() -> None:
    current = AttemptSeen(NOW - at(50), 0, Point(NOW - at(30), 10), Point(NOW - at(5), 35))  # 1 s a step
    running = CellSeen("1.2", 1, 2, CellState.RUNNING, 100, attempts=(current,))
    fc = forecast([running, waiting("1.3")], workers=1, now=NOW)
    assert ends(fc, "1.2", "1.3") == [60.0, 170.0]  # 65 steps from 5 s ago; then the queued one
    assert fc.startup_seconds == 10.0 and fc.steps_per_second("1.2") == 1.0


def test_a_running_cell_before_its_first_step_waits_out_its_startup() -> None:
    current = AttemptSeen(NOW - at(4), 0)  # no step yet: 6 s of the 10 s start-up are left
    running = CellSeen("1.2", 1, 2, CellState.RUNNING, 100, resume_step=40, attempts=(current,))
    fc = forecast([measured("1.1"), running], workers=1, now=NOW)
    assert ends(fc, "1.2") == [66.0]  # resumes at 40: 60 steps


def test_a_cell_long_past_its_projected_end_is_stalled_and_the_eta_a_lower_bound() -> None:
    current = AttemptSeen(NOW - at(500), 0, Point(NOW - at(480), 10), Point(NOW - at(400), 90))  # 1 s a step
    running = CellSeen("1.2", 1, 2, CellState.RUNNING, 100, attempts=(current,))  # due to end 390 s ago
    on_time = forecast([running, waiting("1.3")], workers=1, now=NOW, late_s=400)
    assert (on_time.complete, ends(on_time, "1.2", "1.3")) == (True, [0.0, 110.0])
    stalled = forecast([running, waiting("1.3")], workers=1, now=NOW, late_s=300)
    assert (stalled.complete, stalled.why, ends(stalled, "1.2", "1.3")) == (False, "stalled", [None, 110.0])


def test_more_running_cells_than_workers_count_as_workers() -> None:
    cells = [CellSeen(f"1.{i}", 1, i, CellState.RUNNING, 100, attempts=(AttemptSeen(NOW, 0),)) for i in (2, 3, 4)]
    fc = forecast([measured("1.1"), *cells, waiting("1.5")], workers=1, now=NOW)
    assert fc.workers == 3 and ends(fc, "1.5") == [220.0]


def test_a_back_off_delays_its_cell_and_the_next_due_one_goes_first() -> None:
    backing = waiting("1.2", retry_after=NOW + at(500), updated_at=NOW - at(10))
    fc = forecast([measured("1.1"), backing, waiting("1.3")], workers=1, now=NOW)
    assert ends(fc, "1.3", "1.2") == [110.0, 610.0]  # 1.3 at once; 1.2 not before its retry_after


def test_a_back_off_that_began_after_now_is_over_as_the_queue_decides() -> None:
    """The clock went back: claim.retry_due makes the cell due at once, and so does the forecast."""
    backing = waiting("1.2", retry_after=NOW + at(500), updated_at=NOW + at(60))
    fc = forecast([measured("1.1"), backing], workers=1, now=NOW)
    assert ends(fc, "1.2") == [110.0]


def test_interrupted_cells_go_first_and_resume_from_their_checkpoint() -> None:
    interrupted = waiting("2.1", CellState.INTERRUPTED, resume_step=50)
    fc = forecast([measured("1.1"), waiting("1.2"), interrupted], workers=1, now=NOW)
    assert ends(fc, "2.1", "1.2") == [60.0, 170.0]  # 2.1's 50 steps left, after a start-up; then 1.2


def test_a_group_speed_before_the_sweep_speed() -> None:
    cells = [measured("1.1", spp=1.0), measured("2.1", spp=3.0), waiting("2.2"), waiting("3.1")]
    fc = forecast(cells, workers=2, now=NOW)
    assert ends(fc, "2.2", "3.1") == [310.0, 210.0]  # 2.2 at its group's 3 s; 3.1 at the sweep's 2 s


def test_unknown_lengths_make_a_lower_bound() -> None:
    fc = forecast([measured("1.1", total=None), waiting("1.2")], workers=1, now=NOW)
    assert (fc.complete, fc.why, fc.seconds_left) == (False, "length", 10.0)  # its start-up only


def test_nothing_measured_means_no_eta() -> None:
    fc = forecast([waiting("1.1"), waiting("1.2")], workers=2, now=NOW)
    assert (fc.ends_at, fc.complete, fc.why) == (None, False, "rate")


def test_a_settled_sweep_has_no_eta_and_tells_when_it_ran() -> None:
    fc = forecast([measured("1.1"), measured("1.2")], workers=1, now=NOW)
    assert (fc.ends_at, fc.complete, fc.began, fc.last_end) == (None, True, T0, T0 + at(110))


def test_an_attempt_seen_once_counts_past_the_median_startup() -> None:
    """No checkpoint yet: start-up and steps together, less the start-up measured elsewhere."""
    once = AttemptSeen(NOW - at(30), 0, None, Point(NOW, 10), None)  # 30 s: 10 s start-up + 10 steps at 2 s
    running = CellSeen("1.2", 1, 2, CellState.RUNNING, 100, attempts=(once,))
    fc = forecast([measured("1.1"), running], workers=1, now=NOW)
    assert fc.steps_per_second("1.2") == 0.5 and ends(fc, "1.2") == [180.0]
    # no start-up measured anywhere: its 30 s may be start-up alone, so nothing is known yet
    alone = forecast([running], workers=1, now=NOW)
    assert (alone.steps_per_second("1.2"), alone.why) == (None, "rate")
    # steps for less time than the start-up: mostly its own start-up still (longer than the median?)
    early = AttemptSeen(NOW - at(18), 0, None, Point(NOW, 4), None)  # 8 s past the median start-up of 10
    fc = forecast([measured("1.1"), running._replace(attempts=(early,))], workers=1, now=NOW)
    assert fc.steps_per_second("1.2") is None


def test_a_running_attempt_counts_once_its_steps_cover_the_minimum_span() -> None:
    def running(seconds: float) -> CellSeen:  # 10 s start-up, 10 steps at 0.1 s, then `seconds` more
        steps = round(seconds * 10)
        a = AttemptSeen(NOW - at(11 + seconds), 0, Point(NOW - at(seconds), 10), Point(NOW, 10 + steps))
        return CellSeen("1.2", 1, 2, CellState.RUNNING, 1000, attempts=(a,))

    early = forecast([measured("1.1"), running(MIN_SPAN_S - 1)], workers=1, now=NOW)
    assert early.steps_per_second("1.2") is None and early.startup_seconds == 10.0  # the done cell's
    later = forecast([measured("1.1"), running(MIN_SPAN_S + 1)], workers=1, now=NOW)
    assert later.steps_per_second("1.2") == pytest.approx(10.0)


# -- read from a real queue ---------------------------------------------------------


def run_attempt(
    store: Store, clock: FakeClock, cell: str, startup: float, steps: int, spp: float, **end: object
) -> None:
    """Claim `cell`, take `startup` s to its first step, commit a checkpoint at step 10, report `steps`."""
    assert store.claim(cell, WORKER) is not None
    n = store.cell(cell).attempts
    store.attempt_started(cell, n, start_step=0)
    clock.advance(startup + 10 * spp)
    store.record_checkpoint(cell, 10, path=f"cells/{cell}/checkpoints/step-10", attempt=n)
    clock.advance((steps - 10) * spp)
    store.progress(cell, n, step=steps, total_steps=100)
    if end:
        store.finish(cell, n, Outcome(end_step=steps, wall_seconds=startup + steps * spp, **end))  # type: ignore[arg-type]


def test_the_store_reads_speeds_and_resume_points(store: Store, clock: FakeClock) -> None:
    run_attempt(store, clock, "1.1", startup=10, steps=100, spp=1.0, reason="completed")
    run_attempt(store, clock, "1.2", startup=10, steps=40, spp=1.0)  # running: 40 of 100
    fc = store.forecast(workers=1)
    assert fc.startup_seconds == 10.0 and fc.steps_per_second("1.1") == 1.0 and fc.steps_per_second("1.2") == 1.0
    assert fc.cell_seconds_left("1.2") == 60.0
    # 1.2 is killed; the next launch reaps it an hour later: that end tells nothing of its speed
    clock.advance(3600)
    store.finish("1.2", 1, Outcome(reason="lost", end_step=40))
    fc = store.forecast(workers=1)
    assert fc.steps_per_second("1.2") == 1.0
    assert fc.cell_seconds_left("1.2") == 100.0  # resumes from its checkpoint at 10: start-up + 90 steps
    assert fc.cell_seconds_left("1.3") == 210.0  # then a fresh cell of the group, interrupted ones first


def test_the_store_reads_in_three_queries_whatever_the_number_of_cells(store: Store, clock: FakeClock) -> None:
    for cell in ("1.1", "1.2", "1.3", "2.1"):
        run_attempt(store, clock, cell, startup=5, steps=50, spp=0.5, reason="preempted")
    statements: list[str] = []
    with store.tx.raw() as c:  # SQLite's own trace: every statement the driver runs
        c.set_trace_callback(statements.append)  # type: ignore[attr-defined]
        try:
            cells = _cells(c)
        finally:
            c.set_trace_callback(None)  # type: ignore[attr-defined]
    assert len(cells) == 13 and all(len(c.attempts) == 1 for c in cells[:3])
    assert len([s for s in statements if s.lstrip().upper().startswith("SELECT")]) == 3


@pytest.mark.parametrize("workers, expected", [(1, 12 * 60.0), (4, 3 * 60.0)])
def test_the_store_forecast_divides_among_workers(
    store: Store, clock: FakeClock, workers: int, expected: float
) -> None:
    run_attempt(store, clock, "1.1", startup=10, steps=100, spp=0.5, reason="completed")
    fc = store.forecast(workers)
    assert fc.seconds_left == expected  # 12 queued cells of 10 s + 100 steps at 0.5 s, in rounds of `workers`


def resumed(store: Store, clock: FakeClock, cell: str, start: int, steps: int, spp: float, reason: str) -> None:
    """Claim `cell` again and run it from checkpoint step `start` to `steps`, one checkpoint on the way."""
    assert store.claim(cell, WORKER) is not None
    n = store.cell(cell).attempts
    store.attempt_started(cell, n, start_step=start)
    clock.advance(2.9 + 5 * spp)
    store.record_checkpoint(cell, start + 5, path=f"cells/{cell}/checkpoints/step-{start + 5}", attempt=n)
    clock.advance((steps - start - 5) * spp)
    store.finish(cell, n, Outcome(reason=reason, end_step=steps, wall_seconds=2.9 + (steps - start) * spp + 1e-7))


def test_settled_cells_summed_by_the_database_give_the_same_forecast(store: Store, clock: FakeClock) -> None:
    """The settled cells' spans come from SQL (forecast/reads.py's settled); read one by one and summed in
    Python instead, every figure of the forecast is the same, to the last bit."""
    run_attempt(store, clock, "1.1", startup=7.3, steps=100, spp=0.37, reason="completed")
    run_attempt(store, clock, "1.2", startup=4.1, steps=40, spp=0.41, reason="preempted")
    resumed(store, clock, "1.2", start=10, steps=100, spp=0.43, reason="completed")  # resumed from step 10
    run_attempt(store, clock, "1.3", startup=5.0, steps=30, spp=0.5)
    clock.advance(600)
    store.finish("1.3", 1, Outcome(reason="lost", end_step=30))  # reaped long after: no end point
    resumed(store, clock, "1.3", start=10, steps=100, spp=0.39, reason="completed")
    run_attempt(store, clock, "1.4", startup=6.7, steps=20, spp=0.33, reason="error")  # no retry: failed
    run_attempt(store, clock, "1.5", startup=3.3, steps=25, spp=0.35, reason="preempted")
    store.cancel(["1.5"])
    run_attempt(store, clock, "2.1", startup=3.1, steps=100, spp=1.13, reason="completed")
    assert store.claim("2.2", WORKER) is not None  # no checkpoint: start-up and steps in one span
    store.attempt_started("2.2", 1, start_step=0)
    clock.advance(61.7)
    store.finish("2.2", 1, Outcome(reason="completed", end_step=50, wall_seconds=61.7))
    run_attempt(store, clock, "1.6", startup=5.5, steps=60, spp=0.36)  # running
    run_attempt(store, clock, "1.7", startup=4.4, steps=30, spp=0.38, reason="preempted")  # interrupted
    states = {c: store.cell(c).state for c in ("1.1", "1.2", "1.3", "1.4", "1.5", "2.2", "1.6", "1.7")}
    assert list(states.values()) == [CellState.DONE] * 3 + [CellState.FAILED, CellState.CANCELLED, CellState.DONE] + [
        CellState.RUNNING,
        CellState.INTERRUPTED,
    ]
    assert kept(store) == 10  # every ended attempt's span was kept when it ended (1.3's first: 0 steps)
    fc = same_both_ways(store, spans=9)  # 1.3's lost attempt showed no step past its start
    assert fc.complete and fc.startup_seconds is not None and fc.steps_per_second("1.3") is not None
    assert fc.steps_per_second("1.1") != fc.steps_per_second("2.1")  # different rates, group by group

    # 1.1's checkpoint found corrupt after its end: its attempt's kept span is forgotten, worked out
    # again without that checkpoint (start-up and steps in one span now), and kept again by a launch
    store.set_checkpoint_state("1.1", [10], CheckpointState.CORRUPT)
    assert kept(store) == 9
    changed = same_both_ways(store, spans=9)
    assert changed.steps_per_second("1.1") != fc.steps_per_second("1.1")
    assert store.keep_spans() == 1 and kept(store) == 10
    assert same_both_ways(store, spans=9) == changed

    # The same root as an older sweepq left it (schema 0004: no span kept), opened by a launch: every
    # span worked out, then kept by the launch; the triggers are there again (a corrupt mark forgets)
    cfg = db._alembic_config()
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0004")
    store.close()
    older = Store.open(store.root, clock=clock)
    try:
        assert kept(older) == 0 and same_both_ways(older, spans=9) == changed
        assert older.keep_spans() == 10 and kept(older) == 10 and same_both_ways(older, spans=9) == changed
        older.set_checkpoint_state("1.2", [15], CheckpointState.CORRUPT)  # 1.2's resumed attempt's checkpoint
        assert kept(older) == 9
        same_both_ways(older, spans=9)
    finally:
        older.close()


def kept(store: Store) -> int:
    """The attempts whose span is kept on their row (only ended ones have it)."""
    with store.tx.read() as s:
        kept, running = (
            s.connection()
            .exec_driver_sql(
                "SELECT count(span_steps), count(*) FILTER (WHERE ended_at IS NULL AND span_steps IS NOT NULL) "
                "FROM attempts"
            )
            .one()
        )
    assert running == 0
    return int(kept)


def same_both_ways(store: Store, spans: int) -> Forecast:
    """The settled spans as the database hands them (kept or worked out) equal those of the cells read one
    by one, and so does every figure of the forecast, to the last bit."""
    cells = store.forecast_cells()
    with store.tx.raw() as c:
        summed = _settled(c)
    assert sorted(summed.spans) == sorted(Settled().plus(c for c in cells if c.state not in UNSETTLED).spans)
    assert len(summed.spans) == spans
    for workers in (1, 3):
        fc = store.forecast(workers)
        assert fc == forecast(cells, workers, store.clock(), late_s=stall_floor())
    return fc


THREE_GROUPS = """\
name: three
train: trainers:train
metric: {name: val_acc, goal: max}
retries: {lost: 2, oom: 1, nan: 1, error: 0, data_error: 0, timeout: 1, backoff_seconds: 30, backoff_max_seconds: 100}
groups:
  - name: a
    grid: {lr: [1, 2, 3, 4, 5, 6]}
  - name: b
    grid: {lr: [1, 2, 3, 4, 5]}
  - name: c
    grid: {lr: [1, 2, 3, 4]}
"""


def test_fresh_cells_read_in_bulk_give_the_same_forecast_as_cells_read_one_by_one(
    launch: Launch, clock: FakeClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The queued cells never tried come as bare tuples (queries.UNSETTLED_CELLS, `fresh`); every other cell
    one by one. Against every cell read one by one, the forecast is the same to the last bit."""
    store = launch(tmp_path / "root", sweep_from(THREE_GROUPS, tmp_path))
    run_attempt(store, clock, "1.1", startup=7.3, steps=100, spp=0.37, reason="completed")
    run_attempt(store, clock, "1.2", startup=4.1, steps=40, spp=0.41, reason="preempted")  # interrupted
    run_attempt(store, clock, "2.1", startup=3.1, steps=100, spp=1.13, reason="completed")
    run_attempt(store, clock, "2.2", startup=2.9, steps=30, spp=1.21, reason="oom")  # queued, backing off
    run_attempt(store, clock, "2.3", startup=6.2, steps=20, spp=1.17, reason="error")  # failed...
    store.retry(["2.3"])  # ...and queued again: a past, no back-off
    assert store.claim("1.5", WORKER) is not None  # an attempt and no checkpoint, failed, queued again
    store.attempt_started("1.5", 1, start_step=0)
    clock.advance(12.5)
    store.finish("1.5", 1, Outcome(reason="error", end_step=8, wall_seconds=12.5))
    store.retry(["1.5"])
    run_attempt(store, clock, "3.1", startup=5.5, steps=60, spp=0.52)  # running
    run_attempt(store, clock, "3.2", startup=4.4, steps=100, spp=0.55, reason="completed")
    store.cancel(["1.6"])
    states = {c.id: c.state for c in store.cells()}
    assert [states[c] for c in ("1.2", "2.2", "2.3", "3.1", "1.6")] == [
        CellState.INTERRUPTED,
        CellState.QUEUED,
        CellState.QUEUED,
        CellState.RUNNING,
        CellState.CANCELLED,
    ]
    assert store.cell("2.2").retry_after is not None
    with store.tx.raw() as c:
        fresh = {row[0] for row in c.execute(_UNSETTLED_CELLS) if row[-1]}
    assert fresh == {"1.3", "1.4", "2.4", "2.5", "3.3", "3.4"}
    cells = store.forecast_cells()
    for workers in (1, 2, 5):
        fc = store.forecast(workers)
        assert fc == forecast(cells, workers, store.clock(), late_s=stall_floor())
        assert fc.complete and fc.ends_at is not None
    assert len({fc.steps_per_second(c) for c in ("1.1", "2.1", "3.2")}) == 3  # each group at its own rate
    assert fc.cell_seconds_left("2.4") != fc.cell_seconds_left("1.3")
    monkeypatch.setattr(queries, "IN_BATCH", 2)  # the cells with a past read by id, two a batch
    assert store.forecast(5) == fc
