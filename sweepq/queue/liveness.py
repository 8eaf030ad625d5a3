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
themselves (lock.py): it ends with them, however they end. A lease (a row with
an expiry in one shared clock, renewed by its holder; taken when absent or
expired; handed over as a token in the environment) fits the same Protocol for
workers that share the database but not a file system. RegistryLiveness is
that lease over an in-process registry and a clock a test moves: the contract
suite (tests/contract/test_liveness.py) runs over both, and a lease table in
the database joins it with the same semantics (`LeaseRegistry` is its shape).
"""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import ClassVar, Protocol

from sweepq.layout import RootPaths
from sweepq.queue import lock
from sweepq.queue.handoff import ENV_LEASE as ENV_LEASE
from sweepq.queue.handoff import Handoff as Handoff
from sweepq.queue.handoff import LeaseToken, inherit_lease
from sweepq.queue.handoff import OwnershipLost as OwnershipLost

ENV_LOCK_FD = "SWEEPQ_LOCK_FD"  # the inherited, locked descriptor of a training process


class Ownership(Protocol):
    """This process's part in owning one cell, from `take` or `inherit`."""

    cell: str

    def handoff(self) -> Handoff:
        """For a child that carries the ownership on (it holds it while it lives)."""
        ...

    def release(self) -> None:
        """Drop this process's part. Idempotent.

        Callers release once the processes they handed it to are gone (a worker
        after its attempt ended, the reaper after closing it). What a child still
        holds afterwards is the mechanism's: a lock lives on in the child's
        descriptor, a lease ends with its holder's renewals.
        """
        ...

    def renew(self) -> bool:
        """Prove life again, now: True while this process still owns the cell, False once it is lost.

        A lease is extended by a full term (its holder's renewal thread calls this,
        never the training loop, which a long step can starve); a lock proves life
        by being held, so it only checks. A holder that gets False stops writing.
        """
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
    """The liveness of a sweep root: the one place that picks the mechanism. A root whose queue is on a
    server (its database record) proves life by leases in that database (leases.py), file locks else."""
    from sweepq.queue.database_url import read_record

    record = read_record(root)
    if record is None:
        return FileLockLiveness(root)
    from sweepq.queue.database import Database
    from sweepq.queue.leases import TableLiveness

    return TableLiveness(Database.for_root(root).engine, record.expire_seconds, renew_seconds=record.renew_seconds)


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

    def renew(self) -> bool:
        return self.lost() is None  # a held lock needs no renewal

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


# -- leases -------------------------------------------------------------------------------


class LeaseRegistry:
    """Leases of cells: cell -> (token, expiry), every expiry in one clock (the database's, for a table).

    Each method is one atomic statement on the registry, as each would be one
    short transaction on a lease table: `acquire` an INSERT ... ON CONFLICT
    that takes only an absent or expired row, `renew` and `drop` an UPDATE or
    DELETE guarded by the token.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._leases: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def acquire(self, cell: str, token: str, expire_seconds: float) -> bool:
        with self._lock:
            now = self.clock()
            held = self._leases.get(cell)
            if held is not None and held[1] > now:
                return False
            self._leases[cell] = (token, now + expire_seconds)
            return True

    def renew(self, cell: str, token: str, expire_seconds: float) -> bool:
        """Extend the lease from now; False when `token` no longer holds it (expired, taken, dropped)."""
        with self._lock:
            now = self.clock()
            held = self._leases.get(cell)
            if held is None or held[0] != token or held[1] <= now:
                return False
            self._leases[cell] = (token, now + expire_seconds)
            return True

    def holder(self, cell: str) -> str | None:
        """The token of the unexpired lease on `cell`; None when nobody holds it."""
        with self._lock:
            held = self._leases.get(cell)
            return held[0] if held is not None and held[1] > self.clock() else None

    def drop(self, cell: str, token: str) -> None:
        with self._lock:
            if self._leases.get(cell, ("", 0.0))[0] == token:
                del self._leases[cell]


class _LeaseOwnership:
    def __init__(self, liveness: RegistryLiveness, cell: str, token: str, taker: bool) -> None:
        self.cell = cell
        self._liveness = liveness
        self.lease = LeaseToken(cell, token, taker)

    @property
    def held(self) -> bool:
        return self.lease.held

    def handoff(self) -> Handoff:
        return self.lease.handoff()

    def renew(self) -> bool:
        """Extend the lease by a full term (the holder's renewal thread calls this); False when it is lost."""
        token = self.lease.value
        return token is not None and self._liveness.registry.renew(self.cell, token, self._liveness.expire_seconds)

    def release(self) -> None:
        token = self.lease.give_up()
        if token is not None:
            self._liveness.registry.drop(self.cell, token)

    def lost(self) -> str | None:
        token = self.lease.value
        if token is None:
            return LeaseToken.RELEASED
        if self._liveness.registry.holder(self.cell) != token:
            return LeaseToken.EXPIRED
        return None


class RegistryLiveness:
    """Ownership is a lease of `expire_seconds` in `registry`, renewed by its holder, handed on as its token."""

    def __init__(self, registry: LeaseRegistry, expire_seconds: float) -> None:
        self.registry = registry
        self.expire_seconds = expire_seconds
        self._inherited: dict[tuple[str, str], _LeaseOwnership] = {}

    def take(self, cell: str) -> _LeaseOwnership | None:
        token = secrets.token_hex(8)
        if not self.registry.acquire(cell, token, self.expire_seconds):
            return None
        return _LeaseOwnership(self, cell, token, taker=True)

    def inherit(self, cell: str, environ: Mapping[str, str] | None = None) -> Ownership | None:
        return inherit_lease(cell, environ, self._inherited, lambda token: _LeaseOwnership(self, cell, token, False))

    def owner_alive(self, cell: str) -> bool:
        return self.registry.holder(cell) is not None
