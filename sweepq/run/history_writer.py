"""Appending an attempt's `run.log` points to its metrics.jsonl without the training loop waiting.

`append` only puts the point in a deque (its appends and pops are atomic, so the
training thread takes no lock); a daemon thread writes what gathered every
INTERVAL seconds, or sooner once WAKE_AT points wait, with one `write` a batch
(the page cache keeps it through a kill of the process). `sync` writes what is
left and fsyncs: the Run calls it before each checkpoint commits, so the history
up to every committed checkpoint is on the disk, and at close.

The history is the attempt's own file (no other process writes it, no database
is touched), and it never fails training: a write the disk refuses is said once
on stderr and retried with the next batch, keeping at most MAX_WAITING points.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import weakref
from collections import deque
from pathlib import Path
from typing import Any

from sweepq.atomic import fsync_dir
from sweepq.history.format import encode, header

INTERVAL = 0.5  # seconds between background writes
WAKE_AT = 4096  # points that wake the writer before its interval
MAX_WAITING = 200_000  # points kept while the disk refuses them (the oldest go first)

_writers: weakref.WeakSet[HistoryWriter] = weakref.WeakSet()


class HistoryWriter:
    def __init__(self, path: Path, cell: str, attempt: int) -> None:
        self.path = path
        self._header = header(cell, attempt)
        self._label = f"{cell} attempt {attempt}"
        self._points: Any = deque()  # (step, time, values); Any: replaced by a sink in a forked child
        self._io = threading.Lock()  # one writer of the file at a time: batches stay in order
        self._starting = threading.Lock()
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._fd: int | None = None
        self._size = 0  # bytes known written whole: a failed write is cut back to it
        self._dir_synced = False
        self._complained = False
        self.dropped = 0
        _writers.add(self)

    def append(self, step: int, values: dict[str, Any]) -> None:
        """Keep one point (called by `run.log`: a deque append, nothing more unless the thread must start)."""
        points = self._points
        points.append((step, time.time(), values))
        if self._thread is None:
            self._start()
        elif len(points) == WAKE_AT:
            self._wake.set()

    def flush(self) -> None:
        """Write every point appended so far (what the thread does), without fsync."""
        self._write(durable=False)

    def sync(self) -> None:
        """Write every point appended so far and fsync the file (and, once, its folder)."""
        self._write(durable=True)

    def close(self) -> None:
        """Sync, stop the thread and close the file; a later `append` starts again (appending)."""
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            self._stop = True
            self._wake.set()
            thread.join()
        self._write(durable=True)
        with self._io:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            self._thread, self._stop = None, False
        if self.dropped:
            print(
                f"sweepq warning: {self._label}: {self.dropped} logged points are not in {self.path}: the disk "
                f"refused them while more than {MAX_WAITING} waited (the oldest went first)",
                file=sys.stderr,
            )

    # -- the writing thread -------------------------------------------------------

    def _start(self) -> None:
        with self._starting:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="sweepq-history", daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        while not self._stop:
            self._wake.wait(INTERVAL)
            self._wake.clear()
            self._write(durable=False)

    def _write(self, durable: bool) -> None:
        with self._io:
            batch = [self._points.popleft() for _ in range(len(self._points))]
            try:
                if batch:
                    self._append_lines(batch)
            except OSError as e:
                self._refused(batch, e)
                return
            if durable and self._fd is not None:
                try:
                    os.fsync(self._fd)
                    if not self._dir_synced:
                        fsync_dir(self.path.parent)  # the file's own entry survives a power loss
                        self._dir_synced = True
                except OSError as e:
                    self._complain(e)

    def _append_lines(self, batch: list[tuple[int, float, dict[str, Any]]]) -> None:
        lines = [line for step, t, values in batch if (line := encode(step, t, values)) is not None]
        if lines:
            fd = self._open()
            data = ("\n".join(lines) + "\n").encode()
            _write_all(fd, data)
            self._size += len(data)

    def _open(self) -> int:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # O_NOFOLLOW: never appended to (or cut back) through a link left under this name
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
            size = 0
            try:
                size = os.fstat(fd).st_size
                if size == 0:
                    _write_all(fd, self._header)
            except OSError:
                with contextlib.suppress(OSError):
                    if size == 0:
                        os.ftruncate(fd, 0)  # no half header for the next try to write after
                os.close(fd)
                raise
            self._fd, self._size = fd, size or len(self._header)
        return self._fd

    def _refused(self, batch: list[tuple[int, float, dict[str, Any]]], e: OSError) -> None:
        """The disk took not all of a batch: cut the file back to whole lines, keep the points to retry."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._size)
        waiting = self._points
        for point in reversed(batch):
            waiting.appendleft(point)
        while len(waiting) > MAX_WAITING:
            waiting.popleft()
            self.dropped += 1
        self._complain(e)

    def _complain(self, e: OSError) -> None:
        if self._complained:  # once an attempt: a full disk would say it every half second
            return
        self._complained = True
        print(
            f"sweepq warning: {self._label}: the metric history could not be written to {self.path} ({e}); "
            "training goes on, and the points are kept in memory and written when the disk takes them",
            file=sys.stderr,
            flush=True,
        )


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class _Sink:
    """What a forked child appends to: the parent's file has one writer, the parent."""

    def append(self, point: Any) -> None:
        pass

    def __len__(self) -> int:
        return 0


def _forked() -> None:
    for writer in list(_writers):
        writer._io = threading.Lock()  # the parent's thread may have held it at the fork
        writer._points = _Sink()
        writer._thread = threading.current_thread()  # never started in the child
        writer._fd = None


os.register_at_fork(after_in_child=_forked)
