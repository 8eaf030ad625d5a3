"""How checkpoint files reach the disk: direct I/O from the snapshot's image, shards, gentle deletes."""

from __future__ import annotations

import ctypes
import hashlib
import json
import mmap
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from sweepq.checkpoint import commit as checkpoint
from sweepq.checkpoint import deletion, diskio, image, manifest, serialize, snapshot, storage
from sweepq.checkpoint.manifest import CheckpointCorrupt
from sweepq.checkpoint.storage import LocalFolder
from sweepq.layout import CellPaths

_libc = ctypes.CDLL(None, use_errno=True)


def cached_fraction(path: Path) -> float:
    """The share of a file's pages in the page cache (mincore on a read-only mapping)."""
    size = path.stat().st_size
    with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as m:
        pages = -(-size // mmap.PAGESIZE)
        vec = (ctypes.c_ubyte * pages)()
        view = np.frombuffer(m, dtype=np.uint8)
        failed = _libc.mincore(ctypes.c_void_p(view.ctypes.data), ctypes.c_size_t(size), vec) != 0
        del view  # the mapping cannot close while a buffer of it is exported
    if failed:
        pytest.skip(f"mincore failed (errno {ctypes.get_errno()})")
    return sum(b & 1 for b in vec) / pages


def snapshot_of(state: dict[str, Any], shards: int | None = None) -> tuple[Any, dict[str, torch.Tensor], image.Files]:
    """As Run does, with the shard count chosen by the test instead of by the machine's cores."""
    skeleton, tensors = serialize.flatten(state)
    snapper = snapshot.Snapshotter()
    if shards is not None:
        snapper.image = image.Files(tuple((n, t.shape, t.dtype) for n, t in tensors.items()), shards=shards)
    snap = snapper.take(tensors)
    assert snap.image is snapper.image and snap.image is not None
    skeleton, buffers = serialize.with_rng(skeleton, snap.buffers, serialize.capture_rng())
    return skeleton, buffers, snap.image


def test_tensor_file_is_written_around_the_page_cache(tmp_path: Path) -> None:
    """The image's aligned bytes go to the disk directly: after the write, next to none are cached.

    A buffered write of the same bytes leaves them cached (the control that
    shows the measure can tell the two apart on this filesystem).
    """
    state = {"w": torch.randn(4 << 20), "odd": torch.randn(3).to(torch.float16)}
    skeleton, buffers, files = snapshot_of(state, shards=1)
    direct = checkpoint.write_checkpoint(LocalFolder(tmp_path / "direct"), 1, skeleton, buffers, {}, files)
    buffered = checkpoint.write_checkpoint(LocalFolder(tmp_path / "buffered"), 1, skeleton, buffers, {})
    if cached_fraction(buffered.path / manifest.TENSORS) < 0.9:
        pytest.skip("this filesystem does not keep written pages cached: nothing to tell apart")
    assert cached_fraction(direct.path / manifest.TENSORS) < 0.05
    loaded = checkpoint.load(LocalFolder(tmp_path / "direct"), 1)
    assert torch.equal(loaded.state["w"], state["w"]) and torch.equal(loaded.state["odd"], state["odd"])
    # the same tensors either way; only the direct file's header is padded to a page
    by_library = load_file(str(direct.path / manifest.TENSORS))
    assert by_library.keys() == load_file(str(buffered.path / manifest.TENSORS)).keys()
    header = int.from_bytes((direct.path / manifest.TENSORS).read_bytes()[:8], "little")
    assert (8 + header) % image.ALIGN == 0


def test_any_parts_write_the_exact_bytes(tmp_path: Path) -> None:
    """Aligned and unaligned parts in any order: direct where possible, buffered after, the same bytes."""
    page = image.ALIGN
    arena = torch.empty(8 * page + page, dtype=torch.uint8)
    start = -arena.data_ptr() % page
    aligned = arena[start : start + 8 * page].numpy()
    aligned[:] = np.random.default_rng(0).integers(0, 256, aligned.size, dtype=np.uint8)
    cases = {
        "aligned_then_tail": [aligned.data, memoryview(b"tail")],
        "unaligned_first": [memoryview(b"x" * 3), aligned.data],
        "aligned_odd_length": [aligned[: 5 * page + 17].data, aligned[: 2 * page].data],
        "empty_parts": [memoryview(b""), aligned.data, memoryview(b"")],
    }
    for name, parts in cases.items():
        sha, size = diskio.write_files(tmp_path, {name: parts})[name]
        expected = b"".join(bytes(p) for p in parts)
        data = (tmp_path / name).read_bytes()
        assert data == expected and size == len(expected), name
        assert sha == hashlib.sha256(expected).hexdigest(), name


def test_files_written_at_once_are_exact_and_all_finished_when_one_fails(tmp_path: Path) -> None:
    """Several large files go to the disk on their own threads; an error in one surfaces only after the others end."""
    rng = np.random.default_rng(1)
    data = {f"f{i}": rng.integers(0, 256, diskio.DIRECT_MIN * 3 + i * 4097, dtype=np.uint8) for i in range(3)}
    files = {name: [a.data, memoryview(b"tail")] for name, a in data.items()} | {"small": [memoryview(b"s")]}
    expected = {name: b"".join(bytes(p) for p in parts) for name, parts in files.items()}
    (tmp_path / "ok").mkdir()
    done = diskio.write_files(tmp_path / "ok", files)
    for name, body in expected.items():
        assert (tmp_path / "ok" / name).read_bytes() == body, name
        assert done[name] == (hashlib.sha256(body).hexdigest(), len(body)), name
    clash = tmp_path / "clash"
    clash.mkdir()
    (clash / "f0").write_bytes(b"already here")  # files are created exclusively: this write fails
    with pytest.raises(FileExistsError):
        diskio.write_all(clash, files)
    assert (clash / "f0").read_bytes() == b"already here"
    for name in ("f1", "f2", "small"):  # complete at once: no write was still running when the error came out
        assert (clash / name).read_bytes() == expected[name], name


def test_large_state_in_shards_round_trips_and_each_shard_is_verified(tmp_path: Path) -> None:
    torch.manual_seed(0)
    state = {f"layer{i}": torch.randn(50_000 + 1000 * i) for i in range(6)}
    state["tiny"] = torch.arange(3, dtype=torch.int8)
    cell = CellPaths(tmp_path, "1.1")
    checkpoints = storage.for_cell(cell, None)
    older = checkpoint.write_checkpoint(checkpoints, 10, *snapshot_of(state, shards=3)[:2], {}, None)
    skeleton, buffers, files = snapshot_of(state, shards=3)
    newest = checkpoint.write_checkpoint(checkpoints, 20, skeleton, buffers, {}, files)
    m = json.loads((newest.path / "manifest.json").read_text())
    shards = [manifest.shard_name(i, 3) for i in range(3)]
    assert sorted(n for n in m["files"] if n.startswith("tensors")) == shards
    seen: dict[str, torch.Tensor] = {}
    for name in shards:  # each shard a complete safetensors file; together every tensor once
        part = load_file(str(newest.path / name))
        assert not seen.keys() & part.keys()
        seen.update(part)
    assert set(seen) == set(buffers)
    sizes = [m["files"][n]["size"] for n in shards]
    assert max(sizes) < 1.1 * min(sizes)  # balanced by bytes
    loaded = checkpoint.load(checkpoints, 20)
    for k, t in state.items():
        assert torch.equal(loaded.state[k], t), k
    # damage in one shard: that checkpoint is refused, the reader falls back to the older one
    victim = newest.path / shards[1]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 1
    victim.write_bytes(bytes(data))
    with pytest.raises(CheckpointCorrupt, match=shards[1]):
        storage.verify(checkpoints, 20)
    why: list[str] = []
    fallback = checkpoint.load_newest(checkpoints, on_corrupt=lambda step, w, moved: why.append(w))
    assert fallback is not None and fallback.step == older.step and "sha256" in why[0]


def test_a_manifest_without_a_complete_set_of_shards_is_refused(tmp_path: Path) -> None:
    state = {f"t{i}": torch.randn(10_000) for i in range(4)}
    skeleton, buffers, files = snapshot_of(state, shards=2)
    assert files.parts(snapshot_of(state, shards=2)[1]) is None  # tensors that are not its views: not used
    c = checkpoint.write_checkpoint(LocalFolder(tmp_path), 2, skeleton, buffers, {}, files)
    m = json.loads((c.path / "manifest.json").read_text())
    del m["files"][manifest.shard_name(1, 2)]
    (c.path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(CheckpointCorrupt, match="complete set of tensor files"):
        checkpoint.load(LocalFolder(tmp_path), 2)
    assert manifest.tensor_files({manifest.TENSORS: {}, manifest.shard_name(0, 1): {}}) is None
    assert manifest.tensor_files({manifest.shard_name(0, 2): {}, manifest.shard_name(1, 2): {}}) == [
        manifest.shard_name(0, 2),
        manifest.shard_name(1, 2),
    ]


def test_shard_count_follows_size_and_cores() -> None:
    assert image.shard_count(image.SHARD_MIN - 1) == 1
    cores = len(os.sched_getaffinity(0))
    assert image.shard_count(100 * image.SHARD_MIN) == min(cores, image.HASH_THREADS_MAX)
    specs = tuple((f"t{i}", torch.Size([n]), torch.float32) for i, n in enumerate([9, 1, 5, 5, 4]))
    groups = image.split(specs, 2)
    loads = sorted(sum(s[1][0] for s in g) for g in groups)
    assert loads == [11, 13]  # largest first, each to the lighter group
    assert sorted(s for g in groups for s in g) == sorted(specs)
    assert all(list(g) == [s for s in specs if s in g] for g in groups)  # the state's order within each
    assert len(image.split(specs, 9)) == len(specs)  # never an empty file


def test_gentle_delete_removes_large_files_and_tolerates_a_missing_folder(tmp_path: Path) -> None:
    folder = tmp_path / ".trash-step-1"
    folder.mkdir()
    (folder / "big").write_bytes(os.urandom(deletion.DELETE_STEP * 2 + 123))
    (folder / "small").write_bytes(b"x")
    (folder / "sub").mkdir()
    deletion.remove_gently(folder)
    assert not folder.exists()
    deletion.remove_gently(tmp_path / "never-was")  # no error
