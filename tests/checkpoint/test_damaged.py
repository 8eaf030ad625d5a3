"""Damaged manifests, state.json and DONE.json, in-process on real files: corrupt, never a crash.

Every reader gets a document of the shape it reads, or CheckpointCorrupt naming
what is wrong (for DONE.json: no marker, and why). The cell's owner moves a
damaged checkpoint aside and records the reason; a reader that does not own the
cell leaves it where it is.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import make_run
from unit.support import SWEEP_YAML, WORKER, FakeClock, launch_store, sweep_from

from sweepq.checkpoint import commit as checkpoint
from sweepq.checkpoint import manifest, marker, retention, serialize, storage
from sweepq.checkpoint.manifest import STATE, TENSORS, CheckpointCorrupt, CheckpointTooNew
from sweepq.checkpoint.storage import CheckpointStorage
from sweepq.layout import MANIFEST_NAME, CellPaths
from sweepq.queue import reaper
from sweepq.queue.records import Outcome
from sweepq.queue.states import CellState, CheckpointState, Reason
from sweepq.run.committed import CommittedSet
from sweepq.wire import channel as chan
from sweepq.wire.messages import Corrupt, Superseded


def commit(where: CheckpointStorage, step: int, attempt: int = 1) -> checkpoint.Committed:
    """A checkpoint with the manifest keys a Run writes."""
    skeleton, tensors = serialize.flatten({"w": torch.full((64,), float(step)), "step": step})
    meta = {
        "cell": "1.1",
        "attempt": attempt,
        "epoch": None,
        "metrics": {"loss": 1.0 / step},
        "best": {"value": None, "step": None},
        "cfg_hash": "h",
        "fingerprints": {"code": {"entry": "m:f", "sha256": "0" * 64, "git": None}, "data": {}},
    }
    return checkpoint.write_checkpoint(where, step, skeleton, tensors, meta)


def damage(where: CheckpointStorage, step: int, change: Callable[[str], str]) -> None:
    path = where.location(step) / MANIFEST_NAME
    path.write_text(change(path.read_text()))


def rewritten(change: Callable[[dict[str, Any]], Any]) -> Callable[[str], str]:
    def apply(text: str) -> str:
        m = json.loads(text)
        return json.dumps(change(m) or m)

    return apply


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Set a value of the manifest by its keys joined with "|" (file names have dots)."""

    def change(m: dict[str, Any]) -> None:
        *parents, last = path.split("|")
        for key in parents:
            m = m[key]
        m[last] = value

    return change


def _flip_key(old: str, new: str, last: bool = False) -> Callable[[str], str]:
    """One key renamed in the text, as a flipped byte renames it."""
    if last:
        return lambda text: f'"{new}"'.join(text.rsplit(f'"{old}"', 1))
    return lambda text: text.replace(f'"{old}"', f'"{new}"', 1)


def _rename_file(old: str, new: str) -> Callable[[dict[str, Any]], None]:
    def change(m: dict[str, Any]) -> None:
        m["files"][new] = m["files"].pop(old)

    return change


# (what, the damage, what the reason says after "manifest.json: ")
DAMAGES: list[tuple[str, Callable[[str], str], str]] = [
    (
        "an entry not an object",
        rewritten(_set(f"files|{TENSORS}", 3)),
        f"files['{TENSORS}'] is not an object (it is an integer)",
    ),
    ("sha256 renamed", _flip_key("sha256", "sha257"), f"files['{STATE}'].sha256 is missing"),
    ("step renamed", _flip_key("step", "stap", last=True), "step is missing"),
    ("files renamed", _flip_key("files", "filez"), "files is missing"),
    ("files a list", rewritten(_set("files", [])), "files is not an object (it is a list)"),
    (
        "size a string",
        rewritten(_set(f"files|{STATE}|size", "12")),
        f"files['{STATE}'].size is not an integer (it is a string)",
    ),
    (
        "size a boolean",
        rewritten(_set(f"files|{STATE}|size", True)),
        f"files['{STATE}'].size is not an integer (it is a boolean)",
    ),
    ("size negative", rewritten(_set(f"files|{STATE}|size", -1)), f"files['{STATE}'].size is negative"),
    (
        "sha256 not hex",
        rewritten(_set(f"files|{STATE}|sha256", "z" * 64)),
        f"files['{STATE}'].sha256 is not a sha256 digest (64 hex digits)",
    ),
    (
        "a file outside",
        rewritten(_rename_file(STATE, f"../{STATE}")),
        f"files['../{STATE}'] is not the name of a checkpoint file",
    ),
    ("another step", rewritten(_set("step", 7)), "step is 7, but the checkpoint is step 3"),
    ("step negative", rewritten(_set("step", -3)), "step is negative (-3)"),
    ("step a decimal", rewritten(_set("step", 3.0)), "step is not an integer (it is a decimal number)"),
    ("metrics a list", rewritten(_set("metrics", [1])), "metrics is not an object or null (it is a list)"),
    (
        "best.value a string",
        rewritten(_set("best|value", "high")),
        "best.value is not a number or null (it is a string)",
    ),
    (
        "a git commit number",
        rewritten(_set("fingerprints|code|git", {"commit": 7})),
        "fingerprints.code.git.commit is not a string or null (it is an integer)",
    ),
    ("created_at a number", rewritten(_set("created_at", 0)), "created_at is not a string (it is an integer)"),
]


@pytest.mark.parametrize(("what", "change", "why"), DAMAGES, ids=[d[0] for d in DAMAGES])
def test_a_damaged_manifest_is_corrupt_to_every_reader(
    tmp_path: Path, what: str, change: Callable[[str], str], why: str
) -> None:
    where = storage.for_cell(CellPaths(tmp_path, "1.1"), None)
    commit(where, 1)
    commit(where, 3)
    damage(where, 3, change)
    expected = f"{MANIFEST_NAME}: {why}"

    for read in (where.read_manifest, lambda s: storage.verify(where, s), lambda s: checkpoint.load(where, s)):
        with pytest.raises(CheckpointCorrupt) as e:
            read(3)
        assert e.value.why == expected
    damaged: dict[int, str] = {}
    assert list(storage.committed_manifests(where, damaged)) == [1] and damaged == {3: expected}

    seen: list[tuple[int, str, Path]] = []
    loaded = checkpoint.load_newest(where, on_corrupt=lambda *a: seen.append(a))
    assert loaded is not None and loaded.step == 1  # fell back to the previous one
    assert [(s, w) for s, w, _ in seen] == [(3, expected)]
    assert seen[0][2].name.startswith(".corrupt-step-3-") and (seen[0][2] / MANIFEST_NAME).is_file()
    assert where.steps() == [1]


def test_a_manifest_nested_past_the_parser_is_unreadable_not_a_crash(tmp_path: Path) -> None:
    where = storage.for_cell(CellPaths(tmp_path, "1.1"), None)
    commit(where, 3)
    damage(where, 3, lambda text: "[" * 200_000)
    with pytest.raises(CheckpointCorrupt, match=r"manifest unreadable \(RecursionError"):
        where.read_manifest(3)


def test_an_older_format_whose_translation_meets_damage_is_corrupt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    where = storage.for_cell(CellPaths(tmp_path, "1.1"), None)
    commit(where, 3)
    monkeypatch.setattr(manifest, "READERS", {1: lambda at, m: {**m, "files": m["contents"]}, 2: manifest.READERS[1]})
    with pytest.raises(CheckpointCorrupt) as e:
        where.read_manifest(3)
    assert e.value.why == "manifest format 1 unreadable (KeyError: 'contents')"


def test_every_one_bit_flip_of_a_manifest_is_read_or_corrupt(tmp_path: Path) -> None:
    """A bit flipped anywhere in a real manifest: each reader answers or says corrupt, never anything else."""
    where = storage.for_cell(CellPaths(tmp_path, "1.1"), None)
    path = commit(where, 3).path / MANIFEST_NAME
    original = path.read_bytes()
    outcomes: dict[str, int] = {}
    for i in range(len(original)):
        flipped = bytearray(original)
        flipped[i] ^= 1 << (i % 7)
        path.write_bytes(bytes(flipped))
        try:
            loaded = checkpoint.load(where, 3)
            storage.committed_manifests(where)
            kind = "loaded" if loaded.step == 3 else "wrong step"
        except CheckpointCorrupt:
            kind = "corrupt"
        except CheckpointTooNew:
            kind = "too new"  # "sweepq.checkpoint/1" became /3, /5, ...
        outcomes[kind] = outcomes.get(kind, 0) + 1
    assert set(outcomes) <= {"loaded", "corrupt", "too new"}, outcomes
    assert outcomes["corrupt"] > len(original) // 2  # most flips break the JSON, a key or a digest


def _with_state(where: CheckpointStorage, step: int, state: bytes) -> None:
    """Replace state.json and make the manifest agree with it: only its structure is wrong."""
    import hashlib

    (where.location(step) / STATE).write_bytes(state)
    entry = {"sha256": hashlib.sha256(state).hexdigest(), "size": len(state)}
    damage(where, step, rewritten(_set(f"files|{STATE}", entry)))


@pytest.mark.parametrize(
    ("state", "why"),
    [
        (b"[]", "ValueError: state.json holds no named entries (found list)"),
        (b'{"__tuple__": []}', "ValueError: state.json holds no named entries (found tuple)"),
        (b'{"__dict__": [["__rng__", 3]]}', "ValueError: state.json holds no named RNG states (found int)"),
        (b'{"__dict__": [["w", {"__tensor__": "/gone"}]]}', "KeyError: '/gone'"),
        (b'{"__dict__": [["w"]]}', "ValueError: not enough values to unpack (expected 2, got 1)"),
        (b'{"w": 1}', "ValueError: unknown entry in checkpoint skeleton: ['w']"),
    ],
)
def test_a_state_json_of_the_wrong_structure_is_corrupt(tmp_path: Path, state: bytes, why: str) -> None:
    where = storage.for_cell(CellPaths(tmp_path, "1.1"), None)
    commit(where, 1)
    commit(where, 3)
    _with_state(where, 3, state)
    with pytest.raises(CheckpointCorrupt) as e:
        checkpoint.load(where, 3)
    assert e.value.why == f"verified but unreadable ({why})"
    loaded = checkpoint.load_newest(where, on_corrupt=lambda *a: None)
    assert loaded is not None and loaded.step == 1


# -- DONE.json --------------------------------------------------------------------------


def _done(paths: CellPaths, **changes: Any) -> dict[str, Any]:
    m = marker.write_done(
        paths,
        cfg_hash="h",
        metrics={"loss": 0.1},
        checkpoint_step=None,
        attempt=2,
        step=30,
        epoch=None,
        best=None,
        best_step=None,
    )
    m.update(changes)
    for key in [k for k, v in changes.items() if v is _GONE]:
        del m[key]
    paths.done.write_text(json.dumps(m))
    return m


_GONE = object()
NOT_A_MARKER = "DONE.json is not a done marker: "


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{}", NOT_A_MARKER + "cell is missing"),
        ("[]", NOT_A_MARKER + "the document is not an object (it is a list)"),
        ("null", NOT_A_MARKER + "the document is not an object (it is null)"),
        ("{", "DONE.json does not parse (JSONDecodeError: "),
        ("[" * 200_000, "DONE.json does not parse (RecursionError: "),
        (dict(attempt="2"), NOT_A_MARKER + "attempt is not an integer (it is a string)"),
        (dict(attempt=True), NOT_A_MARKER + "attempt is not an integer (it is a boolean)"),
        (dict(attempt=0), NOT_A_MARKER + "attempt is 0"),
        (dict(metrics=[1]), NOT_A_MARKER + "metrics is not an object or null (it is a list)"),
        (dict(checkpoint=5), NOT_A_MARKER + "checkpoint is not a string or null (it is an integer)"),
        (dict(cfg_hash=None), NOT_A_MARKER + "cfg_hash is not a string (it is null)"),
        (dict(finished_at=_GONE), NOT_A_MARKER + "finished_at is missing"),
        (dict(step="30"), NOT_A_MARKER + "step is not an integer or null (it is a string)"),
        (
            dict(checkpoint_manifest_sha256=1),
            NOT_A_MARKER + "checkpoint_manifest_sha256 is not a string or null (it is an integer)",
        ),
    ],
)
def test_a_done_json_not_of_the_markers_shape_is_no_marker(tmp_path: Path, text: Any, why: str) -> None:
    paths = CellPaths(tmp_path, "1.1")
    paths.dir.mkdir(parents=True)
    if isinstance(text, dict):
        _done(paths, **text)
    else:
        paths.done.write_text(text)
    assert marker.read_done(paths) is None
    for got in (marker.load_done(paths), marker.verify_done(paths, "h")):
        assert got[0] is None and got[1] is not None and got[1].startswith(why), got


def test_a_done_marker_verifies_and_keeps_a_programs_own_words(tmp_path: Path) -> None:
    paths = CellPaths(tmp_path, "1.1")
    paths.dir.mkdir(parents=True)
    assert marker.load_done(paths) == (None, "no DONE.json")
    written = _done(paths, epoch=True, best="high", note="extra keys are allowed")
    assert marker.read_done(paths) == written
    assert marker.verify_done(paths, "h") == (written, None)
    assert marker.verify_done(paths, "other") == (None, "DONE.json was written for a different cfg")
    _done(paths, checkpoint="checkpoints/step-\x00")
    assert marker.verify_done(paths, "h")[1] == (
        "the final checkpoint checkpoints/step-\x00 cannot be read (ValueError: embedded null byte)"
    )
    paths.done.unlink()
    paths.done.mkdir()
    why = marker.load_done(paths)[1]
    assert why is not None and why.startswith("DONE.json cannot be read (IsADirectoryError: ")


# -- the readers outside the loading path: the reaper, reconcile, the committed set ---------------


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = launch_store(tmp_path / "root", sweep_from(SWEEP_YAML, tmp_path), FakeClock())
    yield s
    s.close()


def test_the_reaper_closes_a_dead_attempt_and_moves_its_damaged_checkpoints_aside(store: Any) -> None:
    claim = store.claim("1.1", WORKER)
    assert claim is not None and claim.number == 1
    cell = CellPaths(store.root, "1.1")
    where = storage.for_cell(cell, None)
    for step in (5, 10, 15):
        c = commit(where, step)
        store.record_checkpoint(
            "1.1", step, path=f"cells/1.1/checkpoints/step-{step}", manifest_sha256=c.manifest_sha256
        )
    damage(where, 15, rewritten(_set(f"files|{TENSORS}", 3)))
    damage(where, 10, _flip_key("files", "filez"))

    outcome = reaper.outcome_from_files(store, "1.1", 1, None)
    assert (outcome.reason, outcome.end_step) == (Reason.LOST, 5)  # only step 5 still says whose it is
    assert reaper.finish_attempt(store, "1.1", 1, outcome) is not None

    rows = {c.step: c for c in store.checkpoints("1.1")}
    assert rows[5].state == CheckpointState.COMMITTED
    assert rows[15].state == rows[10].state == CheckpointState.CORRUPT
    assert rows[15].note == f"{MANIFEST_NAME}: files['{TENSORS}'] is not an object (it is an integer)"
    assert rows[10].note == f"{MANIFEST_NAME}: files is missing"
    for step in (10, 15):
        assert f"/checkpoints/.corrupt-step-{step}-" in rows[step].path
        assert (store.root / rows[step].path / MANIFEST_NAME).is_file()
    assert where.steps() == [5]
    events = [e.detail for e in store.events("1.1") if e.kind == "checkpoint_corrupt"]
    assert sorted(e["step"] for e in events) == [10, 15]
    assert store.cell("1.1").state is not CellState.RUNNING


def test_reconcile_requeues_a_done_cell_whose_marker_is_not_one_and_leaves_others_damage(store: Any) -> None:
    # 1.2: done in the database, DONE.json `{}` on disk: not done, trained as if new.
    assert store.claim("1.2", WORKER) is not None
    assert store.finish("1.2", 1, Outcome(Reason.COMPLETED)) is CellState.DONE
    done12 = CellPaths(store.root, "1.2")
    done12.dir.mkdir(parents=True, exist_ok=True)
    done12.done.write_text("{}")
    # 1.3: queued, with a DONE.json that verifies (the database never heard) and a damaged older checkpoint.
    c13 = CellPaths(store.root, "1.3")
    where = storage.for_cell(c13, None)
    commit(where, 5)
    commit(where, 10)
    damage(where, 5, _flip_key("sha256", "sha257"))
    marker.write_done(
        c13,
        cfg_hash=store.cell("1.3").cfg_hash,
        metrics={},
        checkpoint_step=10,
        attempt=1,
        step=10,
        epoch=None,
        best=None,
        best_step=None,
    )

    changes = dict(reaper.reconcile_markers(store))
    assert changes == {
        "1.2": "requeued: DONE.json is not a done marker: cell is missing",
        "1.3": "done: repaired from DONE.json",
    }
    assert store.cell("1.2").state is CellState.QUEUED
    invalid = [e.detail["why"] for e in store.events("1.2") if e.kind == "marker_invalid"]
    assert invalid == ["DONE.json is not a done marker: cell is missing"]
    assert store.cell("1.3").state is CellState.DONE
    assert where.steps() == [10, 5]  # not its owner: the damaged step stays where it is
    assert [c.step for c in store.checkpoints("1.3")] == [10]


def test_the_committed_set_moves_damaged_steps_aside_before_it_changes(tmp_path: Path) -> None:
    """Steps past a rollback's limit are never verified by the restore: damaged, they must not block a commit."""
    cell = CellPaths(tmp_path, "1.1")
    where = storage.for_cell(cell, None)
    for step in (5, 10, 15):
        commit(where, step)
    damage(where, 15, _flip_key("step", "stap", last=True))
    damage(where, 5, rewritten(_set(f"files|{STATE}", None)))
    worker_end, child_end = chan.pair()
    worker_end.setblocking(False)
    committed = CommittedSet(where, chan.Channel(child_end.detach()))
    assert committed.newest() is not None and committed.newest()[0] == 10  # type: ignore[index]
    assert where.steps() == [15, 10, 5]  # reading moves nothing

    committed.supersede_after(7, "abandoned")
    messages = chan.receive(worker_end)
    corrupt = [m for m in messages if isinstance(m, Corrupt)]
    assert [(m.step, m.why) for m in corrupt] == [
        (5, f"{MANIFEST_NAME}: files['{STATE}'] is not an object (it is null)"),
        (15, f"{MANIFEST_NAME}: step is missing"),
    ]
    assert all(m.moved_to.startswith(f"checkpoints/.corrupt-step-{m.step}-") for m in corrupt)
    assert all((cell.dir / m.moved_to / MANIFEST_NAME).is_file() for m in corrupt)
    assert [m.steps for m in messages if isinstance(m, Superseded)] == [[10]]
    assert where.steps() == []
    assert commit(where, 15).step == 15  # the step is free again
    worker_end.close()


def test_a_run_resumes_past_damaged_manifests_and_sets_them_aside(tmp_path: Path) -> None:
    state: dict[str, Any] = {"w": torch.zeros(16), "step": 0}
    first = make_run(tmp_path)
    for step in (5, 10, 15):
        state["w"] += 1
        assert first.checkpoint(state, step, force=True)
    first.close(completed=False)
    where = storage.for_cell(CellPaths(tmp_path, "1.1"), None)
    damage(where, 15, rewritten(_set(f"files|{TENSORS}", "x")))
    damage(where, 5, _flip_key("files", "filez"))

    run = make_run(tmp_path)
    target: dict[str, Any] = {"w": torch.zeros(16), "step": 0}
    assert run.restore(target)
    assert run.start_step == 10 and torch.equal(target["w"], torch.full((16,), 2.0))
    assert run.corrupt == [
        {"step": 15, "why": f"{MANIFEST_NAME}: files['{TENSORS}'] is not an object (it is a string)"}
    ]
    assert where.steps() == [10]  # 15 by the restore, 5 by the committed set
    moved = sorted(p.name.rsplit("-", 1)[0] for p in where.folder.iterdir() if p.name.startswith(".corrupt-"))  # type: ignore[attr-defined]
    assert moved == [".corrupt-step-15", ".corrupt-step-5"]
    run.close(completed=False)
    assert os.path.isdir(where.location(10))


def test_retention_skips_a_metric_no_float_can_hold(tmp_path: Path) -> None:
    manifests: dict[int, dict[str, Any]] = {
        5: {"metrics": {"score": 10**400}},
        10: {"metrics": {"score": 1.0}},
        15: {"metrics": {}},
    }
    assert retention.to_keep(manifests, 1, ("score", "max"), set()) == {10, 15}
