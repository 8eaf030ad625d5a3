"""Nothing outside a root is changed through a link: ownfiles.py, the storage and retention, on real files and links.

Every test builds a second folder ("elsewhere", standing for another sweep),
links it into the root the way a person or a tool would, runs the operation,
and compares every byte and name of the other folder before and after.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import pytest
import torch
from conftest import make_run

from sweepq import ownfiles
from sweepq.checkpoint import commit as checkpoint
from sweepq.checkpoint import serialize, storage
from sweepq.checkpoint.deletion import remove_gently, wait_deleted
from sweepq.checkpoint.storage import CheckpointStorage
from sweepq.layout import CellPaths
from sweepq.run.committed import CommittedSet
from sweepq.wire.channel import Channel

STEP = 1 << 16  # the shrinking step of these tests: files of a few of them are shrunk in several cuts


def snapshot(folder: Path) -> dict[str, tuple[str, str]]:
    """Every name under `folder` (links not followed) -> (kind, sha256 of a file's bytes or a link's text)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if p.is_symlink():
                out[str(p.relative_to(folder))] = ("link", os.readlink(p))
            elif p.is_dir():
                out[str(p.relative_to(folder))] = ("dir", "")
            else:
                out[str(p.relative_to(folder))] = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def other_files(tmp_path: Path) -> Path:
    """A folder outside the root with files larger than several shrinking steps."""
    other = tmp_path / "elsewhere"
    other.mkdir()
    for i, size in enumerate((5 * STEP + 7, 3 * STEP, 100)):
        (other / f"file{i}.bin").write_bytes(os.urandom(size))
    (other / "inner").mkdir()
    (other / "inner" / "deep.bin").write_bytes(os.urandom(4 * STEP))
    return other


def test_remove_unlinks_a_link_and_never_what_it_points_at(tmp_path: Path) -> None:
    other = other_files(tmp_path)
    before = snapshot(other)
    root = tmp_path / "root"
    root.mkdir()
    (root / "to-folder").symlink_to(other)
    (root / "to-file").symlink_to(other / "file0.bin")
    (root / "dangling").symlink_to(tmp_path / "nothing")
    folder = root / "folder"
    folder.mkdir()
    (folder / "linked-folder").symlink_to(other)
    (folder / "linked-file").symlink_to(other / "file1.bin")
    (folder / "own.bin").write_bytes(b"mine")
    for name in ("to-folder", "to-file", "dangling", "folder"):
        ownfiles.remove(root / name)
    ownfiles.remove(root / "never-there")  # nothing: nothing to do
    assert list(root.iterdir()) == []
    assert snapshot(other) == before


def test_shrinking_never_cuts_a_linked_or_hard_linked_file(tmp_path: Path) -> None:
    other = other_files(tmp_path)
    before = snapshot(other)
    root = tmp_path / "root"
    root.mkdir()
    folder = root / ".trash-step-10-abcd"
    folder.mkdir()
    (folder / "linked.bin").symlink_to(other / "file0.bin")
    os.link(other / "file1.bin", folder / "hard.bin")  # a second name of another sweep's file
    (folder / "linked-folder").symlink_to(other / "inner")
    own = folder / "own.bin"
    own.write_bytes(os.urandom(6 * STEP))
    ownfiles.shrink_and_remove(folder, STEP)
    assert not folder.exists() and snapshot(other) == before
    # A trash name that is itself a link (a linked step superseded): the link goes, the folder stays whole.
    trash = root / ".trash-step-20-beef"
    trash.symlink_to(other)
    remove_gently(trash)
    assert not os.path.lexists(trash) and snapshot(other) == before


def test_shrinking_cuts_own_files_in_steps(tmp_path: Path) -> None:
    """The gentle deletion still shrinks the folder's own large files (the cuts are what makes it gentle)."""
    folder = tmp_path / "own"
    folder.mkdir()
    big = folder / "big.bin"
    big.write_bytes(os.urandom(3 * STEP + 5))
    fd = os.open(big, os.O_RDONLY)  # keeps the inode readable after the unlink: its size tells what was cut
    try:
        ownfiles.shrink_and_remove(folder, STEP)
        assert os.fstat(fd).st_size == 5 and not folder.exists()
    finally:
        os.close(fd)


def test_require_own_names_the_link_and_what_to_do(tmp_path: Path) -> None:
    other = other_files(tmp_path)
    root = tmp_path / "root"
    (root / "cells" / "1.1").mkdir(parents=True)
    (root / "cells" / "1.1" / "checkpoints").symlink_to(other)
    ownfiles.require_own(root, root / "cells" / "1.2" / "checkpoints", "x")  # not there yet: no link
    with pytest.raises(ownfiles.LinkedPath) as e:
        ownfiles.require_own(root, root / "cells" / "1.1" / "checkpoints" / "step-1", "the checkpoints folder")
    assert str(e.value) == (
        f"the checkpoints folder is reached through a link: cells/1.1/checkpoints points to {other}. sweepq "
        "writes, moves and deletes only the root's own files, never through a link (the files it points at may "
        "be another sweep's). Replace the link with a real folder (move what it points at into "
        "cells/1.1/checkpoints if it is this sweep's), or put the whole root on the other disk; to warm-start a "
        "cell from another sweep, link single steps as checkpoints/step-N, which sweepq reads but never changes."
    )
    assert e.value.exit_code == 2
    # The root itself may be a link (a root on another disk): only what lies below it counts.
    (tmp_path / "root-link").symlink_to(root)
    ownfiles.require_own(tmp_path / "root-link", tmp_path / "root-link" / "cells" / "1.2", "x")


def write(where: CheckpointStorage, step: int, value: float) -> checkpoint.Committed:
    skeleton, tensors = serialize.flatten({"w": torch.full((4 * STEP,), value), "step": step})
    return checkpoint.write_checkpoint(where, step, skeleton, tensors, {"metrics": {"loss": value}})


def another_sweeps_step(tmp_path: Path, step: int) -> Path:
    """A committed checkpoint of a cell of another root; returns the other root."""
    other = tmp_path / "other-root"
    write(storage.for_cell(CellPaths(other, "1.1"), None), step, 7.0)
    return other


def test_the_storage_never_changes_a_linked_step(tmp_path: Path) -> None:
    other = another_sweeps_step(tmp_path, 10)
    before = snapshot(other)
    cell = CellPaths(tmp_path / "root", "1.1")
    cell.checkpoints.mkdir(parents=True)
    cell.checkpoint(10).symlink_to(CellPaths(other, "1.1").checkpoint(10))
    where = storage.for_cell(cell, None)
    assert where.steps() == [10] and where.linked(10) == str(CellPaths(other, "1.1").checkpoint(10))
    assert checkpoint.load(where, 10).state["step"] == 10  # a resume reads through it, verified
    # A leftover name that is a link: clean-up unlinks the link.
    (cell.checkpoints / ".writing-step-11-dead").symlink_to(CellPaths(other, "1.1").checkpoint(10))
    (cell.checkpoints / ".trash-step-9-dead").symlink_to(CellPaths(other, "1.1").checkpoint(10))
    assert sorted(where.clean_partial()) == [".trash-step-9-dead", ".writing-step-11-dead"]
    # A commit of the same step: the link moves aside (kept), the cell's own step commits.
    c = write(where, 10, 1.0)
    assert not cell.checkpoint(10).is_symlink() and c.path == cell.checkpoint(10)
    (kept,) = [p for p in cell.checkpoints.iterdir() if p.name.startswith(".linked-step-10-")]
    assert kept.is_symlink() and os.readlink(kept) == str(CellPaths(other, "1.1").checkpoint(10))
    # Quarantine and deletion of a linked step move or remove the link itself.
    cell.checkpoint(20).symlink_to(CellPaths(other, "1.1").checkpoint(10))
    moved = where.quarantine(20)
    assert moved.is_symlink() and moved.name.startswith(".corrupt-step-20-")
    cell.checkpoint(30).symlink_to(CellPaths(other, "1.1").checkpoint(10))
    where.delete(30)
    wait_deleted()
    assert where.steps() == [10] and not [p for p in cell.checkpoints.iterdir() if p.name.startswith(".trash-")]
    assert snapshot(other) == before


def test_a_linked_checkpoints_folder_refuses_every_change(tmp_path: Path) -> None:
    other = another_sweeps_step(tmp_path, 10)
    (CellPaths(other, "1.1").checkpoints / ".writing-step-12-dead").mkdir()  # another sweep's own leftover
    before = snapshot(other)
    cell = CellPaths(tmp_path / "root", "1.1")
    cell.dir.mkdir(parents=True)
    cell.checkpoints.symlink_to(CellPaths(other, "1.1").checkpoints)
    where = storage.for_cell(cell, None)
    assert where.steps() == [10]  # reading is allowed
    changes = (where.clean_partial, lambda: where.stage(11), lambda: where.delete(10), lambda: where.quarantine(10))
    for change in changes:
        with pytest.raises(ownfiles.LinkedPath, match=re.escape("cells/1.1/checkpoints points to")):
            change()
    assert snapshot(other) == before


def test_retention_neither_counts_nor_deletes_a_linked_step(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    other = another_sweeps_step(tmp_path, 10)
    before = snapshot(other)
    cell = CellPaths(tmp_path / "root", "1.1")
    cell.checkpoints.mkdir(parents=True)
    target = CellPaths(other, "1.1").checkpoint(10)
    cell.checkpoint(10).symlink_to(target)
    where = storage.for_cell(cell, None)
    kept = CommittedSet(where, Channel(None))
    for step in (20, 30, 40):
        c = write(where, step, float(step))
        kept.add(step, {"step": step, "metrics": c.metrics})
        kept.retain(keep_last=1, metric=None)
    wait_deleted()
    assert where.steps() == [40, 10] and cell.checkpoint(10).is_symlink()
    assert snapshot(other) == before
    said = capfd.readouterr().err
    assert said.count("sweepq warning:") == 1  # said once per attempt
    assert (
        f"sweepq warning: checkpoints/step-10 is a link to {target}: a resume may load it (verified), but sweepq "
        "never counts or deletes a linked checkpoint, nor anything it points at; it stays in place"
    ) in said
    # The cell's own timeline going back before it (a rollback): the link itself moves aside, kept.
    kept.supersede_after(5, "abandoned")
    wait_deleted()
    assert where.steps() == []
    (moved,) = [p for p in cell.checkpoints.iterdir() if p.name.startswith(".linked-")]
    assert moved.is_symlink() and os.readlink(moved) == str(target)
    assert (
        f"sweepq warning: checkpoints/step-10, a link to {target}, was moved to checkpoints/{moved.name}: this "
        "attempt trains from an earlier step or commits step 10 itself (what the link points at is untouched)"
    ) in capfd.readouterr().err
    assert snapshot(other) == before


def test_a_warm_start_linked_at_the_last_step_ends_on_the_cells_own_checkpoint(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Resumed from a linked step and already at the end: the final checkpoint is committed as the cell's own
    (DONE.json then names a step of the root), the link moved aside and kept, its target untouched."""
    other = another_sweeps_step(tmp_path, 10)
    before = snapshot(other)
    root = tmp_path / "root"
    cell = CellPaths(root, "1.1")
    cell.checkpoints.mkdir(parents=True)
    target = CellPaths(other, "1.1").checkpoint(10)
    cell.checkpoint(10).symlink_to(target)
    run = make_run(root, keep_last=1)
    state = {"w": torch.zeros(4 * STEP), "step": 0}
    assert run.restore(state) and run.start_step == 10 and state["step"] == 10
    run.close(completed=True)
    newest = run.newest_committed()
    assert newest is not None and newest[0] == 10
    assert cell.checkpoint(10).is_dir() and not cell.checkpoint(10).is_symlink()
    assert checkpoint.load(storage.for_cell(cell, None), 10).manifest["cfg_hash"] == "h"  # written by this run
    (moved,) = [p for p in cell.checkpoints.iterdir() if p.name.startswith(".linked-step-10-")]
    assert os.readlink(moved) == str(target)
    assert f"checkpoints/step-10, a link to {target}, was moved to checkpoints/{moved.name}" in capfd.readouterr().err
    assert snapshot(other) == before
