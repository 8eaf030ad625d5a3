"""The on-disk checkpoint format, readable without torch: manifests, verification, retention.

A checkpoint is a folder `checkpoints/step-<step>/` with three files:
  tensors.safetensors   every tensor of the state (weights, moments, RNG, ...)
  state.json            the state's structure and plain values
  manifest.json         step, epoch, metrics, and the size and sha256 of both files

Three states: *writing* (a hidden `.writing-*` folder; readers never look at
it), *committed* (renamed to `step-<step>`), *superseded* (renamed to a hidden
`.trash-*` folder, then deleted). A committed checkpoint that fails
verification is renamed `.corrupt-*` and kept for inspection. Only the holder
of the cell's lock writes, restores, cleans or deletes.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import signal
from pathlib import Path
from typing import Any

from .atomic import fsync_dir
from .layout import MANIFEST_NAME, CellPaths

FORMAT = "sweepq.checkpoint/1"
TENSORS = "tensors.safetensors"
STATE = "state.json"
WRITING_PREFIX = ".writing-"
TRASH_PREFIX = ".trash-"
CORRUPT_PREFIX = ".corrupt-"

# Test-only fault injection: SWEEPQ_CRASH_AT=<point> kills this process with
# SIGKILL at that point of a checkpoint write or deletion, once it committed
# SWEEPQ_CRASH_AFTER_COMMITS checkpoints.
CRASH_AT = os.environ.get("SWEEPQ_CRASH_AT")
_CRASH_AFTER = int(os.environ.get("SWEEPQ_CRASH_AFTER_COMMITS", "0"))
_commits_seen = 0


def crash_point(name: str) -> None:
    if CRASH_AT == name and _commits_seen >= _CRASH_AFTER:
        os.kill(os.getpid(), signal.SIGKILL)


def count_commit() -> None:
    global _commits_seen
    _commits_seen += 1


class CheckpointCorrupt(Exception):
    """A committed checkpoint failed verification; the reader falls back."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path.name}: {why}")
        self.path, self.why = path, why


def read_manifest(step_dir: Path) -> dict[str, Any]:
    try:
        m = json.loads((step_dir / MANIFEST_NAME).read_bytes())
    except (OSError, ValueError) as e:
        raise CheckpointCorrupt(step_dir, f"manifest unreadable ({e.__class__.__name__}: {e})") from e
    if not isinstance(m, dict) or m.get("format") != FORMAT or not isinstance(m.get("files"), dict):
        raise CheckpointCorrupt(step_dir, "manifest is not a sweepq checkpoint manifest")
    return m


def read_verified(step_dir: Path, name: str, entry: dict[str, Any]) -> bytes:
    try:
        data = (step_dir / name).read_bytes()
    except OSError as e:
        raise CheckpointCorrupt(step_dir, f"{name} unreadable ({e})") from e
    if len(data) != int(entry["size"]):
        raise CheckpointCorrupt(step_dir, f"{name} has {len(data)} bytes, manifest says {entry['size']}")
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise CheckpointCorrupt(step_dir, f"{name} sha256 does not match the manifest")
    return data


def verify(step_dir: Path) -> dict[str, Any]:
    """Check every file against the manifest (sizes and sha256); return the manifest."""
    m = read_manifest(step_dir)
    for name, entry in m["files"].items():
        read_verified(step_dir, name, entry)
    return m


def quarantine(step_dir: Path) -> Path:
    target = step_dir.with_name(f"{CORRUPT_PREFIX}{step_dir.name}-{secrets.token_hex(4)}")
    os.rename(step_dir, target)
    fsync_dir(step_dir.parent)
    return target


def committed_manifests(cell: CellPaths) -> dict[int, dict[str, Any]]:
    """step -> manifest for every committed checkpoint whose manifest reads (no hashing)."""
    out = {}
    for step in cell.committed_steps():
        try:
            out[step] = read_manifest(cell.checkpoint(step))
        except CheckpointCorrupt:
            continue
    return out


def clean_partial(checkpoints_dir: Path) -> list[str]:
    """Remove what crashed writes and deletions left behind (lock holder only)."""
    removed = []
    if not checkpoints_dir.is_dir():
        return removed
    for entry in checkpoints_dir.iterdir():
        if entry.name.startswith((WRITING_PREFIX, TRASH_PREFIX)):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
    return removed


def delete(step_dir: Path) -> None:
    """Supersede: an atomic rename out of the committed namespace, then the slow delete."""
    trash = step_dir.with_name(f"{TRASH_PREFIX}{step_dir.name}-{secrets.token_hex(4)}")
    os.rename(step_dir, trash)
    fsync_dir(step_dir.parent)
    crash_point("mid_delete")
    shutil.rmtree(trash, ignore_errors=True)


def to_keep(
    manifests: dict[int, dict[str, Any]],
    keep_last: int,
    metric: tuple[str, str] | None,
    protect: set[int],
) -> set[int]:
    """Steps that retention keeps: the newest `keep_last`, the best by metric, `protect`."""
    steps = sorted(manifests, reverse=True)
    keep = set(steps[: max(1, keep_last)]) | (protect & set(steps))
    if metric is not None:
        name, goal = metric
        scored = [
            (float(m["metrics"][name]), s)
            for s, m in manifests.items()
            if isinstance(m.get("metrics"), dict) and _finite(m["metrics"].get(name))
        ]
        if scored:
            best = max(scored) if goal == "max" else min(scored, key=lambda x: (x[0], -x[1]))
            keep.add(best[1])
    return keep


def _finite(v: Any) -> bool:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return False
    return f == f and f not in (float("inf"), float("-inf"))
