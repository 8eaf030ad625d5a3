"""The cell's committed checkpoints as one attempt knows them: retention, superseding, rollback.

Read from storage when the Run starts, then kept by the Run: the training
thread reads it, the writer thread adds to it, hence the lock. Every deletion
is reported to the worker (Superseded), which mirrors it in the database.

A step whose manifest is damaged is none of them. The restore meets the newer
ones first and moves them aside (commit.load_newest); whatever is left (older
than the step resumed from, or past a rollback's limit) is moved aside here
before the set first changes, and reported (Corrupt) as the restore reports
its own: a damaged step is never counted, never in the way of a commit.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from sweepq.checkpoint import retention, storage
from sweepq.execution.channel import Channel
from sweepq.execution.messages import Corrupt, Superseded


class CommittedSet:
    def __init__(self, checkpoints: storage.CheckpointStorage, channel: Channel) -> None:
        self._storage = checkpoints
        self._channel = channel
        self._lock = threading.Lock()
        self._damaged: dict[int, str] = {}  # step -> why its manifest does not read
        self._manifests = storage.committed_manifests(checkpoints, self._damaged)

    def add(self, step: int, entry: dict[str, Any]) -> None:
        with self._lock:
            self._manifests[step] = entry

    def forget(self, step: int) -> None:
        """A checkpoint that failed verification (and was moved aside)."""
        with self._lock:
            self._manifests.pop(step, None)
            self._damaged.pop(step, None)

    def newest(self) -> tuple[int, dict[str, Any]] | None:
        with self._lock:
            if not self._manifests:
                return None
            step = max(self._manifests)
            return step, self._manifests[step]

    def newest_step(self, default: int) -> int:
        with self._lock:
            return max(self._manifests, default=default)

    def rollback_limit(self, nan_step: int | None) -> int | None:
        """After a `nan`: resume from the checkpoint before the one the bad interval started from."""
        with self._lock:
            return retention.rollback_limit(list(self._manifests), nan_step)

    def retain(self, keep_last: int, metric: tuple[str, str] | None) -> None:
        self._set_aside_damaged()
        with self._lock:
            keep = retention.to_keep(self._manifests, keep_last, metric, set())
            drop = sorted(set(self._manifests) - keep)
        self._delete(drop, "retention")

    def supersede_after(self, step: int, note: str) -> None:
        self._set_aside_damaged()
        with self._lock:
            later = sorted(s for s in self._manifests if s > step)
        self._delete(later, note)

    def _delete(self, steps: list[int], note: str) -> None:
        for step in steps:
            self._storage.delete(step)
            self.forget(step)
        if steps:
            self._channel.send(Superseded(steps=steps, note=note))

    def _set_aside_damaged(self) -> None:
        with self._lock:
            damaged, self._damaged = self._damaged, {}
        for step, why in sorted(damaged.items()):
            where = self._storage.location(step)
            try:
                moved = self._storage.quarantine(step)
            except FileNotFoundError:
                continue  # gone meanwhile: nothing left to move aside
            self._channel.send(Corrupt(step=step, why=why, moved_to=_within_cell(where, moved)))


def _within_cell(where: Path, moved: Path) -> str:
    """`moved` relative to the cell folder, as Corrupt says it (the cell folder holds the checkpoints' folder)."""
    try:
        return moved.relative_to(where.parent.parent).as_posix()
    except ValueError:
        return moved.as_posix()
