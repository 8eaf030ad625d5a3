"""What passes an ownership from process to process (liveness.py's interface; re-exported there).

Its own module so that an implementation of the interface in another module (leases.py) and the
place that picks one (liveness.for_root) import it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ENV_LEASE = "SWEEPQ_LEASE"  # the token of the lease a training process carries


class OwnershipLost(RuntimeError):
    """The ownership handed to this process is not held by it: another process owns the cell."""


@dataclass(frozen=True)
class Handoff:
    """What a child process needs to carry an ownership: add `env` to its environment, pass `fds`."""

    env: dict[str, str] = field(default_factory=dict)
    fds: tuple[int, ...] = ()
