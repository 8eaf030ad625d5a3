"""Checkpoints of training state: the commit protocol, verified loading, asynchronous writes.

The format and its verification live in manifest.py (readable without torch).
The commit is the rename of a fully written, fsynced folder, followed by an
fsync of the parent: a crash at any instant leaves the previous committed
checkpoint intact and at most a hidden folder to clean up.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
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
from .layout import MANIFEST_NAME, CellPaths
from .manifest import (
    CRASH_AT,
    FORMAT,
    STATE,
    TENSORS,
    WRITING_PREFIX,
    CheckpointCorrupt,
    count_commit,
    crash_point,
    quarantine,
    read_manifest,
    read_verified,
)

CHUNK = 8 << 20
_hasher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sweepq-hash")


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
                if CRASH_AT and size >= half:
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
    count_commit()
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


def load(step_dir: Path) -> Loaded:
    """Verify and load one checkpoint; raises CheckpointCorrupt."""
    m = read_manifest(step_dir)
    msha = hashlib.sha256((step_dir / MANIFEST_NAME).read_bytes()).hexdigest()
    for needed in (TENSORS, STATE):
        if needed not in m["files"]:
            raise CheckpointCorrupt(step_dir, f"manifest lists no {needed}")
    state_bytes = read_verified(step_dir, STATE, m["files"][STATE])
    tensor_bytes = read_verified(step_dir, TENSORS, m["files"][TENSORS])
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
