"""The seam of a cell's durable files: named objects, put whole or appended by segments.

A name is a path relative to the cell folder, as in a root (layout.py): `DONE.json`,
`attempts/3/receipt.json`, `attempts/3/metrics.jsonl`, `attempts/3/stdout.log`. Two kinds:

  put(name, data)            a whole object, replaced at once: a reader sees the old bytes or the
                             new ones, never a mix (DONE.json, a receipt, a finished log)
  append(name, offset, data) a segment of a stream that only grows (a metric history, a log while
                             its attempt runs): the bytes from `offset` on. An object store cannot
                             append, so a stream there is one object per segment, never rewritten;
                             a segment sent again (a retried upload) is harmless, one that would
                             leave a hole is refused (SegmentGap)
  read(name)                 the object when one was put (a put ends a stream: its final bytes),
                             else the stream's segments joined; None when there is neither
  names(prefix)              what is there under `prefix`, objects and streams alike, once each

Implementations:

  FolderFiles   a folder holding the root's layout: the root itself (today's files, written in
                place by their writers as before) or a folder every machine mounts. A stream is
                one file, each segment written at its offset; a put is an atomic rename.
  MemoryFiles   objects in a dict, the way a bucket keeps them (no append, no rename)
  S3Files       objects in an S3-compatible bucket under the sweep's prefix (durable/s3.py)

The object stores share ObjectFiles: a stream `name` is the objects `name.segments/<offset>`
(20 digits, so that a listing is in offset order), the whole object is `name` itself.
`for_cell` opens a cell's files in the sweep's storage; tests/contract/test_cell_files.py holds
every implementation to one suite.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sweepq.atomic import atomic_write_bytes

if TYPE_CHECKING:
    from sweepq.layout import CellPaths

SEGMENTS = ".segments"  # a stream's segments on an object store: `<name>.segments/<offset>`
OFFSET_DIGITS = 20  # zero-padded, so the keys list in offset order


class SegmentGap(ValueError):
    """A segment that starts beyond the stream's end: the bytes between would be missing."""


class CellFiles(Protocol):
    """A cell's durable files (the module's doc says what each operation promises)."""

    def put(self, name: str, data: bytes) -> None: ...

    def read(self, name: str) -> bytes | None: ...

    def append(self, name: str, offset: int, data: bytes) -> None: ...

    def names(self, prefix: str = "") -> list[str]: ...

    def describe(self, name: str) -> str:
        """Where `name` is, for messages (a path, or an s3:// URL)."""
        ...


def check_name(name: str) -> str:
    """A name is a relative path within the cell: no `..`, no leading `/`, no empty part."""
    parts = name.split("/")
    if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in name:
        raise ValueError(f"{name!r} is no name of a cell's file (a relative path inside the cell folder)")
    if parts[-1].endswith(SEGMENTS):
        raise ValueError(f"{name!r} is no name of a cell's file: it ends like a stream's segments ({SEGMENTS})")
    return name


class FolderFiles:
    """A cell's files in the folder `base` (a root, or a folder that holds a root's layout)."""

    def __init__(self, base: Path, cell: str) -> None:
        self.base = base
        self.cell = cell
        self.folder = base / "cells" / cell
        self._lock = threading.Lock()

    def _path(self, name: str) -> Path:
        return self.folder / check_name(name)

    def describe(self, name: str) -> str:
        return str(self._path(name))

    def put(self, name: str, data: bytes) -> None:
        path = self._path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, data)

    def read(self, name: str) -> bytes | None:
        try:
            return self._path(name).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def append(self, name: str, offset: int, data: bytes) -> None:
        path = self._path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                size = os.fstat(fd).st_size
                if offset > size:
                    raise SegmentGap(f"{path}: a segment at byte {offset} of a stream of {size} bytes")
                view = memoryview(data)
                while view:  # at its offset: a segment sent again writes the same bytes again
                    written = os.pwrite(fd, view, offset)
                    view, offset = view[written:], offset + written
                os.fsync(fd)
            finally:
                os.close(fd)

    def names(self, prefix: str = "") -> list[str]:
        top = self.folder / prefix if prefix else self.folder
        if not top.is_dir():
            return []
        found = []
        for dirpath, _, files in os.walk(top):
            here = Path(dirpath)
            for f in files:
                rel = (here / f).relative_to(self.folder).as_posix()
                if not f.startswith(".tmp") and rel.startswith(prefix):  # atomic_write's temporaries
                    found.append(rel)
        return sorted(found)


class ObjectFiles:
    """A cell's files as objects of a store that cannot append or rename (keys mirror the root's layout).

    Subclasses give the store's four object operations; the streams are built here.
    """

    def __init__(self, cell: str) -> None:
        self.cell = cell
        self._lengths: dict[str, int] = {}  # streams this object appended to: their stored length
        self._lock = threading.Lock()

    # -- the store's operations (keys relative to the cell) ---------------------------------
    def _put(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    def _get(self, key: str) -> bytes | None:
        raise NotImplementedError

    def _list(self, prefix: str) -> list[tuple[str, int]]:
        """(key, size) of every object whose key starts with `prefix`, in key order."""
        raise NotImplementedError

    def describe(self, name: str) -> str:
        raise NotImplementedError

    # -- the seam ---------------------------------------------------------------------------
    def put(self, name: str, data: bytes) -> None:
        self._put(check_name(name), data)

    def read(self, name: str) -> bytes | None:
        whole = self._get(check_name(name))
        if whole is not None:
            return whole
        segments = self._segments(name)
        if not segments:
            return None
        out = bytearray()
        for offset, key, _ in segments:
            if offset > len(out):
                break  # a hole (a segment lost with its machine): what follows cannot be placed
            body = self._get(key)
            if body is None:
                break  # deleted meanwhile
            out += body[len(out) - offset :]  # a segment overlapping the joined bytes adds its new end only
        return bytes(out)

    def append(self, name: str, offset: int, data: bytes) -> None:
        check_name(name)
        with self._lock:
            length = self._lengths.get(name)
        if length is None or offset > length:
            length = self._stored_length(name)  # another process's segments, or none yet
        if offset > length:
            raise SegmentGap(f"{self.describe(name)}: a segment at byte {offset} of a stream of {length} bytes")
        if data:
            self._put(f"{name}{SEGMENTS}/{offset:0{OFFSET_DIGITS}d}", data)
        with self._lock:
            self._lengths[name] = max(length, offset + len(data))

    def names(self, prefix: str = "") -> list[str]:
        found = set()
        for key, _ in self._list(prefix):
            head, sep, _ = key.rpartition(SEGMENTS + "/")
            found.add(head if sep and "/" not in key[len(head) + len(sep) :] else key)
        return sorted(found)

    def _segments(self, name: str) -> list[tuple[int, str, int]]:
        """(offset, key, size) of a stream's segments, in offset order."""
        out = []
        for key, size in self._list(f"{name}{SEGMENTS}/"):
            tail = key.rsplit("/", 1)[1]
            if tail.isdigit():
                out.append((int(tail), key, size))
        return sorted(out)

    def _stored_length(self, name: str) -> int:
        """Where the stream's contiguous bytes end (from one listing: offsets and sizes)."""
        length = 0
        for offset, _, size in self._segments(name):
            if offset > length:
                break
            length = max(length, offset + size)
        return length


class MemoryFiles(ObjectFiles):
    """A cell's files in a dict shared by the cells of one store (`objects`: key -> bytes)."""

    def __init__(self, cell: str, objects: dict[str, bytes] | None = None) -> None:
        super().__init__(cell)
        self.objects = objects if objects is not None else {}
        self.prefix = f"cells/{cell}/"
        self._store_lock = threading.Lock()

    def _put(self, key: str, data: bytes) -> None:
        with self._store_lock:
            self.objects[self.prefix + key] = bytes(data)

    def _get(self, key: str) -> bytes | None:
        with self._store_lock:
            return self.objects.get(self.prefix + key)

    def _list(self, prefix: str) -> list[tuple[str, int]]:
        start = self.prefix + prefix
        with self._store_lock:
            keys = sorted(k for k in self.objects if k.startswith(start))
            return [(k[len(self.prefix) :], len(self.objects[k])) for k in keys]

    def describe(self, name: str) -> str:
        return f"memory:{self.prefix}{name}"


def read_json(files: CellFiles, name: str) -> Any:
    """A JSON file of the cell's in the storage, parsed; None when it is missing or does not parse."""
    raw = files.read(name)
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def is_root(files: CellFiles, cell: CellPaths) -> bool:
    """Whether `files` are the root's own files (nothing to copy: the writers write there already)."""
    return isinstance(files, FolderFiles) and files.folder.resolve() == cell.dir.resolve()
