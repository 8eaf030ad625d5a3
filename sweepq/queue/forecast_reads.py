"""What the forecast (queue/forecast.py) needs of the queue: one read, one query per kind of row.

It runs at every refresh of a live view, on sweeps of any size: the cells and the attempts are
read as narrow tuples (no JSON column), and the checkpoints only as one aggregate per attempt.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta
from typing import Any

from sqlalchemy import case, func, select

from sweepq.queue.forecast import AttemptSeen, CellSeen, Forecast, Point, forecast
from sweepq.queue.models import AttemptRow, CellRow, CheckpointRow
from sweepq.queue.reads import stall_floor
from sweepq.queue.states import CellState, CheckpointState, Reason
from sweepq.queue.transactions import StoreBase


class StoreForecastReads(StoreBase):
    def forecast(self, workers: int) -> Forecast:
        """The sweep's ETA and each cell's, with `workers` workers, as of the store's clock; a running
        cell late by more than the silence `status` calls "no progress" (reads.stall_floor) is stalled."""
        return forecast(self.forecast_cells(), workers, self.clock(), late_s=stall_floor())

    def forecast_cells(self) -> list[CellSeen]:
        """Every cell still in the sweep, with what its attempts showed of their speed."""
        with self._read() as s:
            conn = s.connection()  # plain rows: the ORM's result machinery costs more than the query
            cells = list(conn.execute(_CELLS))
            attempts = list(conn.execute(_ATTEMPTS))
            checkpoints = list(conn.execute(_CHECKPOINTS))
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
    return Point(a.started_at + timedelta(seconds=a.wall_seconds), a.end_step)
