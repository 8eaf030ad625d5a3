"""Process helpers shared by launch, workers, attempts and checkpoint copies (they import nothing of sweepq)."""

from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int | None, sig: int = signal.SIGTERM) -> None:
    """Ask Linux to send `sig` when the parent dies: a graceful stop, never an orphan that runs on.

    If the parent already died before the request took effect, send it now.
    """
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: orphans are noticed by polling getppid()
        pass
    if parent_pid is not None and os.getppid() != parent_pid:
        os.kill(os.getpid(), sig)


def orphaned(parent_pid: int | None) -> bool:
    return parent_pid is not None and os.getppid() != parent_pid


def usable_cores(at_most: int) -> int:
    """The cores this process may run on (its affinity, not the machine's count), capped at `at_most`."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, at_most))


def pidfd(pid: int) -> int | None:
    """A descriptor that turns readable when `pid` exits (Linux 5.3+), to wait in select(); None where unsupported."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None
