"""The on-disk checkpoint format, readable without torch: file names, manifests, format versions.

A checkpoint is a folder `checkpoints/step-<step>/` with three files:
  tensors.safetensors   every tensor of the state (weights, moments, RNG, ...)
  state.json            the state's structure and plain values
  manifest.json         format, step, epoch, metrics, and the size and sha256 of the other files
A large state's tensors are split instead over `tensors-00001-of-0000N.safetensors`
... (each a complete safetensors file), hashed in parallel (image.py).

Three states: *writing* (a hidden `.writing-*` folder; readers never look at
it), *committed* (renamed to `step-<step>`), *superseded* (renamed to a hidden
`.trash-*` folder, then deleted in the background). A committed checkpoint that fails
verification is renamed `.corrupt-*` and kept for inspection. Only the holder
of the cell's lock writes, restores, cleans or deletes. Where the folders live
and how they are written and read is storage.py's business; this module only
says what the bytes of a manifest mean.

Format versions. `format` is "sweepq.checkpoint/<N>". This sweepq writes
VERSION and reads every version in READERS. A manifest of a version above
those is a checkpoint from a newer sweepq: CheckpointTooNew, never
CheckpointCorrupt, because a corrupt checkpoint is moved aside and skipped,
and skipping a newer one would silently resume from an older step (or from
0) and later delete it. A format bump adds the new version's reader to
READERS and keeps the old ones, translating an old manifest into the current
shape, so that old checkpoints keep loading.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sweepq.errors import SweepqError

FORMAT_PREFIX = "sweepq.checkpoint/"
VERSION = 1
FORMAT = f"{FORMAT_PREFIX}{VERSION}"
TENSORS = "tensors.safetensors"
STATE = "state.json"
_FORMAT = re.compile(re.escape(FORMAT_PREFIX) + r"([1-9][0-9]*)")
_SHARD = re.compile(r"tensors-(\d{5})-of-(\d{5})\.safetensors")


class CheckpointCorrupt(Exception):
    """A committed checkpoint failed verification; the reader falls back."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path.name}: {why}")
        self.path, self.why = path, why


class CheckpointTooNew(SweepqError):
    """A checkpoint in a format newer than this sweepq reads: not corrupt, and never skipped or moved."""

    def __init__(self, path: Path, version: int, readable: int) -> None:
        super().__init__(
            f"{path}: written by a newer sweepq (format {version}; this sweepq reads formats up to {readable}): "
            "upgrade sweepq"
        )
        self.path, self.version, self.readable = path, version, readable


def shard_name(index: int, count: int) -> str:
    return f"tensors-{index + 1:05d}-of-{count:05d}.safetensors"


def tensor_files(files: dict[str, Any]) -> list[str] | None:
    """The tensor files a manifest lists, in order: TENSORS alone or a complete set of shards; else None."""
    shards = [name for name in files if _SHARD.fullmatch(name)]
    if TENSORS in files:
        return None if shards else [TENSORS]
    if not shards:
        return None
    count = int(_SHARD.fullmatch(shards[0]).group(2))  # type: ignore[union-attr]
    expected = [shard_name(i, count) for i in range(count)]
    return expected if sorted(shards) == expected else None


# -- reading a manifest, by format version ------------------------------------------

Reader = Callable[[Path, dict[str, Any]], dict[str, Any]]


def _read_v1(where: Path, m: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(m.get("files"), dict):
        raise CheckpointCorrupt(where, "manifest is not a sweepq checkpoint manifest")
    return m


# version -> a function that checks a manifest of that version and returns it
# in the current shape (what commit.py, retention and the reaper read). The
# newest entry is VERSION; older ones stay for as long as their checkpoints
# may be around.
READERS: dict[int, Reader] = {1: _read_v1}


def format_version(fmt: Any) -> int | None:
    """N of "sweepq.checkpoint/N"; None when `fmt` is no sweepq checkpoint format."""
    found = _FORMAT.fullmatch(fmt) if isinstance(fmt, str) else None
    return int(found.group(1)) if found else None


def parse(raw: bytes, where: Path) -> dict[str, Any]:
    """A manifest's bytes as the current format's manifest; raises CheckpointCorrupt or CheckpointTooNew.

    `where` names the checkpoint in errors.
    """
    try:
        m = json.loads(raw)
    except ValueError as e:
        raise CheckpointCorrupt(where, f"manifest unreadable ({e.__class__.__name__}: {e})") from e
    version = format_version(m.get("format")) if isinstance(m, dict) else None
    if version is None:
        raise CheckpointCorrupt(where, "manifest is not a sweepq checkpoint manifest")
    newest = max(READERS)
    if version > newest:
        raise CheckpointTooNew(where, version, newest)
    reader = READERS.get(version)
    if reader is None:  # an old version no longer read: as unusable as a damaged one
        raise CheckpointCorrupt(where, f"manifest format {version} is no longer read by this sweepq")
    return reader(where, m)
