"""Fencing at the storage: a cell's checkpoints as the attempt that owns it may trust them.

The fence (queue/fence.py) is asked before every commit, but on a bucket a commit is one PUT that
may land any time after that question: a process frozen (SIGSTOP, a VM paused, a GC pause, a
network partition) between the check and the PUT finishes its commit when it thaws, long after the
queue gave its cell to another attempt. Its checkpoint is then a sound manifest over sound bytes,
verified like any other, of a training the queue abandoned: it must never be resumed from.

So a committed step is trusted only with a witness, checked here when the attempt reads the cell's
checkpoints (before its resume):

  * its manifest names this attempt (`attempt`: the token, written in every manifest), or
  * the queue has its row (the `checkpoints` table: step, attempt and manifest sha256 equal), written
    only while the writing attempt was the cell's current one: by its worker's flush (fenced in the
    same transaction, worker/progress.py), or by whoever closed the attempt, for the manifests of that
    attempt in the storage at the close (queue/reaper.py `sync_checkpoints`: a commit that landed
    before the queue moved on is the attempt's own, whoever saw it first), or
  * it carries no attempt (a sweepq before the token) or is a linked step (another sweep's).

The worker reads the rows when it starts the attempt (AttemptSpec.witnessed): every earlier attempt
is closed by then, so a late commit of any of them is not among them, whenever it lands. A step
without a witness is hidden from `steps()`: no resume, retention, rollback or DONE.json sees it; the
attempt says so once (Run: Warned `checkpoint_unwitnessed`). Should this attempt commit the same step
number, the stray manifest is first moved aside (quarantined, through the fence), so that the step's
name holds this attempt's checkpoint. What a late writer can still do is one operation (its next
question to the fence refuses it), and a deletion or a clean-up it makes costs only time: every
resume verifies every byte.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from sweepq.checkpoint.manifest import CheckpointCorrupt, CheckpointTooNew
from sweepq.checkpoint.storage import CheckpointStorage, Staged

_B = TypeVar("_B")
#: [step, attempt, manifest sha256] of a row of the queue, as the attempt file carries it (JSON)
Witness = tuple[int, int | None, str | None] | list[Any]


class Witnessed:
    """`inner` with the steps no witness vouches for hidden (the module's doc says which)."""

    def __init__(self, inner: CheckpointStorage, attempt: int, witnessed: Iterable[Witness]) -> None:
        self.inner = inner
        self.attempt = attempt
        self._rows: dict[int, list[tuple[int | None, str | None]]] = {}
        for step, by, sha in witnessed:
            self._rows.setdefault(int(step), []).append((None if by is None else int(by), sha))
        self._lock = threading.Lock()
        self._manifests: dict[int, tuple[dict[str, Any], str]] = {}  # immutable while the step's key lives
        self.unwitnessed: dict[int, int] = {}  # step -> the attempt that wrote it, hidden

    def trusted(self, step: int) -> bool:
        try:
            m, sha = self.read_manifest(step)
        except (CheckpointCorrupt, CheckpointTooNew):
            return True  # not hidden: the damaged path moves it aside, a newer sweepq's stops the resume
        by = m.get("attempt")
        if not isinstance(by, int) or by == self.attempt or self.inner.linked(step) is not None:
            return True
        if any(a == by and s in (None, sha) for a, s in self._rows.get(step, ())):
            return True
        with self._lock:
            self.unwitnessed[step] = by
        return False

    # -- reads -------------------------------------------------------------------

    def steps(self) -> list[int]:
        return [s for s in self.inner.steps() if self.trusted(s)]

    def location(self, step: int) -> Path:
        return self.inner.location(step)

    def read_manifest(self, step: int) -> tuple[dict[str, Any], str]:
        with self._lock:
            known = self._manifests.get(step)
        if known is not None:
            return known
        found = self.inner.read_manifest(step)
        with self._lock:
            self._manifests[step] = found
        return found

    def read(self, step: int, name: str, entry: dict[str, Any]) -> bytes:
        return self.inner.read(step, name, entry)

    def read_into(self, step: int, name: str, entry: dict[str, Any], alloc: Callable[[int], _B]) -> _B:
        return self.inner.read_into(step, name, entry, alloc)

    def check(self, step: int, name: str, entry: dict[str, Any]) -> None:
        self.inner.check(step, name, entry)

    def linked(self, step: int) -> str | None:
        return self.inner.linked(step)

    # -- changes -----------------------------------------------------------------

    def _forget(self, step: int) -> None:
        with self._lock:
            self._manifests.pop(step, None)

    def stage(self, step: int) -> Staged:
        if step in self.inner.steps() and not self.trusted(step):
            self.inner.quarantine(step)  # a superseded attempt's late commit: the name is this attempt's
        self._forget(step)
        return _Forgetting(self.inner.stage(step), lambda: self._forget(step))

    def quarantine(self, step: int) -> Path:
        self._forget(step)
        return self.inner.quarantine(step)

    def detach(self, step: int) -> Path:
        self._forget(step)
        return self.inner.detach(step)

    def delete(self, step: int) -> None:
        self._forget(step)
        self.inner.delete(step)

    def clean_partial(self) -> list[str]:
        return self.inner.clean_partial()


class _Forgetting:
    """A stage whose commit drops what was known of its step (the manifest there is a new one)."""

    def __init__(self, inner: Staged, forget: Callable[[], None]) -> None:
        self.inner, self.forget = inner, forget

    def write(self, files: dict[str, list[memoryview]]) -> dict[str, tuple[str, int]]:
        return self.inner.write(files)

    def commit(self, manifest_bytes: bytes) -> bool:
        try:
            return self.inner.commit(manifest_bytes)
        finally:
            self.forget()
