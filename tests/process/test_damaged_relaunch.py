"""Damaged manifests and a DONE.json of `{}` after a sweep was killed mid-way: the relaunch runs every cell.

The first launch is killed like a reboot (SIGKILL to every process at once)
while one cell holds at a known step. Then that cell's newest four manifests are
damaged, each in another way a flipped byte or a bug would damage one, and the
finished cell's DONE.json becomes `{}`. The relaunch must reap the dead attempt,
move every damaged checkpoint aside with its reason, resume the cell from the
one good checkpoint left, and train the `{}` cell again rather than trust it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

from conftest import cli, cli_json, kill_tree, start, wait_for, wait_gone, write

from sweepq.layout import CellPaths

# Attempt 1 of a cell with `hold_at` waits there (its checkpoint being committed) until it is killed.
TRAINER = """
import time

import torch


def train(cfg, run):
    state = {"w": torch.zeros(4), "step": 0}
    run.restore(state)
    run.set_total(cfg["steps"])
    while state["step"] < cfg["steps"]:
        state["w"] = state["w"] + 1
        state["step"] += 1
        run.log(state["step"], loss=float(state["w"].mean()))
        run.checkpoint(state, state["step"])
        if state["step"] == cfg.get("hold_at") and run.attempt == 1:
            while not run.should_stop:
                time.sleep(0.05)
            return None
    return {"w_sum": float(state["w"].sum())}
"""

SPEC = """
name: damaged
train: held:train
root: runs/damaged
params: {steps: 30}
checkpoint: {every_steps: 5, keep_last: 10}
groups:
  - name: finished
  - name: held
    params: {hold_at: 25}
"""


def _rewrite(change: Callable[[dict], dict]) -> Callable[[str], str]:
    return lambda text: json.dumps(change(json.loads(text)))


def _entry_not_an_object(m: dict) -> dict:
    m["files"]["tensors.safetensors"] = 3
    return m


# step -> (how its manifest is damaged, what the reason must say)
DAMAGE: dict[int, tuple[Callable[[str], str], str]] = {
    25: (_rewrite(_entry_not_an_object), "manifest.json: files['tensors.safetensors'] is not an object"),
    20: (lambda t: t.replace('"sha256"', '"sha257"', 1), "manifest.json: files['state.json'].sha256 is missing"),
    15: (lambda t: '"stap"'.join(t.rsplit('"step"', 1)), "manifest.json: step is missing"),  # the top-level one
    10: (lambda t: t.replace('"files"', '"filez"', 1), "manifest.json: files is missing"),
}


def state_of(root: Path, cell: str) -> str | None:
    """The cell's state as the database has it (read-only, as any reader may while the sweep runs)."""
    try:
        con = sqlite3.connect(f"file:{root / 'sweepq.db'}?mode=ro", uri=True)
        try:
            row = con.execute("SELECT state FROM cells WHERE id = ?", (cell,)).fetchone()
        finally:
            con.close()
    except sqlite3.OperationalError:  # not created yet
        return None
    return row[0] if row else None


def test_a_relaunch_after_damage_runs_every_cell(tmp_path: Path) -> None:
    (tmp_path / "held.py").write_text(TRAINER)
    spec = write(tmp_path / "damaged.yaml", SPEC)
    root = tmp_path / "runs" / "damaged"
    finished, held = CellPaths(root, "1.1"), CellPaths(root, "2.1")

    first = start("launch", str(spec), "--no-live", cwd=tmp_path)
    wait_for(lambda: first.poll() is not None or (held.checkpoint(25).is_dir() and state_of(root, "1.1") == "done"))
    assert first.poll() is None, first.communicate()[0]
    wait_gone(kill_tree(first.pid))
    first.communicate()
    assert finished.done.exists() and held.committed_steps() == [25, 20, 15, 10, 5]

    for step, (damage, _) in DAMAGE.items():
        held.manifest(step).write_text(damage(held.manifest(step).read_text()))
    finished.done.write_text("{}")

    r = cli("launch", str(spec), "--no-live", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    shown = cli_json("show", "2.1", "--root", str(root))
    assert shown["state"] == "done"
    assert [a["reason"] for a in shown["attempts"]] == ["lost", "completed"]
    assert shown["attempts"][-1]["start_step"] == 5  # the one good checkpoint left
    corrupt = {c["step"]: c for c in shown["checkpoints"] if c["state"] == "corrupt"}
    assert sorted(corrupt) == sorted(DAMAGE)
    for step, (_, why) in DAMAGE.items():
        assert corrupt[step]["note"].startswith(why), corrupt[step]
        assert f".corrupt-step-{step}-" in corrupt[step]["path"]
        assert (root / corrupt[step]["path"] / "manifest.json").is_file()  # kept for inspection
    events = [e["detail"] for e in shown["history"] if e["kind"] == "checkpoint_corrupt"]
    assert sorted(e["step"] for e in events) == sorted(DAMAGE)
    assert held.committed_steps() == [30, 25, 20, 15, 10, 5]  # trained again from step 5
    assert json.loads(held.done.read_text())["metrics"] == {"w_sum": 120.0}

    again = cli_json("show", "1.1", "--root", str(root))
    assert again["state"] == "done"
    assert [a["reason"] for a in again["attempts"]] == ["completed", "completed"]  # not skipped
    invalid = [e["detail"]["why"] for e in again["history"] if e["kind"] == "marker_invalid"]
    assert invalid == ["DONE.json is not a done marker: cell is missing"]
    done = json.loads(finished.done.read_text())
    assert done["attempt"] == 2 and done["metrics"] == {"w_sum": 120.0}
