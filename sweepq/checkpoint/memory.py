"""A cell's checkpoints as objects in memory: the storage interface (storage.py) the way an object store keeps it.

The second implementation of `CheckpointStorage`, written the way a bucket
must be used (no renames, no folders, one conditional write), so that the
contract suite (tests/contract/) holds the interface to what an object store
can do, not to what a local file system happens to allow:

  stage      data objects put under a prefix of their own, `data/step-<step>-<tag>/`,
             hashed as they are put; nothing lists them as a step
  commit     the manifest put last, at `step-<step>/manifest.json`, only if no
             object has that key yet (`If-None-Match: *`): its existence is the
             commit, and its metadata names the data prefix it vouches for
  delete     the manifest first (the step is gone from `steps()` at once), then the data
  quarantine the manifest copied under `corrupt-step-<step>-<tag>/`, then deleted: the
             data stays, referenced, for inspection
  clean      data prefixes no manifest names (a crash before the commit, during
             a deletion) are removed

Listing finds the newest committed step from one listing of the manifests.
A linked step (a warm start from another sweep's storage in the same bucket)
is a manifest key whose metadata points at the other step's manifest.

Keys mirror the root's layout, as a bucket holding a root under its prefix
does: the checkpoints of `<root>/cells/<cell>/checkpoints/` are under the key
prefix `cells/<cell>/checkpoints/`, and `location(step)` is the step's place
in the root's layout (the path the run records relative to the cell folder),
which here names keys, not a folder on disk.

Several storages may share one `Bucket` (two writers of one cell, another
sweep's steps to link): the bucket's lock makes each object operation atomic,
as a store's single-object operations are.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from sweepq import layout
from sweepq.checkpoint import manifest
from sweepq.checkpoint.manifest import CheckpointCorrupt
from sweepq.layout import MANIFEST_NAME

_B = TypeVar("_B")

DATA = "data"  # the prefix under which each stage puts its data objects
CORRUPT = "corrupt-"
LINKED = "linked-"


@dataclass(frozen=True)
class Object:
    body: bytes
    meta: dict[str, str] = field(default_factory=dict)


class Bucket:
    """Keys to objects, each operation atomic; `put(..., if_absent=True)` is the conditional write."""

    def __init__(self) -> None:
        self._objects: dict[str, Object] = {}
        self._lock = threading.Lock()

    def put(self, key: str, body: bytes, meta: dict[str, str] | None = None, *, if_absent: bool = False) -> bool:
        """Store an object; with `if_absent`, False (nothing written) when the key exists (HTTP 412)."""
        with self._lock:
            if if_absent and key in self._objects:
                return False
            self._objects[key] = Object(bytes(body), dict(meta or {}))
            return True

    def get(self, key: str) -> Object | None:
        with self._lock:
            return self._objects.get(key)

    def delete(self, key: str) -> None:
        with self._lock:
            self._objects.pop(key, None)

    def keys(self, prefix: str) -> list[str]:
        """Every key under `prefix`, sorted (one LIST)."""
        with self._lock:
            return sorted(k for k in self._objects if k.startswith(prefix))


class InMemory:
    """The checkpoints folder `folder` of the sweep root `root`, kept in `bucket` (a fresh one when none is given)."""

    def __init__(self, folder: Path, root: Path, bucket: Bucket | None = None) -> None:
        self.folder = folder
        self.bucket = bucket if bucket is not None else Bucket()
        self.prefix = folder.relative_to(root).as_posix()  # the keys mirror the root's layout

    # -- keys --------------------------------------------------------------------

    def _key(self, *parts: str) -> str:
        return "/".join((self.prefix, *parts))

    def _manifest_key(self, step: int) -> str:
        return self._key(layout.step_name(step), MANIFEST_NAME)

    def _commit_record(self, step: int) -> Object:
        """The manifest object of a committed step, a link followed (CheckpointCorrupt when gone)."""
        where = self.location(step)
        record = self.bucket.get(self._manifest_key(step))
        if record is not None and "link" in record.meta:
            record = self.bucket.get(record.meta["link"])
        if record is None:
            raise CheckpointCorrupt(where, "manifest unreadable (no such object)")
        return record

    def _data(self, step: int, name: str) -> bytes:
        record = self._commit_record(step)
        obj = self.bucket.get(f"{record.meta['data']}/{name}")
        if obj is None:
            raise CheckpointCorrupt(self.location(step), f"{name} unreadable (no such object)")
        return obj.body

    # -- reads -------------------------------------------------------------------

    def steps(self) -> list[int]:
        return layout.manifest_steps(self.bucket.keys(self._key("")), self.prefix)

    def location(self, step: int) -> Path:
        return self.folder / layout.step_name(step)

    def read_manifest(self, step: int) -> tuple[dict[str, Any], str]:
        raw = self._commit_record(step).body
        return manifest.parse(raw, self.location(step), step), hashlib.sha256(raw).hexdigest()

    def read(self, step: int, name: str, entry: dict[str, Any]) -> bytes:
        data = self._data(step, name)
        _verify(self.location(step), name, data, entry)
        return data

    def read_into(self, step: int, name: str, entry: dict[str, Any], alloc: Callable[[int], _B]) -> _B:
        data = self._data(step, name)
        _verify(self.location(step), name, data, entry)  # the size before anything is allocated
        out = alloc(len(data))
        memoryview(out).cast("B")[:] = data  # type: ignore[arg-type]
        return out

    def check(self, step: int, name: str, entry: dict[str, Any]) -> None:
        _verify(self.location(step), name, self._data(step, name), entry)

    def linked(self, step: int) -> str | None:
        record = self.bucket.get(self._manifest_key(step))
        return None if record is None else record.meta.get("link")

    # -- changes -----------------------------------------------------------------

    def stage(self, step: int) -> _MemoryStaged:
        data = self._key(DATA, f"{layout.step_name(step)}-{secrets.token_hex(4)}")
        return _MemoryStaged(self, step, data)

    def _move_manifest(self, step: int, aside: str) -> Path:
        """Copy the step's manifest object under `aside`, then delete it: the step leaves `steps()`."""
        key = self._manifest_key(step)
        record = self.bucket.get(key)
        if record is None:
            raise FileNotFoundError(f"no committed step {step} in {self.prefix}")
        name = f"{aside}{layout.step_name(step)}-{secrets.token_hex(4)}"
        self.bucket.put(self._key(name, MANIFEST_NAME), record.body, record.meta)
        self.bucket.delete(key)
        return self.folder / name

    def quarantine(self, step: int) -> Path:
        """A linked step's link is moved; what it points at is untouched."""
        return self._move_manifest(step, CORRUPT)

    def link(self, step: int, source: InMemory, source_step: int) -> None:
        """Make `step` a linked step: `source`'s committed `source_step`, in the same bucket (a warm start)."""
        if source.bucket is not self.bucket:
            raise ValueError("a linked step must be in the same bucket")
        target = source._manifest_key(source_step)
        if source.bucket.get(target) is None:
            raise FileNotFoundError(f"no committed step {source_step} in {source.prefix}")
        if not self.bucket.put(self._manifest_key(step), b"", {"link": target}, if_absent=True):
            raise FileExistsError(f"step {step} exists in {self.prefix}")

    def detach(self, step: int) -> Path:
        if self.linked(step) is None:
            raise ValueError(f"{self.location(step)} is no link: only a linked step is detached")
        return self._move_manifest(step, LINKED)

    def delete(self, step: int) -> None:
        """The manifest first, then the data: a crash between leaves only unreferenced data (clean_partial)."""
        key = self._manifest_key(step)
        record = self.bucket.get(key)
        if record is None:
            raise FileNotFoundError(f"no committed step {step} in {self.prefix}")
        self.bucket.delete(key)
        if "link" not in record.meta:  # a link's target belongs to another storage
            for data_key in self.bucket.keys(record.meta["data"] + "/"):
                self.bucket.delete(data_key)

    def clean_partial(self) -> list[str]:
        """Data prefixes no manifest (committed, quarantined or detached) names: crashed writes and deletions."""
        referenced = {
            obj.meta["data"]
            for key in self.bucket.keys(self._key(""))
            if key.endswith("/" + MANIFEST_NAME) and (obj := self.bucket.get(key)) is not None and "data" in obj.meta
        }
        removed: dict[str, None] = {}
        data_root = self._key(DATA, "")
        for key in self.bucket.keys(data_root):
            stage = key[: key.index("/", len(data_root))]
            if stage not in referenced:
                self.bucket.delete(key)
                removed[stage[len(data_root) :]] = None
        return list(removed)


def _verify(where: Path, name: str, data: bytes, entry: dict[str, Any]) -> None:
    if len(data) != int(entry["size"]):
        raise CheckpointCorrupt(where, f"{name} has {len(data)} bytes, manifest says {entry['size']}")
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise CheckpointCorrupt(where, f"{name} sha256 does not match the manifest")


class _MemoryStaged:
    def __init__(self, storage: InMemory, step: int, data: str) -> None:
        self.storage, self.step, self.data = storage, step, data

    def write(self, files: dict[str, list[memoryview]]) -> dict[str, tuple[str, int]]:
        written = {}
        for name, parts in files.items():
            body = b"".join(parts)  # a copy: the caller may reuse its parts once this returns
            self.storage.bucket.put(f"{self.data}/{name}", body)
            written[name] = (hashlib.sha256(body).hexdigest(), len(body))
        return written

    def commit(self, manifest_bytes: bytes) -> bool:
        storage, key = self.storage, self.storage._manifest_key(self.step)
        if storage.linked(self.step) is not None:
            # A linked step of the same number is not the cell's own: the link moves aside, ours commits.
            storage.detach(self.step)
        if not storage.bucket.put(key, manifest_bytes, {"data": self.data}, if_absent=True):
            # The same step committed earlier (a repeated request): keep the first one, drop ours.
            for data_key in storage.bucket.keys(self.data + "/"):
                storage.bucket.delete(data_key)
            return False
        return True
