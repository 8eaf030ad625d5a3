"""The process's helper threads for checkpoint files: one per file hashed or written at once.

hashlib, read, write and fsync all release the GIL, so a file's sha256 runs on
a lane while the calling thread reads or writes the next chunk, and several
large files are written at once, one lane each (diskio.py).
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

SMALL = 1 << 20  # below this many bytes a round trip to a lane costs more than hashing them in place


class Lane:
    """One daemon thread that runs calls in submission order (hash updates of one file stay in order).

    Not a ThreadPoolExecutor: that one refuses work once the interpreter starts
    shutting down, which is exactly when an exit hook waits for the checkpoint
    in flight to be written.
    """

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        self._queue.put((fut, fn, args))
        return fut

    def _serve(self) -> None:
        while True:
            fut, fn, args = self._queue.get()
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args))
            except BaseException as e:
                fut.set_exception(e)
            del fut, fn, args  # drop references to the caller's buffers


_lanes: tuple[int, dict[tuple[str, int], Lane]] | None = None
_lane_lock = threading.Lock()


def _after_fork_in_child() -> None:
    # The parent's threads do not exist in the child, and its lock may be held by one of them.
    global _lanes, _lane_lock
    _lanes, _lane_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def lane(kind: str, index: int = 0) -> Lane:
    """The process's thread `index` for `kind` of work, started on first use (anew in a forked child)."""
    global _lanes
    current = _lanes
    if current is None or current[0] != os.getpid() or (kind, index) not in current[1]:
        with _lane_lock:
            if _lanes is None or _lanes[0] != os.getpid():
                _lanes = (os.getpid(), {})
            if (kind, index) not in _lanes[1]:
                _lanes[1][(kind, index)] = Lane(f"sweepq-{kind}-{index}")
            current = _lanes
    return current[1][(kind, index)]


def hasher(index: int = 0) -> Lane:
    """A thread that computes sha256s (one per file being written or read at once)."""
    return lane("hash", index)


def writer(index: int = 0) -> Lane:
    """A thread that writes one file (diskio writes several files at once)."""
    return lane("write", index)
