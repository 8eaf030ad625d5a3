"""The on-disk checkpoint format, readable without torch: manifests, verification, retention.

A checkpoint is a folder `checkpoints/step-<step>/` with three files:
  tensors.safetensors   every tensor of the state (weights, moments, RNG, ...)
  state.json            the state's structure and plain values
  manifest.json         step, epoch, metrics, and the size and sha256 of the other files
A large state's tensors are split instead over `tensors-00001-of-0000N.safetensors`
... (each a complete safetensors file), hashed in parallel (image.py).

Three states: *writing* (a hidden `.writing-*` folder; readers never look at
it), *committed* (renamed to `step-<step>`), *superseded* (renamed to a hidden
`.trash-*` folder, then deleted in the background). A committed checkpoint that fails
verification is renamed `.corrupt-*` and kept for inspection. Only the holder
of the cell's lock writes, restores, cleans or deletes.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import re
import secrets
import shutil
import signal
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from sweepq.atomic import fsync_dir
from sweepq.layout import MANIFEST_NAME, CellPaths

FORMAT = "sweepq.checkpoint/1"
TENSORS = "tensors.safetensors"
HASH_THREADS_MAX = 8  # shards of a large state's tensors hashed at once, at most (image.py)
_SHARD = re.compile(r"tensors-(\d{5})-of-(\d{5})\.safetensors")


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


STATE = "state.json"
WRITING_PREFIX = ".writing-"
TRASH_PREFIX = ".trash-"
CORRUPT_PREFIX = ".corrupt-"

# Files are read (and written, in checkpoint.py) in chunks while the sha256 runs
# on a second thread: hashlib, read and write all release the GIL, so hashing a
# chunk overlaps reading the next one. Below SMALL bytes a thread round trip
# costs more than the hash itself.
CHUNK = 8 << 20
READ_CHUNK = 2 << 20  # the last chunk's hash is not overlapped with a read: keep it short
SMALL = 1 << 20
_B = TypeVar("_B")


class Lane:
    """One daemon thread that runs calls in submission order (hash updates of one file stay in order).

    Not a ThreadPoolExecutor: that one refuses work once the interpreter starts
    shutting down, which is exactly when an exit hook waits for the checkpoint
    in flight to be written.
    """

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        self._queue.put((fut, fn, args))
        return fut

    def _serve(self) -> None:
        while True:
            fut, fn, args = self._queue.get()
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args))
            except BaseException as e:
                fut.set_exception(e)
            del fut, fn, args  # drop references to the caller's buffers


_lanes: tuple[int, dict[tuple[str, int], Lane]] | None = None
_lane_lock = threading.Lock()


def _after_fork_in_child() -> None:
    global _lanes, _lane_lock, _reaper_state
    _lanes, _lane_lock, _reaper_state = None, threading.Lock(), None


os.register_at_fork(after_in_child=_after_fork_in_child)


def lane(kind: str, index: int = 0) -> Lane:
    """The process's thread `index` for `kind` of work, started on first use (anew in a forked child)."""
    global _lanes
    current = _lanes
    if current is None or current[0] != os.getpid() or (kind, index) not in current[1]:
        with _lane_lock:
            if _lanes is None or _lanes[0] != os.getpid():
                _lanes = (os.getpid(), {})
            if (kind, index) not in _lanes[1]:
                _lanes[1][(kind, index)] = Lane(f"sweepq-{kind}-{index}")
            current = _lanes
    return current[1][(kind, index)]


def hasher(index: int = 0) -> Lane:
    """A thread that computes sha256s (one per file being written or read at once)."""
    return lane("hash", index)


def writer(index: int = 0) -> Lane:
    """A thread that writes one file (diskio writes several files at once)."""
    return lane("write", index)


# Test-only fault injection: SWEEPQ_CRASH_AT=<point> kills this process with
# SIGKILL at that point of a checkpoint write or deletion, once it committed
# SWEEPQ_CRASH_AFTER_COMMITS checkpoints.
CRASH_AT = os.environ.get("SWEEPQ_CRASH_AT")
_CRASH_AFTER = int(os.environ.get("SWEEPQ_CRASH_AFTER_COMMITS", "0"))
_commits_seen = 0


def crash_point(name: str) -> None:
    if name == CRASH_AT and _commits_seen >= _CRASH_AFTER:
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


def read_verified_into(step_dir: Path, name: str, entry: dict[str, Any], alloc: Callable[[int], _B]) -> _B:
    """Read a file into `alloc(size)` (a writable buffer), hashing each chunk while the next is read.

    The size is checked before anything is allocated; raises CheckpointCorrupt.
    """
    size = int(entry["size"])
    path = step_dir / name
    try:
        with open(path, "rb", buffering=0) as f:
            actual = os.fstat(f.fileno()).st_size
            if actual != size:
                raise CheckpointCorrupt(step_dir, f"{name} has {actual} bytes, manifest says {size}")
            out = alloc(size)
            view = memoryview(out).cast("B")  # type: ignore[arg-type]
            h, pool = hashlib.sha256(), hasher()
            pipelined = size >= SMALL
            got = 0
            while got < size:
                n = f.readinto(view[got : got + READ_CHUNK])
                if not n:
                    raise CheckpointCorrupt(step_dir, f"{name} ended after {got} bytes, manifest says {size}")
                if pipelined:
                    pool.submit(h.update, view[got : got + n])
                else:
                    h.update(view[got : got + n])
                got += n
            digest = pool.submit(h.hexdigest).result() if pipelined else h.hexdigest()
    except OSError as e:
        raise CheckpointCorrupt(step_dir, f"{name} unreadable ({e})") from e
    if digest != entry["sha256"]:
        raise CheckpointCorrupt(step_dir, f"{name} sha256 does not match the manifest")
    return out


def _hash_file(step_dir: Path, name: str, entry: dict[str, Any]) -> None:
    """Verify one file without keeping it: two chunk buffers, hashing one while reading the other."""
    size = int(entry["size"])
    try:
        with open(step_dir / name, "rb", buffering=0) as f:
            actual = os.fstat(f.fileno()).st_size
            if actual != size:
                raise CheckpointCorrupt(step_dir, f"{name} has {actual} bytes, manifest says {size}")
            h, pool = hashlib.sha256(), hasher()
            bufs = [memoryview(bytearray(min(READ_CHUNK, size))) for _ in range(2 if size >= SMALL else 1)]
            pending: list[Future[Any] | None] = [None] * len(bufs)
            got = i = 0
            while got < size:
                k = i % len(bufs)
                if pending[k] is not None:
                    pending[k].result()  # type: ignore[union-attr]
                n = f.readinto(bufs[k])
                if not n:
                    raise CheckpointCorrupt(step_dir, f"{name} ended after {got} bytes, manifest says {size}")
                if len(bufs) > 1:
                    pending[k] = pool.submit(h.update, bufs[k][:n])
                else:
                    h.update(bufs[k][:n])
                got += n
                i += 1
            digest = pool.submit(h.hexdigest).result() if len(bufs) > 1 else h.hexdigest()
    except OSError as e:
        raise CheckpointCorrupt(step_dir, f"{name} unreadable ({e})") from e
    if digest != entry["sha256"]:
        raise CheckpointCorrupt(step_dir, f"{name} sha256 does not match the manifest")


def verify(step_dir: Path) -> dict[str, Any]:
    """Check every file against the manifest (sizes and sha256); return the manifest."""
    m = read_manifest(step_dir)
    for name, entry in m["files"].items():
        _hash_file(step_dir, name, entry)
    return m


def quarantine(step_dir: Path) -> Path:
    target = step_dir.with_name(f"{CORRUPT_PREFIX}{step_dir.name}-{secrets.token_hex(4)}")
    os.rename(step_dir, target)
    fsync_dir(step_dir.parent)
    return target


def rollback_limit(steps: Iterable[int], nan_step: int | None) -> int | None:
    """After a `nan` at nan_step: the newest step a resume may load, -1 for a fresh start.

    The newest checkpoint before the bad step is where the bad interval started,
    so the resume rolls back one further. None when there is no rollback.
    """
    if nan_step is None:
        return None
    before = sorted((s for s in steps if s < nan_step), reverse=True)
    return before[1] if len(before) > 1 else -1


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
    """Supersede: an atomic rename out of the committed namespace, then the slow delete.

    The delete itself runs on a background thread (see wait_deleted): unlinking
    a large file can take tens of milliseconds of waiting on the disk (ext4
    mounted with `discard`: 40 ms for 160 MB here) and nothing needs it done
    now. A crash before it ends leaves a `.trash-*` folder, which the next lock
    holder removes (clean_partial), as after a crash at `mid_delete`.
    """
    trash = step_dir.with_name(f"{TRASH_PREFIX}{step_dir.name}-{secrets.token_hex(4)}")
    os.rename(step_dir, trash)
    fsync_dir(step_dir.parent)
    crash_point("mid_delete")
    _reaper().put(trash)


def wait_deleted() -> None:
    """Wait until every folder given to `delete` in this process is gone (checkpoint.AsyncWriter.flush calls it)."""
    r = _reaper_state
    if r is not None and r[0] == os.getpid():
        r[1].wait()


class _Reaper:
    """Removes superseded folders, one at a time, on a daemon thread that exits when idle."""

    IDLE_EXIT = 30.0

    def __init__(self) -> None:
        self._cv = threading.Condition(threading.Lock())
        self._paths: list[Path] = []
        self._busy = False
        self._thread: threading.Thread | None = None

    def put(self, path: Path) -> None:
        with self._cv:
            self._paths.append(path)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="sweepq-delete", daemon=True)
                self._thread.start()
            self._cv.notify_all()

    def wait(self) -> None:
        if not (self._paths or self._busy):
            return
        with self._cv:
            while self._paths or self._busy:
                self._cv.wait()

    def _serve(self) -> None:
        while True:
            with self._cv:
                while not self._paths:
                    if not self._cv.wait(timeout=self.IDLE_EXIT) and not self._paths:
                        self._thread = None
                        return
                path = self._paths.pop(0)
                self._busy = True
            try:
                remove_gently(path)
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()


DELETE_STEP = 8 << 20


def remove_gently(folder: Path) -> None:
    """Remove a folder, shrinking its large files DELETE_STEP bytes per journal commit first.

    On a filesystem mounted with `discard` (ext4 here), freeing a file's blocks
    sends the device a TRIM inside the journal commit, and every fsync on that
    filesystem waits for the commit: unlinking 160 MB at once held the worker's
    SQLite commit for 31 ms. Shrinking in steps, each made durable, keeps any
    one wait near 1 ms for about the same total time (the way RocksDB rate-limits
    file deletion). Errors are ignored: what is left is cleaned up later.
    """
    try:
        files = [f for f in folder.iterdir() if f.is_file()]
    except OSError:
        files = []
    for f in files:
        try:
            fd = os.open(f, os.O_WRONLY)
        except OSError:
            continue
        try:
            size = os.fstat(fd).st_size
            while size > DELETE_STEP:
                size -= DELETE_STEP
                os.ftruncate(fd, size)
                os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)
    shutil.rmtree(folder, ignore_errors=True)


_reaper_state: tuple[int, _Reaper] | None = None


def _reaper() -> _Reaper:
    global _reaper_state
    with _lane_lock:
        if _reaper_state is None or _reaper_state[0] != os.getpid():
            _reaper_state = (os.getpid(), _Reaper())
        return _reaper_state[1]


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
