"""Reading a checkpoint back: the files at once, direct I/O, every byte hashed before a tensor is handed out."""

from __future__ import annotations

import hashlib
import os
import subprocess
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import torch
from test_diskio import cached_fraction, snapshot_of  # tests/checkpoint is on sys.path

from sweepq.checkpoint import commit as checkpoint
from sweepq.checkpoint import lanes, manifest, readio, storage
from sweepq.checkpoint.manifest import CheckpointCorrupt
from sweepq.checkpoint.storage import LocalFolder

SHARDS = 3


def sharded(folder: Path, step: int = 1) -> tuple[dict[str, torch.Tensor], Path, list[str]]:
    """A committed checkpoint of a state in SHARDS files, each a few read chunks long (the chunks overlap)."""
    torch.manual_seed(step)
    n = readio.CHUNK // 4  # float32: one chunk per tensor, several tensors per shard
    state = {f"t{i}": torch.randn(n + 1000 * i) for i in range(2 * SHARDS)}
    skeleton, buffers, files = snapshot_of(state, shards=SHARDS)
    c = checkpoint.write_checkpoint(LocalFolder(folder), step, skeleton, buffers, {}, files)
    return state, c.path, [manifest.shard_name(i, SHARDS) for i in range(SHARDS)]


def flip(path: Path, at: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x01]))


def evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def test_the_shards_round_trip_into_page_aligned_memory(tmp_path: Path) -> None:
    state, _, _ = sharded(tmp_path)
    loaded = checkpoint.load(LocalFolder(tmp_path), 1)
    for k, t in state.items():
        assert torch.equal(loaded.state[k], t), k
    # the data of a file sweepq wrote starts on a page, and the buffer it was read into does too
    firsts = [t for t in loaded.state.values() if t.data_ptr() % readio.ALIGN == 0]
    assert len(firsts) >= SHARDS


@pytest.mark.parametrize("where", ["last byte", "last chunk", "first byte of the data"])
def test_a_flipped_byte_in_the_last_shard_is_found_and_named(tmp_path: Path, where: str) -> None:
    """The chunks of every shard are hashed on lanes while the next ones are read: damage anywhere, even in the
    chunk read last, fails the load, names the file, and no tensor comes out."""
    _, path, shards = sharded(tmp_path)
    victim = path / shards[-1]
    size = victim.stat().st_size
    at = {"last byte": size - 1, "last chunk": size - readio.CHUNK // 2, "first byte of the data": readio.ALIGN}
    flip(victim, at[where])
    with pytest.raises(CheckpointCorrupt) as e:
        checkpoint.load(LocalFolder(tmp_path), 1)
    assert e.value.why == f"{shards[-1]} sha256 does not match the manifest"
    with pytest.raises(CheckpointCorrupt, match=shards[-1]):
        storage.verify(LocalFolder(tmp_path), 1)


def test_a_truncated_or_grown_shard_is_refused_before_it_is_read(tmp_path: Path) -> None:
    _, path, shards = sharded(tmp_path)
    victim = path / shards[1]
    size = victim.stat().st_size
    os.truncate(victim, size - 5)
    with pytest.raises(CheckpointCorrupt) as e:
        checkpoint.load(LocalFolder(tmp_path), 1)
    assert e.value.why == f"{shards[1]} has {size - 5} bytes, manifest says {size}"
    os.truncate(victim, size + readio.ALIGN)  # grown: zeros past the end
    with pytest.raises(CheckpointCorrupt, match=f"{shards[1]} has {size + readio.ALIGN} bytes"):
        storage.verify(LocalFolder(tmp_path), 1)


def test_of_several_damaged_files_the_first_in_order_is_named(tmp_path: Path) -> None:
    """The files are read at once; which one fails first in time does not decide what the error says."""
    _, path, shards = sharded(tmp_path)
    flip(path / shards[2], 100)
    os.truncate(path / shards[1], 10)
    for read in (lambda: checkpoint.load(LocalFolder(tmp_path), 1), lambda: storage.verify(LocalFolder(tmp_path), 1)):
        with pytest.raises(CheckpointCorrupt) as e:
            read()
        assert e.value.why.startswith(f"{shards[1]} has 10 bytes")


def test_a_verified_read_leaves_the_page_cache_alone(tmp_path: Path) -> None:
    """The tensor files are read with direct I/O: after a load their pages are not cached. A buffered read
    of the same file fills the cache (the control: on a filesystem that caches nothing there is nothing to see)."""
    _, path, shards = sharded(tmp_path)
    victim = path / shards[0]
    evict(victim)
    victim.read_bytes()
    if cached_fraction(victim) < 0.9:
        pytest.skip("this filesystem does not keep read pages cached: nothing to tell apart")
    evict(victim)
    assert checkpoint.load(LocalFolder(tmp_path), 1).step == 1
    assert cached_fraction(victim) < 0.05
    evict(victim)
    storage.verify(LocalFolder(tmp_path), 1)
    assert cached_fraction(victim) < 0.05


@pytest.fixture
def no_direct_io(tmp_path: Path) -> Iterator[Path]:
    """A folder on a filesystem that refuses O_DIRECT: a ramfs mounted there (tmpfs accepts it since Linux 6.6)."""
    if os.geteuid() != 0:
        pytest.skip("a filesystem without direct I/O needs a mount (ramfs), and mounting needs root")
    mnt = tmp_path / "ramfs"
    mnt.mkdir()
    made = subprocess.run(["mount", "-t", "ramfs", "ramfs", str(mnt)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a ramfs here: {made.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_a_filesystem_without_direct_io_is_written_and_read_buffered(no_direct_io: Path) -> None:
    with pytest.raises(OSError):  # the condition: this filesystem refuses O_DIRECT
        os.close(os.open(no_direct_io / "probe", os.O_WRONLY | os.O_CREAT | readio.O_DIRECT, 0o644))
    state, path, shards = sharded(no_direct_io)
    loaded = checkpoint.load(LocalFolder(no_direct_io), 1)
    for k, t in state.items():
        assert torch.equal(loaded.state[k], t), k
    flip(path / shards[0], 5)
    with pytest.raises(CheckpointCorrupt, match=shards[0]):
        checkpoint.load(LocalFolder(no_direct_io), 1)


def test_read_into_unaligned_memory_and_digest_agree_with_hashlib(tmp_path: Path) -> None:
    """Memory the device cannot reach directly (not page-aligned) falls back to buffered reads; the digest
    of every size around the chunk and page boundaries is the file's sha256."""
    for size in (0, 1, readio.ALIGN - 1, readio.ALIGN + 1, readio.CHUNK, 2 * readio.CHUNK + 4097):
        data = os.urandom(size)
        path = tmp_path / f"f{size}"
        path.write_bytes(data)
        evict(path)
        expected = hashlib.sha256(data).hexdigest()
        out = bytearray(size + 1)
        assert readio.read_into(path, size, memoryview(out)[1 : size + 1]) == expected, size
        assert out[1:] == data, size
        assert readio.digest(path, size) == expected, size
        fresh = readio.fresh(size)
        assert readio.read_into(path, size, fresh) == expected and fresh.tobytes() == data, size


def test_calls_at_once_end_before_the_first_error_in_order_is_raised() -> None:
    release = threading.Event()
    ended: list[int] = []

    def first() -> int:
        release.set()
        raise ValueError("first")

    def waits() -> int:
        release.wait()
        ended.append(1)
        raise KeyError("second")

    with pytest.raises(ValueError, match="first"):
        lanes.at_once([first, waits], width=2)
    assert ended == [1]  # the other call had ended before the error came out
    with pytest.raises(KeyError):
        lanes.at_once([lambda: 0, waits, first], width=3)
    assert lanes.at_once([partial(pow, i, 2) for i in range(7)], width=3) == [i * i for i in range(7)]


def test_borrowed_lanes_are_distinct_while_held() -> None:
    with lanes.borrowed("test") as a, lanes.borrowed("test") as b:
        assert a is not b
        held: Any = a
    with lanes.borrowed("test") as c:
        assert c is held  # given back, then lent again


def _sysfs(root: Path, order: int | None, devices: dict[str, tuple[int, str, bool]]) -> str:
    """A sysfs tree with page reporting at `order` (None: not in the kernel) and virtio devices
    name -> (device id, negotiated feature bits, bound to a driver), as Linux lays them out."""
    if order is not None:
        params = root / "module/page_reporting/parameters"
        params.mkdir(parents=True)
        (params / "page_reporting_order").write_text(f"{order}\n")
    for name, (kind, features, bound) in devices.items():
        dev = root / "bus/virtio/devices" / name
        dev.mkdir(parents=True)
        (dev / "device").write_text(f"0x{kind:04x}\n")
        (dev / "features").write_text(features + "0" * (64 - len(features)) + "\n")
        if bound:
            (dev / "driver").mkdir()
    return str(root)


@pytest.mark.parametrize(
    ("order", "devices", "pay"),
    [
        (None, {}, True),  # a kernel without page reporting
        (9, {}, True),  # reporting built in, no balloon to report to
        (9, {"virtio0": (5, "011001010", True)}, False),  # a balloon that reports free pages
        (9, {"virtio0": (5, "01100001", True)}, True),  # a balloon without free page reporting
        (9, {"virtio0": (5, "011001010", False)}, True),  # its driver not bound: nothing is reported
        (9, {"virtio1": (2, "001001000", True)}, True),  # bit 5 of a block device means something else
        (10, {"virtio0": (5, "011001010", True)}, True),  # only blocks larger than a huge page are reported
    ],
)
def test_huge_pages_are_advised_unless_free_ones_go_back_to_the_hypervisor(
    tmp_path: Path, order: int | None, devices: dict[str, tuple[int, str, bool]], pay: bool
) -> None:
    assert readio.huge_pages_pay.__wrapped__(_sysfs(tmp_path, order, devices)) is pay
