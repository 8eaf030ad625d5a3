"""Durable file writes: every file sweepq relies on after a crash is written here.

A file is written to a temporary name in the same folder, fsynced, renamed over
its final name (atomic within a filesystem), and the folder is fsynced so the
rename itself survives a power loss. Readers therefore see the old file or the
new one, never a torn one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a rename or a new entry in `path` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def tmp_name(path: Path) -> Path:
    """A unique temporary sibling of `path` (hidden, so listings skip it)."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{os.urandom(4).hex()}")


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    path = Path(path)
    tmp = tmp_name(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    data = json.dumps(obj, indent=2, sort_keys=True, allow_nan=True) + "\n"
    atomic_write_bytes(path, data.encode())


def read_json(path: str | os.PathLike[str]) -> Any:
    with open(path, "rb") as f:
        return json.loads(f.read())
