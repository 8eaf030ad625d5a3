"""Writing one checkpoint file: direct I/O where the bytes allow it, hashed on another core meanwhile.

A buffered write first copies every byte into the page cache, on this
process's CPU, and the disk writes them back later (at the fsync). With
`O_DIRECT` the disk reads the caller's memory itself: no copy, no dirty
pages to throttle other writers, the training data's pages are not evicted,
and the CPU stays free for the sha256, which then sets the pace whenever the
disk is faster than one core hashes. Direct I/O needs the memory address, the
file offset and the length to be multiples of the block size, so the aligned
prefix of the file (all of it but the last partial page, for an Image) is
written directly and the rest buffered: Linux lets a file descriptor drop
O_DIRECT with fcntl. Filesystems that refuse O_DIRECT (tmpfs, some FUSE
mounts) get buffered writes throughout.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import threading
from concurrent.futures import Future
from contextlib import nullcontext
from pathlib import Path

from sweepq.checkpoint import crashpoints, sharing
from sweepq.checkpoint.lanes import SMALL, hasher, writer

O_DIRECT = getattr(os, "O_DIRECT", 0)  # Linux (and a few others); elsewhere every write is buffered
DIRECT_MIN = 1 << 20  # below this, direct I/O saves less than its extra system calls cost
ALIGN = 4096  # a page, and a multiple of every block size direct I/O asks for in practice
# Written in chunks (a multiple of ALIGN), the mid-file crash point between two. Large: each
# direct write keeps the device busy until it ends, and between two the writing thread must get
# a core back from the hashing ones (8 MB chunks wrote two 80 MB shards about 10 % slower here).
CHUNK = 32 << 20


def write_files(folder: Path, files: dict[str, list[memoryview]]) -> dict[str, tuple[str, int]]:
    """Write several new files and fsync each; name -> (sha256, size).

    Each large file's sha256 runs on a hashing thread from the first byte
    (hashlib, write and fsync all release the GIL): one core hashes slower than
    a disk written with direct I/O, so the shards of a large state are hashed
    at once, on as many cores as the write may take (sharing.py). The parts
    must not change until this returns (the caller owns them).
    """
    share = sharing.current()
    width = share.width() if share is not None else sharing.cores()
    hashes = {name: _Hash(parts) for name, parts in files.items() if sum(map(len, parts)) >= SMALL}
    for i, h in enumerate(hashes.values()):
        hasher(i % width).submit(h.run)  # several on one lane run one after another

    def spread() -> None:  # every hash not started yet on a lane of its own
        for i, h in enumerate(hashes.values()):
            hasher(i).submit(h.run)

    try:
        with share.on_hurry(spread) if share is not None else nullcontext():
            sizes = write_all(folder, files)
            for h in hashes.values():
                h.done.exception()
    finally:
        for h in hashes.values():
            if not h.cancel():  # on errors: a hash not started never starts (the caller's buffers are its again)
                h.done.exception()  # one that started ends first
    return {
        name: (hashes[name].done.result() if name in hashes else _digest(files[name]), sizes[name]) for name in files
    }


class _Hash:
    """One file's sha256, computed by whichever lane starts it first (it may be offered to several)."""

    def __init__(self, parts: list[memoryview]) -> None:
        self.parts: list[memoryview] | None = parts
        self.done: Future[str] = Future()
        self._lock = threading.Lock()

    def run(self) -> None:
        with self._lock:
            parts, self.parts = self.parts, None
        if parts is None:
            return  # taken by another lane, or cancelled
        self.done.set_running_or_notify_cancel()
        try:
            self.done.set_result(_digest(parts))
        except BaseException as e:
            self.done.set_exception(e)

    def cancel(self) -> bool:
        """True if it had not started (and now never will)."""
        with self._lock:
            if self.parts is None:
                return False
            self.parts = None
        return self.done.cancel()


def write_all(folder: Path, files: dict[str, list[memoryview]]) -> dict[str, int]:
    """Write several new files at once, one thread per large file, and fsync each; name -> size.

    A direct write is synchronous: with one thread the disk idles from each
    completion until the thread is scheduled again and asks for more, which
    takes longer when the hashing threads occupy every core (10-15 % of the
    write's time on 160 MB here). Two writes in flight keep it busy. The small
    files are written meanwhile on the calling thread, so that their fsyncs
    (a journal commit each) do not follow the large files' ones.
    """
    large = [name for name, parts in files.items() if sum(map(len, parts)) >= DIRECT_MIN]
    if not large or len(files) < 2:
        return {name: write_plain(folder / name, parts) for name, parts in files.items()}
    futs = {name: writer(i).submit(write_plain, folder / name, files[name]) for i, name in enumerate(large)}
    try:
        sizes = {name: write_plain(folder / name, parts) for name, parts in files.items() if name not in futs}
    finally:
        for fut in futs.values():
            fut.exception()  # every write ends before this returns or raises: they read the caller's buffers
    return sizes | {name: fut.result() for name, fut in futs.items()}


def write_plain(path: Path, parts: list[memoryview], direct: bool = True) -> int:
    """Write `parts` to a new file and fsync it, without hashing; returns the size."""
    total = sum(len(p) for p in parts)
    fd, direct = _open(path, direct and total >= DIRECT_MIN)
    try:
        out = _Out(fd, direct, half=total // 2)
        for p in parts:
            out.write(p)
        os.fsync(fd)
    finally:
        os.close(fd)
    return out.size


def _open(path: Path, direct: bool) -> tuple[int, bool]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    return fd, direct and set_direct(fd)


def set_direct(fd: int) -> bool:
    """Turn O_DIRECT on for an open file; False where its filesystem refuses it (ramfs, some FUSE mounts).

    Set after the open, not passed to it: an open that creates the file and
    then refuses O_DIRECT leaves the file behind.
    """
    if not O_DIRECT:
        return False
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | O_DIRECT)
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
        return False
    return True


class _Out:
    """One open file: direct writes while address and offset stay aligned, buffered ones after."""

    def __init__(self, fd: int, direct: bool, half: int) -> None:
        self.fd, self.direct, self.half, self.size = fd, direct, half, 0

    def write(self, part: memoryview) -> None:
        aligned = 0
        if self.direct and self.size % ALIGN == 0 and len(part) >= ALIGN and _address(part) % ALIGN == 0:
            aligned = len(part) - len(part) % ALIGN
        if aligned:
            self._all(part[:aligned])
        if aligned < len(part):
            self._buffered()
            self._all(part[aligned:])

    def _all(self, view: memoryview) -> None:
        for start in range(0, len(view), CHUNK):  # CHUNK is a multiple of ALIGN
            chunk = view[start : start + CHUNK]
            while len(chunk):
                try:
                    n = os.write(self.fd, chunk)
                except OSError as e:
                    if not (self.direct and e.errno == errno.EINVAL):
                        raise
                    self._buffered()  # the device wants a larger alignment: nothing was written
                    continue
                chunk = chunk[n:]
                self.size += n
                if n % ALIGN:
                    self._buffered()  # a short write left the offset unaligned
            if crashpoints.armed() and self.size >= self.half:
                crashpoints.crash_point("mid_file")

    def _buffered(self) -> None:
        if self.direct:
            fcntl.fcntl(self.fd, fcntl.F_SETFL, fcntl.fcntl(self.fd, fcntl.F_GETFL) & ~O_DIRECT)
            self.direct = False


def _address(view: memoryview) -> int:
    import numpy as np  # here, not at the top: readers of checkpoints (the CLI) never load numpy

    return int(np.frombuffer(view, dtype=np.uint8).ctypes.data)


def _digest(parts: list[memoryview]) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p)
    return h.hexdigest()
