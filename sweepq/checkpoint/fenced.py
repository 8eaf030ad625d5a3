"""A checkpoint storage whose every change is fenced: asked first, refused when the writer lost its cell.

The fence itself is the caller's (queue/fence.py checks the attempt against
the queue); this module only makes sure no change to a cell's checkpoints
(commit, quarantine, deletion, cleaning after a crash) happens without it.
Reads are not fenced: reading never harms the cell's owner.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from sweepq.checkpoint.crashpoints import crash_point
from sweepq.checkpoint.storage import CheckpointStorage, Staged

FenceCheck = Callable[[str], None]  # raises when the write named must not happen
_B = TypeVar("_B")


class FencedStorage:
    """`inner` with `fence(what)` asked before each change."""

    def __init__(self, inner: CheckpointStorage, fence: FenceCheck) -> None:
        self.inner = inner
        self.fence = fence

    # -- reads -------------------------------------------------------------------

    def steps(self) -> list[int]:
        return self.inner.steps()

    def location(self, step: int) -> Path:
        return self.inner.location(step)

    def read_manifest(self, step: int) -> tuple[dict[str, Any], str]:
        return self.inner.read_manifest(step)

    def read(self, step: int, name: str, entry: dict[str, Any]) -> bytes:
        return self.inner.read(step, name, entry)

    def read_into(self, step: int, name: str, entry: dict[str, Any], alloc: Callable[[int], _B]) -> _B:
        return self.inner.read_into(step, name, entry, alloc)

    def check(self, step: int, name: str, entry: dict[str, Any]) -> None:
        self.inner.check(step, name, entry)

    def linked(self, step: int) -> str | None:
        return self.inner.linked(step)

    # -- changes -----------------------------------------------------------------

    def stage(self, step: int) -> Staged:
        return _FencedStaged(self.inner.stage(step), lambda: self.fence(f"the commit of checkpoint step {step}"))

    def quarantine(self, step: int) -> Path:
        self.fence(f"moving aside checkpoint step {step}")
        return self.inner.quarantine(step)

    def detach(self, step: int) -> Path:
        self.fence(f"moving aside the link named checkpoint step {step}")
        return self.inner.detach(step)

    def delete(self, step: int) -> None:
        self.fence(f"the deletion of checkpoint step {step}")
        self.inner.delete(step)

    def clean_partial(self) -> list[str]:
        self.fence("cleaning up after crashed writes")
        return self.inner.clean_partial()


class _FencedStaged:
    """Files are written unfenced (nobody sees a stage); the commit that publishes them is fenced."""

    def __init__(self, inner: Staged, fence: Callable[[], None]) -> None:
        self.inner = inner
        self.fence = fence

    def write(self, files: dict[str, list[memoryview]]) -> dict[str, tuple[str, int]]:
        return self.inner.write(files)

    def commit(self, manifest_bytes: bytes) -> bool:
        self.fence()
        # Between the fence's answer and the commit a process may stop for any time (on a bucket the
        # commit is one PUT): what it commits then is never trusted by a later attempt (witnessed.py).
        crash_point("after_fence")
        return self.inner.commit(manifest_bytes)
