"""The checkpoint's tensor files laid out in page-aligned memory: the snapshot buffers are views of them.

When the buffers already sit where the file puts them, writing the file is
one stream from page-aligned memory at page-aligned offsets, which is what
direct I/O needs (diskio.py): the disk reads the buffers themselves, nothing
is copied into the page cache, and the CPU stays free to hash while the disk
writes.

The header goes first and is padded with spaces (the format allows it) to a
whole number of pages, so that the data starts page-aligned in the file too.
It keeps room for tensors added at write time (the RNG states, captured on the
training thread but encoded on the writer thread): they are appended after the
image's data, as ordinary small parts.

A large state is split into several files (shards) whose sha256 run on
separate cores: one core hashes about 1.2 GB/s, slower than a disk written
with direct I/O here (2 GB/s), so a single file's hash, which cannot be
split, would set the pace.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from sweepq.checkpoint import serialize
from sweepq.checkpoint.diskio import ALIGN
from sweepq.checkpoint.manifest import TENSORS, shard_name
from sweepq.checkpoint.serialize import TensorSpec
from sweepq.host.procs import usable_cores

HASH_THREADS_MAX = 8  # shards of a large state's tensors hashed at once, at most
HEADER_ROOM = 4096  # header bytes kept for the tensors added at write time
SHARD_MIN = 4 << 20  # bytes per shard, at least: below this another file (its fsync) costs more than it saves


def round_up(n: int, to: int = ALIGN) -> int:
    return -(-n // to) * to


class Image:
    """One file's bytes, page-aligned, for a fixed set of tensors (name, shape, dtype)."""

    def __init__(self, specs: tuple[TensorSpec, ...], pin: bool = False) -> None:
        entries, order, data_len = serialize.header_entries(specs)
        fixed = len(serialize.header_bytes(entries))
        self.header_len = round_up(fixed + HEADER_ROOM)
        self.data_len = data_len
        size = self.header_len + data_len
        raw = torch.empty(size + ALIGN, dtype=torch.uint8, pin_memory=pin)
        start = -raw.data_ptr() % ALIGN
        self.bytes = raw[start : start + size]
        base = self.header_len
        self.views: dict[str, torch.Tensor] = {}
        for name, shape, dtype in specs:
            lo, hi = entries[name]["data_offsets"]
            flat = self.bytes[base + lo : base + hi].view(dtype)
            self.views[name] = flat.view(shape)
        self.order = order
        self._entries = entries

    def parts(self, tensors: dict[str, torch.Tensor]) -> list[memoryview] | None:
        """The file of `tensors`, if they are this image's views plus extras; else None.

        The extras (small tensors added at write time) follow the image's data.
        None also when their header entries do not fit the room kept for them.
        Writes the header into the image: call it from the one thread that
        writes the file.
        """
        views = self.views
        if any(tensors.get(name) is not view for name, view in views.items()):
            return None
        extras = {name: t for name, t in tensors.items() if name not in views}
        more, extra_order, _ = serialize.header_entries(
            ((n, t.shape, t.dtype) for n, t in extras.items()), offset=self.data_len
        )
        try:
            header = serialize.header_bytes({**self._entries, **more}, self.header_len)
        except ValueError:
            return None
        self.bytes[: self.header_len].copy_(torch.frombuffer(bytearray(header), dtype=torch.uint8))
        return [self.bytes.numpy().data.cast("B"), *(serialize.tensor_bytes(extras[n]) for n in extra_order)]


class Files:
    """The tensor files of one checkpoint: one Image, or shards of about equal size hashed in parallel."""

    def __init__(self, specs: tuple[TensorSpec, ...], pin: bool = False, shards: int | None = None) -> None:
        self.specs = specs
        self.pinned = pin
        if shards is None:
            shards = shard_count(sum(math.prod(shape) * dtype.itemsize for _, shape, dtype in specs))
        groups = split(specs, shards)
        names = [TENSORS] if len(groups) == 1 else [shard_name(i, len(groups)) for i in range(len(groups))]
        self.images = [(name, Image(group, pin)) for name, group in zip(names, groups, strict=True)]
        self.views = {n: v for _, image in self.images for n, v in image.views.items()}

    def parts(self, tensors: dict[str, torch.Tensor]) -> dict[str, list[memoryview]] | None:
        """File name -> parts for `tensors` (the views plus small extras, which go to the last file).

        None if `tensors` are not these views, or the extras do not fit.
        """
        extras = {n: t for n, t in tensors.items() if n not in self.views}
        out: dict[str, list[memoryview]] = {}
        last = len(self.images) - 1
        for i, (name, image) in enumerate(self.images):
            mine: dict[str, Any] = {n: tensors.get(n) for n in image.views}
            if i == last:
                mine.update(extras)
            parts = image.parts(mine)
            if parts is None:
                return None
            out[name] = parts
        return out


def shard_count(nbytes: int) -> int:
    return max(1, min(usable_cores(HASH_THREADS_MAX), nbytes // SHARD_MIN))


def split(specs: tuple[TensorSpec, ...], k: int) -> list[tuple[TensorSpec, ...]]:
    """Tensors over at most `k` groups of about equal bytes: each, largest first, to the lightest group."""
    if k <= 1:
        return [specs]
    loads = [0] * k
    members: list[list[int]] = [[] for _ in range(k)]
    sizes = [math.prod(shape) * dtype.itemsize for _, shape, dtype in specs]
    for i in sorted(range(len(specs)), key=lambda i: -sizes[i]):
        g = loads.index(min(loads))
        members[g].append(i)
        loads[g] += sizes[i]
    return [tuple(specs[i] for i in sorted(m)) for m in members if m]
