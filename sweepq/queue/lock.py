"""The cell lock: a whole-file flock on cells/<cell>/lock, the proof that a cell's owner lives.

The mechanism behind FileLockLiveness (liveness.py), which is what callers use.
The lock sits on the open file description, so a descriptor passed to a child
keeps it held while either process lives; it goes away with the last process
that has it open, however that process ends (kill -9 and power loss included).
"""

from __future__ import annotations

import os
from pathlib import Path

from filelock import lock_descriptor


class CellLock:
    """A non-blocking exclusive lock on one file; `fd` can be passed to a child."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None

    def try_acquire(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if lock_descriptor(fd, blocking=False):
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
    descriptor (flock needs no write access).
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False  # never locked: no attempt of this cell has started here
    try:
        return not lock_descriptor(fd, blocking=False)
    finally:
        os.close(fd)


def ensure_held(fd: int) -> bool:
    """Make sure an inherited descriptor holds its lock; False when another process holds it.

    Locking again through the description that holds the lock succeeds at once.
    """
    return lock_descriptor(fd, blocking=False)
