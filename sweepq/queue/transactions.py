"""Opening a root's queue and the transactions every verb runs in (the base of Store).

Every write is one short write transaction (`BEGIN IMMEDIATE` on SQLite), or
joins the one a caller opened with `batch()`. Reads run in their own
transaction so that they see one consistent state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self, cast

from sqlalchemy import CursorResult, Result, select
from sqlalchemy.orm import Session

from sweepq.layout import RootPaths
from sweepq.queue import opening
from sweepq.queue.database import Database
from sweepq.queue.opening import damage_reported
from sweepq.queue.reads import Driver, read_settings
from sweepq.queue.records import json_safe
from sweepq.queue.schema import AttemptRow, EventRow
from sweepq.spec.types import Settings

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    return datetime.now(UTC)


class StoreBase:
    def __init__(self, root: Path, database: Database, clock: Clock = utcnow) -> None:
        self.root = root
        self.paths = RootPaths(root)
        self.database = database
        self.engine = database.engine
        self._writer = database.writer
        self.clock = clock
        self._batch: Session | None = None

    # -- opening ----------------------------------------------------------

    @classmethod
    def open(cls, root: Path, *, create: bool = False, clock: Clock = utcnow, database: Database | None = None) -> Self:
        """Open a root's database, migrating it to this sweepq's schema.

        `create=False` refuses a folder that is not a sweep root (no database).
        `database` replaces the root's own (Database.for_root). A root whose
        cells are on disk but whose queue is gone or damaged is refused: a new
        queue would number attempts again from 1 (`sweepq repair` rebuilds it).
        """
        database = database or Database.for_root(root)
        if not database.exists():
            opening.check_not_lost(root, database.path)
            if not create:
                raise opening.not_a_root(root, database.describe())
            root.mkdir(parents=True, exist_ok=True)
        else:
            opening.check_holds_queue(root, database.path, database.revision)
        database.upgrade()
        return cls(root, database, clock)

    @classmethod
    def open_readonly(cls, root: Path, clock: Clock = utcnow, database: Database | None = None) -> Self:
        """For read commands: never creates, migrates or writes anything (Database's read-only recipe)."""
        database = (database or Database.for_root(root)).read_only()
        if not database.exists():
            opening.check_not_lost(root, database.path)
            raise opening.not_a_root(root, database.describe())
        opening.check_holds_queue(root, database.path, database.revision)
        database.check_current()
        return cls(root, database, clock)

    def close(self) -> None:
        self.database.dispose()

    # -- transactions -------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[Session]:
        if self._batch is not None:  # inside batch(): join its transaction
            yield self._batch
            return
        with Session(self._writer, expire_on_commit=False) as s, s.begin():
            yield s

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Run the write verbs called inside as one transaction (one fsync, one short lock)."""
        if self._batch is not None:
            yield
            return
        with Session(self._writer, expire_on_commit=False) as s, s.begin():
            self._batch = s
            try:
                yield
            finally:
                self._batch = None

    @contextmanager
    def _read(self) -> Iterator[Session]:
        with Session(self.engine, expire_on_commit=False) as s, s.begin():
            yield s

    @contextmanager
    def _raw(self) -> Iterator[Driver]:
        """The driver's connection in a read transaction, for the reads written in SQL text (status_reads.py)."""
        with self._read() as s, damage_reported(self.database.path or Path()):
            yield cast(Driver, s.connection().connection.driver_connection)

    # -- shared by the verbs --------------------------------------------------

    def add_event(self, cell: str | None, kind: str, detail: dict[str, Any] | None = None) -> None:
        with self._write() as s:
            self._event(s, cell, kind, detail or {})

    def _event(self, s: Session, cell: str | None, kind: str, detail: dict[str, Any]) -> None:
        s.add(EventRow(cell_id=cell, at=self.clock(), kind=kind, detail=json_safe(detail)))

    def _settings(self, s: Session) -> Settings:
        return read_settings(cast(Driver, s.connection().connection.driver_connection), self.root)

    @staticmethod
    def _attempt_row(s: Session, cell: str, number: int) -> AttemptRow | None:
        return s.scalar(select(AttemptRow).where(AttemptRow.cell_id == cell, AttemptRow.number == number))


def rowcount(result: Result[Any]) -> int:
    """The rows a guarded UPDATE changed: 1 proves the change won, 0 is a lost race or an illegal move."""
    return cast("CursorResult[Any]", result).rowcount
