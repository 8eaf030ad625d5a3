"""What passes an ownership from process to process (liveness.py's interface; re-exported there).

Its own module so that an implementation of the interface in another module (leases.py) and the
place that picks one (liveness.for_root) import it without importing each other.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

ENV_LEASE = "SWEEPQ_LEASE"  # the token of the lease a training process carries


class OwnershipLost(RuntimeError):
    """The ownership handed to this process is not held by it: another process owns the cell."""


@dataclass(frozen=True)
class Handoff:
    """What a child process needs to carry an ownership: add `env` to its environment, pass `fds`."""

    env: dict[str, str] = field(default_factory=dict)
    fds: tuple[int, ...] = ()


class LeaseToken:
    """A lease's token as a process holds it: handed to children, given up once, dropped only by its taker.

    The lease livenesses (the registry's, the database table's) each hold one, beside how they renew.
    """

    RELEASED = "its ownership was released"
    EXPIRED = "its lease expired (not renewed in time) or another holder took the cell"

    def __init__(self, cell: str, token: str, taker: bool) -> None:
        self.cell = cell
        self.value: str | None = token
        self.taker = taker  # only the taker drops the lease; an heir just stops using it

    @property
    def held(self) -> bool:
        return self.value is not None

    def handoff(self) -> Handoff:
        if self.value is None:
            raise OwnershipLost(f"the ownership of cell {self.cell} was released")
        return Handoff(env={ENV_LEASE: self.value})

    def give_up(self) -> str | None:
        """Stop holding it; the token to drop where this process took the lease (None for an heir, or again)."""
        token, self.value = self.value, None
        return token if self.taker else None


class _Lease(Protocol):
    @property
    def held(self) -> bool: ...

    def lost(self) -> str | None: ...


L = TypeVar("L", bound=_Lease)


def inherit_lease(
    cell: str, environ: Mapping[str, str] | None, inherited: dict[tuple[str, str], L], make: Callable[[str], L]
) -> L | None:
    """The lease of `cell` whose token this process was handed (ENV_LEASE), or None when none was.

    Checked once against its keeper (`lost()`), then remembered in `inherited`: the same handoff asked for
    again is the same ownership. Raises OwnershipLost when the token is not the lease's holder.
    """
    token = (os.environ if environ is None else environ).get(ENV_LEASE)
    if not token:
        return None
    known = inherited.get((cell, token))
    if known is not None and known.held:
        return known
    owned = make(token)
    why = owned.lost()
    if why is not None:
        raise OwnershipLost(f"the lease of cell {cell} handed to this process is not held by it: {why}")
    inherited[(cell, token)] = owned
    return owned
