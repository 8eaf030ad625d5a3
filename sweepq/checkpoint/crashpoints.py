"""Test-only fault injection: kill this process with SIGKILL at a named point of a checkpoint write or deletion.

SWEEPQ_CRASH_AT=<point> arms it from the environment, `arm()` from inside a
training function (the tests arm it per cell, which an environment variable
shared by a whole sweep cannot). It fires only once the process committed
SWEEPQ_CRASH_AFTER_COMMITS checkpoints, so that there is something to fall
back to. The points are named where they are called (storage.py, diskio.py, fenced.py).
SWEEPQ_CRASH_SIGNAL=SIGSTOP freezes the process there instead (a process paused between the
fence's answer and its write: tests/process/test_storage_fencing.py continues it later).
"""

from __future__ import annotations

import os
import signal

_point: str | None = os.environ.get("SWEEPQ_CRASH_AT")
_after = int(os.environ.get("SWEEPQ_CRASH_AFTER_COMMITS", "0"))
_commits_seen = 0
_signal = getattr(signal, os.environ.get("SWEEPQ_CRASH_SIGNAL", "SIGKILL"), signal.SIGKILL)


def arm(point: str | None, after_commits: int = 0) -> None:
    global _point, _after
    _point, _after = point, after_commits


def armed() -> bool:
    """Whether any point is armed: lets a hot loop skip the call entirely."""
    return _point is not None


def crash_point(name: str) -> None:
    if name == _point and _commits_seen >= _after:
        os.kill(os.getpid(), _signal)


def count_commit() -> None:
    global _commits_seen
    _commits_seen += 1
