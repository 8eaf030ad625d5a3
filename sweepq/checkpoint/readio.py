"""Reading a checkpoint file back: direct I/O into page-aligned memory, hashed on another core meanwhile.

A cold buffered read has the kernel copy every byte from the page cache into
the caller's memory, on this process's CPU, the CPU the sha256 needs. With
`O_DIRECT` the disk writes into the destination itself and the pages of the
file never enter the cache. The file is read chunk by chunk and each chunk
hashed on a lane while the next one is read, so the disk and the hash run
side by side; files read at once (the shards of a large state) each have a
hashing lane of their own. Direct I/O wants the memory address, the offset
and the length to be multiples of the block size: the destinations made here
are page-aligned and whole chunks are whole pages, and the last partial page
is read buffered (Linux lets a descriptor drop O_DIRECT with fcntl).
Filesystems that refuse O_DIRECT (ramfs, some FUSE mounts) are read buffered
throughout.

The destination of a kept file is fresh anonymous memory, advised for huge
pages where they pay: a fresh 4 KiB page costs a fault and a zeroing, and a
huge page takes one fault for 512 of them. They do not pay on a VM whose kernel
hands free 2 MiB blocks back to the hypervisor (virtio-balloon's free page
reporting): there a fresh huge page is one the host must fault in again.
Measured on such a VM, faulting 85 MB took 11 ms with huge pages
just freed by the same process, 200-290 ms with huge pages reported to the host,
and 45-60 ms with 4 KiB pages; a resume in a fresh process (the usual one: an
attempt's first act) restored 160 MB in 320-400 ms advised, 104-156 ms not
(`torch.load`: 115-190 ms). `huge_pages_pay` reads which case this is from
sysfs. Nothing here imports numpy or torch: the CLI verifies checkpoints too.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import hashlib
import mmap
import os
from pathlib import Path

from sweepq.checkpoint.diskio import ALIGN, O_DIRECT, set_direct
from sweepq.checkpoint.lanes import SMALL, borrowed

# A chunk is read while the one before is hashed; the last chunk's hash waits
# for nobody, so the chunk stays small next to a shard (a multiple of ALIGN).
CHUNK = 4 << 20
DIRECT_MIN = 1 << 20  # below this the extra system calls and a lane's round trip cost more than they save


class WrongSize(Exception):
    """The file does not have the size the caller expects (`actual` bytes, or fewer read: `short`)."""

    def __init__(self, actual: int, short: bool = False) -> None:
        super().__init__(actual)
        self.actual, self.short = actual, short


HUGE = 2 << 20  # a huge page on x86-64 and arm64 (4 KiB base pages)
HUGE_ORDER = 9  # HUGE in 4 KiB pages, as a power of two
BALLOON_DEVICE, REPORTING_BIT = 0x0005, 5  # virtio's device id of the balloon; its feature "free page reporting"


@functools.cache
def huge_pages_pay(sysfs: str = "/sys") -> bool:
    """Whether fresh memory is cheaper advised for huge pages here: not where a virtio balloon bound to its
    driver reports free blocks of a huge page or smaller back to the hypervisor (the module docstring)."""
    base = Path(sysfs)
    try:
        order = int((base / "module/page_reporting/parameters/page_reporting_order").read_text())
    except (OSError, ValueError):
        return True  # no page reporting in this kernel
    return order > HUGE_ORDER or not any(_reports_pages(d) for d in (base / "bus/virtio/devices").glob("*"))


def _reports_pages(device: Path) -> bool:
    try:
        kind = int((device / "device").read_text(), 16)
        features = (device / "features").read_text().strip()  # one 0/1 a feature bit, bit 0 first
    except (OSError, ValueError):
        return False
    bound = (device / "driver").exists()
    return bound and kind == BALLOON_DEVICE and features[REPORTING_BIT : REPORTING_BIT + 1] == "1"


def fresh(size: int) -> memoryview:
    """`size` bytes of page-aligned, writable, uninitialised memory, private to this process (a fork copies
    it on write), advised for huge pages where Linux has them and they pay (`huge_pages_pay`)."""
    large = size >= HUGE
    # A whole number of huge pages: Linux aligns such mappings to a huge page, so that all of it can use them.
    buf = mmap.mmap(-1, -(-size // HUGE) * HUGE if large else max(size, 1), mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if large and advice is not None and huge_pages_pay():
        try:
            buf.madvise(advice)
        except OSError:  # transparent huge pages not built into this kernel: small pages then
            pass
    return memoryview(buf)[:size]


def read_into(path: Path, size: int, out: memoryview) -> str:
    """Read the whole file, which must have `size` bytes, into `out[:size]`; its sha256.

    Raises OSError, or WrongSize for a file of another size (or one that ends early).
    """
    with _File(path, size, direct=size >= DIRECT_MIN) as f:
        if size < SMALL:
            f.fill(out[:size])
            return hashlib.sha256(out[:size]).hexdigest()
        with borrowed("verify") as lane:
            h = hashlib.sha256()
            try:
                for start in range(0, size, CHUNK):
                    chunk = out[start : min(start + CHUNK, size)]
                    f.fill(chunk)
                    lane.submit(h.update, chunk)
            finally:
                digest = lane.submit(h.hexdigest).result()  # the lane is done with `out` before this returns
        return digest


def digest(path: Path, size: int) -> str:
    """The sha256 of a file that must have `size` bytes, in little memory: two chunk buffers, one hashed
    while the other is read. Raises as read_into does."""
    if size < SMALL:
        out = bytearray(size)
        return read_into(path, size, memoryview(out))
    bufs = [fresh(CHUNK) for _ in range(2)]
    with _File(path, size, direct=True) as f, borrowed("verify") as lane:
        h = hashlib.sha256()
        pending = [lane.submit(lambda: None) for _ in bufs]
        try:
            for i, start in enumerate(range(0, size, CHUNK)):
                k = i % 2
                pending[k].result()  # the lane is done with this buffer
                chunk = bufs[k][: min(CHUNK, size - start)]
                f.fill(chunk)
                pending[k] = lane.submit(h.update, chunk)
        finally:
            result = lane.submit(h.hexdigest).result()
    return result


class _File:
    """An open file read in order: direct while the offset stays aligned, buffered after."""

    def __init__(self, path: Path, size: int, direct: bool) -> None:
        self.path, self.size, self.direct, self.at = path, size, direct, 0
        self.fd = -1

    def __enter__(self) -> _File:
        self.fd = os.open(self.path, os.O_RDONLY)
        try:
            self.direct = self.direct and set_direct(self.fd)
            actual = os.fstat(self.fd).st_size
            if actual != self.size:
                raise WrongSize(actual)
        except BaseException:
            os.close(self.fd)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)

    def fill(self, view: memoryview) -> None:
        """Read the next len(view) bytes of the file into view."""
        while len(view):
            whole = len(view) - len(view) % ALIGN
            if self.direct and not whole:
                self._buffered()  # the last partial page
            part = view[:whole] if self.direct else view
            try:
                n = os.readv(self.fd, [part])
            except OSError as e:
                if not (self.direct and e.errno == errno.EINVAL):
                    raise
                self._buffered()  # memory the device cannot reach directly: nothing was read
                continue
            if not n:
                raise WrongSize(self.at, short=True)
            self.at += n
            view = view[n:]
            if n % ALIGN:
                self._buffered()  # a short read left the offset unaligned

    def _buffered(self) -> None:
        if self.direct:
            fcntl.fcntl(self.fd, fcntl.F_SETFL, fcntl.fcntl(self.fd, fcntl.F_GETFL) & ~O_DIRECT)
            self.direct = False
