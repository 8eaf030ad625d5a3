"""Preemption signals in a training process: handlers that only set a flag.

Kept free of heavy imports so a training process installs its handlers before
it spends a second importing torch: a SIGTERM during start-up is then a
preemption like any other, not a death by the default handler.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from sweepq.evidence import STOP_SIGNALS

_stop = threading.Event()
_received: list[int] = []


def _on_signal(signum: int, _frame: Any) -> None:
    _received.append(signum)
    _stop.set()


def install() -> None:
    for sig in STOP_SIGNALS:
        signal.signal(sig, _on_signal)


def relay(signum: int) -> None:
    """A stop signal that another process of the attempt heard (another rank of the cell), taken as
    this process's own: every rank then stops, and reports the stop, alike."""
    if not _stop.is_set():
        _on_signal(signum, None)


def requested() -> bool:
    return _stop.is_set()


def first_signal() -> int | None:
    return _received[0] if _received else None


def describe() -> str:
    sig = first_signal()
    return signal.Signals(sig).name if sig else "a signal"


def clear() -> None:
    _stop.clear()
    _received.clear()
