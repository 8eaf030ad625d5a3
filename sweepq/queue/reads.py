"""The store's questions: read-only, each in one read transaction, answered with frozen records."""

from __future__ import annotations

import os
from datetime import datetime
from functools import lru_cache
from typing import Any, cast

from sqlalchemy import BindParameter, ColumnElement, FromClause, Select, Table, bindparam, func, or_, select
from sqlalchemy.engine import Dialect

from sweepq.errors import UsageError
from sweepq.queue import states
from sweepq.queue.models import AttemptRow, CellRow, CheckpointRow, EventRow, UTCDateTime
from sweepq.queue.prepared import Prepared
from sweepq.queue.records import AttemptRecord, CellRecord, CheckpointRecord, EventRecord
from sweepq.queue.rows import CELL_COLUMNS, attempt_record, cell_record, cell_records, checkpoint_record, event_record
from sweepq.queue.states import CellState
from sweepq.queue.transactions import StoreBase
from sweepq.spec.types import Settings

#: A running cell is said to make no progress once silent for the longer of this and three of its steps.
STALL_SECONDS = 120.0
ENV_STALL_SECONDS = "SWEEPQ_STALL_SECONDS"  # overrides STALL_SECONDS (for the reader: `status`)

# The claim's statements are Core, built once and run with parameters: building an ORM
# statement costs more than SQLite's whole claim.
CELLS = cast(Table, CellRow.__table__)


def now_param() -> BindParameter[datetime]:
    """The claim statements' `:now`, given when they run."""
    return bindparam("now", type_=UTCDateTime())


def retry_due(now: datetime | BindParameter[datetime], cells: FromClause = CELLS) -> ColumnElement[bool]:
    """A cell's back-off is over: it has none, its time came, or the clock went back since it began.

    `finish` writes `updated_at` with `retry_after`; a later write of the row only
    moves it later. A clock now earlier than `updated_at` was set back (or another
    machine's runs behind): the wait is over at once. So no cell ever waits longer
    than the back-off it was given, whatever happens to the wall clock meanwhile.
    """
    c = cells.c
    return or_(c.retry_after.is_(None), c.retry_after <= now, c.updated_at > now)


def claim_order(state: str, cells: FromClause = CELLS, skip: tuple[str, ...] = ()) -> Select[Any]:
    """The ids of the cells in `state` that may be claimed at `:now`, in cell order (group, then index).

    Passed over: cells removed from the sweep, in their retry back-off, or in
    `skip`. With ix_cells_claim this is a seek on (state, removed)
    walked in order: a LIMIT reads only the rows in front of it, whatever the
    sweep's size (tests/unit/test_claims.py reads the query plan).
    """
    c = cells.c
    return (
        select(c.id)
        .where(
            c.state == state,
            c.removed.is_(False),
            retry_due(now_param(), cells),
            *(c.id != cell for cell in skip),
        )
        .order_by(c.group_number, c.index)
    )


def claim_pick(skip: tuple[str, ...] = ()) -> ColumnElement[Any]:
    """The id of the next cell to claim at `:now`, as one SQL expression (NULL when there is none).

    Claim order is interrupted cells first, then queued ones, each in cell order:
    one LIMIT 1 seek per claimable state, the first that finds a cell wins
    (COALESCE evaluates its arguments in order). Over an alias of the table, so
    that it can sit inside an UPDATE of `cells` (claiming.py).
    """
    pick = CELLS.alias("pick")
    firsts = [claim_order(str(st), pick, skip).limit(1).scalar_subquery() for st in states.CLAIMABLE]
    return func.coalesce(*firsts)


def stall_floor() -> float:
    try:
        return max(0.0, float(os.environ.get(ENV_STALL_SECONDS, STALL_SECONDS)))
    except ValueError:
        return STALL_SECONDS


class StoreReads(StoreBase):
    # -- the sweep ----------------------------------------------------------

    def settings(self) -> Settings:
        with self._read() as s:
            return self._settings(s)

    # -- cells, attempts, checkpoints, history ------------------------------

    def cells(self, include_removed: bool = True) -> list[CellRecord]:
        # Converted tuples from the driver's cursor (prepared.py), not ORM objects: reading every cell of a
        # sweep of 100,000 took 5.4 s through the ORM, 3.7 s as row objects.
        every = _every_cell(self.engine.dialect, include_removed)
        with self._read() as s:
            return cell_records(every.each(s.connection(), 2000))

    def cell(self, cell_id: str) -> CellRecord:
        with self._read() as s:
            row = s.get(CellRow, cell_id)
            if row is None:
                raise UsageError(f"no cell {cell_id!r} in the sweep at {self.root}")
            return cell_record(row)

    def attempts(
        self, cell: str | None = None, reason: str | None = None, newest_first: bool = False
    ) -> list[AttemptRecord]:
        with self._read() as s:
            q = select(AttemptRow)
            if cell is not None:
                q = q.where(AttemptRow.cell_id == cell)
            if reason is not None:
                q = q.where(AttemptRow.reason == reason)
            order = (AttemptRow.started_at, AttemptRow.id)
            q = q.order_by(*(o.desc() for o in order)) if newest_first else q.order_by(*order)
            return [attempt_record(r) for r in s.scalars(q)]

    def attempt(self, cell: str, number: int) -> AttemptRecord | None:
        with self._read() as s:
            row = self._attempt_row(s, cell, number)
            return None if row is None else attempt_record(row)

    def checkpoints(self, cell: str) -> list[CheckpointRecord]:
        with self._read() as s:
            q = select(CheckpointRow).where(CheckpointRow.cell_id == cell).order_by(CheckpointRow.step)
            return [checkpoint_record(r) for r in s.scalars(q)]

    def events(self, cell: str | None = None) -> list[EventRecord]:
        with self._read() as s:
            q = select(EventRow).order_by(EventRow.at, EventRow.id)
            if cell is not None:
                q = q.where(EventRow.cell_id == cell)
            return [event_record(r) for r in s.scalars(q)]

    def claimable(self, limit: int | None = None) -> list[str]:
        """Cell ids a worker may claim now, in claim order: interrupted first, then queued (the first `limit`).

        The order claims take (claiming.claim_next takes the first of it); workers
        never read this list, which is for people and tests.
        """
        params = {"now": self.clock()}
        out: list[str] = []
        with self._read() as s:
            for state in states.CLAIMABLE:
                left = None if limit is None else limit - len(out)
                if left is not None and left <= 0:
                    break
                out += s.scalars(claim_order(str(state)).limit(left), params)
        return out

    def etas(self) -> dict[str, float]:
        """Seconds left for running cells, from their attempt's rate since it started."""
        rows = self._current_attempts()
        out = {}
        for r in rows:
            if not r.total_steps or r.step is None or r.progress_at is None:
                continue
            done, spent = r.step - (r.start_step or 0), (r.progress_at - r.started_at).total_seconds()
            if done > 0 and spent > 0:
                out[r.id] = max(0.0, (r.total_steps - r.step) * spent / done)
        return out

    def stalls(self) -> dict[str, float]:
        """Running cells silent for too long: seconds since their last progress (or their attempt's start).

        Too long is relative to the cell's own cadence: three of its steps, at the
        rate of its current attempt, and at least `stall_floor()` (2 minutes unless
        SWEEPQ_STALL_SECONDS says otherwise). A live training reports within a second
        of each logged step (run.log, flushed each second), so such silence means a
        stopped (SIGSTOP), hung or swapping process, or one that logs more rarely than that.
        """
        now, floor = self.clock(), stall_floor()
        out = {}
        for r in self._current_attempts():
            since = r.progress_at or r.started_at
            silent = (now - since).total_seconds()  # negative when the clock went back: not silent
            steps = (r.step or 0) - (r.start_step or 0)
            per_step = (since - r.started_at).total_seconds() / steps if steps > 0 else 0.0
            if silent > max(floor, 3 * per_step):
                out[r.id] = silent
        return out

    def fault_notes(self) -> dict[str, str]:
        """What the last attempt said of cells whose last reason is the machine's fault (a full disk)."""
        with self._read() as s:
            q = (
                select(CellRow.id, AttemptRow.note)
                .join(AttemptRow, (AttemptRow.cell_id == CellRow.id) & (AttemptRow.number == CellRow.attempts))
                .where(
                    CellRow.last_reason.in_([str(r) for r in states.MACHINE_FAULTS]),
                    AttemptRow.reason == CellRow.last_reason,
                    AttemptRow.note.is_not(None),
                )
            )
            return {r.id: r.note for r in s.execute(q)}

    def _current_attempts(self) -> list[Any]:
        with self._read() as s:
            q = (
                select(
                    CellRow.id,
                    CellRow.step,
                    CellRow.total_steps,
                    CellRow.progress_at,
                    AttemptRow.started_at,
                    AttemptRow.start_step,
                )
                .join(AttemptRow, (AttemptRow.cell_id == CellRow.id) & (AttemptRow.number == CellRow.attempts))
                .where(CellRow.state == CellState.RUNNING)
            )
            return list(s.execute(q))

    def running(self) -> list[tuple[str, int]]:
        """(cell, attempt number) of every cell the database believes is running."""
        with self._read() as s:
            q = select(CellRow.id, CellRow.attempts).where(CellRow.state == CellState.RUNNING)
            return [(r.id, r.attempts) for r in s.execute(q)]

    def unsettled(self) -> int:
        """Cells that are neither done, failed nor cancelled (and still in the sweep)."""
        with self._read() as s:
            q = select(func.count()).where(
                CellRow.state.not_in([str(x) for x in states.TERMINAL]), CellRow.removed.is_(False)
            )
            return int(s.scalar(q.select_from(CellRow)) or 0)

    def cancel_requested(self, cell: str) -> bool:
        with self._read() as s:
            return bool(s.scalar(select(CellRow.cancel_requested).where(CellRow.id == cell)))


@lru_cache(maxsize=8)
def _every_cell(dialect: Dialect, include_removed: bool) -> Prepared:
    """The read of every cell, compiled once (a live view reads them at every refresh)."""
    q = select(*CELL_COLUMNS).order_by(CellRow.group_number, CellRow.index)
    if not include_removed:
        q = q.where(CellRow.removed.is_(False))
    return Prepared(q, dialect, returns=CELL_COLUMNS)
