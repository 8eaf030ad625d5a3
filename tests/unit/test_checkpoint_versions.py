"""Checkpoint format versions and the storage seam, in-process on real files.

A checkpoint from a newer sweepq is neither corrupt nor skippable: every reader
refuses it with the same "upgrade sweepq" error and leaves it exactly as it was.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import torch
from conftest import make_run

from sweepq.checkpoint import commit as checkpoint
from sweepq.checkpoint import manifest, serialize, storage
from sweepq.checkpoint.manifest import FORMAT, VERSION, CheckpointCorrupt, CheckpointTooNew
from sweepq.checkpoint.storage import CheckpointStorage, LocalFolder
from sweepq.layout import MANIFEST_NAME, CellPaths

_B = TypeVar("_B")
NEWER = f"written by a newer sweepq (format {VERSION + 1}; this sweepq reads formats up to {VERSION}): upgrade sweepq"


def write(where: CheckpointStorage, step: int, value: float = 1.0) -> checkpoint.Committed:
    skeleton, tensors = serialize.flatten({"w": torch.full((1000,), value), "step": step})
    return checkpoint.write_checkpoint(where, step, skeleton, tensors, {"metrics": {"loss": value}})


def rewrite_manifest(step_dir: Path, change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    path = step_dir / MANIFEST_NAME
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


def as_newer(m: dict[str, Any]) -> dict[str, Any]:
    return {**m, "format": f"{manifest.FORMAT_PREFIX}{VERSION + 1}"}


def files_of(folder: Path) -> dict[str, str]:
    """Every path under `folder` -> the sha256 of its bytes ("" for folders)."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
        for p in sorted(folder.rglob("*"))
    }


def test_format_strings_and_the_reader_table() -> None:
    assert manifest.format_version(FORMAT) == VERSION
    assert max(manifest.READERS) == VERSION  # this sweepq writes the newest version it reads
    assert manifest.format_version("sweepq.checkpoint/1") == 1
    assert manifest.format_version("sweepq.checkpoint/12") == 12
    for bad in ("sweepq.checkpoint/01", "sweepq.checkpoint/", "other/1", "sweepq.checkpoint/1 ", None, 1):
        assert manifest.format_version(bad) is None, bad


def test_a_newer_format_is_refused_by_every_reader_and_left_untouched(tmp_path: Path) -> None:
    cell = CellPaths(tmp_path, "1.1")
    where = storage.for_cell(cell, None)
    c = write(where, 7)
    rewrite_manifest(c.path, as_newer)
    before = files_of(cell.checkpoints)

    attempts: list[Callable[[], Any]] = [
        lambda: where.read_manifest(7),
        lambda: storage.verify(where, 7),
        lambda: checkpoint.load(where, 7),
        lambda: checkpoint.load_newest(where, on_corrupt=lambda *a: pytest.fail(f"reported corrupt: {a}")),
    ]
    for attempt in attempts:
        with pytest.raises(CheckpointTooNew) as e:
            attempt()
        assert not isinstance(e.value, CheckpointCorrupt)
        assert str(e.value) == f"{c.path}: {NEWER}"
        assert (e.value.version, e.value.readable) == (VERSION + 1, VERSION)

    assert storage.committed_manifests(where) == {}  # not counted by retention: never deleted by it
    assert where.clean_partial() == []
    assert where.steps() == [7]
    assert files_of(cell.checkpoints) == before  # not moved, not renamed, not changed


def test_a_resume_never_falls_back_past_a_newer_checkpoint(tmp_path: Path) -> None:
    cell = CellPaths(tmp_path, "1.1")
    where = storage.for_cell(cell, None)
    write(where, 10, 1.0)
    newest = write(where, 20, 2.0)
    rewrite_manifest(newest.path, as_newer)
    before = files_of(cell.checkpoints)
    with pytest.raises(CheckpointTooNew, match="upgrade sweepq"):
        checkpoint.load_newest(where)
    assert files_of(cell.checkpoints) == before
    # Under a rollback limit below it, the newer checkpoint is not the one to load: the older one is.
    loaded = checkpoint.load_newest(where, max_step=10)
    assert loaded is not None and loaded.step == 10


def test_run_restore_fails_with_the_upgrade_message_and_the_attempt_says_so(tmp_path: Path) -> None:
    state: dict[str, Any] = {"w": torch.zeros(100), "step": 0}
    first = make_run(tmp_path)
    for step in (5, 10):
        state["w"] += 1
        assert first.checkpoint(state, step, force=True)
    first.close(completed=False)
    cell = CellPaths(tmp_path, "1.1")
    rewrite_manifest(cell.checkpoint(10), as_newer)
    before = files_of(cell.checkpoints)

    run = make_run(tmp_path)  # opening the cell does not touch it either
    target: dict[str, Any] = {"w": torch.zeros(100), "step": 0}
    with pytest.raises(CheckpointTooNew) as e:
        run.restore(target)
    assert NEWER in str(e.value)
    assert torch.equal(target["w"], torch.zeros(100)) and run.start_step == 0  # not resumed from step 5
    assert run.corrupt == []
    run.close(completed=False)
    assert files_of(cell.checkpoints) == before


def test_an_attempt_that_meets_a_newer_checkpoint_ends_in_an_error_that_says_upgrade(tmp_path: Path) -> None:
    from sweepq.attempt.training import run_train
    from sweepq.queue.states import Reason
    from sweepq.spec.sweep import Settings
    from sweepq.wire.attempt_spec import AttemptSpec
    from sweepq.wire.channel import Channel

    root = tmp_path / "root"
    c = write(storage.for_cell(CellPaths(root, "1.1"), None), 3)
    rewrite_manifest(c.path, as_newer)
    before = files_of(c.path.parent)
    (tmp_path / "newer_format_trainer.py").write_text(
        "def train(cfg, run):\n"
        "    import torch\n"
        "    state = {'w': torch.zeros(1000), 'step': 0}\n"
        "    run.restore(state)\n"
        "    run.checkpoint(state, 1, force=True)  # never reached\n"
    )
    settings = Settings(name="s", form="grouped", spec_dir=str(tmp_path), train="newer_format_trainer:train")
    spec = AttemptSpec(root=str(root), cell="1.1", attempt=1, cfg={}, cfg_hash="h", settings=settings.to_json())
    outcome, _ = run_train(spec, settings, Channel(None))
    assert outcome.reason == Reason.ERROR
    assert NEWER in (outcome.error_tail or "")
    assert files_of(c.path.parent) == before


def test_an_older_format_loads_through_its_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As after a future bump to format 2: format 1's reader turns an old manifest into the current shape."""
    where = LocalFolder(tmp_path)
    c = write(where, 3, 3.0)

    def as_old(m: dict[str, Any]) -> dict[str, Any]:  # an "old" manifest: the files under another key
        m = dict(m)
        m["contents"] = m.pop("files")
        return m

    def read_old(at: Path, m: dict[str, Any]) -> dict[str, Any]:
        m = dict(m)
        m["files"] = m.pop("contents")
        return m

    rewrite_manifest(c.path, as_old)
    with pytest.raises(CheckpointCorrupt):  # read as today's format 1, it is not a manifest
        checkpoint.load(where, 3)
    monkeypatch.setattr(manifest, "READERS", {1: read_old, 2: manifest.READERS[VERSION]})
    loaded = checkpoint.load(where, 3)
    assert loaded.step == 3 and torch.equal(loaded.state["w"], torch.full((1000,), 3.0))
    assert storage.verify(where, 3)["files"].keys() == {"tensors.safetensors", "state.json"}


def test_a_foreign_or_dropped_format_is_corrupt_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cell = CellPaths(tmp_path, "1.1")
    where = storage.for_cell(cell, None)
    write(where, 1)
    c = write(where, 2)
    rewrite_manifest(c.path, lambda m: {**m, "format": "somebody-else/3"})
    seen: list[int] = []
    loaded = checkpoint.load_newest(where, on_corrupt=lambda step, why, moved: seen.append(step))
    assert loaded is not None and loaded.step == 1 and seen == [2]
    assert where.steps() == [1]
    # A version this sweepq no longer reads (below the newest, without a reader) is unusable too.
    monkeypatch.setattr(manifest, "READERS", {2: manifest.READERS[VERSION]})
    with pytest.raises(CheckpointCorrupt, match="no longer read"):
        where.read_manifest(1)


def test_local_folder_commit_protocol(tmp_path: Path) -> None:
    where = LocalFolder(tmp_path / "checkpoints")
    staged = where.stage(4)
    written = staged.write({"a.bin": [memoryview(b"abc")]})
    assert written == {"a.bin": (hashlib.sha256(b"abc").hexdigest(), 3)}
    hidden = [p.name for p in where.folder.iterdir()]
    assert len(hidden) == 1 and hidden[0].startswith(".writing-step-4-") and where.steps() == []
    body = json.dumps({"format": FORMAT, "step": 4, "files": {"a.bin": {"sha256": written["a.bin"][0], "size": 3}}})
    assert staged.commit(body.encode())
    assert where.steps() == [4] and [p.name for p in where.folder.iterdir()] == ["step-4"]
    assert where.read(4, "a.bin", {"sha256": written["a.bin"][0], "size": 3}) == b"abc"
    # The same step again: the first one is kept, the second stage removed.
    again = where.stage(4)
    again.write({"a.bin": [memoryview(b"xyz")]})
    assert not again.commit(body.encode())
    assert [p.name for p in where.folder.iterdir()] == ["step-4"] and (
        where.location(4) / "a.bin"
    ).read_bytes() == b"abc"
    # Leftovers of crashes go; a quarantined step stays for inspection.
    where.stage(5)
    (where.folder / ".trash-step-3-dead").mkdir()
    moved = where.quarantine(4)
    assert moved.name.startswith(".corrupt-step-4-") and where.steps() == []
    leftovers = sorted(p.name for p in where.folder.iterdir() if p != moved)
    assert len(leftovers) == 2 and sorted(where.clean_partial()) == leftovers
    assert [p.name for p in where.folder.iterdir()] == [moved.name]


class MemoryStorage:
    """Checkpoints in a dict: shows that the commit protocol and the readers need only the interface."""

    def __init__(self) -> None:
        self.committed: dict[int, dict[str, bytes]] = {}

    def steps(self) -> list[int]:
        return sorted(self.committed, reverse=True)

    def location(self, step: int) -> Path:
        return Path(f"memory/step-{step}")

    def read_manifest(self, step: int) -> tuple[dict[str, Any], str]:
        raw = self.committed[step][MANIFEST_NAME]
        return manifest.parse(raw, self.location(step)), hashlib.sha256(raw).hexdigest()

    def read(self, step: int, name: str, entry: dict[str, Any]) -> bytes:
        data = self.committed[step][name]
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise CheckpointCorrupt(self.location(step), f"{name} sha256 does not match the manifest")
        return data

    def read_into(self, step: int, name: str, entry: dict[str, Any], alloc: Callable[[int], _B]) -> _B:
        data = self.read(step, name, entry)
        out = alloc(len(data))
        memoryview(out).cast("B")[:] = data  # type: ignore[arg-type]
        return out

    def check(self, step: int, name: str, entry: dict[str, Any]) -> None:
        self.read(step, name, entry)

    def stage(self, step: int) -> MemoryStaged:
        return MemoryStaged(self, step)

    def quarantine(self, step: int) -> Path:
        del self.committed[step]
        return self.location(step)

    def linked(self, step: int) -> str | None:
        return None  # nothing in memory is a link

    def detach(self, step: int) -> Path:
        raise ValueError(f"step {step} is no link")

    def delete(self, step: int) -> None:
        del self.committed[step]

    def clean_partial(self) -> list[str]:
        return []


class MemoryStaged:
    def __init__(self, owner: MemoryStorage, step: int) -> None:
        self.owner, self.step = owner, step
        self.files: dict[str, bytes] = {}

    def write(self, files: dict[str, list[memoryview]]) -> dict[str, tuple[str, int]]:
        out = {}
        for name, parts in files.items():
            self.files[name] = b"".join(bytes(p) for p in parts)
            out[name] = (hashlib.sha256(self.files[name]).hexdigest(), len(self.files[name]))
        return out

    def commit(self, manifest_bytes: bytes) -> bool:
        if self.step in self.owner.committed:
            return False
        self.owner.committed[self.step] = {**self.files, MANIFEST_NAME: manifest_bytes}  # the manifest last
        return True


def test_the_commit_protocol_and_readers_run_on_any_storage() -> None:
    where = MemoryStorage()
    write(where, 1, 1.0)
    c = write(where, 2, 2.0)
    assert c.path == Path("memory/step-2") and c.size_bytes > 4000
    assert storage.verify(where, 2)["step"] == 2
    assert sorted(storage.committed_manifests(where)) == [1, 2]
    where.committed[2]["state.json"] = b"{}"
    loaded = checkpoint.load_newest(where, on_corrupt=lambda step, why, moved: None)
    assert loaded is not None and loaded.step == 1 and float(loaded.state["w"][0]) == 1.0
    assert where.steps() == [1]  # the corrupt one quarantined through the interface
