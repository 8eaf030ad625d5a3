"""The durable layout of a sweep root: the one place that knows where files live.

Stable (outside tools rely on it):
    <root>/sweepq.db                              the queue and all receipts
    <root>/cells/<cell>/checkpoints/step-<step>/  one committed checkpoint (manifest.json inside)
    <root>/cells/<cell>/DONE.json                 the done marker

sweepq's own choice (may change between versions):
    <root>/cells/<cell>/lock                      the cell's file lock (held by its training process)
    <root>/cells/<cell>/cfg.json                  the cell's cfg, for programs and people
    <root>/cells/<cell>/attempts/<n>/             stdout.log, stderr.log, receipt.json of attempt n
    <root>/attic/<cell>/<stamp>/                  what `sweepq reset` moved aside
    <root>/.sweepq/                               root-wide locks and launch logs
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

DB_NAME = "sweepq.db"
DONE_NAME = "DONE.json"
MANIFEST_NAME = "manifest.json"
STEP_DIR = re.compile(r"^step-(\d+)$")


@dataclass(frozen=True)
class RootPaths:
    root: Path

    @property
    def db(self) -> Path:
        return self.root / DB_NAME

    @property
    def private(self) -> Path:
        return self.root / ".sweepq"

    @property
    def migrate_lock(self) -> Path:
        return self.private / "migrate.lock"

    @property
    def attic(self) -> Path:
        return self.root / "attic"

    def cell(self, cell_id: str) -> CellPaths:
        return CellPaths(self.root, cell_id)


@dataclass(frozen=True)
class CellPaths:
    root: Path
    cell_id: str

    @property
    def dir(self) -> Path:
        return self.root / "cells" / self.cell_id

    @property
    def checkpoints(self) -> Path:
        return self.dir / "checkpoints"

    def checkpoint(self, step: int) -> Path:
        return self.checkpoints / f"step-{step}"

    @property
    def done(self) -> Path:
        return self.dir / DONE_NAME

    @property
    def lock(self) -> Path:
        return self.dir / "lock"

    @property
    def cfg(self) -> Path:
        return self.dir / "cfg.json"

    def attempt_dir(self, number: int) -> Path:
        return self.dir / "attempts" / str(number)

    def receipt(self, number: int) -> Path:
        return self.attempt_dir(number) / "receipt.json"

    def stdout(self, number: int) -> Path:
        return self.attempt_dir(number) / "stdout.log"

    def stderr(self, number: int) -> Path:
        return self.attempt_dir(number) / "stderr.log"

    def relative(self, path: Path) -> str:
        """A path inside the cell folder, as DONE.json and the database record it."""
        return path.relative_to(self.dir).as_posix()

    def committed_steps(self) -> list[int]:
        """Steps of folders named like committed checkpoints, newest first (unverified)."""
        if not self.checkpoints.is_dir():
            return []
        steps = []
        for entry in self.checkpoints.iterdir():
            m = STEP_DIR.match(entry.name)
            if m and entry.is_dir():
                steps.append(int(m.group(1)))
        return sorted(steps, reverse=True)
