"""An attempt's growing files copied to the sweep's storage while it runs, and whole at its end.

The attempt writes its metric history and its logs in its attempt folder of the root, as always
(the root is the fast local copy, and the files of a sweep whose storage is the root itself). When
the storage is elsewhere (a bucket, a mounted folder), a thread of the attempt process ships what
each file gained since the last round, every `interval` seconds, as a segment of the file's stream
(files.py `append`: an object store cannot append, so each segment is an object of its own, never
rewritten). So a machine that dies mid-attempt loses at most the last round of its files.

A log is bounded (host/logkeeper.py): once it is longer than its head, its tail is rewritten in
place, which no stream of segments can follow. The shipper sees it (the bytes it shipped last are
no longer there) and from then on puts the whole log, which the bound keeps small, in each round
it changed. At the end, `finish` ships the last of every file and puts each log whole: the reader
of a stream takes the whole object first (files.py `read`).
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from sweepq.durable.files import CellFiles

INTERVAL_SECONDS = 5.0
SEGMENT_MAX = 8 << 20  # one segment's most bytes (a history that grew fast goes up in several)
_WITNESS = 256  # bytes before a stream's shipped end, read again to see that they are still there


@dataclass
class _Tracked:
    name: str  # the name in the cell's files: attempts/<n>/<file>
    path: Path
    bounded: bool  # a log (rewritten once longer than its head); the history only grows
    shipped: int = 0
    witness: bytes = b""
    whole: bool = False  # rewritten: put whole from now on
    put_stamp: tuple[int, int] | None = None  # (size, mtime_ns) of the last whole put


class Shipper:
    """Ships the history and the logs of attempt `number` of a cell (files in `folder`) to `files`."""

    def __init__(self, files: CellFiles, folder: Path, number: int, interval: float = INTERVAL_SECONDS) -> None:
        self.files = files
        self.interval = interval
        base = f"attempts/{number}"
        self.tracked = [
            _Tracked(f"{base}/metrics.jsonl", folder / "metrics.jsonl", bounded=False),
            _Tracked(f"{base}/stdout.log", folder / "stdout.log", bounded=True),
            _Tracked(f"{base}/stderr.log", folder / "stderr.log", bounded=True),
        ]
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one round at a time: the thread's or finish's
        self._thread: threading.Thread | None = None
        self.failures = 0

    def start(self) -> Shipper:
        self._thread = threading.Thread(target=self._loop, name="sweepq-ship", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.round()

    def round(self) -> None:
        """Ship what each file gained; a failure (an outage) is said once and tried again next round."""
        with self._lock:
            for t in self.tracked:
                try:
                    self._ship(t)
                except Exception as e:  # the storage's outage must not stop the training: next round
                    self.failures += 1
                    if self.failures == 1:
                        print(f"sweepq: could not copy {t.name} to {self.files.describe(t.name)}: {e}", file=sys.stderr)

    def finish(self) -> None:
        """Stop the thread, ship the last bytes, and put each log whole (as it stays). Raises what the storage
        raised: the caller decides what an attempt whose files did not reach the storage becomes."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            for t in self.tracked:
                if t.bounded:
                    data = _read(t.path)
                    if data is not None:
                        self.files.put(t.name, data)
                else:
                    self._ship(t)

    def _ship(self, t: _Tracked) -> None:
        try:
            st = os.stat(t.path)
        except FileNotFoundError:
            return
        if t.whole or (t.bounded and not self._unchanged(t, st.st_size)):
            t.whole = True
            stamp = (st.st_size, st.st_mtime_ns)
            if stamp != t.put_stamp:
                data = _read(t.path)
                if data is not None:
                    self.files.put(t.name, data)
                    t.put_stamp = stamp
            return
        while st.st_size > t.shipped:
            with open(t.path, "rb") as f:
                f.seek(t.shipped)
                data = f.read(min(st.st_size - t.shipped, SEGMENT_MAX))
            if not data:
                return
            self.files.append(t.name, t.shipped, data)
            t.shipped += len(data)
            t.witness = data[-_WITNESS:] if len(data) >= _WITNESS else (t.witness + data)[-_WITNESS:]

    def _unchanged(self, t: _Tracked, size: int) -> bool:
        """Whether the file still holds, before the shipped end, the bytes shipped there."""
        if size < t.shipped:
            return False
        if not t.witness:
            return True
        with open(t.path, "rb") as f:
            f.seek(t.shipped - len(t.witness))
            return f.read(len(t.witness)) == t.witness


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
