"""The schema's version: alembic migrations, run in code when a root is opened.

Nobody runs alembic's command line: when a launch or a worker opens a root
whose schema is not current, `Database.upgrade` calls `upgrade` under a lock;
read commands only compare revisions (`check_current`). Where the database is and how to connect to it is
sweepq/queue/database.py's question; this module gets an engine.

Commands must answer at once, and importing alembic alone costs about 0.2 s:
the database's revision, read with one SELECT, is compared with SCHEMA_HEAD,
which a unit test holds equal to the scripts' head. Alembic is imported only
when a migration runs (a launch or a worker on an older root); read commands
never migrate, they refuse an older schema.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, inspect, text

from sweepq.errors import UsageError
from sweepq.queue import root_checks
from sweepq.queue.root_checks import SCHEMA_HEAD as SCHEMA_HEAD
from sweepq.queue.sqlite_file import VERSION_TABLE

if TYPE_CHECKING:
    from alembic.config import Config


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
        if not inspect(conn).has_table(VERSION_TABLE):
            return None
        revisions = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
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
    root_checks.check_known(rev, where)
    cfg = _alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def check_current(engine: Engine, where: str) -> None:
    """For read-only commands: refuse a database whose schema is not this sweepq's."""
    root_checks.check_current(current_revision(engine), where)
