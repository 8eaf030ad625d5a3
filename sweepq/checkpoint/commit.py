"""Checkpoints of training state: the commit protocol, verified loading, asynchronous writes.

The format lives in manifest.py (readable without torch), where and how the
files are kept in storage.py. A checkpoint is staged, its files written and
hashed, then committed with its manifest written last: a crash at any instant
leaves the previous committed checkpoint intact and at most a partial stage
to clean up.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import torch

from sweepq.checkpoint import readio, serialize
from sweepq.checkpoint.crashpoints import crash_point
from sweepq.checkpoint.deletion import wait_deleted
from sweepq.checkpoint.image import Files
from sweepq.checkpoint.lanes import at_once
from sweepq.checkpoint.manifest import FORMAT, STATE, TENSORS, CheckpointCorrupt, OtherKind, tensor_files
from sweepq.checkpoint.sharing import Sharing, background
from sweepq.checkpoint.storage import CheckpointStorage

# -- writing ------------------------------------------------------------------------


@dataclass(frozen=True)
class Committed:
    """A checkpoint just committed, as its manifest describes it."""

    step: int
    path: Path
    manifest_sha256: str
    size_bytes: int
    epoch: float | None
    metrics: dict[str, Any]
    created_at: str


def write_checkpoint(
    storage: CheckpointStorage,
    step: int,
    skeleton: Any,
    tensors: dict[str, torch.Tensor],
    meta: dict[str, Any],
    image: Files | None = None,
) -> Committed:
    """Commit one checkpoint (tensors already on the CPU and owned by the caller).

    When the tensors are `image`'s views (plus small extras), the tensor files
    are written from the image itself, with direct I/O (diskio.py).
    """
    staged = storage.stage(step)
    crash_point("before_write")
    parts = image.parts(tensors) if image is not None else None
    if parts is None:
        parts = {TENSORS: list(serialize.safetensors_parts(tensors))}
    # state.json goes with the tensor files: its write and fsync end while theirs run, not after them.
    state_bytes = json.dumps(skeleton, separators=(",", ":"), allow_nan=True).encode()
    written = staged.write({**parts, STATE: [memoryview(state_bytes)]})
    crash_point("after_tensors")
    crash_point("after_state")
    files = {name: {"sha256": sha, "size": size} for name, (sha, size) in written.items()}
    created = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    manifest = {"format": FORMAT, "step": step, "created_at": created, "files": files, **meta}
    manifest_bytes = (json.dumps(manifest, indent=1, sort_keys=True, allow_nan=True) + "\n").encode()
    if not staged.commit(manifest_bytes):
        existing, msha = storage.read_manifest(step)
        return committed_from(storage.location(step), existing, msha)
    return committed_from(storage.location(step), manifest, hashlib.sha256(manifest_bytes).hexdigest())


def committed_from(path: Path, manifest: dict[str, Any], msha: str) -> Committed:
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


@dataclass(frozen=True)
class Loaded:
    """A checkpoint verified and read back."""

    step: int
    path: Path
    manifest: dict[str, Any]
    manifest_sha256: str
    state: dict[str, Any]  # the user's entries, plain (state_dicts, values)
    rng: dict[str, Any] | None


def load(storage: CheckpointStorage, step: int) -> Loaded:
    """Verify and load one checkpoint; raises CheckpointCorrupt (or CheckpointTooNew).

    The files are read at once, each into one buffer of fresh page-aligned
    memory (direct I/O) while it is hashed chunk by chunk on a core of its own;
    the tensors are views into those buffers, made only once every byte of
    every file matched the manifest.
    """
    m, msha = storage.read_manifest(step)
    where = storage.location(step)
    if m.get("kind") == "files":
        raise OtherKind(where, "files (run.commit_files)", "a training state (run.restore)")
    names = tensor_files(m["files"])
    if names is None:
        raise CheckpointCorrupt(where, "manifest lists no complete set of tensor files")
    if STATE not in m["files"]:
        raise CheckpointCorrupt(where, f"manifest lists no {STATE}")
    files = m["files"]
    reads: list[Callable[[], Any]] = [partial(storage.read, step, STATE, files[STATE])]
    reads += [partial(storage.read_into, step, name, files[name], readio.fresh) for name in names]
    state_bytes, *raws = at_once(reads)
    try:
        tensors: dict[str, torch.Tensor] = {}
        for raw in raws:
            more = serialize.load_safetensors(raw)
            if tensors.keys() & more.keys():
                raise ValueError(f"tensors {sorted(tensors.keys() & more.keys())[:3]} are in two files")
            tensors.update(more)
        skeleton = json.loads(state_bytes)
        plain = serialize.unflatten(skeleton, tensors)
        # The state is named entries, the RNG states among them one more: anything else is no state.
        if not isinstance(plain, dict):
            raise ValueError(f"{STATE} holds no named entries (found {type(plain).__name__})")
        rng = plain.pop(serialize.RNG_KEY, None)
        if rng is not None and not isinstance(rng, dict):
            raise ValueError(f"{STATE} holds no named RNG states (found {type(rng).__name__})")
    except Exception as e:  # a verified file that still does not parse: written by a bug
        raise CheckpointCorrupt(where, f"verified but unreadable ({e.__class__.__name__}: {e})") from e
    return Loaded(int(m["step"]), where, m, msha, plain, rng)


def load_newest(
    storage: CheckpointStorage,
    max_step: int | None = None,
    on_corrupt: Callable[[int, str, Path], None] | None = None,
) -> Loaded | None:
    """The newest committed checkpoint that verifies (at most `max_step`); None: start fresh.

    A checkpoint that fails is moved aside (so it is never tried again) and
    reported through `on_corrupt(step, why, new_path)`. One written by a newer
    sweepq stops the search (CheckpointTooNew): falling back past it would
    train from an older step and then supersede it.
    """
    for step in storage.steps():
        if max_step is not None and step > max_step:
            continue
        try:
            return load(storage, step)
        except CheckpointCorrupt as e:
            moved = storage.quarantine(step)
            if on_corrupt is not None:
                on_corrupt(step, e.why, moved)
    return None


# -- the asynchronous path ------------------------------------------------------------------


class _Thread:
    """Runs one call at a time on a thread that stays up between calls (for IDLE_EXIT seconds).

    Starting a thread and handing it the GIL costs more than the rest of a small
    checkpoint's pause in the training thread, so the thread is kept.
    """

    IDLE_EXIT = 120.0

    def __init__(self, name: str) -> None:
        self.name = name
        self._reset()

    def _reset(self) -> None:
        self._cv = threading.Condition(threading.Lock())
        self._job: Callable[[], None] | None = None
        self._running = False
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self.error: BaseException | None = None
        self.seconds = 0.0

    @property
    def busy(self) -> bool:
        return self._running

    def submit(self, job: Callable[[], None]) -> None:
        """Start `job` (the previous one must have ended: see wait)."""
        if self._pid != os.getpid():  # a forked child: the parent's thread is not here
            self._reset()
        with self._cv:
            self._job, self._running = job, True
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
                self._thread.start()
            else:
                self._cv.notify_all()

    def wait(self) -> None:
        if self._running:
            with self._cv:
                while self._running:
                    self._cv.wait()

    def _serve(self) -> None:
        while True:
            with self._cv:
                while self._job is None:
                    if not self._cv.wait(timeout=self.IDLE_EXIT) and self._job is None:
                        self._thread = None  # under the lock: the next submit starts a new one
                        return
                job, self._job = self._job, None
            start = time.perf_counter()
            try:
                job()
            except BaseException as e:
                self.error = e
            finally:
                job = None  # type: ignore[assignment]  # drop what it holds (snapshot buffers)
                self.seconds = time.perf_counter() - start
                with self._cv:
                    self._running = False
                    self._cv.notify_all()


class AsyncWriter:
    """One background write at a time; errors surface at the next submit or flush.

    A write hashes on the cores torch's threads leave free while the loop
    trains beside it, and on every core once somebody waits for it (sharing.py).
    """

    def __init__(self) -> None:
        self._thread = _Thread("sweepq-checkpoint")
        self._share = Sharing(busy=0)

    @property
    def last_seconds(self) -> float:
        return self._thread.seconds

    def submit(self, job: Callable[[], None]) -> None:
        self.flush()
        share = self._share = Sharing(busy=torch.get_num_threads())

        def shared() -> None:
            with background(share):
                job()

        self._thread.submit(shared)

    @property
    def busy(self) -> bool:
        return self._thread.busy

    def flush(self) -> None:
        """Wait for the write in flight, and for the retention deletes it started."""
        if self._thread.busy:
            self._share.hurry()
        self._thread.wait()
        wait_deleted()
        if self._thread.error is not None:
            err, self._thread.error = self._thread.error, None
            raise err
