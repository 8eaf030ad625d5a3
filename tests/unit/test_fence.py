"""The fence in-process: an attempt's writes pass while it is the cell's current one, and never after."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sweepq.checkpoint import commit, serialize, storage
from sweepq.checkpoint.fenced import FencedStorage
from sweepq.layout import CellPaths
from sweepq.queue import liveness
from sweepq.queue.fence import Fence, Fenced
from sweepq.queue.records import Outcome
from sweepq.queue.store import Store
from unit.support import WORKER


def _own_and_claim(store: Store, cell: str) -> tuple[liveness.Ownership, int]:
    owner = liveness.for_root(store.root).take(cell)
    assert owner is not None
    claim = store.claim(cell, WORKER)
    assert claim is not None
    return owner, claim.number


def _commit(checkpoints: storage.CheckpointStorage, step: int) -> None:
    skeleton, tensors = serialize.flatten({"w": torch.ones(2)})
    commit.write_checkpoint(checkpoints, step, skeleton, tensors, {})


def test_the_current_attempt_writes_and_a_superseded_one_is_refused(store: Store) -> None:
    owner, number = _own_and_claim(store, "1.1")
    fence = Fence(store.root, "1.1", number, owner)
    fenced = FencedStorage(storage.for_cell(CellPaths(store.root, "1.1"), None), fence.check)
    _commit(fenced, 1)
    assert store.is_current("1.1", number)

    store.finish("1.1", number, Outcome(reason="lost"))  # what a reaper does when it believes it dead
    with pytest.raises(Fenced, match=r"attempt 1 no longer owns the cell \(the queue closed this attempt"):
        _commit(fenced, 2)
    owner.release()
    with pytest.raises(Fenced, match="its ownership was released"):
        fenced.delete(1)
    new_owner, second = _own_and_claim(store, "1.1")
    # Even holding the lock (as a second writer would if locking failed), the token refuses attempt 1.
    stale = FencedStorage(fenced.inner, Fence(store.root, "1.1", number, new_owner).check)
    with pytest.raises(Fenced, match="the cell is on attempt 2 now"):
        stale.delete(1)
    assert not store.is_current("1.1", number) and store.is_current("1.1", second)
    assert fenced.steps() == [1]  # nothing was committed or deleted by the superseded attempt
    new_owner.release()


def test_a_cell_folder_moved_under_its_owner_fences_it_even_while_the_queue_agrees(store: Store) -> None:
    owner, number = _own_and_claim(store, "1.1")
    fence = Fence(store.root, "1.1", number, owner)
    fence.check("a write")
    cell = CellPaths(store.root, "1.1")
    cell.dir.rename(cell.dir.with_name("1.1-moved"))
    cell.dir.mkdir()
    assert owner.lost() is not None
    with pytest.raises(Fenced, match="was moved, removed or replaced"):
        fence.check("DONE.json")
    # The folder that replaced it can be taken: the moved one's lock does not hold it.
    other = liveness.for_root(store.root).take("1.1")
    assert other is not None
    other.release()
    owner.release()


def test_deleting_files_in_a_cell_folder_never_frees_its_lock(tmp_path: Path) -> None:
    owners = liveness.for_root(tmp_path)
    owner = owners.take("1.1")
    assert owner is not None
    cell = CellPaths(tmp_path, "1.1")
    (cell.dir / "lock").write_text("")  # what earlier versions locked
    cell.attempt_dir(1).mkdir(parents=True)
    cell.stdout(1).write_text("log")
    # A tmp cleaner or `find -delete` removes every file and empty folder it finds inside.
    for f in sorted(cell.dir.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        f.rmdir() if f.is_dir() else f.unlink()
    assert not any(cell.dir.iterdir())
    assert owners.owner_alive("1.1") and owners.take("1.1") is None and owner.lost() is None
    owner.release()
    assert not owners.owner_alive("1.1")
