"""The cores a checkpoint write may hash on: all of them, or those the training loop leaves free.

A write in the background runs beside the training loop, whose torch threads
keep their cores busy. Hashing the shards of a large state on every core at
once then takes cores from the loop, whose steps slow down while the hashes
run; a hash that takes longer on the cores the loop leaves free costs nobody
anything (nobody waits for a write in the background). So such a write
hashes on `cores - busy` lanes (at least one), one shard after another on
each. The moment somebody waits for it (the loop's next checkpoint, the
final one at exit), `hurry()` puts every shard not yet started on a lane of
its own. A write nobody shares the cores with (the calling thread is not in
`background`) uses them all from the start.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_local = threading.local()


def cores() -> int:
    """The cores this process may run on (its affinity, not the machine's count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1  # pragma: no cover - not Linux


class Sharing:
    """One background write's share of the cores; `hurry` gives it all of them."""

    def __init__(self, busy: int) -> None:
        self.busy = busy
        self.urgent = False
        self._lock = threading.Lock()
        self._hooks: list[Callable[[], None]] = []

    def width(self) -> int:
        """How many shards to hash at once now."""
        return cores() if self.urgent else max(1, cores() - self.busy)

    def hurry(self) -> None:
        """Somebody waits for this write: hash on every core from now on."""
        with self._lock:
            self.urgent = True
            hooks = list(self._hooks)
        for hook in hooks:
            hook()

    @contextmanager
    def on_hurry(self, hook: Callable[[], None]) -> Iterator[None]:
        """Call `hook` if `hurry` comes while inside (at once if it already came)."""
        with self._lock:
            self._hooks.append(hook)
            urgent = self.urgent
        try:
            if urgent:
                hook()
            yield
        finally:
            with self._lock:
                self._hooks.remove(hook)


@contextmanager
def background(share: Sharing) -> Iterator[None]:
    """The writes this thread makes inside run beside `share.busy` busy cores."""
    previous = getattr(_local, "share", None)
    _local.share = share
    try:
        yield
    finally:
        _local.share = previous


def current() -> Sharing | None:
    """The calling thread's share; None: the write has every core."""
    share: Sharing | None = getattr(_local, "share", None)
    return share
