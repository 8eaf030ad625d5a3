"""The transactions every verb of the Store runs in, over one `Database`.

Every write is one short write transaction (`BEGIN IMMEDIATE` on SQLite), or
joins the one a caller opened with `batch()`. Reads run in their own
transaction so that they see one consistent state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from sqlalchemy import CursorResult, Result, select
from sqlalchemy.orm import Session

from sweepq.layout import RootPaths
from sweepq.queue.database import Database
from sweepq.queue.opening import damage_reported
from sweepq.queue.reads import Driver, read_settings
from sweepq.queue.records import json_safe
from sweepq.queue.schema import AttemptRow, EventRow
from sweepq.queue.server_text import ServerText
from sweepq.spec.types import Settings

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    return datetime.now(UTC)


class Transactions:
    """The transactions every verb runs in, over one `Database`: held by the `Store`, given to each group of
    its verbs (claim.py, attempts.py, moves.py, definition.py), so that they share one `batch()`."""

    def __init__(self, root: Path, database: Database, clock: Clock = utcnow) -> None:
        self.root = root
        self.paths = RootPaths(root)
        self.database = database
        self.engine = database.engine
        self.writer = database.writer
        self.clock = clock
        self.batch_session: Session | None = None

    @contextmanager
    def write(self) -> Iterator[Session]:
        if self.batch_session is not None:  # inside batch(): join its transaction
            yield self.batch_session
            return
        with Session(self.writer, expire_on_commit=False) as s, s.begin():
            yield s

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Run the write verbs called inside as one transaction (one fsync, one short lock)."""
        if self.batch_session is not None:
            yield
            return
        with Session(self.writer, expire_on_commit=False) as s, s.begin():
            self.batch_session = s
            try:
                yield
            finally:
                self.batch_session = None

    @contextmanager
    def read(self) -> Iterator[Session]:
        with Session(self.engine, expire_on_commit=False) as s, s.begin():
            yield s

    @contextmanager
    def raw(self) -> Iterator[Driver]:
        """The driver's connection in a read transaction, for the reads written in SQL text (queries.py)."""
        with self.read() as s, damage_reported(self.database.path or Path()):
            yield self.driver(s)

    def driver(self, s: Session) -> Driver:
        """`s`'s connection as the driver's, which runs queries.py's text (on a server: server_text.py)."""
        conn = s.connection().connection.driver_connection
        schema = self.database.schema
        return cast(Driver, conn if schema is None else ServerText(conn, schema))

    # -- shared by the verbs --------------------------------------------------

    def add_event(self, cell: str | None, kind: str, detail: dict[str, Any] | None = None) -> None:
        with self.write() as s:
            self.event(s, cell, kind, detail or {})

    def event(self, s: Session, cell: str | None, kind: str, detail: dict[str, Any]) -> None:
        s.add(EventRow(cell_id=cell, at=self.clock(), kind=kind, detail=json_safe(detail)))

    def settings(self, s: Session) -> Settings:
        return read_settings(self.driver(s), self.root)

    @staticmethod
    def attempt_row(s: Session, cell: str, number: int) -> AttemptRow | None:
        return s.scalar(select(AttemptRow).where(AttemptRow.cell_id == cell, AttemptRow.number == number))


def rowcount(result: Result[Any]) -> int:
    """The rows a guarded UPDATE changed: 1 proves the change won, 0 is a lost race or an illegal move."""
    return cast("CursorResult[Any]", result).rowcount
