"""Where a root's queue lives, and the engine that talks to it: the one object that knows.

Callers ask a `Database`, never the file system: is there a database yet, may
this user write it, an engine for readers and one for write transactions,
migrate it or check its schema. The default is the SQLite file sweepq.db in the
root (`sqlite:///<root>/sweepq.db`); a server URL (`postgresql+psycopg://...`)
can replace it in `Database.for_root` alone, because no caller builds the URL,
opens the file or asks the dialect.

SQLite recipe (after huey): WAL so that readers (status) never block the
writer; a busy timeout so that short write transactions queue up instead of
failing; `BEGIN IMMEDIATE` for writes so a transaction takes the write lock
before it reads what it will change (a claim cannot be decided on stale data);
synchronous=FULL because the queue must survive a power cut (writes are rare).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import Any

from filelock import FileLock
from sqlalchemy import Engine, create_engine, event, inspect
from sqlalchemy.engine import URL, make_url

from sweepq.errors import UsageError
from sweepq.layout import RootPaths
from sweepq.queue import db

BUSY_TIMEOUT_S = 60.0
_IMMEDIATE = "sweepq_immediate"  # execution option of the writer engine: BEGIN IMMEDIATE


class Database:
    """One queue database, named by a SQLAlchemy URL.

    `migrate_lock` is a file that serializes schema upgrades between processes
    of this machine (two launches opening a new root at once).
    """

    def __init__(self, url: str | URL, *, migrate_lock: Path | None = None) -> None:
        self.url = make_url(url)
        self.migrate_lock = migrate_lock

    @classmethod
    def for_root(cls, root: Path) -> Database:
        """The database of a sweep root (where a configured server URL would be read, later)."""
        paths = RootPaths(root)
        return cls(URL.create("sqlite", database=str(paths.db)), migrate_lock=paths.migrate_lock)

    # -- where ------------------------------------------------------------------------

    @property
    def path(self) -> Path | None:
        """The file, for a SQLite database on disk; None for a server."""
        if self.url.get_backend_name() != "sqlite" or self.url.database in (None, "", ":memory:"):
            return None
        return Path(self.url.database)

    def describe(self) -> str:
        """For messages: the file, or the URL without its password."""
        return str(self.path) if self.path is not None else self.url.render_as_string(hide_password=True)

    def exists(self) -> bool:
        """Is there a queue here yet? Asking never creates one."""
        if self.path is not None:
            return self.path.exists()
        with self.engine.connect() as conn:
            return inspect(conn).has_table("alembic_version")

    def check_writable(self) -> None:
        """Refuse, before anything is written, a database this user cannot write."""
        path = self.path
        if path is None:
            return  # a server says so when a write transaction begins
        if path.exists() and not os.access(path, os.W_OK):
            raise UsageError(f"the database {path} is not writable by this user")
        # WAL keeps two files beside the database: its folder must be writable too.
        if path.parent.is_dir() and not os.access(path.parent, os.W_OK | os.X_OK):
            raise UsageError(f"the folder of the database {path} is not writable by this user")

    # -- engines ----------------------------------------------------------------------

    @cached_property
    def engine(self) -> Engine:
        """For reads (and the base of `writer`); a SQLite file is created on first connect."""
        if self.url.get_backend_name() != "sqlite":
            return create_engine(self.url, pool_pre_ping=True)
        engine = create_engine(self.url, connect_args={"timeout": BUSY_TIMEOUT_S})

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            # Let SQLAlchemy emit BEGIN itself (pysqlite's implicit BEGIN is DEFERRED
            # and only starts at the first write, too late for a claim).
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
            cur.execute("PRAGMA synchronous=FULL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Any) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(_IMMEDIATE) else "BEGIN")

        return engine

    @cached_property
    def writer(self) -> Engine:
        """For write transactions: they hold the write lock from their first statement."""
        if self.url.get_backend_name() != "sqlite":
            return self.engine  # a server's row locks (SELECT ... FOR UPDATE) do this per statement
        return self.engine.execution_options(**{_IMMEDIATE: True})

    def dispose(self) -> None:
        if "engine" in self.__dict__:
            self.engine.dispose()

    # -- schema -----------------------------------------------------------------------

    def upgrade(self) -> None:
        """Create or upgrade the schema to this sweepq's, once, even with several launches at once."""
        with self._migration_lock():
            db.upgrade(self.engine, self.describe())

    def schema_current(self) -> bool:
        return db.current_revision(self.engine) == db.SCHEMA_HEAD

    def check_current(self) -> None:
        """For read-only commands: refuse a database whose schema is not this sweepq's."""
        db.check_current(self.engine, self.describe())

    @contextmanager
    def _migration_lock(self) -> Iterator[None]:
        # A server database would take an advisory lock instead: the file only
        # serializes processes that share this file system.
        if self.migrate_lock is None:
            yield
            return
        self.migrate_lock.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(self.migrate_lock):
            yield
