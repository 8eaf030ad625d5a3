"""The commit protocol under a SIGKILL at every point of a checkpoint write, and corrupt checkpoints.

A test-only hook (SWEEPQ_CRASH_AT) kills the training process at a named point
after two checkpoints were committed. Whatever the point, the previous
committed checkpoint must load, the partial one must be ignored and cleaned,
and the relaunched cell must finish bit-exactly like an uninterrupted run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import HERE, cli, cli_json, write

from sweepq.checkpoint import storage
from sweepq.layout import CellPaths

SPEC = """
name: crash
train: trainers:train
root: runs/crash
params: {steps: 30, seed: 4}
checkpoint: {every_steps: 5, keep_last: 2}
retries: {lost: 0}
groups:
  - name: a
"""

POINTS = [
    "before_write",
    "mid_file",
    "after_tensors",
    "after_state",
    "after_manifest",
    "before_rename",
    "after_rename",
    "after_commit",
    "mid_delete",
]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict:
    d = tmp_path_factory.mktemp("reference")
    (d / "trainers.py").write_text((HERE / "trainers.py").read_text())
    spec = write(d / "crash.yaml", SPEC)
    assert cli("launch", str(spec), cwd=d).returncode == 0
    return json.loads((d / "runs/crash/cells/1.1/DONE.json").read_text())


def hidden(cell: CellPaths) -> list[str]:
    return sorted(p.name for p in cell.checkpoints.iterdir() if p.name.startswith("."))


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One sweep, one cell per crash point; each first attempt dies there, then all are relaunched."""
    d = tmp_path_factory.mktemp("crashed")
    (d / "trainers.py").write_text((HERE / "trainers.py").read_text())
    text = SPEC.replace("  - name: a\n", f"  - name: a\n    grid: {{crash_at: [{', '.join(POINTS)}]}}\n")
    spec = write(d / "crash.yaml", text)
    root = d / "runs" / "crash"
    first = cli("launch", str(spec), "--no-live", cwd=d)
    after_crash = {}
    for i, point in enumerate(POINTS, start=1):
        cell = CellPaths(root, f"1.{i}")
        committed = cell.committed_steps()
        verified = all(storage.verify(storage.for_cell(cell, None), s) for s in committed)
        after_crash[point] = {
            "committed": committed,
            "verified": verified,
            "hidden": hidden(cell),
            "attempts": cli_json("show", cell.cell_id, "--root", str(root))["attempts"],
        }
    retried = cli("retry", "a", "--root", str(root))
    second = cli("launch", str(spec), cwd=d)
    return {"root": root, "first": first, "after_crash": after_crash, "retried": retried, "second": second}


@pytest.mark.parametrize("point", POINTS)
def test_crash_at_every_point_of_a_checkpoint_write(crashed: dict, reference: dict, point: str) -> None:
    assert crashed["first"].returncode == 1  # every cell lost its first attempt (no budget for `lost`)
    seen = crashed["after_crash"][point]
    assert [a["reason"] for a in seen["attempts"]] == ["lost"]
    assert "SIGKILL" in seen["attempts"][0]["note"]
    committed = seen["committed"]
    assert committed and seen["verified"], "the checkpoints committed before the crash must survive, whole"
    if point in ("before_write", "mid_file", "after_tensors", "after_state", "after_manifest", "before_rename"):
        assert any(n.startswith(".writing-") for n in seen["hidden"]), seen["hidden"]
        assert max(committed) == 10  # the third checkpoint never became visible
    if point == "mid_delete":
        assert any(n.startswith(".trash-") for n in seen["hidden"]), seen["hidden"]

    assert crashed["retried"].returncode == 0 and crashed["second"].returncode == 0, crashed["second"].stdout
    i = POINTS.index(point) + 1
    cell = CellPaths(crashed["root"], f"1.{i}")
    attempts = cli_json("show", cell.cell_id, "--root", str(cell.root))["attempts"]
    assert [a["reason"] for a in attempts] == ["lost", "completed"]
    assert attempts[-1]["start_step"] == max(committed)
    assert hidden(cell) == []  # partial writes and trash were cleaned by the next lock holder
    done = json.loads(cell.done.read_text())
    assert done["metrics"] == reference["metrics"]  # bit-exact despite the crash


def test_corrupt_and_truncated_checkpoints_fall_back_and_are_reported(sweep_dir: Path, reference: dict) -> None:
    spec = write(sweep_dir / "crash.yaml", SPEC.replace("keep_last: 2", "keep_last: 4"))
    cell = CellPaths(sweep_dir / "runs" / "crash", "1.1")
    write(
        spec,
        spec.read_text().replace(
            "params: {steps: 30, seed: 4}", "params: {steps: 30, seed: 4, crash_at: after_commit, crash_after: 4}"
        ),
    )
    cli("launch", str(spec), "--no-live", cwd=sweep_dir)
    steps = cell.committed_steps()
    assert len(steps) >= 3
    newest, second = steps[0], steps[1]
    # flip one byte in the newest checkpoint, truncate the second newest
    tensors = cell.checkpoint(newest) / "tensors.safetensors"
    data = bytearray(tensors.read_bytes())
    data[len(data) // 2] ^= 0xFF
    tensors.write_bytes(bytes(data))
    state = cell.checkpoint(second) / "state.json"
    state.write_bytes(state.read_bytes()[:10])
    assert cli("retry", "1.1", "--root", str(cell.root)).returncode == 0
    r = cli("launch", str(spec), cwd=sweep_dir)
    assert r.returncode == 0, r.stdout + r.stderr
    shown = cli_json("show", "1.1", "--root", str(cell.root))
    assert shown["attempts"][-1]["start_step"] == steps[2]  # the third newest was the first that verified
    corrupt = {c["step"]: c for c in shown["checkpoints"] if c["state"] == "corrupt"}
    assert set(corrupt) == {newest, second}
    assert "sha256" in corrupt[newest]["note"] and "bytes" in corrupt[second]["note"]
    assert all(".corrupt-step-" in c["path"] for c in corrupt.values())
    assert {e["kind"] for e in shown["history"]} >= {"checkpoint_corrupt"}
    human = cli("show", "1.1", "--root", str(cell.root)).stdout
    assert "corrupt" in human
    assert json.loads(cell.done.read_text())["metrics"] == reference["metrics"]


def test_no_checkpoint_verifies_restarts_from_scratch_and_says_so(sweep_dir: Path, reference: dict) -> None:
    spec = write(sweep_dir / "crash.yaml", SPEC)
    cell = CellPaths(sweep_dir / "runs" / "crash", "1.1")
    write(
        spec,
        spec.read_text().replace(
            "params: {steps: 30, seed: 4}", "params: {steps: 30, seed: 4, crash_at: after_commit}"
        ),
    )
    cli("launch", str(spec), "--no-live", cwd=sweep_dir)
    for step in cell.committed_steps():
        (cell.checkpoint(step) / "manifest.json").write_text("{not json")
    assert cli("retry", "1.1", "--root", str(cell.root)).returncode == 0
    assert cli("launch", str(spec), cwd=sweep_dir).returncode == 0
    shown = cli_json("show", "1.1", "--root", str(cell.root))
    assert shown["attempts"][-1]["start_step"] == 0
    assert "no checkpoint verified" in (shown["attempts"][-1]["note"] or "") or any(
        e["kind"] == "restarted_from_scratch" for e in shown["history"]
    )
    assert json.loads(cell.done.read_text())["metrics"] == reference["metrics"]


def test_retention_keeps_last_best_and_final(sweep_dir: Path) -> None:
    text = SPEC.replace("keep_last: 2", "keep_last: 2, keep_best: true") + "metric: {name: score, goal: max}\n"
    spec = write(sweep_dir / "crash.yaml", text)
    cell = CellPaths(sweep_dir / "runs" / "crash", "1.1")
    assert cli("launch", str(spec), cwd=sweep_dir).returncode == 0
    shown = cli_json("show", "1.1", "--root", str(cell.root))
    scored = {c["step"]: c["metrics"]["score"] for c in shown["checkpoints"] if "score" in c["metrics"]}
    best = max(scored, key=lambda s: scored[s])
    assert sorted(cell.committed_steps()) == sorted({25, 30, best})
    states = {c["step"]: c["state"] for c in shown["checkpoints"]}
    assert {s for s, st in states.items() if st == "committed"} == {25, 30, best}
    assert all(st == "superseded" for s, st in states.items() if s not in (25, 30, best))
    assert os.path.basename(json.loads(cell.done.read_text())["checkpoint"]) == "step-30"
