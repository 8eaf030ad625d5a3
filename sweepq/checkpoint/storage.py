"""Where a cell's checkpoints are kept: the interface the commit protocol and the readers use.

A storage holds committed steps, each a set of named files plus the manifest
that lists them (manifest.py). Writers stage a step's files where no reader
looks, then commit the step in one atomic act; readers see committed steps
only and verify every byte against the manifest. LocalFolder keeps them in a
folder of the local file system (layout.py names it):

  stage      a hidden `.writing-*` folder; each file written (direct I/O where
             the bytes allow, diskio.py), hashed on the way and fsynced
  commit     the manifest written last, the folder fsynced, renamed to
             `step-<step>`, the parent fsynced: a crash at any instant leaves
             the previous checkpoint intact and at most a hidden folder
  quarantine renamed to `.corrupt-*`, kept for inspection
  delete     renamed to `.trash-*` at once, removed in the background

In an object store the same interface commits by writing the manifest last,
only if absent (a step is committed when its manifest exists; nothing is
renamed): memory.py keeps checkpoints so, and tests/contract/ holds every
implementation to one suite.

Links (ownfiles.py). A `step-<step>` that is a symbolic link (a warm start
linked in from another sweep) is a linked step: a resume may load it, every
byte verified against its manifest as any step's, but it is not the cell's
own. Retention never counts or deletes it (run/committed.py); when the
cell's own timeline needs its name (a rollback before it, a commit of the same
step) the link itself is moved aside to `.linked-*` and kept (`detach`); a
corrupt one is quarantined the same way, by renaming the link. Nothing a
change reaches goes through a link: the checkpoints folder must be the cell's
own (a link to it, or to the cell folder, raises ownfiles.LinkedPath before
anything is written), leftovers that are links are unlinked themselves, and
the background deletion never shrinks a linked or hard-linked file.
"""

from __future__ import annotations

import errno
import hashlib
import os
import secrets
import shutil
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, Protocol, TypeVar

from sweepq import layout, ownfiles
from sweepq.atomic import fsync_dir
from sweepq.checkpoint import manifest, readio
from sweepq.checkpoint.crashpoints import count_commit, crash_point
from sweepq.checkpoint.deletion import delete_later
from sweepq.checkpoint.diskio import write_files
from sweepq.checkpoint.lanes import at_once
from sweepq.checkpoint.manifest import CheckpointCorrupt, CheckpointTooNew
from sweepq.layout import MANIFEST_NAME, CellPaths

_B = TypeVar("_B")


class Staged(Protocol):
    """One step being written: invisible to readers until `commit`."""

    def write(self, files: dict[str, list[memoryview]]) -> dict[str, tuple[str, int]]:
        """Write new files, durably; name -> (sha256, size). The parts must not change until this returns."""
        ...

    def commit(self, manifest_bytes: bytes) -> bool:
        """Write the manifest last and make the step visible; False (nothing committed) if it already was."""
        ...


class CheckpointStorage(Protocol):
    def steps(self) -> list[int]:
        """Committed steps, newest first (unverified)."""
        ...

    def location(self, step: int) -> Path:
        """Where a committed step is, for messages, DONE.json and the database: its place in the root's
        layout (the cell's checkpoints folder / `step-<step>`), a folder on a local disk and the
        mirror of its keys in an object store, which keeps a root's layout under its prefix."""
        ...

    def read_manifest(self, step: int) -> tuple[dict[str, Any], str]:
        """(the manifest in the current format, the sha256 of its bytes).

        The manifest has the current shape and says it is `step` (manifest.parse
        checks both). Raises CheckpointCorrupt, or CheckpointTooNew for a newer
        sweepq's checkpoint.
        """
        ...

    def read(self, step: int, name: str, entry: dict[str, Any]) -> bytes:
        """A file's bytes, verified against its manifest `entry`; raises CheckpointCorrupt."""
        ...

    def read_into(self, step: int, name: str, entry: dict[str, Any], alloc: Callable[[int], _B]) -> _B:
        """A file read into `alloc(size)` (a writable buffer), verified; raises CheckpointCorrupt."""
        ...

    def check(self, step: int, name: str, entry: dict[str, Any]) -> None:
        """Verify a file without keeping it; raises CheckpointCorrupt."""
        ...

    def stage(self, step: int) -> Staged: ...

    def quarantine(self, step: int) -> Path:
        """Move a corrupt step out of the committed ones (kept for inspection); returns where it went."""
        ...

    def linked(self, step: int) -> str | None:
        """Where a linked step points (the link's text); None when the step is the cell's own."""
        ...

    def detach(self, step: int) -> Path:
        """Move a linked step's link itself out of the committed ones (kept); returns where it went."""
        ...

    def delete(self, step: int) -> None:
        """Supersede a step: gone from `steps()` when this returns, its bytes freed in the background."""
        ...

    def clean_partial(self) -> list[str]:
        """Remove what crashed writes and deletions left behind (lock holder only); what was removed."""
        ...


def for_cell(cell: CellPaths, where: str | None, environ: Mapping[str, str] | None = None) -> CheckpointStorage:
    """The storage of a cell's checkpoints in the sweep's storage `where` (its settings' `storage`, as
    the launch chose it; None: the root folder). This process's SWEEPQ_STORAGE_URL comes first;
    storage_url.py is the one place that reads a URL."""
    from sweepq.checkpoint import storage_url

    at = storage_url.locate(where, environ)
    if at is None:
        return LocalFolder(cell.checkpoints, cell.root)
    if at.s3_url is not None:
        from sweepq.checkpoint import s3

        return s3.for_cell(cell, at.s3_url, at.client)
    assert at.folder is not None
    return LocalFolder(CellPaths(at.folder, cell.cell_id).checkpoints, at.folder)


def verify(storage: CheckpointStorage, step: int) -> dict[str, Any]:
    """Check every file of a step against its manifest (sizes and sha256), the files at once; return the manifest.

    The first damaged file in the manifest's order is the one named.
    """
    m, _ = storage.read_manifest(step)
    at_once([partial(storage.check, step, name, entry) for name, entry in m["files"].items()])
    return m


def committed_manifests(storage: CheckpointStorage, damaged: dict[int, str] | None = None) -> dict[int, dict[str, Any]]:
    """step -> manifest for every committed checkpoint whose manifest reads (no hashing).

    A damaged manifest (CheckpointCorrupt) is left out, and its step -> why
    put in `damaged` when given: moving it aside is for the cell's owner. A
    newer sweepq's checkpoint is left out too: its manifest cannot be
    interpreted, so retention never counts (or deletes) it, and the resume
    that meets it fails (commit.load_newest).
    """
    out = {}
    for step in storage.steps():
        try:
            out[step], _ = storage.read_manifest(step)
        except CheckpointCorrupt as e:
            if damaged is not None:
                damaged[step] = e.why
        except CheckpointTooNew:
            continue
    return out


class LocalFolder:
    """A cell's checkpoints as folders in a local `checkpoints/` folder (layout.py names them).

    `root`, when given, is the sweep root the folder lies in: every change
    first checks that no link leads from it to the folder (ownfiles.require_own).
    """

    def __init__(self, folder: Path, root: Path | None = None) -> None:
        self.folder = folder
        self.root = root if root is not None else folder.parent

    def _own(self) -> None:
        """Before any change: the folder is reached from the root without a link (else LinkedPath)."""
        ownfiles.require_own(self.root, self.folder, "the checkpoints folder")

    def steps(self) -> list[int]:
        return layout.committed_steps_in(self.folder)

    def location(self, step: int) -> Path:
        return self.folder / layout.step_name(step)

    def read_manifest(self, step: int) -> tuple[dict[str, Any], str]:
        where = self.location(step)
        try:
            raw = (where / MANIFEST_NAME).read_bytes()
        except OSError as e:
            raise CheckpointCorrupt(where, f"manifest unreadable ({e.__class__.__name__}: {e})") from e
        return manifest.parse(raw, where, step), hashlib.sha256(raw).hexdigest()

    def read(self, step: int, name: str, entry: dict[str, Any]) -> bytes:
        where = self.location(step)
        try:
            data = (where / name).read_bytes()
        except OSError as e:
            raise CheckpointCorrupt(where, f"{name} unreadable ({e})") from e
        if len(data) != int(entry["size"]):
            raise CheckpointCorrupt(where, f"{name} has {len(data)} bytes, manifest says {entry['size']}")
        _check_digest(where, name, hashlib.sha256(data).hexdigest(), entry)
        return data

    def read_into(self, step: int, name: str, entry: dict[str, Any], alloc: Callable[[int], _B]) -> _B:
        """Read with direct I/O where `alloc` gives page-aligned memory, each chunk hashed on a lane while the next
        is read (readio.py); the size is checked before anything is allocated."""
        where, size = self.location(step), int(entry["size"])
        _check_size(where, name, size)
        out = alloc(size)
        with _reading(where, name, size):
            digest = readio.read_into(where / name, size, memoryview(out).cast("B"))  # type: ignore[arg-type]
        _check_digest(where, name, digest, entry)
        return out

    def check(self, step: int, name: str, entry: dict[str, Any]) -> None:
        """Two chunk buffers, one hashed on a lane while the other is read: a file of any size in little memory."""
        where, size = self.location(step), int(entry["size"])
        with _reading(where, name, size):
            digest = readio.digest(where / name, size)
        _check_digest(where, name, digest, entry)

    def stage(self, step: int) -> _LocalStaged:
        self._own()
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / layout.staging_name(step, f"{os.getpid()}-{secrets.token_hex(4)}")
        tmp.mkdir()
        return _LocalStaged(tmp, self.location(step), step)

    def quarantine(self, step: int) -> Path:
        """A rename: a linked step's link itself is moved, what it points at is untouched."""
        self._own()
        target = self.folder / layout.quarantine_name(step, secrets.token_hex(4))
        os.rename(self.location(step), target)
        fsync_dir(self.folder)
        return target

    def linked(self, step: int) -> str | None:
        try:
            return os.readlink(self.location(step))
        except OSError:  # not a link (EINVAL), or gone
            return None

    def detach(self, step: int) -> Path:
        self._own()
        where = self.location(step)
        if not ownfiles.is_link(where):
            raise ValueError(f"{where} is no link: only a linked step is detached")
        target = self.folder / layout.linked_name(step, secrets.token_hex(4))
        os.rename(where, target)
        fsync_dir(self.folder)
        return target

    def delete(self, step: int) -> None:
        """A linked step loses its link only (the rename moves the link; remove_gently unlinks it)."""
        self._own()
        trash = self.folder / layout.trash_name(step, secrets.token_hex(4))
        os.rename(self.location(step), trash)
        fsync_dir(self.folder)
        # A crash from here on leaves a trash folder: the next lock holder's clean_partial removes it.
        crash_point("mid_delete")
        delete_later(trash)

    def clean_partial(self) -> list[str]:
        removed: list[str] = []
        if not self.folder.is_dir():
            return removed
        self._own()
        for entry in self.folder.iterdir():
            if layout.is_leftover(entry.name):
                try:
                    ownfiles.remove(entry)  # a leftover name that is a link: the link goes, never its target
                except OSError:
                    continue  # left for the next lock holder
                removed.append(entry.name)
        return removed


def _check_size(where: Path, name: str, size: int) -> None:
    with _reading(where, name, size):
        actual = os.stat(where / name).st_size
        if actual != size:
            raise readio.WrongSize(actual)


@contextmanager
def _reading(where: Path, name: str, size: int) -> Iterator[None]:
    """A step's file being read: an OSError or a size other than the manifest's is corruption."""
    try:
        yield
    except readio.WrongSize as e:
        if e.short:
            raise CheckpointCorrupt(where, f"{name} ended after {e.actual} bytes, manifest says {size}") from None
        raise CheckpointCorrupt(where, f"{name} has {e.actual} bytes, manifest says {size}") from None
    except OSError as e:
        raise CheckpointCorrupt(where, f"{name} unreadable ({e})") from e


def _check_digest(where: Path, name: str, digest: str, entry: dict[str, Any]) -> None:
    if digest != entry["sha256"]:
        raise CheckpointCorrupt(where, f"{name} sha256 does not match the manifest")


class _LocalStaged:
    def __init__(self, tmp: Path, final: Path, step: int) -> None:
        self.tmp, self.final, self.step = tmp, final, step

    def write(self, files: dict[str, list[memoryview]]) -> dict[str, tuple[str, int]]:
        return write_files(self.tmp, files)

    def commit(self, manifest_bytes: bytes) -> bool:
        self.write({MANIFEST_NAME: [memoryview(manifest_bytes)]})
        crash_point("after_manifest")
        fsync_dir(self.tmp)
        crash_point("before_rename")
        if ownfiles.is_link(self.final):
            # A linked step of the same number is not the cell's own: the link moves aside, ours commits.
            os.rename(self.final, self.final.with_name(layout.linked_name(self.step, secrets.token_hex(4))))
        elif self.final.exists():
            # The same step committed earlier (a repeated request): keep the first one.
            shutil.rmtree(self.tmp, ignore_errors=True)
            return False
        try:
            os.rename(self.tmp, self.final)
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            # Another writer committed the step between the check and the rename (a committed
            # step is never an empty folder, which a rename would replace): the first one stays.
            shutil.rmtree(self.tmp, ignore_errors=True)
            return False
        crash_point("after_rename")
        fsync_dir(self.final.parent)
        count_commit()
        crash_point("after_commit")
        return True
