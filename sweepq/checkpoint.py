"""Checkpoints: the commit protocol, verification with fallback, retention, async writes.

A checkpoint is a folder `checkpoints/step-<step>/` with three files:
  tensors.safetensors   every tensor of the state (weights, moments, RNG, ...)
  state.json            the state's structure and plain values
  manifest.json         step, epoch, metrics, and the size and sha256 of both files

Three states: *writing* (a hidden `.writing-*` folder; readers never look at
it), *committed* (renamed to `step-<step>`), *superseded* (renamed to a hidden
`.trash-*` folder, then deleted). The commit is the rename, done after every
file and the folder itself were fsynced and followed by an fsync of the parent,
so a crash at any instant leaves the previous committed checkpoint intact and
at most a hidden folder to clean up. Only the holder of the cell's lock writes,
restores, cleans or deletes.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from . import serialize
from .atomic import fsync_dir
from .layout import MANIFEST_NAME, STEP_DIR, CellPaths

FORMAT = "sweepq.checkpoint/1"
TENSORS = "tensors.safetensors"
STATE = "state.json"
WRITING_PREFIX = ".writing-"
TRASH_PREFIX = ".trash-"
CORRUPT_PREFIX = ".corrupt-"
CHUNK = 8 << 20

# Test-only fault injection: SWEEPQ_CRASH_AT=<point> kills this process with
# SIGKILL at that point of a checkpoint write (see crash_point).
_CRASH_AT = os.environ.get("SWEEPQ_CRASH_AT")
_CRASH_AFTER = int(os.environ.get("SWEEPQ_CRASH_AFTER_COMMITS", "0"))
_commits_seen = 0

_hasher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sweepq-hash")


def crash_point(name: str) -> None:
    if _CRASH_AT == name and _commits_seen >= _CRASH_AFTER:
        os.kill(os.getpid(), signal.SIGKILL)


class CheckpointCorrupt(Exception):
    """A committed checkpoint failed verification; the reader falls back."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path.name}: {why}")
        self.path, self.why = path, why


@dataclass(frozen=True)
class Committed:
    step: int
    path: Path
    manifest_sha256: str
    size_bytes: int
    epoch: float | None
    metrics: dict[str, Any]
    created_at: str


@dataclass(frozen=True)
class Loaded:
    step: int
    path: Path
    manifest: dict[str, Any]
    manifest_sha256: str
    state: dict[str, Any]  # the user's entries, plain (state_dicts, values)
    rng: dict[str, Any] | None


# -- writing ------------------------------------------------------------------------


def _write_file(path: Path, parts: list[memoryview]) -> tuple[str, int]:
    """Write parts, then fsync while the sha256 is computed on the other core.

    hashlib and fsync both release the GIL: hashing costs nothing extra as long
    as it is faster than the disk.
    """
    size = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        half = sum(len(p) for p in parts) // 2
        for p in parts:
            for start in range(0, len(p), CHUNK):
                view = p[start : start + CHUNK]
                while len(view):
                    n = os.write(fd, view)
                    view = view[n:]
                    size += n
                if _CRASH_AT and size >= half:
                    crash_point("mid_file")

        def digest() -> str:
            h = hashlib.sha256()
            for p in parts:
                h.update(p)
            return h.hexdigest()

        fut = _hasher.submit(digest)
        os.fsync(fd)
        sha = fut.result()
    finally:
        os.close(fd)
    return sha, size


def write_checkpoint(
    checkpoints_dir: Path,
    step: int,
    skeleton: Any,
    tensors: dict[str, torch.Tensor],
    meta: dict[str, Any],
) -> Committed:
    """Commit one checkpoint (tensors already on the CPU and owned by the caller)."""
    global _commits_seen
    checkpoints_dir.mkdir(parents=True, exist_ok=True)
    final = checkpoints_dir / f"step-{step}"
    tmp = checkpoints_dir / f"{WRITING_PREFIX}step-{step}-{os.getpid()}-{secrets.token_hex(4)}"
    tmp.mkdir()
    crash_point("before_write")
    files: dict[str, dict[str, Any]] = {}
    sha, size = _write_file(tmp / TENSORS, list(serialize.safetensors_parts(tensors)))
    files[TENSORS] = {"sha256": sha, "size": size}
    crash_point("after_tensors")
    state_bytes = json.dumps(skeleton, separators=(",", ":"), allow_nan=True).encode()
    sha, size = _write_file(tmp / STATE, [memoryview(state_bytes)])
    files[STATE] = {"sha256": sha, "size": size}
    crash_point("after_state")
    created = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
    manifest = {"format": FORMAT, "step": step, "created_at": created, "files": files, **meta}
    manifest_bytes = (json.dumps(manifest, indent=1, sort_keys=True, allow_nan=True) + "\n").encode()
    msha, _ = _write_file(tmp / MANIFEST_NAME, [memoryview(manifest_bytes)])
    crash_point("after_manifest")
    fsync_dir(tmp)
    crash_point("before_rename")
    if final.exists():
        # The same step committed earlier (a repeated request): keep the first one.
        shutil.rmtree(tmp, ignore_errors=True)
        m = read_manifest(final)
        return _committed(final, m, hashlib.sha256((final / MANIFEST_NAME).read_bytes()).hexdigest())
    os.rename(tmp, final)
    crash_point("after_rename")
    fsync_dir(checkpoints_dir)
    _commits_seen += 1
    crash_point("after_commit")
    return _committed(final, manifest, msha)


def _committed(path: Path, manifest: dict[str, Any], msha: str) -> Committed:
    return Committed(
        step=int(manifest["step"]),
        path=path,
        manifest_sha256=msha,
        size_bytes=sum(int(f["size"]) for f in manifest["files"].values()),
        epoch=manifest.get("epoch"),
        metrics=manifest.get("metrics") or {},
        created_at=manifest.get("created_at", ""),
    )


# -- reading ------------------------------------------------------------------------


def read_manifest(step_dir: Path) -> dict[str, Any]:
    try:
        m = json.loads((step_dir / MANIFEST_NAME).read_bytes())
    except (OSError, ValueError) as e:
        raise CheckpointCorrupt(step_dir, f"manifest unreadable ({e.__class__.__name__}: {e})") from e
    if not isinstance(m, dict) or m.get("format") != FORMAT or not isinstance(m.get("files"), dict):
        raise CheckpointCorrupt(step_dir, "manifest is not a sweepq checkpoint manifest")
    return m


def _read_verified(step_dir: Path, name: str, entry: dict[str, Any]) -> bytes:
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
        _read_verified(step_dir, name, entry)
    return m


def load(step_dir: Path) -> Loaded:
    """Verify and load one checkpoint; raises CheckpointCorrupt."""
    m = read_manifest(step_dir)
    msha = hashlib.sha256((step_dir / MANIFEST_NAME).read_bytes()).hexdigest()
    for needed in (TENSORS, STATE):
        if needed not in m["files"]:
            raise CheckpointCorrupt(step_dir, f"manifest lists no {needed}")
    state_bytes = _read_verified(step_dir, STATE, m["files"][STATE])
    tensor_bytes = _read_verified(step_dir, TENSORS, m["files"][TENSORS])
    try:
        tensors = serialize.load_safetensors(tensor_bytes)
        skeleton = json.loads(state_bytes)
        plain = serialize.unflatten(skeleton, tensors)
    except Exception as e:  # a verified file that still does not parse: written by a bug
        raise CheckpointCorrupt(step_dir, f"verified but unreadable ({e.__class__.__name__}: {e})") from e
    rng = plain.pop(serialize.RNG_KEY, None)
    return Loaded(int(m["step"]), step_dir, m, msha, plain, rng)


def load_newest(
    cell: CellPaths,
    max_step: int | None = None,
    on_corrupt: Callable[[int, str, Path], None] | None = None,
) -> Loaded | None:
    """The newest committed checkpoint that verifies (at most `max_step`); None: start fresh.

    A checkpoint that fails is moved aside (so it is never tried again) and
    reported through `on_corrupt(step, why, new_path)`.
    """
    for step in cell.committed_steps():
        if max_step is not None and step > max_step:
            continue
        path = cell.checkpoint(step)
        try:
            return load(path)
        except CheckpointCorrupt as e:
            moved = quarantine(path)
            if on_corrupt is not None:
                on_corrupt(step, e.why, moved)
    return None


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


# -- cleaning and retention ---------------------------------------------------------------


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


# -- the asynchronous path ------------------------------------------------------------------


class Snapshotter:
    """Copies tensors into reusable CPU buffers (pinned for GPU tensors).

    Reusing buffers matters: fresh allocations cost several times a copy into
    memory that is already mapped.
    """

    def __init__(self) -> None:
        self.buffers: dict[str, torch.Tensor] = {}

    def take(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        on_gpu = False
        for name, t in tensors.items():
            t = t.detach()
            buf = self.buffers.get(name)
            if buf is None or buf.shape != t.shape or buf.dtype != t.dtype:
                buf = torch.empty(t.shape, dtype=t.dtype, pin_memory=t.is_cuda)
                self.buffers[name] = buf
            buf.copy_(t, non_blocking=t.is_cuda)
            on_gpu = on_gpu or t.is_cuda
            out[name] = buf
        if on_gpu:
            torch.cuda.synchronize()
        for stale in set(self.buffers) - set(out):
            del self.buffers[stale]
        return out


class AsyncWriter:
    """One background write at a time; errors surface at the next submit or flush."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.last_seconds = 0.0

    def submit(self, job: Callable[[], None]) -> None:
        self.flush()

        def run() -> None:
            start = time.perf_counter()
            try:
                job()
            except BaseException as e:  # noqa: BLE001 - re-raised in the training thread
                self._error = e
            finally:
                self.last_seconds = time.perf_counter() - start

        self._thread = threading.Thread(target=run, name="sweepq-checkpoint", daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def flush(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            err, self._error = self._error, None
            raise err
