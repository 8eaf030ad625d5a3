"""What the forecast (queue/forecast.py) needs of the queue: one read, one query per kind of row.

It runs at every refresh of a live view, on sweeps of any size. The cells that take a worker
(running, interrupted, queued) are read one by one, as narrow tuples (no JSON column), with their
attempts and one checkpoint aggregate per attempt; the fresh ones among them (queued, never tried,
no back-off: most of a large sweep's queue) as four bare values each, straight from the driver,
since all the forecast needs of them is where they stand in claim order and their length. The
settled cells (most of a large sweep) are not read one by one: the database hands back each of their
attempts' span (queue/forecast.py's `span`, in whole microseconds), kept on the attempt's row when
it ended or else worked out (queue/span_sql.py), with their lengths summed by group.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta
from typing import Any

from sqlalchemy import ClauseElement, Connection, and_, case, exists, func, not_, select, text

from sweepq.queue.forecast import UNSETTLED, AttemptSeen, CellSeen, Forecast, Point, Settled, Span, forecast
from sweepq.queue.models import AttemptRow, CellRow, CheckpointRow
from sweepq.queue.prepared import Prepared
from sweepq.queue.reads import stall_floor
from sweepq.queue.span_sql import SETTLED_SPANS
from sweepq.queue.states import CellState, CheckpointState, Reason
from sweepq.queue.transactions import StoreBase

_UNSETTLED = sorted(str(s) for s in UNSETTLED)


class StoreForecastReads(StoreBase):
    def forecast(self, workers: int) -> Forecast:
        """The sweep's ETA and each cell's, with `workers` workers, as of the store's clock; a running
        cell late by more than the silence `status` calls "no progress" (reads.stall_floor) is stalled."""
        with self._read() as s:
            conn = s.connection()
            cells, settled = _unsettled(conn), _settled(conn)
        return forecast(cells, workers, self.clock(), late_s=stall_floor(), settled=settled)

    def forecast_cells(self) -> list[CellSeen]:
        """Every cell still in the sweep, settled ones too, with what its attempts showed of their speed
        (what `forecast` sums in SQL, read one by one)."""
        with self._read() as s:
            return _cells(s.connection(), settled_too=True)


def _cells(conn: Connection, settled_too: bool, fresh: bool = True) -> list[CellSeen]:
    """The cells still in the sweep (only those that take a worker unless `settled_too`; not the fresh
    ones unless `fresh`), as plain rows: the ORM's result machinery costs more than the query."""
    cells, attempts, checkpoints = _CELLS, _ATTEMPTS, _CHECKPOINTS
    if not fresh:
        cells = cells.where(not_(_FRESH))
    if not settled_too:
        cells = cells.where(CellRow.state.in_(_UNSETTLED))
        attempts = attempts.join(CellRow, CellRow.id == AttemptRow.cell_id).where(CellRow.state.in_(_UNSETTLED))
        checkpoints = checkpoints.join(CellRow, CellRow.id == CheckpointRow.cell_id).where(
            CellRow.state.in_(_UNSETTLED)
        )
    return _seen(list(conn.execute(cells)), list(conn.execute(attempts)), list(conn.execute(checkpoints)))


def _unsettled(conn: Connection) -> list[CellSeen]:
    """The cells that take a worker: those with a past (attempts, checkpoints, a back-off) as `_cells`
    reads them, the fresh ones as bare tuples (what `_cell` would make of them, without the work)."""
    cells = _cells(conn, settled_too=False, fresh=False)
    queued = CellState.QUEUED
    cells += [CellSeen(i, g, x, queued, n) for i, g, x, n in _rows(conn, _FRESH_CELLS)]
    return cells


def _rows(conn: Connection, stmt: ClauseElement) -> list[tuple[Any, ...]]:
    """Every row of `stmt` as the driver gives it: a row object per cell costs more than the query."""
    return Prepared(stmt, conn.dialect).rows(conn)


def _seen(cells: list[Any], attempts: list[Any], checkpoints: list[Any]) -> list[CellSeen]:
    marks: dict[tuple[str, int | None], Any] = {(k.cell_id, k.attempt): k for k in checkpoints}
    resume: dict[str, int] = defaultdict(int)
    for k in checkpoints:
        resume[k.cell_id] = max(resume[k.cell_id], k.committed or 0)
    by_cell: dict[str, list[Any]] = defaultdict(list)
    for a in attempts:
        by_cell[a.cell_id].append(a)
    return [_cell(c, by_cell.get(c.id, []), marks, resume[c.id]) for c in cells]


_CELLS = (
    select(
        CellRow.id,
        CellRow.group_number,
        CellRow.index,
        CellRow.state,
        CellRow.attempts,
        CellRow.step,
        CellRow.total_steps,
        # Times only where they tell something (a time costs more to read than any other value):
        # the progress of a running cell, the back-off of a waiting one.
        case((CellRow.state == str(CellState.RUNNING), CellRow.progress_at)).label("progress_at"),
        CellRow.retry_after,
        case((CellRow.retry_after.is_not(None), CellRow.updated_at)).label("updated_at"),
    )
    .where(CellRow.removed.is_(False))
    .order_by(CellRow.group_number, CellRow.index)
)

# A fresh cell: queued, never tried (no attempt, no checkpoint kept), no back-off. Its forecast is its
# group's speed and length from the start: `_cell` would make of it a CellSeen with defaults only.
_FRESH = and_(
    CellRow.state == str(CellState.QUEUED),
    CellRow.retry_after.is_(None),
    ~exists().where(AttemptRow.cell_id == CellRow.id),
    ~exists().where(CheckpointRow.cell_id == CellRow.id, CheckpointRow.state != str(CheckpointState.CORRUPT)),
)
_FRESH_CELLS = select(CellRow.id, CellRow.group_number, CellRow.index, CellRow.total_steps).where(
    _FRESH, CellRow.removed.is_(False)
)

_ATTEMPTS = select(
    AttemptRow.cell_id,
    AttemptRow.number,
    AttemptRow.started_at,
    AttemptRow.ended_at,
    AttemptRow.start_step,
    AttemptRow.end_step,
    AttemptRow.wall_seconds,
    AttemptRow.reason,
).order_by(AttemptRow.cell_id, AttemptRow.number)

# Per attempt, its first and last checkpoint (steps grow with time within an attempt), and the
# newest committed step (what the cell resumes from).
_CHECKPOINTS = (
    select(
        CheckpointRow.cell_id,
        CheckpointRow.attempt,
        func.min(CheckpointRow.step).label("first_step"),
        func.min(CheckpointRow.created_at).label("first_at"),
        func.max(CheckpointRow.step).label("last_step"),
        func.max(CheckpointRow.created_at).label("last_at"),
        func.max(case((CheckpointRow.state == str(CheckpointState.COMMITTED), CheckpointRow.step))).label("committed"),
    )
    .where(CheckpointRow.state != str(CheckpointState.CORRUPT))
    .group_by(CheckpointRow.cell_id, CheckpointRow.attempt)
)


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
    return AttemptSeen(a.started_at, a.start_step or 0, first, last, a.ended_at)


def _end(a: Any) -> Point | None:
    """Where an attempt ended, as its receipt measured it: a lost one's end is when it was reaped, maybe
    long after it died (the next launch), so it tells nothing of its speed."""
    if a.reason is None or a.reason == _LOST or a.end_step is None or a.wall_seconds is None:
        return None
    return Point(a.started_at + timedelta(microseconds=_micros(a.wall_seconds)), a.end_step)


def _micros(seconds: float) -> int:
    """Seconds to whole microseconds, rounded as the settled spans' SQL rounds them (half up)."""
    return int(seconds * 1e6 + 0.5)


def _settled(conn: Connection) -> Settled:
    """The settled cells still in the sweep, summed (forecast.Settled): three queries at any size."""
    spans = [
        (g, cell, Span(steps, micros, startup, bool(ended)))
        for g, cell, steps, micros, startup, ended in _rows(conn, text(SETTLED_SPANS))
    ]
    lengths = {g: (steps or 0, n) for g, steps, n in conn.execute(_SETTLED_LENGTHS)}
    began, last_end = conn.execute(_SETTLED_TIMES).one()
    return Settled(spans, lengths, began, last_end)


def _settled_cells() -> Any:
    return (CellRow.state.not_in(_UNSETTLED)) & CellRow.removed.is_(False)


_SETTLED_LENGTHS = (
    select(CellRow.group_number, func.sum(CellRow.total_steps), func.count())
    .where(_settled_cells(), CellRow.total_steps.is_not(None), CellRow.total_steps != 0)
    .group_by(CellRow.group_number)
)
_SETTLED_TIMES = (
    select(func.min(AttemptRow.started_at), func.max(AttemptRow.ended_at))
    .join(CellRow, CellRow.id == AttemptRow.cell_id)
    .where(_settled_cells())
)
