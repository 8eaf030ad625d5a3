"""A root's queue as `status` reads it: the standard library's sqlite3 alone, nothing ever written.

`status` is what people run most, often in a loop, and on a small sweep importing SQLAlchemy cost
several times everything else it does. A `Reader` opens the SQLite file with the read-only recipe
(queue/sqlite_file.py), makes the checks `Store.open_readonly` makes, and answers the reads that
`status` asks (status_reads.py, forecast_reads.py), the same code the `Store` runs on its session's
connection. Every read opens a connection of its own, in its own transaction, as the read-only
engine's (no pool): the recipe is decided from the files as they are then.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from sweepq.queue import root_checks
from sweepq.queue.cell_reads import CellReads
from sweepq.queue.forecast_reads import ForecastReads
from sweepq.queue.sqlite_file import connect_readonly, damage_reported, revision


def _utcnow() -> datetime:
    return datetime.now(UTC)


class Reader(ForecastReads, CellReads):
    """Open with `Reader.open(root)`; it holds no connection between reads (closing it is a no-op)."""

    def __init__(self, root: Path, path: Path, clock: Callable[[], datetime] = _utcnow) -> None:
        self.root, self.path, self._clock = root, path, clock

    @classmethod
    def open(cls, root: Path, clock: Callable[[], datetime] = _utcnow) -> Reader:
        """The root's queue, refused as `Store.open_readonly` refuses it: no database, a lost or emptied
        one beside cell folders, a schema other than this sweepq's."""
        path = root_checks.database_file(root)
        if not path.exists():
            root_checks.check_not_lost(root, path)
            raise root_checks.not_a_root(root, str(path))
        reader = cls(root, path, clock)
        root_checks.check_holds_queue(root, path, reader.revision)
        root_checks.check_current(reader.revision(), str(path))
        return reader

    def clock(self) -> datetime:
        return self._clock()

    def revision(self) -> str | None:
        with self._raw() as c:
            return revision(c)

    @contextmanager
    def _raw(self) -> Iterator[sqlite3.Connection]:
        conn = connect_readonly(self.path)
        try:
            with damage_reported(self.path):
                conn.execute("BEGIN")
                yield conn
        finally:
            conn.close()  # ends the read transaction: nothing was written

    def close(self) -> None:
        """Nothing is held between reads; here so that a Reader closes as a Store does."""
