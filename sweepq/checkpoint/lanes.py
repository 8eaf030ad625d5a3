"""The process's helper threads for checkpoint files: one per file hashed, written or read at once.

hashlib, read, write and fsync all release the GIL, so a file's sha256 runs on
a lane while the calling thread reads or writes the next chunk, and several
large files are written (diskio.py) or read (readio.py) at once, one lane each.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any, TypeVar

from sweepq.checkpoint.sharing import cores

SMALL = 1 << 20  # below this many bytes a round trip to a lane costs more than hashing them in place
_T = TypeVar("_T")


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
_borrowed: dict[str, set[int]] = {}  # kind -> indexes lent out by `borrowed` (guarded by _lane_lock)


def _after_fork_in_child() -> None:
    # The parent's threads do not exist in the child, and its lock may be held by one of them.
    global _lanes, _lane_lock, _borrowed
    _lanes, _lane_lock, _borrowed = None, threading.Lock(), {}


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


def reader(index: int = 0) -> Lane:
    """A thread that reads one file (readio reads several files at once)."""
    return lane("read", index)


@contextmanager
def borrowed(kind: str) -> Iterator[Lane]:
    """A lane of `kind` that no other borrower holds meanwhile (the lowest free index).

    For work whose callers do not know how many run at once: each file read at
    once gets a hashing thread of its own, and its chunks stay in order.
    """
    with _lane_lock:
        taken = _borrowed.setdefault(kind, set())
        index = next(i for i in range(len(taken) + 1) if i not in taken)
        taken.add(index)
    try:
        yield lane(kind, index)
    finally:
        with _lane_lock:
            _borrowed.get(kind, set()).discard(index)


def at_once(calls: Sequence[Callable[[], _T]], width: int = 8) -> list[_T]:
    """Run `calls` concurrently, at most `width` (and the usable cores) at a time; their results in order.

    Call i runs on reader lane i % width, 0 meaning this thread. Every call ends
    before this returns or raises (they may fill the caller's buffers), and the
    first error in the calls' order is the one raised.
    """
    width = max(1, min(width, len(calls), cores()))
    groups = [list(range(g, len(calls), width)) for g in range(width)]
    outcomes: list[Any] = [None] * len(calls)

    def run(group: list[int]) -> None:
        for i in group:
            try:
                outcomes[i] = (True, calls[i]())
            except BaseException as e:  # kept, raised below in the calls' order
                outcomes[i] = (False, e)

    futs = [reader(g).submit(run, group) for g, group in enumerate(groups) if g]
    run(groups[0] if groups else [])
    for fut in futs:
        fut.result()
    for ok, value in outcomes:
        if not ok:
            raise value
    return [value for _, value in outcomes]
