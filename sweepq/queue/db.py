"""The schema's version: alembic migrations, run in code when a root is opened.

Nobody runs alembic's command line: `Database.upgrade` calls `upgrade` under a
lock when a launch or a worker opens a root, and read commands only compare
revisions (`check_current`). Where the database is and how to connect to it is
sweepq/queue/database.py's question; this module gets an engine.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from sweepq.errors import UsageError


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


def upgrade(engine: Engine, where: str) -> None:
    """Create or upgrade the schema to head; the caller holds the migration lock."""
    rev = current_revision(engine)
    head = head_revision()
    if rev == head:
        return
    script = ScriptDirectory.from_config(_alembic_config())
    if rev is not None and script.get_revision(rev) is None:
        raise UsageError(
            f"the database at {where} has schema revision {rev}, which this "
            f"sweepq ({head}) does not know: it was made by a newer sweepq. Upgrade sweepq."
        )
    cfg = _alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def check_current(engine: Engine, where: str) -> None:
    """For read-only commands: refuse a database whose schema is not this sweepq's."""
    rev, head = current_revision(engine), head_revision()
    if rev != head:
        raise UsageError(
            f"the database at {where} has schema revision {rev}, this sweepq "
            f"expects {head}. Run `sweepq launch` or `sweepq worker` on it once to upgrade it "
            "(read commands never change a database)."
        )
