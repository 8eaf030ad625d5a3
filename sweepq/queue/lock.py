"""The cell lock: a whole-file flock on cells/<cell>/lock, the proof that a cell's owner lives.

The worker takes the lock *before* it claims the cell in the database and hands
the locked descriptor to the training process (the same open file description,
so the lock is held while either process lives). A `running` cell whose lock
can be taken therefore belongs to processes that are all gone: no gap between
claim and child start in which a reaper could mistake a new attempt for a dead
one, and no second writer while any process of the attempt lives.
"""

from __future__ import annotations

import os
from pathlib import Path

from filelock import lock_descriptor

ENV_LOCK_FD = "SWEEPQ_LOCK_FD"  # the inherited, locked descriptor of a training process


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


def is_free(path: Path) -> bool:
    """True when nobody holds the lock (it is taken and dropped at once to find out)."""
    if not path.exists():
        return True
    lock = CellLock(path)
    if lock.try_acquire():
        lock.release()
        return True
    return False


def verify_inherited(fd: int) -> None:
    """In the training process: make sure the inherited descriptor really holds the lock."""
    if not lock_descriptor(fd, blocking=False):
        raise RuntimeError("the cell lock handed to this process is held by another process")
