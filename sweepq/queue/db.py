"""Engine and migrations: how sweepq talks to the queue's database.

SQLite recipe (after huey): WAL so that readers (status) never block the
writer; a busy timeout so that short write transactions queue up instead of
failing; `BEGIN IMMEDIATE` for writes so a transaction takes the write lock
before it reads what it will change (a claim cannot be decided on stale data);
synchronous=FULL because the queue must survive a power cut (writes are rare).

All access goes through SQLAlchemy so that a PostgreSQL URL can replace the
file later; the SQLite specifics live in this module alone.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from filelock import FileLock
from sqlalchemy import Engine, create_engine, event

from sweepq.errors import UsageError

BUSY_TIMEOUT_S = 60.0
IMMEDIATE = "sweepq_immediate"  # execution option: begin a write transaction


def make_engine(db_path: Path) -> Engine:
    engine = create_engine(
        f"sqlite:///{db_path}",
        connect_args={"timeout": BUSY_TIMEOUT_S},
    )

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
        if conn.get_execution_options().get(IMMEDIATE):
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.exec_driver_sql("BEGIN")

    return engine


def migrations_dir() -> Path:
    """The alembic scripts: top-level migrations/ in a checkout, sweepq/migrations in a wheel."""
    return Path(str(importlib.resources.files("sweepq.migrations")))


def _alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine, lock_path: Path) -> None:
    """Create or upgrade the schema to head, once, even with several launches at once."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(lock_path):
        rev = current_revision(engine)
        head = head_revision()
        if rev == head:
            return
        script = ScriptDirectory.from_config(_alembic_config())
        if rev is not None and script.get_revision(rev) is None:
            raise UsageError(
                f"the database at {engine.url.database} has schema revision {rev}, which this "
                f"sweepq ({head}) does not know: it was made by a newer sweepq. Upgrade sweepq."
            )
        cfg = _alembic_config()
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")


def check_current(engine: Engine) -> None:
    """For read-only commands: refuse a database whose schema is not this sweepq's."""
    rev, head = current_revision(engine), head_revision()
    if rev != head:
        raise UsageError(
            f"the database at {engine.url.database} has schema revision {rev}, this sweepq "
            f"expects {head}. Run `sweepq launch` or `sweepq worker` on it once to upgrade it "
            "(read commands never change a database)."
        )
