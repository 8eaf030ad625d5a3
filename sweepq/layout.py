"""The durable layout of a sweep root: the one place that knows where files live.

Stable (outside tools rely on it):
    <root>/sweepq.db                              the queue and all receipts (the default database)
    <root>/cells/<cell>/checkpoints/step-<step>/  one committed checkpoint (manifest.json inside)
    <root>/cells/<cell>/DONE.json                 the done marker

sweepq's own choice (may change between versions):
    <root>/cells/<cell>/                          the folder is the cell's lock (flock held by its training process)
    <root>/cells/<cell>/cfg.json                  the cell's cfg, for programs and people
    <root>/cells/<cell>/args.json                 what a program's ${args_json_file} stands for
    <root>/cells/<cell>/output/                   a program's own files, kept across attempts
    <root>/cells/<cell>/attempts/<n>/             attempt.json, stdout.log, stderr.log, receipt.json,
                                                  outcome.json (a program's own account), metrics.jsonl
                                                  (every point it logged) of attempt n
    <root>/attic/<cell>/<stamp>/                  what `sweepq reset` moved aside
    <root>/launch.log                             a launch's output once its terminal went away (and
                                                  all of a `launch --detach`)
    <root>/.sweepq/                               root-wide locks (migrate.lock, claim.lock, launch.lock with who
                                                  holds it in launch.json) and worker logs (logs/)

Only sweepq/queue/database.py turns `RootPaths.db` into a database URL: where
the queue lives is its question (a server URL may replace the file).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import overload

DB_NAME = "sweepq.db"
DONE_NAME = "DONE.json"
MANIFEST_NAME = "manifest.json"
STEP_DIR = re.compile(r"^step-(\d+)$")
CELLS_DIR = "cells"


def default_root_beside(spec_dir: Path, name: str) -> Path:
    """The root of a sweep file that names none: runs/<name> beside the file."""
    return spec_dir / "runs" / name


def step_name(step: int) -> str:
    """The folder name of the committed checkpoint at `step` (STEP_DIR reads it back)."""
    return f"step-{step}"


def manifest_steps(keys: Iterable[str], folder_key: str) -> list[int]:
    """The steps, newest first, whose manifest is among the object keys `keys` listed under `folder_key`.

    On an object store (no folders, no renames) a step is committed when `step-N/manifest.json` exists.
    """
    found = []
    for key in keys:
        parts = key[len(folder_key) + 1 :].split("/")
        m = STEP_DIR.match(parts[0])
        if m is not None and parts[1:] == [MANIFEST_NAME]:
            found.append(int(m.group(1)))
    return sorted(found, reverse=True)


# Hidden names beside the committed `step-*` folders: readers never look at
# them, so renaming into or out of one is atomic for every reader.
WRITING_PREFIX = ".writing-"  # a checkpoint being written (the lock holder's)
TRASH_PREFIX = ".trash-"  # superseded, being deleted in the background
CORRUPT_PREFIX = ".corrupt-"  # failed verification, kept for inspection
LINKED_PREFIX = ".linked-"  # a link named like a step, moved out of the committed ones (kept: a person made it)


def staging_name(step: int, tag: str) -> str:
    return f"{WRITING_PREFIX}{step_name(step)}-{tag}"


def trash_name(step: int, tag: str) -> str:
    return f"{TRASH_PREFIX}{step_name(step)}-{tag}"


def quarantine_name(step: int, tag: str) -> str:
    return f"{CORRUPT_PREFIX}{step_name(step)}-{tag}"


def linked_name(step: int, tag: str) -> str:
    return f"{LINKED_PREFIX}{step_name(step)}-{tag}"


def is_leftover(name: str) -> bool:
    """A folder a crashed write or deletion left behind (quarantined ones are kept)."""
    return name.startswith((WRITING_PREFIX, TRASH_PREFIX))


def committed_steps_in(checkpoints: Path) -> list[int]:
    """Steps of folders named like committed checkpoints in `checkpoints`, newest first (unverified)."""
    if not checkpoints.is_dir():
        return []
    steps = []
    for entry in checkpoints.iterdir():
        m = STEP_DIR.match(entry.name)
        if m and entry.is_dir():
            steps.append(int(m.group(1)))
    return sorted(steps, reverse=True)


class _Within:
    """A path property: a fixed `name` inside the path that the object's attribute `parent` gives."""

    def __init__(self, parent: str, name: str) -> None:
        self.parent, self.name = parent, name

    @overload
    def __get__(self, obj: None, owner: type) -> _Within: ...

    @overload
    def __get__(self, obj: object, owner: type) -> Path: ...

    def __get__(self, obj: object, owner: type) -> _Within | Path:
        if obj is None:
            return self
        base: Path = getattr(obj, self.parent)
        return base / self.name


@dataclass(frozen=True)
class RootPaths:
    root: Path

    db = _Within("root", DB_NAME)
    private = _Within("root", ".sweepq")
    migrate_lock = _Within("private", "migrate.lock")
    claim_lock = _Within("private", "claim.lock")  # claimers of the root's SQLite file queue on it
    launch_lock = _Within("private", "launch.lock")  # held by the root's live launch, if any
    launch_info = _Within("private", "launch.json")  # who holds launch_lock (pid, host, log)
    launch_log = _Within("root", "launch.log")
    logs = _Within("private", "logs")
    attic = _Within("root", "attic")

    def worker_log(self, stamp: str, launcher_pid: int, number: int) -> Path:
        """The output of worker `number` started by one launch (stamp and pid tell launches apart)."""
        return self.logs / f"worker-{stamp}-{launcher_pid}-{number}.log"

    def attic_entry(self, cell_id: str, stamp: str) -> Path:
        """Where one `sweepq reset` of a cell puts what it moves aside."""
        return self.attic / cell_id / stamp

    def cell(self, cell_id: str) -> CellPaths:
        return CellPaths(self.root, cell_id)


@dataclass(frozen=True)
class CellPaths:
    root: Path
    cell_id: str

    @property
    def dir(self) -> Path:
        return self.root / CELLS_DIR / self.cell_id

    checkpoints = _Within("dir", "checkpoints")
    done = _Within("dir", DONE_NAME)

    @property
    def lock(self) -> Path:
        """What the cell's lock is taken on: the cell folder itself (queue/lock.py says why)."""
        return self.dir

    cfg = _Within("dir", "cfg.json")
    args = _Within("dir", "args.json")
    output = _Within("dir", "output")

    def checkpoint(self, step: int) -> Path:
        return self.checkpoints / step_name(step)

    def manifest(self, step: int) -> Path:
        return self.checkpoint(step) / MANIFEST_NAME

    def attempt_dir(self, number: int) -> Path:
        return self.dir / "attempts" / str(number)

    def attempt_file(self, number: int) -> Path:
        """What the worker tells the training process about attempt `number`."""
        return self.attempt_dir(number) / "attempt.json"

    def receipt(self, number: int) -> Path:
        return self.attempt_dir(number) / "receipt.json"

    def outcome(self, number: int) -> Path:
        """Where a program may say how attempt `number` ended."""
        return self.attempt_dir(number) / "outcome.json"

    def metrics(self, number: int) -> Path:
        """Every point attempt `number` logged (`run.log`), one JSON line each (sweepq/history/)."""
        return self.attempt_dir(number) / "metrics.jsonl"

    def stdout(self, number: int) -> Path:
        return self.attempt_dir(number) / "stdout.log"

    def stderr(self, number: int) -> Path:
        return self.attempt_dir(number) / "stderr.log"

    def resolve(self, relative: str) -> Path:
        """The path that `relative` (as DONE.json records it) names."""
        return self.dir / relative

    def relative(self, path: Path) -> str:
        """A path inside the cell folder, as DONE.json and the database record it.

        A path in the sweep's storage folder (`storage:`, which holds the root's layout) is named as
        in the root: what follows its `cells/<cell>/`.
        """
        try:
            return path.relative_to(self.dir).as_posix()
        except ValueError:
            parts = path.parts
            for i in range(len(parts) - 2, -1, -1):
                if parts[i] == CELLS_DIR and parts[i + 1] == self.cell_id:
                    return PurePosixPath(*parts[i + 2 :]).as_posix()
            raise

    def from_root(self, relative: str) -> str:
        """A path relative to the cell folder (as `relative` gives), made relative to the root.

        The database's checkpoint rows hold these, so that they read the same on
        any machine that mounts the root elsewhere.
        """
        return (PurePosixPath(CELLS_DIR) / self.cell_id / relative).as_posix()

    def committed_steps(self) -> list[int]:
        """Steps of folders named like committed checkpoints, newest first (unverified)."""
        return committed_steps_in(self.checkpoints)
