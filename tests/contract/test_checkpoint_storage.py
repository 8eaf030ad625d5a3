"""The CheckpointStorage contract (checkpoint/storage.py), one suite over every implementation (contract/backends.py).

Each test is written once and runs over the local folder, the in-memory
object store and a bucket on a real S3 API (moto's server on the loopback). The commit protocol: a step
is committed only when its manifest is; `steps()` lists committed steps newest
first; a repeated commit keeps the first; damage is found on read and moved
aside by quarantine; deletion (retention) removes a step from the listing at
once; what a crash leaves is never a step and is cleaned up later.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from contract.backends import CheckpointBackend
from contract.racing import race
from sweepq.checkpoint import commit, readio, retention, serialize
from sweepq.checkpoint.fenced import FencedStorage
from sweepq.checkpoint.manifest import FORMAT, CheckpointCorrupt
from sweepq.checkpoint.storage import CheckpointStorage, committed_manifests, verify
from sweepq.layout import MANIFEST_NAME, CellPaths
from sweepq.queue.fence import Fenced


def manifest_bytes(step: int, written: dict[str, tuple[str, int]], **meta: Any) -> bytes:
    files = {name: {"sha256": sha, "size": size} for name, (sha, size) in written.items()}
    m = {"format": FORMAT, "kind": "files", "step": step, "created_at": "2025-03-01T12:00:00Z", "files": files, **meta}
    return (json.dumps(m, indent=1, sort_keys=True) + "\n").encode()


def put(storage: CheckpointStorage, step: int, files: dict[str, bytes], **meta: Any) -> bool:
    """Stage, write and commit one step the way the writers do (commit.py, files.py)."""
    staged = storage.stage(step)
    written = staged.write({name: [memoryview(data)] for name, data in files.items()})
    return staged.commit(manifest_bytes(step, written, **meta))


def content(storage: CheckpointStorage, step: int) -> dict[str, bytes]:
    m, _ = storage.read_manifest(step)
    return {name: storage.read(step, name, entry) for name, entry in m["files"].items()}


@pytest.fixture
def storage(checkpoints: CheckpointBackend, tmp_path: Path) -> CheckpointStorage:
    return checkpoints.make(tmp_path)


# -- the commit ------------------------------------------------------------------------


def test_an_empty_storage_has_no_steps(storage: CheckpointStorage) -> None:
    assert storage.steps() == []
    assert storage.clean_partial() == []


def test_a_committed_step_reads_back_verified(storage: CheckpointStorage, tmp_path: Path) -> None:
    data = {"a.bin": b"alpha" * 1000, "b.bin": b"", "c.bin": bytes(range(256))}
    assert put(storage, 7, data, epoch=1.5)
    assert storage.steps() == [7]
    m, msha = storage.read_manifest(7)
    assert (m["step"], m["epoch"]) == (7, 1.5)
    assert m["files"]["a.bin"] == {"sha256": hashlib.sha256(data["a.bin"]).hexdigest(), "size": 5000}
    written = {name: (hashlib.sha256(d).hexdigest(), len(d)) for name, d in data.items()}
    assert msha == hashlib.sha256(manifest_bytes(7, written, epoch=1.5)).hexdigest()
    assert content(storage, 7) == data
    into = storage.read_into(7, "a.bin", m["files"]["a.bin"], readio.fresh)
    assert bytes(memoryview(into).cast("B")) == data["a.bin"]
    for name, entry in m["files"].items():
        storage.check(7, name, entry)
    assert verify(storage, 7) == m
    assert storage.linked(7) is None
    cell = CellPaths(tmp_path / "root", "a")
    assert storage.location(7) == cell.checkpoint(7)  # its place in the root's layout, whatever keeps it
    assert cell.relative(storage.location(7)) == "checkpoints/step-7"  # as DONE.json and the database record it


def test_a_step_is_committed_only_once_its_manifest_is(storage: CheckpointStorage) -> None:
    """A crash after the data and before the manifest: no step, the previous one intact, the data an orphan."""
    put(storage, 1, {"x": b"one"})
    staged = storage.stage(2)
    staged.write({"x": [memoryview(b"two")]})
    assert storage.steps() == [1]  # written, not committed: invisible
    assert content(storage, 1) == {"x": b"one"}
    removed = storage.clean_partial()
    assert len(removed) == 1  # the crashed write's leftovers, named
    assert storage.clean_partial() == []
    assert storage.steps() == [1] and content(storage, 1) == {"x": b"one"}


def test_the_parts_may_change_once_write_returns(storage: CheckpointStorage) -> None:
    buffer = bytearray(b"before")
    staged = storage.stage(3)
    written = staged.write({"x": [memoryview(buffer)]})
    buffer[:] = b"AFTER!"
    assert staged.commit(manifest_bytes(3, written))
    assert content(storage, 3) == {"x": b"before"}


def test_a_repeated_commit_keeps_the_first(storage: CheckpointStorage) -> None:
    assert put(storage, 5, {"x": b"first"})
    assert not put(storage, 5, {"x": b"second"})  # nothing committed, nothing changed
    assert content(storage, 5) == {"x": b"first"}
    assert storage.steps() == [5]
    assert storage.clean_partial() == []  # the loser's data did not stay behind


def test_steps_are_listed_newest_first_by_number(storage: CheckpointStorage) -> None:
    for step in (2, 10, 9, 100, 0):
        put(storage, step, {"x": str(step).encode()})
    assert storage.steps() == [100, 10, 9, 2, 0]
    assert {s: content(storage, s)["x"] for s in storage.steps()} == {s: str(s).encode() for s in (100, 10, 9, 2, 0)}


def test_two_cells_do_not_see_each_others_steps(checkpoints: CheckpointBackend, tmp_path: Path) -> None:
    a, b = checkpoints.make(tmp_path, "a"), checkpoints.make(tmp_path, "b")
    put(a, 1, {"x": b"a"})
    put(b, 2, {"x": b"b"})
    assert (a.steps(), b.steps()) == ([1], [2])
    a.delete(1)
    a.clean_partial()
    assert a.steps() == []
    assert b.steps() == [2] and content(b, 2) == {"x": b"b"}


# -- damage -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "why"),
    [(b"alphA", "sha256 does not match"), (b"alph", "manifest says 5"), (b"alpha!", "manifest says 5")],
)
def test_a_damaged_file_is_refused_on_every_read(
    checkpoints: CheckpointBackend, storage: CheckpointStorage, data: bytes, why: str
) -> None:
    put(storage, 4, {"x": b"alpha", "y": b"beta"})
    checkpoints.replace(storage, 4, "x", data)
    m, _ = storage.read_manifest(4)  # the manifest itself is sound
    entry = m["files"]["x"]
    for read in (
        lambda: storage.read(4, "x", entry),
        lambda: storage.read_into(4, "x", entry, readio.fresh),
        lambda: storage.check(4, "x", entry),
        lambda: verify(storage, 4),
    ):
        with pytest.raises(CheckpointCorrupt, match=why):
            read()
    assert storage.read(4, "y", m["files"]["y"]) == b"beta"


@pytest.mark.parametrize("raw", [b"{not json", b'{"format": 1}', b""])
def test_a_damaged_manifest_is_refused_and_reported(
    checkpoints: CheckpointBackend, storage: CheckpointStorage, raw: bytes
) -> None:
    put(storage, 1, {"x": b"one"})
    put(storage, 2, {"x": b"two"})
    checkpoints.replace(storage, 2, MANIFEST_NAME, raw)
    with pytest.raises(CheckpointCorrupt):
        storage.read_manifest(2)
    damaged: dict[int, str] = {}
    assert list(committed_manifests(storage, damaged)) == [1]
    assert list(damaged) == [2]


def test_a_manifest_of_another_step_is_refused(checkpoints: CheckpointBackend, storage: CheckpointStorage) -> None:
    put(storage, 1, {"x": b"one"})
    put(storage, 2, {"x": b"two"})
    checkpoints.replace(storage, 2, MANIFEST_NAME, manifest_bytes(1, {"x": (hashlib.sha256(b"one").hexdigest(), 3)}))
    with pytest.raises(CheckpointCorrupt, match="step is 1, but the checkpoint is step 2"):
        storage.read_manifest(2)


def test_quarantine_moves_a_step_aside_and_keeps_it(checkpoints: CheckpointBackend, storage: CheckpointStorage) -> None:
    put(storage, 1, {"x": b"one"})
    put(storage, 2, {"x": b"two"})
    moved = storage.quarantine(2)
    assert storage.steps() == [1]
    assert moved.parent == storage.location(2).parent and moved != storage.location(2) and "corrupt" in moved.name
    assert storage.clean_partial() == []  # kept for inspection, not a leftover
    assert put(storage, 2, {"x": b"again"})  # the step's name is free for a new commit
    assert content(storage, 2) == {"x": b"again"}


# -- a training state through the storage (commit.py) --------------------------------------


def tensors_of(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(64, 33, generator=g), "b": torch.arange(7, dtype=torch.int64) * seed}


def write_state(storage: CheckpointStorage, step: int, seed: int) -> commit.Committed:
    skeleton, tensors = serialize.flatten({"model": tensors_of(seed), "epoch": seed})
    return commit.write_checkpoint(storage, step, skeleton, tensors, {"attempt": 1, "metrics": {"loss": 1.0 / seed}})


def test_a_training_state_round_trips_bit_exactly(storage: CheckpointStorage) -> None:
    done = write_state(storage, 10, 3)
    assert done.step == 10 and done.path == storage.location(10)
    loaded = commit.load(storage, 10)
    expected = tensors_of(3)
    assert loaded.state["epoch"] == 3
    assert loaded.manifest_sha256 == done.manifest_sha256
    for name, tensor in expected.items():
        assert torch.equal(loaded.state["model"][name], tensor)


def test_the_newest_sound_step_is_loaded_and_damaged_ones_moved_aside(
    checkpoints: CheckpointBackend, storage: CheckpointStorage
) -> None:
    for step, seed in ((10, 1), (20, 2), (30, 3)):
        write_state(storage, step, seed)
    m, _ = storage.read_manifest(30)
    tensors = next(n for n in m["files"] if n != "state.json")
    checkpoints.replace(storage, 30, tensors, b"\0" * m["files"][tensors]["size"])
    seen: list[tuple[int, str]] = []
    loaded = commit.load_newest(storage, on_corrupt=lambda step, why, where: seen.append((step, why)))
    assert loaded is not None and loaded.step == 20 and loaded.state["epoch"] == 2
    assert [s for s, _ in seen] == [30] and "sha256" in seen[0][1]
    assert storage.steps() == [20, 10]  # never tried again
    assert commit.load_newest(storage, max_step=15).step == 10  # type: ignore[union-attr]


# -- retention and links ---------------------------------------------------------------------


def test_retention_deletes_what_it_does_not_keep(storage: CheckpointStorage) -> None:
    for step, loss in ((1, 0.5), (2, 0.1), (3, 0.9), (4, 0.8), (5, 0.7)):
        put(storage, step, {"x": str(step).encode()}, metrics={"loss": loss})
    keep = retention.to_keep(committed_manifests(storage), keep_last=2, metric=("loss", "min"), protect={1})
    assert keep == {5, 4, 2, 1}
    for step in set(storage.steps()) - keep:
        storage.delete(step)
        assert step not in storage.steps()  # gone at once, whatever is freed later
    assert storage.steps() == [5, 4, 2, 1]
    assert {s: content(storage, s)["x"] for s in storage.steps()} == {s: str(s).encode() for s in (5, 4, 2, 1)}
    assert put(storage, 3, {"x": b"three again"})  # a deleted step's name is free


def test_a_linked_step_is_read_but_never_changed_through(checkpoints: CheckpointBackend, tmp_path: Path) -> None:
    other, mine = checkpoints.make(tmp_path, "other"), checkpoints.make(tmp_path, "mine")
    put(other, 8, {"x": b"warm"})
    put(other, 9, {"x": b"start"})
    checkpoints.link(mine, 8, other, 8)
    checkpoints.link(mine, 9, other, 9)
    assert mine.steps() == [9, 8]
    assert mine.linked(8) is not None and content(mine, 8) == {"x": b"warm"}
    moved = mine.detach(8)  # the link moves aside, kept
    assert mine.steps() == [9] and moved != mine.location(8)
    mine.delete(9)  # only the link goes
    assert mine.steps() == []
    assert other.steps() == [9, 8] and content(other, 9) == {"x": b"start"} and content(other, 8) == {"x": b"warm"}
    put(mine, 1, {"x": b"own"})
    with pytest.raises(ValueError, match="no link"):
        mine.detach(1)


def test_a_commit_over_a_linked_step_moves_the_link_aside(checkpoints: CheckpointBackend, tmp_path: Path) -> None:
    other, mine = checkpoints.make(tmp_path, "other"), checkpoints.make(tmp_path, "mine")
    put(other, 4, {"x": b"theirs"})
    checkpoints.link(mine, 4, other, 4)
    assert put(mine, 4, {"x": b"mine"})  # the cell's own timeline needs the name
    assert mine.linked(4) is None and content(mine, 4) == {"x": b"mine"}
    assert content(other, 4) == {"x": b"theirs"}


# -- fencing (checkpoint/fenced.py over any storage) ----------------------------------------------


def test_a_fenced_writer_changes_nothing_and_its_reads_still_work(storage: CheckpointStorage) -> None:
    put(storage, 1, {"x": b"one"})
    put(storage, 2, {"x": b"two"})
    refused: list[str] = []

    def superseded(what: str) -> None:
        refused.append(what)
        raise Fenced(f"{what} refused: attempt 1 no longer owns the cell")

    fenced = FencedStorage(storage, superseded)
    staged = fenced.stage(3)
    written = staged.write({"x": [memoryview(b"three")]})  # unseen, so unfenced
    with pytest.raises(Fenced):
        staged.commit(manifest_bytes(3, written))
    for change in (lambda: fenced.delete(1), lambda: fenced.quarantine(2), fenced.clean_partial):
        with pytest.raises(Fenced):
            change()
    assert len(refused) == 4
    assert storage.steps() == [2, 1] and content(storage, 2) == {"x": b"two"}
    assert fenced.steps() == [2, 1] and content(fenced, 1) == {"x": b"one"}  # reading never harms the owner
    assert len(storage.clean_partial()) == 1  # the refused commit's data, cleaned by the next owner


def test_writers_racing_to_commit_one_step_make_one_commit(checkpoints: CheckpointBackend, tmp_path: Path) -> None:
    """Two processes of one cell (a zombie and its successor) commit the same step: one wins, whole."""
    writers = [checkpoints.make(tmp_path) for _ in range(6)]  # one cell's storage, seen by six writers
    staged = [(w.stage(5), w) for w in writers]
    manifests = [
        manifest_bytes(5, s.write({"x": [memoryview(f"writer {i}".encode() * 100)]})) for i, (s, _) in enumerate(staged)
    ]
    results: dict[int, bool] = {}

    def commit_one(i: int) -> None:
        results[i] = staged[i][0].commit(manifests[i])

    assert race(commit_one, len(writers)) == []
    winners = [i for i, won in results.items() if won]
    assert len(winners) == 1
    assert content(writers[0], 5) == {"x": f"writer {winners[0]}".encode() * 100}
    assert writers[0].steps() == [5]
    assert writers[0].clean_partial() == []  # the losers took their data with them
