"""The store's questions: read-only, each in one read transaction, answered with frozen records."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from sqlalchemy import BindParameter, ColumnElement, FromClause, Select, Table, bindparam, func, or_, select

from sweepq.queue import states
from sweepq.queue.models import CellRow, UTCDateTime
from sweepq.queue.transactions import StoreBase

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


class StoreReads(StoreBase):
    """What is claimable, read through SQLAlchemy (the read commands' reads: status_reads.py, cell_reads.py)."""

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

    def cancel_requested(self, cell: str) -> bool:
        with self._read() as s:
            return bool(s.scalar(select(CellRow.cancel_requested).where(CellRow.id == cell)))
