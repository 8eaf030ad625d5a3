"""An attempt found dead ends at its last sign of life; what it lost is training, the gap is downtime.

On a real root with an injected clock (no sleeping): the Store's close of an attempt found dead, the
forecast's elapsed time, and report's split of the hours (training lost, downtime), words included.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from sweepq.cli import render
from sweepq.queue.attempts import last_sign_of_life
from sweepq.queue.records import AttemptRecord, Outcome
from sweepq.queue.states import CellState, Reason
from sweepq.queue.store import Store
from sweepq.results import report
from unit.support import T0, WORKER, FakeClock
from unit.test_render import BLANK_ATTEMPT, text

NIGHT = 8 * 3600.0


def claimed(store: Store, cell: str = "1.1") -> int:
    won = store.claim(cell, WORKER)
    assert won is not None
    return won.number


def test_an_attempt_found_dead_ends_at_its_workers_last_flush_not_at_the_reap(store: Store, clock: FakeClock) -> None:
    number = claimed(store)
    clock.advance(17)
    store.seen("1.1", number)  # the worker's last flush before the machine went down
    clock.advance(NIGHT)  # the next launch, in the morning, reaps it
    lost = Outcome(reason=str(Reason.LOST), end_step=40)
    assert store.finish("1.1", number, lost, found_dead=True) is CellState.INTERRUPTED
    (a,) = store.attempts("1.1")
    assert (a.started_at, a.ended_at, a.seen_at, a.closed_at) == (T0, T0 + timedelta(seconds=17), a.ended_at, clock.now)
    assert a.wall_seconds == 17.0  # its life, not 8 hours
    assert report.downtime(a) == NIGHT
    # The forecast's elapsed time ends where the attempt did.
    assert store.forecast(1).last_end == T0 + timedelta(seconds=17)


def test_a_file_written_after_the_last_flush_is_a_newer_sign_of_life(store: Store, clock: FakeClock) -> None:
    number = claimed(store)
    clock.advance(5)
    store.seen("1.1", number)
    clock.advance(NIGHT)
    later = T0 + timedelta(seconds=5.5)  # its log's last line, after the worker's last flush
    store.finish("1.1", number, Outcome(reason=str(Reason.LOST)), found_dead=True, last_seen=later)
    assert store.attempts("1.1")[0].ended_at == later


def test_an_attempt_its_closer_saw_end_ends_now_with_no_downtime(store: Store, clock: FakeClock) -> None:
    number = claimed(store)
    clock.advance(3)
    store.seen("1.1", number)
    clock.advance(0.4)
    store.finish("1.1", number, Outcome(reason=str(Reason.PREEMPTED), end_step=9, wall_seconds=3.4))
    (a,) = store.attempts("1.1")
    assert a.ended_at == a.closed_at == a.seen_at == clock.now
    assert report.downtime(a) == 0.0


def test_the_last_sign_of_life_is_never_before_the_start_nor_after_the_reap() -> None:
    start, reap = T0, T0 + timedelta(hours=1)
    assert last_sign_of_life(start, None, None, reap) == start  # dead before anything was seen of it
    assert last_sign_of_life(start, T0 - timedelta(seconds=5), None, reap) == start  # a clock that went back
    assert last_sign_of_life(start, T0 + timedelta(seconds=3), T0 + timedelta(seconds=4), reap) == T0 + timedelta(
        seconds=4
    )
    assert last_sign_of_life(start, None, reap + timedelta(days=1), reap) == reap  # a file touched since


def attempt(number: int, start_s: float, end_s: float, **fields: object) -> AttemptRecord:
    return replace(
        BLANK_ATTEMPT,
        cell="1.1",
        number=number,
        started_at=T0 + timedelta(seconds=start_s),
        ended_at=T0 + timedelta(seconds=end_s),
        wall_seconds=end_s - start_s,
        **fields,  # type: ignore[arg-type]
    )


# 1.1 attempt 1 was killed with the machine: its last sign of life at 17 s, reaped at 130 s (1m53s of
# downtime). Attempt 2 resumed from its checkpoint at step 20, made at 12 s: 5 s of training lost. Attempt
# 2 was then preempted at 200 s and attempt 3 resumed from a checkpoint attempt 1 made: all of attempt 2
# (from its start at 130 s) was lost.
ATTEMPTS = [
    attempt(1, 0, 17, reason="lost", start_step=0, end_step=25, closed_at=T0 + timedelta(seconds=130)),
    attempt(2, 130, 200, reason="preempted", start_step=20, end_step=60, closed_at=T0 + timedelta(seconds=200)),
    attempt(3, 210, 300, reason="completed", start_step=10, end_step=100, closed_at=T0 + timedelta(seconds=300)),
]
MADE = {("1.1", 1, 10): T0 + timedelta(seconds=6), ("1.1", 1, 20): T0 + timedelta(seconds=12)}


def test_training_lost_runs_from_the_resumed_checkpoint_to_the_last_sign_of_life() -> None:
    assert report.training_lost(ATTEMPTS, MADE) == {("1.1", 1): 5.0, ("1.1", 2): 70.0}
    assert [report.downtime(a) for a in ATTEMPTS] == [113.0, 0.0, 0.0]
    rows = {r["reason"]: r for r in report.by_reason(ATTEMPTS, MADE)}
    assert rows["lost"]["wall_hours"] == 17 / 3600  # the downtime is not in it
    assert (rows["lost"]["training_lost_hours"], rows["lost"]["downtime_hours"]) == (5 / 3600, 113 / 3600)
    assert (rows["preempted"]["training_lost_hours"], rows["preempted"]["downtime_hours"]) == (70 / 3600, 0.0)
    assert (rows["completed"]["training_lost_hours"], rows["completed"]["downtime_hours"]) == (0.0, 0.0)


REPORT = """\
reason     attempts  wall hours  gpu hours  steps run  steps lost  share of wall  training lost h  downtime h
completed         1       0.025      0.000         90           0          50.8%            0.000       0.000
preempted         1       0.019      0.000         40          50          39.5%            0.019       0.000
lost              1       0.005      0.000         25           5           9.6%            0.001       0.031
training lost: 0.021 h (1m15s), from the checkpoint each next attempt resumed from to the last sign of life of \
the attempt before it;
downtime: 0.031 h (1m53s), from an attempt's last sign of life until a later launch found it dead, not counted \
in wall hours
"""


def test_report_says_training_lost_and_downtime_apart() -> None:
    assert text(render.report_table(report.by_reason(ATTEMPTS, MADE)), width=140) == REPORT


def test_no_sentence_when_nothing_was_lost() -> None:
    assert report.hours_words(report.by_reason([ATTEMPTS[2]], MADE)) is None
    assert [report._clock(h / 3600) for h in (17, 113, 3723)] == ["17s", "1m53s", "1h02m03s"]
