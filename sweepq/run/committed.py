"""The cell's committed checkpoints as one attempt knows them: retention, superseding, rollback.

Read from storage when the Run starts, then kept by the Run: the training
thread reads it, the writer thread adds to it, hence the lock. Every deletion
is reported to the worker (Superseded), which mirrors it in the database.

A step whose manifest is damaged is none of them. The restore meets the newer
ones first and moves them aside (commit.load_newest); whatever is left (older
than the step resumed from, or past a rollback's limit) is moved aside here
before the set first changes, and reported (Corrupt) as the restore reports
its own: a damaged step is never counted, never in the way of a commit.

A linked step (a `step-N` that is a symbolic link: a warm start linked in
from another sweep, storage.py) may be resumed from, but it is not the cell's
own: retention neither counts nor deletes it, it stays in place and the
attempt says so once (Warned `checkpoint_link_kept`). When the cell's own
timeline passes back over it (a rollback or restart before it, or a commit of
the same step) the link itself is moved aside, kept under `.linked-*`, and
the attempt says so (Warned `checkpoint_link_moved`). What the link points at
is never changed.
"""

from __future__ import annotations

import math
import sys
import threading
from pathlib import Path
from typing import Any

from sweepq.checkpoint import retention, storage
from sweepq.wire.channel import Channel
from sweepq.wire.messages import Corrupt, Superseded, Warned


class CommittedSet:
    def __init__(self, checkpoints: storage.CheckpointStorage, channel: Channel) -> None:
        self._storage = checkpoints
        self._channel = channel
        self._lock = threading.Lock()
        self._damaged: dict[int, str] = {}  # step -> why its manifest does not read
        self._manifests = storage.committed_manifests(checkpoints, self._damaged)
        # step -> where the link points, for the linked steps among them (never the cell's own)
        self._linked = {s: t for s in self._manifests if (t := checkpoints.linked(s)) is not None}
        self._said_kept: set[int] = set()

    def add(self, step: int, entry: dict[str, Any]) -> None:
        with self._lock:
            self._manifests[step] = entry
            self._linked.pop(step, None)  # committed by this cell: its own now (a link there was moved aside)

    def forget(self, step: int) -> None:
        """A checkpoint that failed verification (and was moved aside)."""
        with self._lock:
            self._manifests.pop(step, None)
            self._damaged.pop(step, None)
            self._linked.pop(step, None)

    def newest(self) -> tuple[int, dict[str, Any]] | None:
        with self._lock:
            if not self._manifests:
                return None
            step = max(self._manifests)
            return step, self._manifests[step]

    def newest_is_linked(self) -> bool:
        """Whether the newest committed step is linked (a warm start the attempt resumed from and never passed)."""
        with self._lock:
            return bool(self._manifests) and max(self._manifests) in self._linked

    def newest_step(self, default: int) -> int:
        with self._lock:
            return max(self._manifests, default=default)

    def best(self, name: str, goal: str) -> float | None:
        """The best finite value of metric `name` among the cell's own committed checkpoints (None: none holds it)."""
        with self._lock:
            values = [
                float(v)
                for s, m in self._manifests.items()
                if s not in self._linked
                and isinstance(m.get("metrics"), dict)
                and isinstance(v := m["metrics"].get(name), (int, float))
                and not isinstance(v, bool)
                and math.isfinite(v)
            ]
        if not values:
            return None
        return max(values) if goal == "max" else min(values)

    def rollback_limit(self, nan_step: int | None) -> int | None:
        """After a `nan`: resume from the checkpoint before the one the bad interval started from."""
        with self._lock:
            return retention.rollback_limit(list(self._manifests), nan_step)

    def retain(self, keep_last: int, metric: tuple[str, str] | None) -> None:
        self._set_aside_damaged()
        with self._lock:
            own = {s: m for s, m in self._manifests.items() if s not in self._linked}
            keep = retention.to_keep(own, keep_last, metric, set())
            drop = sorted(set(own) - keep)
            unsaid = {s: t for s, t in self._linked.items() if s not in self._said_kept}
            self._said_kept.update(unsaid)
        self._delete(drop, "retention")
        for step, target in sorted(unsaid.items()):
            self._warn(
                "checkpoint_link_kept",
                step,
                f"checkpoints/step-{step} is a link to {target}: a resume may load it (verified), but sweepq never "
                "counts or deletes a linked checkpoint, nor anything it points at; it stays in place",
            )

    def supersede_after(self, step: int, note: str) -> None:
        self._set_aside_damaged()
        with self._lock:
            later = sorted(s for s in self._manifests if s > step and s not in self._linked)
            links = sorted(s for s in self._linked if s > step)
        for s in links:
            self._detach(s)
        self._delete(later, note)

    def _detach(self, step: int) -> None:
        """A linked step the cell's own timeline passed back over: its link moves aside, its target stays."""
        with self._lock:
            target = self._linked.get(step, "?")
        try:
            moved = self._storage.detach(step)
        except (FileNotFoundError, ValueError):
            moved = None  # gone, or no longer a link: nothing of ours to move
        self.forget(step)
        if moved is not None:
            self._warn(
                "checkpoint_link_moved",
                step,
                f"checkpoints/step-{step}, a link to {target}, was moved to checkpoints/{moved.name}: this attempt "
                f"trains from an earlier step or commits step {step} itself (what the link points at is untouched)",
            )

    def _warn(self, event: str, step: int, note: str) -> None:
        print(f"sweepq warning: {note}", file=sys.stderr, flush=True)
        self._channel.send(Warned(event=event, step=step, notes=[note]))

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
