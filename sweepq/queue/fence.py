"""Fencing: an attempt writes nothing durable unless it is still its cell's current attempt.

The lock (liveness.py) keeps two processes from training one cell; the fence
makes sure that, should that ever fail (a cell folder removed under a running
attempt, a process stopped for hours, a lock the file system did not honour),
the process that lost its cell can never commit anything of it. The token is
the attempt number: the database names the cell's current attempt (`cells.attempts`
while the cell is `running`), and every checkpoint commit, deletion and
DONE.json write of a training process asks `Fence.check` first. The worker's
writes of an attempt's progress are fenced in their own transaction
(`Store.is_current`), which leaves no gap at all.

What remains between a check and the rename that commits a file is
microseconds, during which the lock also has to have failed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import cast

from sqlalchemy import Executable, create_engine, select
from sqlalchemy.dialects import sqlite
from sqlalchemy.sql.elements import ClauseElement

from sweepq.queue.database import Database
from sweepq.queue.liveness import Ownership, OwnershipLost
from sweepq.queue.schema import CellRow
from sweepq.queue.states import CellState


class Fenced(OwnershipLost):
    """A write refused because its attempt is no longer the cell's current one."""


@dataclass
class Fence:
    """The right of attempt `attempt` of `cell` to write, checked before each durable write."""

    root: Path
    cell: str
    attempt: int
    ownership: Ownership
    database: Database | None = None  # the queue to ask; the root's own (Database.for_root) when None

    def __post_init__(self) -> None:
        self._queue = (self.database or Database.for_root(self.root)).read_only()  # asking never writes

    def check(self, what: str) -> None:
        """Raise Fenced, naming `what` was refused and why, unless this attempt still owns the cell."""
        why = self.ownership.lost() or self._superseded()
        if why is not None:
            raise Fenced(f"{what} of cell {self.cell} refused: attempt {self.attempt} no longer owns the cell ({why})")

    def _superseded(self) -> str | None:
        try:
            with self._queue.engine.connect() as conn:
                row = conn.execute(_current(self.cell)).first()
        except Exception as e:  # fail closed: a write nobody can vouch for is not made
            return f"the queue could not be read to confirm it: {e.__class__.__name__}: {e}"
        if row is None:
            return "the cell is no longer in the queue"
        state, attempts = row
        if attempts != self.attempt:
            return f"the cell is on attempt {attempts} now"
        if state != CellState.RUNNING:
            return f"the queue closed this attempt (the cell is {state})"
        return None


def _current(cell: str) -> Executable:
    return select(CellRow.state, CellRow.attempts).where(CellRow.id == cell)


def warm() -> None:
    """Load SQLite's dialect and compile the fence's question once: a process forked after this
    (worker/template.py) asks its first one in milliseconds, not a tenth of a second."""
    create_engine("sqlite://").dispose()  # the dialect's modules, imported by the engine's entry point
    cast(ClauseElement, _current("")).compile(dialect=sqlite.dialect())
