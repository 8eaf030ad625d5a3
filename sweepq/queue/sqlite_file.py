"""A root's SQLite file as a reader opens it, with the standard library alone.

Read commands must answer at once, and importing SQLAlchemy costs several times what `status`
does on a small sweep. So what a reader needs of the file lives here, without it: the read-only
recipe (database.py's docstring tells it), SQLite's words for a damaged file, and the schema's
revision. `Database`'s read-only engine and `Reader` (queue/reader.py) open the file the same way.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from sweepq.errors import UsageError

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
