"""Is a folder a sweep root whose queue can be read? The checks every opening makes, writer or reader.

Without SQLAlchemy: `Store.open` and `Reader.open` (queue/reader.py, read commands) both ask here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sweepq.errors import UsageError
from sweepq.layout import CELLS_DIR, RootPaths
from sweepq.queue.sqlite_file import DatabaseDamaged

#: The newest revision in migrations/versions (tests/unit/test_store.py holds it to alembic's head).
SCHEMA_HEAD = "0007e"
#: Every revision in migrations/versions, oldest first (tests/process/test_newer_database.py holds it to
#: alembic's scripts): any other revision in a database was written by a newer sweepq.
KNOWN_REVISIONS = ("0001", "0002", "0003", "0004", "0005", "0006", "0007e")


def database_file(root: Path) -> Path:
    """Where a root's queue is: the one place that says so (Database.for_root, Reader.open, finding a root)."""
    return RootPaths(root).db


def cell_folders(root: Path) -> list[str]:
    """The ids of the cell folders on disk (what a root's queue was about, whatever became of it)."""
    cells = root / CELLS_DIR
    return sorted(p.name for p in cells.iterdir() if p.is_dir()) if cells.is_dir() else []


def check_not_lost(root: Path, path: Path | None) -> None:
    """A root with cell folders but no database (at `path`) lost its queue (deleted, or moved by hand)."""
    if path is not None and cell_folders(root):
        raise DatabaseDamaged(path, f"the file is missing, but {root} has cell folders")


def check_holds_queue(root: Path, path: Path | None, revision: Callable[[], str | None]) -> None:
    """A database with no schema beside cell folders was emptied (truncated to nothing)."""
    if path is not None and revision() is None and cell_folders(root):
        raise DatabaseDamaged(path, f"it holds no queue ({path.stat().st_size} bytes), but {root} has cell folders")


def not_a_root(root: Path, where: str) -> UsageError:
    return UsageError(
        f"{root} is not a sweep root (no database at {where}). Give the root with "
        "--root DIR or the sweep file, or launch the sweep first."
    )


def check_known(revision: str | None, where: str) -> None:
    """For every opening, before anything is written: refuse a database a newer sweepq wrote.

    Its schema may hold what this sweepq would misread or overwrite, and no migration of this
    sweepq leads from it: the only way on is the newer sweepq (never a downgrade of the database).
    """
    if revision is not None and revision not in KNOWN_REVISIONS:
        from sweepq.version import __version__

        raise UsageError(
            f"the database at {where} was written by a newer sweepq: its schema revision {revision} is not one "
            f"this sweepq ({__version__}, schema {SCHEMA_HEAD}) knows, and this command "
            "changed nothing. Upgrade sweepq on this machine to the version that wrote it (`pip install -U sweepq`), "
            "then run the command again; never downgrade the database: every machine that uses this sweep root "
            "needs that sweepq."
        )


def check_current(revision: str | None, where: str) -> None:
    """For read-only commands: refuse a database whose schema is not this sweepq's."""
    check_known(revision, where)
    if revision != SCHEMA_HEAD:
        raise UsageError(
            f"the database at {where} has schema revision {revision}, this sweepq "
            f"expects {SCHEMA_HEAD}. Run `sweepq launch` or `sweepq worker` on it once to upgrade it "
            "(read commands never change a database)."
        )
