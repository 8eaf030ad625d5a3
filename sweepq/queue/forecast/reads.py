"""What the forecast (queue/forecast/model.py) needs of the queue: one read, one query per kind of row.

It runs at every refresh of a live view, on sweeps of any size. The cells that take a worker
(running, interrupted, queued) are read one by one, as narrow tuples (no JSON column), with their
attempts and one checkpoint aggregate per attempt; the fresh ones among them (queued, never tried,
no back-off: most of a large sweep's queue) as four bare values each, since all the forecast needs
of them is where they stand in claim order and their length. The settled cells (most of a large
sweep) are not read one by one: the database hands back each of their attempts' span
(queue/forecast/model.py's `span`, in whole microseconds), kept on the attempt's row when it ended or else
worked out (queue/queries.py), with their lengths summed by group.

SQL text on the driver's connection, as queue/reads.py's reads (which says why): `status` runs
these without SQLAlchemy.
"""

from __future__ import annotations

from collections import defaultdict, namedtuple
from collections.abc import Sequence
from datetime import timedelta
from operator import attrgetter
from typing import Any

from sweepq.queue.forecast.model import AttemptSeen, CellSeen, Point, Settled, Span
from sweepq.queue.queries import (
    FORECAST_ATTEMPTS,
    FORECAST_CELLS,
    FORECAST_MARKS,
    SETTLED_LENGTHS,
    SETTLED_SPANS,
    SETTLED_TIMES,
    UNSETTLED_CELLS,
    Driver,
    in_lists,
)
from sweepq.queue.records import utc
from sweepq.queue.states import CELL_ORDER, CellState, Reason


def every_cell(c: Driver) -> list[CellSeen]:
    """Every cell still in the sweep, settled ones too, as plain rows (three queries whatever its size)."""
    rows = [_cell_row(r) for r in c.execute(FORECAST_CELLS)]
    return _seen(rows, _attempts(c, "", ()), _marks(c, "", ()))


def unsettled(c: Driver) -> list[CellSeen]:
    """The cells that take a worker, in one pass over them that tells the fresh ones (most of a large
    sweep's queue) as bare tuples (what `_cell` would make of them, without the work); the others read as
    `every_cell` reads them, with the attempts and checkpoints of those cells alone, by id."""
    past, fresh = [], []
    queued = CellState.QUEUED
    for *r, new in c.execute(UNSETTLED_CELLS):
        if new:
            fresh.append(CellSeen(r[0], r[1], r[2], queued, r[6]))
        else:
            past.append(_cell_row(r))
    past.sort(key=attrgetter(*CELL_ORDER))  # in cell order, as `every_cell` reads them
    attempts: list[_AttemptRow] = []
    marks: list[_MarkRow] = []
    for held, ids in in_lists([r.id for r in past]):
        only = f" {{t}}.cell_id IN ({held}) AND"
        attempts += _attempts(c, only, ids)
        marks += _marks(c, only, ids)
    return _seen(past, attempts, marks) + fresh


def _cell_row(r: Sequence[Any]) -> _CellRow:
    return _CellRow(*r[:7], *map(_at, r[7:]))


def _attempts(c: Driver, only: str, args: Sequence[Any]) -> list[_AttemptRow]:
    q = FORECAST_ATTEMPTS.format(only=only.format(t="attempts"))
    return [_AttemptRow(a, n, utc(s), _at(e), *r) for a, n, s, e, *r in c.execute(q, args)]


def _marks(c: Driver, only: str, args: Sequence[Any]) -> list[_MarkRow]:
    q = FORECAST_MARKS.format(only=only.format(t="checkpoints"))
    return [_MarkRow(i, n, fs, _at(fa), ls, _at(la), k) for i, n, fs, fa, ls, la, k in c.execute(q, args)]


def _at(v: Any) -> Any:
    return None if v is None else utc(v)


def _seen(cells: list[Any], attempts: list[Any], checkpoints: list[Any]) -> list[CellSeen]:
    marks: dict[tuple[str, int | None], Any] = {(k.cell_id, k.attempt): k for k in checkpoints}
    resume: dict[str, int] = defaultdict(int)
    for k in checkpoints:
        resume[k.cell_id] = max(resume[k.cell_id], k.committed or 0)
    by_cell: dict[str, list[Any]] = defaultdict(list)
    for a in attempts:
        by_cell[a.cell_id].append(a)
    return [_cell(c, by_cell.get(c.id, []), marks, resume[c.id]) for c in cells]


_STATES = {str(s): s for s in CellState}
_LOST = str(Reason.LOST)


def _cell(c: Any, attempts: list[Any], marks: dict[tuple[str, int | None], Any], resume: int) -> CellSeen:
    state = _STATES[c.state]
    seen = []
    for a in attempts:  # most cells of a large sweep have none yet, or one
        current = state is CellState.RUNNING and a.number == c.attempts and a.reason is None
        seen.append(_attempt(a, marks.get((c.id, a.number)), _progress(c, a) if current else None))
    return CellSeen(
        id=c.id,
        group=c.group_number,
        idx=c.index,
        state=state,
        total_steps=c.total_steps,
        resume_step=resume,
        retry_after=c.retry_after,
        updated_at=c.updated_at,
        attempts=tuple(seen),
    )


def _progress(c: Any, a: Any) -> Point | None:
    """A running attempt's latest progress (the cell's progress is its own once reported after its start)."""
    if c.step is None or c.progress_at is None or c.progress_at < a.started_at:
        return None
    return Point(c.progress_at, c.step)


def _attempt(a: Any, mark: Any, progress: Point | None) -> AttemptSeen:
    first = None if mark is None else Point(mark.first_at, mark.first_step)
    lasts = [p for p in (_end(a), progress) if p is not None]
    if not lasts and mark is not None:
        lasts = [Point(mark.last_at, mark.last_step)]
    last = max(lasts, key=lambda p: (p.step, p.at), default=None)
    return AttemptSeen(a.started_at, a.start_step or 0, first, last, a.ended_at, bool(a.current))


def _end(a: Any) -> Point | None:
    """Where an attempt ended, as its receipt measured it. A lost one's end (`ended_at`) is its last sign of
    life (Store.finish: the reaper never ends it at the reap), which the sweep's elapsed time uses, but not
    its speed: its end step is the cell's last progress, which a run that died before its first flush never
    reported (it may be the attempt before's), so its newest checkpoint measures it instead."""
    if a.reason is None or a.reason == _LOST or a.end_step is None or a.wall_seconds is None:
        return None
    return Point(a.started_at + timedelta(microseconds=_micros(a.wall_seconds)), a.end_step)


def _micros(seconds: float) -> int:
    """Seconds to whole microseconds, rounded as the settled spans' SQL rounds them (half up)."""
    return int(seconds * 1e6 + 0.5)


def settled(c: Driver) -> Settled:
    """The settled cells still in the sweep, summed (forecast.Settled): three queries at any size."""
    spans = [
        (g, cell, Span(steps, micros, startup, bool(ended)))
        for g, cell, steps, micros, startup, ended in c.execute(SETTLED_SPANS).fetchall()
    ]
    lengths = {g: (steps or 0, n) for g, steps, n in c.execute(SETTLED_LENGTHS)}
    began, last_end = c.execute(SETTLED_TIMES).fetchone()
    return Settled(spans, lengths, _at(began), _at(last_end))


_CellRow = namedtuple(
    "_CellRow", "id group_number index state attempts step total_steps progress_at retry_after updated_at"
)

_AttemptRow = namedtuple(
    "_AttemptRow", "cell_id number started_at ended_at start_step end_step wall_seconds reason current"
)
_MarkRow = namedtuple("_MarkRow", "cell_id attempt first_step first_at last_step last_at committed")
