"""Checkpoints of files another library wrote (Lightning's `.ckpt`, a Hugging Face `checkpoint-N/`).

The library keeps its own format and its own resume logic; sweepq keeps the
guarantees: the files are copied into a stage, hashed and fsynced, and
committed with a manifest of `kind: files` by the same protocol as sweepq's
own checkpoints (commit.py). A crash at any instant leaves the previous
committed checkpoint intact, and the folder handed back for a resume is one
whose every byte was just verified against its manifest, never "the newest
file" or "the highest number" in a folder the library also writes.

The files are copied, not linked: a library may later rewrite a file of the
same name in place (Lightning's `last.ckpt`), which would change a linked copy
under its manifest.
"""

from __future__ import annotations

import hashlib
import json
import mmap
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sweepq.checkpoint.commit import Committed, committed_from
from sweepq.checkpoint.manifest import FORMAT, OtherKind
from sweepq.checkpoint.storage import CheckpointStorage, verify
from sweepq.layout import MANIFEST_NAME

KIND = "files"


class NotFiles(ValueError):
    """What was asked to be kept is not a flat set of regular files."""


def is_files(manifest: dict[str, Any]) -> bool:
    return manifest.get("kind") == KIND


def sources_of(files: Path | dict[str, Path]) -> dict[str, Path]:
    """name -> file: a folder's regular files, or the mapping given; NotFiles when that cannot be kept."""
    if isinstance(files, dict):
        found = {str(name): Path(p) for name, p in files.items()}
    else:
        folder = Path(files)
        if not folder.is_dir():
            raise NotFiles(f"{folder} is not a folder")
        found = {}
        for entry in sorted(folder.iterdir()):
            if entry.is_dir():
                raise NotFiles(
                    f"{entry} is a folder: sweepq keeps flat checkpoint folders (pass the files as a mapping)"
                )
            found[entry.name] = entry
    for name, path in found.items():
        if "/" in name or name in ("", ".", "..", MANIFEST_NAME):
            raise NotFiles(f"{name!r} cannot be the name of a file in a checkpoint")
        if not path.is_file():
            raise NotFiles(f"{path} is not a regular file")
    if not found:
        raise NotFiles("no files to keep")
    return found


def write_files_checkpoint(
    storage: CheckpointStorage, step: int, sources: dict[str, Path], meta: dict[str, Any]
) -> Committed:
    """Copy `sources` into a new committed checkpoint of `step` (kind: files)."""
    staged = storage.stage(step)
    with _mapped(sources) as parts:
        written = staged.write(parts)
    files = {name: {"sha256": sha, "size": size} for name, (sha, size) in written.items()}
    created = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    manifest = {"format": FORMAT, "kind": KIND, "step": step, "created_at": created, "files": files, **meta}
    manifest_bytes = (json.dumps(manifest, indent=1, sort_keys=True, allow_nan=True) + "\n").encode()
    if not staged.commit(manifest_bytes):
        existing, msha = storage.read_manifest(step)
        return committed_from(storage.location(step), existing, msha)
    return committed_from(storage.location(step), manifest, hashlib.sha256(manifest_bytes).hexdigest())


@contextmanager
def _mapped(sources: dict[str, Path]) -> Iterator[dict[str, list[memoryview]]]:
    """Each file as a read-only memory map: written and hashed without reading it into memory first."""
    with ExitStack() as stack:
        parts: dict[str, list[memoryview]] = {}
        for name, path in sources.items():
            f = stack.enter_context(open(path, "rb"))
            size = f.seek(0, 2)
            if size == 0:
                parts[name] = [memoryview(b"")]
                continue
            m = stack.enter_context(mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ))
            view = memoryview(m)
            stack.callback(view.release)
            parts[name] = [view]
        yield parts


@dataclass(frozen=True)
class Verified:
    """A files checkpoint whose every byte matched its manifest."""

    step: int
    path: Path
    manifest: dict[str, Any]
    manifest_sha256: str


def verified(storage: CheckpointStorage, step: int) -> Verified:
    """Verify one files checkpoint; CheckpointCorrupt when a byte or a size is wrong, OtherKind for a state."""
    m = verify(storage, step)
    where = storage.location(step)
    if not is_files(m):
        raise OtherKind(where, "a training state (run.checkpoint)", "files (run.commit_files)")
    _, msha = storage.read_manifest(step)
    return Verified(step, where, m, msha)
