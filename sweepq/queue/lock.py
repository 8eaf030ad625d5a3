"""The cell lock: an flock on the cell's folder itself, the proof that a cell's owner lives.

The mechanism behind FileLockLiveness (liveness.py), which is what callers use.
The lock sits on the open file description, so a descriptor passed to a child
keeps it held while either process lives; it goes away with the last process
that has it open, however that process ends (kill -9 and power loss included).

The folder is locked rather than a file in it because a lock file can be
deleted under its holder (a tmp cleaner, `find -delete`, a user tidying up):
the next process would then lock a new file of the same name and believe the
cell's owner dead. A folder that holds a cell's files cannot vanish that way.
Whoever locks also checks that the path still names the locked folder
(`names`), so a folder moved or removed and made again is never mistaken for
the one that is locked.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class CellLock:
    """A non-blocking exclusive lock on one folder (made if missing); `fd` can be passed to a child."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None

    def try_acquire(self) -> bool:
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        # Locked, and still the folder the path names (not one moved away meanwhile).
        if take(fd) and names(fd, self.path):
            self.fd = fd
            return True
        os.close(fd)
        return False

    def release(self) -> None:
        """Drop this process's hold (children that inherited the descriptor keep theirs)."""
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)

    def __enter__(self) -> CellLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def is_held(path: Path) -> bool:
    """Does some process hold the lock? Creates nothing (read commands ask this).

    Found out by taking the lock and dropping it at once, through a read-only
    descriptor (flock needs no write access, so a read-only root answers too).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except (FileNotFoundError, NotADirectoryError):
        return False  # never locked: no attempt of this cell has started here
    try:
        return held_elsewhere(fd)
    finally:
        os.close(fd)


def take(fd: int) -> bool:
    """Lock `fd`'s file without waiting (filelock's `lock_descriptor`, an flock); False when another holds it."""
    from filelock import lock_descriptor  # here: a read command only asks (`held_elsewhere`)

    return lock_descriptor(fd, blocking=False)


def held_elsewhere(fd: int) -> bool:
    """Does another open file description hold the lock on `fd`'s file? Asked by taking it without waiting,
    which the caller drops by closing `fd`. The standard library's flock, the primitive `take` uses on
    Linux: `status` asks this of every running cell, and importing filelock cost it more than the asking."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    return False


def ensure_held(fd: int) -> bool:
    """Make sure an inherited descriptor holds its lock; False when another process holds it.

    Locking again through the description that holds the lock succeeds at once.
    """
    return take(fd)


def names(fd: int, path: Path) -> bool:
    """Does `path` still name the file or folder open as `fd` (not moved, removed or replaced)?"""
    try:
        now = os.stat(path)
    except OSError:
        return False
    held = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)
