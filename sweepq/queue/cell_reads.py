"""What `show`, `attempts`, `logs`, `best` and `report` read beyond status's reads, in SQL text.

The same mixin as status's reads (status_reads.py), for the same reason: a read command that imports
SQLAlchemy spends most of its time importing it. The `Store` runs these on its session's connection,
read commands on a bare `sqlite3` connection (`Reader`): one implementation for both.
"""

from __future__ import annotations

from datetime import datetime

from sweepq.errors import UsageError
from sweepq.queue.records import AttemptRecord, CellRecord, CheckpointRecord, EventRecord
from sweepq.queue.rows import (
    ATTEMPT_NAMES,
    CELL_NAMES,
    CHECKPOINT_NAMES,
    EVENT_NAMES,
    attempt_records,
    cell_records,
    checkpoint_records,
    event_records,
    utc,
)
from sweepq.queue.states import CheckpointState
from sweepq.queue.status_reads import StatusReads, quoted

_CELL = f"SELECT {quoted(CELL_NAMES)} FROM cells WHERE id = ?"
_ATTEMPTS = f"SELECT {quoted(ATTEMPT_NAMES)} FROM attempts"
_ONE_ATTEMPT = f"{_ATTEMPTS} WHERE cell_id = ? AND number = ?"
_CHECKPOINTS = f"SELECT {quoted(CHECKPOINT_NAMES)} FROM checkpoints WHERE cell_id = ? ORDER BY step"
_IN_STATE = f"SELECT {quoted(CHECKPOINT_NAMES)} FROM checkpoints WHERE state = ? ORDER BY cell_id, step, id"
_EVENTS = f"SELECT {quoted(EVENT_NAMES)} FROM events"
_MADE = (
    "SELECT cell_id, attempt, step, min(created_at) FROM checkpoints "
    f"WHERE state != '{CheckpointState.CORRUPT}' GROUP BY cell_id, attempt, step"
)


class CellReads(StatusReads):
    def cell(self, cell_id: str) -> CellRecord:
        with self._raw() as c:
            found = cell_records(c.execute(_CELL, (cell_id,)))
        if not found:
            raise UsageError(f"no cell {cell_id!r} in the sweep at {self.root}")
        return found[0]

    def attempts(
        self, cell: str | None = None, reason: str | None = None, newest_first: bool = False
    ) -> list[AttemptRecord]:
        """The attempts (of `cell`, ended with `reason`), in the order they started."""
        where = [(f, v) for f, v in (("cell_id = ?", cell), ("reason = ?", reason)) if v is not None]
        order = " DESC" if newest_first else ""
        q = (
            f"{_ATTEMPTS}{' WHERE ' if where else ''}{' AND '.join(f for f, _ in where)} "
            f"ORDER BY started_at{order}, id{order}"
        )
        with self._raw() as c:
            return attempt_records(c.execute(q, [v for _, v in where]))

    def attempt(self, cell: str, number: int) -> AttemptRecord | None:
        with self._raw() as c:
            found = attempt_records(c.execute(_ONE_ATTEMPT, (cell, number)))
        return found[0] if found else None

    def checkpoints(self, cell: str) -> list[CheckpointRecord]:
        """The cell's checkpoints by step, whatever their state."""
        with self._raw() as c:
            return checkpoint_records(c.execute(_CHECKPOINTS, (cell,)))

    def checkpoints_in(self, state: str) -> dict[str, list[CheckpointRecord]]:
        """Every cell's checkpoints in `state`, by step: one query, not one a cell (`best` reads them all)."""
        out: dict[str, list[CheckpointRecord]] = {}
        with self._raw() as c:
            for k in checkpoint_records(c.execute(_IN_STATE, (state,))):
                out.setdefault(k.cell, []).append(k)
        return out

    def checkpoint_times(self) -> dict[tuple[str, int, int], datetime]:
        """(cell, attempt, step) -> when the queue first knew that checkpoint (its row's time), for every
        checkpoint not corrupt: when the training a later attempt resumed from was made (report's training
        lost)."""
        with self._raw() as c:
            return {(cell, a, step): utc(t) for cell, a, step, t in c.execute(_MADE) if a is not None}

    def events(self, cell: str | None = None) -> list[EventRecord]:
        """The history (of `cell`), oldest first."""
        q = f"{_EVENTS}{' WHERE cell_id = ?' if cell is not None else ''} ORDER BY at, id"
        with self._raw() as c:
            return event_records(c.execute(q, () if cell is None else (cell,)))
