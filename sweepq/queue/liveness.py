"""Is a cell's owner alive? Every part of sweepq asks it here, through one interface.

The contract, whatever proves life:
- A worker *takes* ownership of a cell before it claims the cell in the
  database, and hands it to the training process it starts (`handoff()`: the
  environment and descriptors the child needs). So there is no moment between
  claim and child start in which a reaper could mistake a new attempt for a
  dead one.
- The training process (and a program it starts) *inherits* the ownership and
  checks that it really holds it before it writes anything of the cell: never
  two writers, even when the worker that started it has died.
- A `running` cell whose ownership can be taken belongs to processes that are
  all gone: the reaper takes it, closes the attempt, and releases it.
- Read commands ask `owner_alive`, which never creates or changes anything.

FileLockLiveness proves life with a file lock held by the processes
themselves (lock.py): it ends with them, however they end. A lease in the
database (a row with an expiry, renewed by a thread of the holder; taken when
absent or expired; handed over as a token in the environment) fits the same
Protocol for workers that share the database but not a file system.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Protocol

from sweepq.layout import RootPaths
from sweepq.queue import lock

ENV_LOCK_FD = "SWEEPQ_LOCK_FD"  # the inherited, locked descriptor of a training process


class OwnershipLost(RuntimeError):
    """The ownership handed to this process is not held by it: another process owns the cell."""


@dataclass(frozen=True)
class Handoff:
    """What a child process needs to carry an ownership: add `env` to its environment, pass `fds`."""

    env: dict[str, str] = field(default_factory=dict)
    fds: tuple[int, ...] = ()


class Ownership(Protocol):
    """This process's part in owning one cell, from `take` or `inherit`."""

    cell: str

    def handoff(self) -> Handoff:
        """For a child that carries the ownership on (it holds it while it lives)."""
        ...

    def release(self) -> None:
        """Drop this process's part; children it was handed to keep theirs. Idempotent."""
        ...

    def lost(self) -> str | None:
        """Why this process may no longer write the cell, or None while it still owns it.

        Asked before every durable write of an attempt (queue/fence.py): an
        ownership can be lost without its holder hearing of it (a folder moved
        or removed under it, a lease that expired while the process was stopped).
        """
        ...


class Liveness(Protocol):
    def take(self, cell: str) -> Ownership | None:
        """Own `cell` now, without waiting; None when a live owner has it."""
        ...

    def inherit(self, cell: str, environ: Mapping[str, str] | None = None) -> Ownership | None:
        """In a process started with a `handoff()`: the ownership of `cell` it carries, checked.

        Raises OwnershipLost when it is not really held; None when no ownership
        was handed (the process was not started by a worker). A second call in
        the same process returns the same ownership.
        """
        ...

    def owner_alive(self, cell: str) -> bool:
        """Does a live process own `cell`? Read-only: creates and changes nothing."""
        ...


def for_root(root: Path) -> Liveness:
    """The liveness of a sweep root: the one place that picks the mechanism."""
    return FileLockLiveness(root)


# -- the file lock -----------------------------------------------------------------------


class _LockOwnership:
    def __init__(self, cell: str, path: Path, fd: int, release: lock.CellLock | None) -> None:
        self.cell = cell
        self._path = path
        self._fd: int | None = fd
        self._lock = release  # None when inherited: the descriptor was not opened here

    @property
    def held(self) -> bool:
        return self._fd is not None

    def handoff(self) -> Handoff:
        if self._fd is None:
            raise OwnershipLost(f"the ownership of cell {self.cell} was released")
        return Handoff(env={ENV_LOCK_FD: str(self._fd)}, fds=(self._fd,))

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if self._lock is not None:
            self._lock.release()
        elif fd is not None:
            os.close(fd)

    def lost(self) -> str | None:
        fd = self._fd
        if fd is None:
            return "its ownership was released"
        if not lock.ensure_held(fd):
            return "another process holds the cell's lock"
        if not lock.names(fd, self._path):
            return f"the cell folder {self._path} was moved, removed or replaced while it was locked"
        return None


class FileLockLiveness:
    """Ownership is an exclusive flock on the folder cells/<cell>/, passed on as a locked descriptor."""

    # What this process inherited, so that the attempt and the program it starts share one ownership.
    _inherited: ClassVar[dict[tuple[Path, str, int], _LockOwnership]] = {}

    def __init__(self, root: Path) -> None:
        self.paths = RootPaths(root)

    def take(self, cell: str) -> Ownership | None:
        cell_lock = lock.CellLock(self.paths.cell(cell).lock)
        if not cell_lock.try_acquire():
            return None
        assert cell_lock.fd is not None
        return _LockOwnership(cell, cell_lock.path, cell_lock.fd, cell_lock)

    def inherit(self, cell: str, environ: Mapping[str, str] | None = None) -> Ownership | None:
        raw = (os.environ if environ is None else environ).get(ENV_LOCK_FD)
        if not raw:
            return None
        key = (self.paths.root, cell, int(raw))
        known = self._inherited.get(key)
        if known is not None and known.held:
            return known
        owned = _LockOwnership(cell, self.paths.cell(cell).lock, key[2], None)
        why = owned.lost()
        if why is not None:
            raise OwnershipLost(f"the lock of cell {cell} handed to this process is not held by it: {why}")
        self._inherited[key] = owned
        return owned

    def owner_alive(self, cell: str) -> bool:
        return lock.is_held(self.paths.cell(cell).lock)
