"""Deleting superseded checkpoint folders gently, on a background thread.

Unlinking a large file can take tens of milliseconds of waiting on the disk
(ext4 mounted with `discard`: 40 ms for 160 MB here) and nothing needs it done
at once: the folder has already left the committed namespace (a rename, see
storage.py), so the removal runs on a daemon thread. A crash before it ends
leaves a hidden trash folder, which the next lock holder removes.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from sweepq.ownfiles import shrink_and_remove

DELETE_STEP = 8 << 20


def delete_later(folder: Path) -> None:
    """Remove `folder` (already out of every reader's sight) on this process's delete thread."""
    _deleter().put(folder)


def wait_deleted() -> None:
    """Wait until every folder given to `delete_later` in this process is gone (AsyncWriter.flush calls it)."""
    d = _state
    if d is not None and d[0] == os.getpid():
        d[1].wait()


class _Deleter:
    """Removes folders, one at a time, on a daemon thread that exits when idle."""

    IDLE_EXIT = 30.0

    def __init__(self) -> None:
        self._cv = threading.Condition(threading.Lock())
        self._paths: list[Path] = []
        self._busy = False
        self._thread: threading.Thread | None = None

    def put(self, path: Path) -> None:
        with self._cv:
            self._paths.append(path)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="sweepq-delete", daemon=True)
                self._thread.start()
            self._cv.notify_all()

    def wait(self) -> None:
        if not (self._paths or self._busy):
            return
        with self._cv:
            while self._paths or self._busy:
                self._cv.wait()

    def _serve(self) -> None:
        while True:
            with self._cv:
                while not self._paths:
                    if not self._cv.wait(timeout=self.IDLE_EXIT) and not self._paths:
                        self._thread = None
                        return
                path = self._paths.pop(0)
                self._busy = True
            try:
                remove_gently(path)
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()


def remove_gently(folder: Path) -> None:
    """Remove a folder, shrinking its large files DELETE_STEP bytes per journal commit first.

    On a filesystem mounted with `discard` (ext4 here), freeing a file's blocks
    sends the device a TRIM inside the journal commit, and every fsync on that
    filesystem waits for the commit: unlinking 160 MB at once held the worker's
    SQLite commit for 31 ms. Shrinking in steps, each made durable, keeps any
    one wait near 1 ms for about the same total time (the way RocksDB rate-limits
    file deletion). Errors are ignored: what is left is cleaned up later.

    Nothing is shrunk or removed through a link (ownfiles.py): a trash name
    that is a link (a linked step superseded) loses the link itself, a linked
    or hard-linked file in the folder keeps every byte of what it points at.
    """
    shrink_and_remove(folder, DELETE_STEP)


_state: tuple[int, _Deleter] | None = None
_state_lock = threading.Lock()


def _after_fork_in_child() -> None:
    # The parent's delete thread does not exist in the child, and its lock may be held by it.
    global _state, _state_lock
    _state, _state_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _deleter() -> _Deleter:
    global _state
    with _state_lock:
        if _state is None or _state[0] != os.getpid():
            _state = (os.getpid(), _Deleter())
        return _state[1]
