"""A root whose database a newer sweepq wrote: every command answers in one paragraph and changes nothing.

The database is a real root's (a finished tiny sweep, copied), stamped with the revision a newer sweepq's
next migration would record, as that sweepq's `launch` leaves it. Two machines with different versions
of sweepq on one shared root meet exactly this.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import cli
from tiny_sweep import finished

from sweepq.queue import database as db
from sweepq.queue import opening
from sweepq.version import __version__

pytestmark = pytest.mark.process

NEWER = "0007"  # the revision the next migration of sweepq would record


def files_of(root: Path) -> dict[str, bytes]:
    """Every file under the root, name and bytes (the database, its cells, the private folder)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def stamp(database: Path, revision: str) -> None:
    """Record `revision` in alembic's table, as the newer sweepq's migration commits it."""
    con = sqlite3.connect(database, isolation_level=None)
    try:
        con.execute("UPDATE alembic_version SET version_num = ?", (revision,))
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # everything in the file itself, as a closed root is
    finally:
        con.close()


def test_known_revisions_are_the_scripts() -> None:
    """KNOWN_REVISIONS (read commands load no alembic) is every revision of migrations/versions."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(db._alembic_config())
    walked = [s.revision for s in script.walk_revisions()]
    assert tuple(reversed(walked)) == opening.KNOWN_REVISIONS
    assert opening.KNOWN_REVISIONS[-1] == db.SCHEMA_HEAD


def test_every_command_refuses_a_database_from_a_newer_sweepq(tmp_path_factory: pytest.TempPathFactory) -> None:
    d = tmp_path_factory.mktemp("newer")
    shutil.copytree(finished(tmp_path_factory), d, dirs_exist_ok=True)
    root = d / "runs" / "tiny"
    database = root / "sweepq.db"
    stamp(database, NEWER)
    before = files_of(root)
    paragraph = (
        f"error: the database at {database} was written by a newer sweepq: its schema revision {NEWER} is not "
        f"one this sweepq ({__version__}, schema {db.SCHEMA_HEAD}) knows, and this command changed nothing. "
        "Upgrade sweepq on this machine to the version that wrote it (`pip install -U sweepq`), then run the "
        "command again; never downgrade the database: every machine that uses this sweep root needs that sweepq.\n"
    )
    commands = {
        "status": ["status", "--root", str(root)],
        "show": ["show", "1.1", "--root", str(root)],
        "attempts": ["attempts", "1.1", "--root", str(root)],
        "launch": ["launch", "tiny.yaml", "--no-live"],
        "worker": ["worker", "--root", str(root)],
        "retry": ["retry", "1.1", "--root", str(root)],
        "reset": ["reset", "1.1", "--root", str(root)],
        "repair": ["repair", "tiny.yaml"],
        "repair --force": ["repair", "tiny.yaml", "--force"],
        "repair ROOT": ["repair", str(root)],
    }
    for name, args in commands.items():
        r = cli(*args, cwd=d)
        assert (name, r.returncode, r.stdout, r.stderr) == (name, 2, "", paragraph)
        assert files_of(root) == before, f"{name} changed the root"
