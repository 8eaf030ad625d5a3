"""Opening a root's queue: is the folder a sweep root, is its file readable, is its schema this sweepq's.

The path every opening takes, writer or reader, with the standard library alone: read commands must
answer at once, and importing SQLAlchemy costs several times what `status` does on a small sweep.
Here, in the order an opening asks: where a root's queue is (`database_file`), whether it was lost or
emptied beside cell folders, the read-only recipe (database.py's docstring tells it), SQLite's words
for a damaged file, the schema's revision against the ones this sweepq knows, and `Reader`: the
root's queue as read commands read it (`status` is what people run most, often in a loop). `Database`'s
read-only engine and `Reader` open the file the same way; `Store.open` makes the same checks.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

from sweepq.errors import UsageError
from sweepq.layout import CELLS_DIR, RootPaths
from sweepq.queue.reads import Reads

BUSY_TIMEOUT_S = 60.0
SIDECARS = ("-wal", "-shm")  # SQLite's files beside a WAL-mode database
VERSION_TABLE = "alembic_version"  # alembic's default, where it records the revision
# SQLite's primary result codes that mean the file is not a readable database.
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26


class DatabaseDamaged(UsageError):
    """The queue's database cannot be read as a database; `words` say what is wrong with it."""

    def __init__(self, path: Path, words: str) -> None:
        self.path, self.words = path, words
        super().__init__(
            f"the database at {path} is damaged: {words}. The cells' checkpoints and DONE.json "
            "files are kept outside it and are intact. To rebuild the queue from them, run "
            f"`sweepq repair SPEC --root {path.parent}` with this sweep's file: it moves the damaged "
            "database aside (it is never deleted) and makes a new one, then `sweepq launch` goes on."
        )


def is_damage(e: BaseException) -> bool:
    """Does SQLite say the file is not a database, or a malformed one?"""
    return isinstance(e, sqlite3.DatabaseError) and (getattr(e, "sqlite_errorcode", 0) & 0xFF) in (
        _SQLITE_CORRUPT,
        _SQLITE_NOTADB,
    )


@contextmanager
def damage_reported(path: Path) -> Iterator[None]:
    """SQLite's "not a database" and "malformed" raised inside become one paragraph that says what to do."""
    try:
        yield
    except sqlite3.DatabaseError as e:
        if is_damage(e):
            raise DatabaseDamaged(path, f'SQLite says "{e}"') from e
        raise


def readonly_target(path: Path) -> str:
    """The URI that opens `path` without writing anything (database.py's docstring says why)."""
    wal, shm = (path.with_name(path.name + side) for side in SIDECARS)
    uri = "file:" + quote(str(path))
    can_create = can_create_beside(path)
    if wal.exists() and (shm.exists() or can_create):
        return uri + "?mode=ro"
    if not wal.exists() and can_create and os.access(path, os.W_OK):
        return uri + "?mode=rw"  # never create: a file that vanished meanwhile is not made empty
    if not wal.exists() or wal.stat().st_size == 0:
        return uri + "?mode=ro&immutable=1"
    raise UsageError(
        f"the database at {path} has transactions in its log {wal.name} but no {shm.name} beside it, and this "
        f"user cannot create one in {path.parent}: read it as a user who can write that folder, or read a copy "
        "of the root made with `cp -a` (its log comes along)."
    )


def can_create_beside(path: Path) -> bool:
    """Could this process create SQLite's log and index next to `path`?"""
    folder = path.parent
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return False
    except OSError:
        return False
    return os.access(folder, os.W_OK | os.X_OK)


def prepare_readonly(conn: sqlite3.Connection) -> None:
    """What every read-only connection sets: transactions begun by the caller, a write is an error."""
    conn.isolation_level = None
    conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
    conn.execute("PRAGMA query_only=ON")  # a write statement is an error, whatever the recipe


def connect_readonly(path: Path) -> sqlite3.Connection:
    """A connection to `path` that never writes, its recipe decided from the files as they are now."""
    with damage_reported(path):
        conn = sqlite3.connect(readonly_target(path), uri=True, timeout=BUSY_TIMEOUT_S)
        try:
            prepare_readonly(conn)
        except BaseException:
            conn.close()
            raise
    return conn


def revision(conn: sqlite3.Connection) -> str | None:
    """The schema revision recorded in the database; None for a database alembic never touched."""
    found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (VERSION_TABLE,))
    if found.fetchone() is None:
        return None
    revisions = [r for (r,) in conn.execute(f"SELECT version_num FROM {VERSION_TABLE}")]
    if len(revisions) > 1:
        raise UsageError(f"the database records several schema revisions ({', '.join(revisions)})")
    return revisions[0] if revisions else None


#: The newest revision in migrations/versions (tests/unit/test_store.py holds it to alembic's head).
SCHEMA_HEAD = "0009"
#: Every revision in migrations/versions, oldest first (tests/process/test_newer_database.py holds it to
#: alembic's scripts): any other revision in a database was written by a newer sweepq.
KNOWN_REVISIONS = ("0001", "0002", "0003", "0004", "0005", "0006", "0007e", "0008", "0009")


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


def _utcnow() -> datetime:
    return datetime.now(UTC)


class Reader(Reads):
    """The queue's `Reads` over the SQLite file opened read-only: open with `Reader.open(root)`. It holds no
    connection between reads (closing it is a no-op): each read opens its own, in its own transaction, as
    the read-only engine's (no pool), its recipe decided from the files as they are then."""

    def __init__(self, root: Path, path: Path, clock: Callable[[], datetime] = _utcnow) -> None:
        super().__init__(root, self._raw, clock)
        self.path = path

    @classmethod
    def open(cls, root: Path, clock: Callable[[], datetime] = _utcnow) -> Reader:
        """The root's queue, refused as `Store.open_readonly` refuses it: no database, a lost or emptied
        one beside cell folders, a schema other than this sweepq's."""
        path = database_file(root)
        if not path.exists():
            check_not_lost(root, path)
            raise not_a_root(root, str(path))
        reader = cls(root, path, clock)
        check_holds_queue(root, path, reader.revision)
        check_current(reader.revision(), str(path))
        return reader

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
