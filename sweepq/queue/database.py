"""Where a root's queue lives, and the engine that talks to it: the one object that knows.

Callers ask a `Database`, never the file system: is there a database yet, may
this user write it, an engine for readers and one for write transactions,
migrate it or check its schema, is it damaged. The default is the SQLite file
sweepq.db in the root (`sqlite:///<root>/sweepq.db`); a server URL
(`postgresql+psycopg://...`) can replace it in `Database.for_root` alone,
because no caller builds the URL, opens the file or asks the dialect.

SQLite recipe (after huey): WAL so that readers (status) never block the
writer; a busy timeout so that short write transactions queue up instead of
failing; `BEGIN IMMEDIATE` for writes so a transaction takes the write lock
before it reads what it will change (a claim cannot be decided on stale data);
synchronous=FULL because the queue must survive a power cut (writes are rare).

Read-only recipe (`readonly=True`, read commands): nothing is ever written, on
a root whose file system or permissions are read-only too. Decided afresh for
each connection (the pool keeps none), from the files beside the database:
- a log (`-wal`) exists: `mode=ro`, which reads the transactions still in it
  (through a private copy of the index when the `-shm` cannot be written);
- no log, and this process could create one: an ordinary connection with
  `query_only`, which refuses every write statement; SQLite creates the log
  while it reads and removes it when the last connection closes;
- no log (or an empty one) and none can be created: `immutable=1`. Every
  committed transaction is then in the file, and no process with this user's
  rights can be writing (a writer needs the log); on a read-only mount no
  process at all. (Where only permissions stop this user, one with more rights
  could start writing meanwhile: a read racing it is not guaranteed.)
- a log holding transactions but no `-shm`, which cannot be created: refused
  with what to do, since reading the file alone would show an older state.

The schema's version (the functions at the end): alembic migrations, run in code when a root is
opened. Nobody runs alembic's command line: a launch or a worker that opens a root whose schema is
not current calls `Database.upgrade` under a lock; read commands only compare revisions. Importing
alembic alone costs about 0.2 s, so the database's revision, read with one SELECT, is compared with
SCHEMA_HEAD (opening.py; a unit test holds it equal to the scripts' head), and alembic is imported
only when a migration runs.
"""

from __future__ import annotations

import importlib.resources
import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.pool import NullPool

from sweepq.atomic import fsync_dir
from sweepq.errors import UsageError
from sweepq.layout import RootPaths
from sweepq.queue import database_url, opening, pg_schema
from sweepq.queue.opening import BUSY_TIMEOUT_S as BUSY_TIMEOUT_S
from sweepq.queue.opening import SCHEMA_HEAD as SCHEMA_HEAD
from sweepq.queue.opening import SIDECARS as SIDECARS
from sweepq.queue.opening import VERSION_TABLE, is_damage, prepare_readonly, readonly_target
from sweepq.queue.opening import DatabaseDamaged as DatabaseDamaged

if TYPE_CHECKING:
    from alembic.config import Config

_IMMEDIATE = "sweepq_immediate"  # execution option of the writer engine: BEGIN IMMEDIATE


class Database:
    """One queue database, named by a SQLAlchemy URL.

    `migrate_lock` is a file that serializes schema upgrades between processes
    of this machine (two launches opening a new root at once). A `readonly`
    database never writes anything (see the module's read-only recipe).
    """

    def __init__(
        self, url: str | URL, *, migrate_lock: Path | None = None, readonly: bool = False, sweep: str | None = None
    ) -> None:
        self.url = make_url(url)
        self.migrate_lock = migrate_lock
        self.readonly = readonly
        #: The sweep's name: on a server, its tables are in a schema of their own (pg_schema.py).
        self.sweep = sweep
        if self.is_server and not sweep:
            raise UsageError(f"a sweep on the server database {self.describe()} needs its name (--sweep NAME)")

    @property
    def is_server(self) -> bool:
        return self.url.get_backend_name() != "sqlite"

    @property
    def schema(self) -> str | None:
        """The server schema of the sweep's tables; None on SQLite."""
        return pg_schema.sweep_schema(self.sweep) if self.is_server and self.sweep else None

    @classmethod
    def for_root(cls, root: Path, *, readonly: bool = False) -> Database:
        """The database of a sweep root: the server its record names (database_url.py), else its SQLite file."""
        record = database_url.read_record(root)
        if record is not None:
            return cls(record.connect_url(os.environ), readonly=readonly, sweep=record.sweep)
        url = URL.create("sqlite", database=str(opening.database_file(root)))
        return cls(url, migrate_lock=RootPaths(root).migrate_lock, readonly=readonly)

    def read_only(self) -> Database:
        """The same database, for a reader that must never write."""
        return self if self.readonly else self._reader

    @cached_property
    def _reader(self) -> Database:
        return Database(self.url, migrate_lock=self.migrate_lock, readonly=True, sweep=self.sweep)

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
            return inspect(conn).has_table(VERSION_TABLE, schema=self.schema)

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
        if self.is_server:
            return self._server_engine()
        if self.readonly:
            return self._readonly_engine()
        engine = create_engine(self.url, connect_args={"timeout": BUSY_TIMEOUT_S})
        self._report_damage(engine)

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

    def _server_engine(self) -> Engine:
        """A small pool per process (many workers must not exhaust max_connections), nothing kept in the
        session (PgBouncer's transaction mode), the sweep's schema mapped on every statement."""
        engine = create_engine(self.url, pool_size=2, max_overflow=3, pool_pre_ping=True, pool_recycle=600)
        options: dict[str, Any] = pg_schema.execution_options(self.sweep or "")
        if self.readonly:
            options["postgresql_readonly"] = True  # every transaction BEGIN ... READ ONLY
        return engine.execution_options(**options)

    def _readonly_engine(self) -> Engine:
        path = self.path
        assert path is not None
        # No pool: each connection decides its recipe from the files as they are then.
        engine = create_engine(self.url, poolclass=NullPool, connect_args={"timeout": BUSY_TIMEOUT_S})
        self._report_damage(engine)

        @event.listens_for(engine, "do_connect")
        def _on_do_connect(_dialect: Any, _record: Any, cargs: list[Any], cparams: dict[str, Any]) -> None:
            cargs[:] = [readonly_target(path)]
            cparams["uri"] = True

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            prepare_readonly(dbapi_conn)

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Any) -> None:
            conn.exec_driver_sql("BEGIN")

        return engine

    def _report_damage(self, engine: Engine) -> None:
        """SQLite's "not a database" and "malformed" become one paragraph that says what to do."""
        path = self.path
        assert path is not None

        @event.listens_for(engine, "handle_error")
        def _on_error(ctx: Any) -> None:
            e = ctx.original_exception
            if is_damage(e):
                raise DatabaseDamaged(path, f'SQLite says "{e}"') from e

    @cached_property
    def writer(self) -> Engine:
        """For write transactions: they hold the write lock from their first statement."""
        if self.readonly:
            return self.engine  # whose connections refuse every write (query_only, mode=ro)
        if self.is_server:
            return self.engine  # a server's row locks (SELECT ... FOR UPDATE) do this per statement
        return self.engine.execution_options(**{_IMMEDIATE: True})

    def dispose(self) -> None:
        if "engine" in self.__dict__:
            self.engine.dispose()
        if "_reader" in self.__dict__:
            self._reader.dispose()

    # -- schema -----------------------------------------------------------------------

    def upgrade(self) -> None:
        """Create or upgrade the schema to this sweepq's, once, even with several launches at once."""
        if self.readonly:
            raise RuntimeError(f"the database {self.describe()} was opened read-only")
        # Asked through the read-only recipe first: a newer sweepq's database is refused before
        # this process connects as a writer or makes the lock file (nothing of the root changes).
        revision = self.revision() if self.exists() else None
        opening.check_known(revision, self.describe())
        if revision == SCHEMA_HEAD:
            return  # the usual case: no lock file, no migration environment
        with self._migration_lock():
            upgrade(self.engine, self.describe())

    def revision(self) -> str | None:
        """The schema revision recorded in the database; None when it holds no queue yet.

        Read through the read-only recipe: asking writes nothing (a writer's first
        connection would give an empty file a header, and damaged or emptied files
        are exactly those asked about before anything else).
        """
        return current_revision((self.read_only() if self.path is not None else self).engine)

    def schema_current(self) -> bool:
        return self.revision() == SCHEMA_HEAD

    def check_current(self) -> None:
        """For read-only commands: refuse a database whose schema is not this sweepq's."""
        check_current(self.engine, self.describe())

    @contextmanager
    def _migration_lock(self) -> Iterator[None]:
        # A server database would take an advisory lock instead: the file only
        # serializes processes that share this file system.
        if self.migrate_lock is None:
            yield
            return
        from filelock import FileLock  # only where a migration may run

        self.migrate_lock.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(self.migrate_lock):
            yield

    # -- damage and its repair (a SQLite file) --------------------------------------------

    def damage(self) -> str | None:
        """SQLite's words when the file does not read as a sound database; None when it does.

        Reads only (a quick_check of every page); a file that is missing is not damaged.
        """
        if not self.exists():
            return None
        try:
            with self.read_only().engine.connect() as conn:
                problems = [str(p) for p in conn.exec_driver_sql("PRAGMA quick_check").scalars()]
        except DatabaseDamaged as e:
            return e.words
        if problems == ["ok"]:
            return None
        found = "; ".join(problems[:3])
        return f"SQLite's check says: {found}"

    def _sqlite_file(self) -> Path:
        if self.path is None:
            raise UsageError(f"the database {self.describe()} is not a SQLite file: it cannot be moved aside")
        return self.path

    def staging(self, tag: str) -> Database:
        """A new database beside this one (a rebuild is written there, then `install`ed)."""
        path = self._sqlite_file()
        return Database(URL.create("sqlite", database=str(path.with_name(f"{path.name}.{tag}"))))

    def seal(self) -> None:
        """Make the file hold everything (no log beside it), so it can be renamed; then close."""
        raw = self.engine.raw_connection()  # outside a transaction: the journal mode changes only there
        try:
            raw.driver_connection.execute("PRAGMA journal_mode=DELETE")  # type: ignore[union-attr]
        finally:
            raw.close()
        self.dispose()

    def discard(self) -> None:
        """Close and delete a staging database that will not be installed (a rebuild that failed)."""
        self.dispose()
        path = self._sqlite_file()
        for side in ("", *SIDECARS):
            path.with_name(path.name + side).unlink(missing_ok=True)

    def move_aside(self, suffix: str) -> Path | None:
        """Rename the file (and its log and index, which SQLite finds by name) to `<name><suffix>`.

        Returns the new path of the file; None when there was no file. Nothing is deleted.
        """
        path = self._sqlite_file()
        target = path.with_name(path.name + suffix)
        moved = None
        for side in ("", *SIDECARS):
            source = path.with_name(path.name + side)
            if source.exists():
                os.replace(source, target.with_name(target.name + side))
                moved = target if side == "" else moved
        return moved

    def install(self, staged: Database) -> None:
        """Put a sealed staging database in this one's place (this one was moved aside)."""
        path, source = self._sqlite_file(), staged._sqlite_file()
        if any(path.with_name(path.name + side).exists() for side in ("", *SIDECARS)):
            raise UsageError(f"{path} appeared while it was being rebuilt: another process is using this root")
        os.replace(source, path)
        fsync_dir(path.parent)  # the rename survives a power loss


def migrations_dir() -> Path:
    """The alembic scripts: top-level migrations/ in a checkout, sweepq/migrations in a wheel."""
    return Path(str(importlib.resources.files("sweepq.migrations")))


def _alembic_config() -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    return cfg


def head_revision() -> str:
    """The head of the migration scripts, as alembic reads them."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision recorded in the database; None for a database alembic never touched."""
    with engine.connect() as conn:
        schema = (conn.get_execution_options().get("schema_translate_map") or {}).get(None)
        if not inspect(conn).has_table(VERSION_TABLE, schema=schema):
            return None
        table = f"{pg_schema.quoted(schema)}.{VERSION_TABLE}" if schema else VERSION_TABLE
        revisions = conn.execute(text(f"SELECT version_num FROM {table}")).scalars().all()
    if len(revisions) > 1:
        raise UsageError(f"the database records several schema revisions ({', '.join(revisions)})")
    return revisions[0] if revisions else None


def upgrade(engine: Engine, where: str) -> None:
    """Create or upgrade the schema to head; the caller holds the migration lock."""
    rev = current_revision(engine)
    if rev == SCHEMA_HEAD:
        return  # current: alembic (and its script folder) is loaded only when a migration runs
    from alembic import command

    head = head_revision()
    if rev == head:
        return
    # Asked again under the migration lock (another process may have written it meanwhile); alembic's
    # own lookup of an unknown revision raises its "Can't locate revision" with a long traceback.
    opening.check_known(rev, where)
    cfg = _alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def check_current(engine: Engine, where: str) -> None:
    """For read-only commands: refuse a database whose schema is not this sweepq's."""
    opening.check_current(current_revision(engine), where)
