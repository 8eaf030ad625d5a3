"""The CLI contract: JSON fields, bad input (exit 2, nothing written), drift, DONE.json repair."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import HERE, cli, cli_json, write

SPEC = """
name: small
train: trainers:train
root: runs/small
params: {steps: 20}
checkpoint: {every_steps: 5, keep_last: 2}
metric: {name: score, goal: max}
groups:
  - name: q1
    grid: {seed: [1, 2]}
  - name: q2
    grid: {seed: [3], lr: [0.5, 2.0]}
"""


@pytest.fixture(scope="module")
def launched_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("small")
    shutil.copy(HERE / "trainers.py", d / "trainers.py")
    spec = write(d / "small.yaml", SPEC)
    r = cli("launch", str(spec), cwd=d)
    assert r.returncode == 0, r.stdout + r.stderr
    return d


@pytest.fixture
def done_sweep(launched_once: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A finished sweep of the test's own: a copy of one launched once per module (the launch is the slow part)."""
    d = tmp_path / "sweep"
    shutil.copytree(launched_once, d)
    return d / "small.yaml", d / "runs" / "small"


def test_plan_touches_nothing_and_needs_no_program(tmp_path: Path) -> None:
    spec = write(tmp_path / "s.yaml", SPEC.replace("trainers:train", "not_a_module_anywhere:train"))
    result = cli_json("plan", str(spec))
    assert [c["cell"] for c in result] == ["1.1", "1.2", "2.1", "2.2"]
    assert result[3] == {**result[3], "cell": "2.2", "group": "q2", "cfg": {"steps": 20, "seed": 3, "lr": 2.0}}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]
    human = cli("plan", str(spec))
    assert human.returncode == 0 and "2.2" in human.stdout and '"lr": 2.0' in human.stdout


def test_plan_of_a_large_grid_shows_its_first_and_last_cells_and_all_shows_every_row(tmp_path: Path) -> None:
    seeds = ", ".join(str(s) for s in range(20))
    spec = write(tmp_path / "big.yaml", f"name: big\ntrain: m:f\ngrid: {{lr: [0.1, 0.2, 0.3], seed: [{seeds}]}}\n")
    ids = [f"1.{i}" for i in range(1, 61)]
    shown = cli("plan", "big.yaml", cwd=tmp_path)  # root runs/big: the first line fits a narrow terminal
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "big: 60 cells in 1 group(s), root runs/big, runs m:f"
    assert lines[1].split() == ["group", "cells", "first", "last"] and lines[2].split() == ["big", "60", "1.1", "1.60"]
    listed = [line.split()[0] for line in lines[4:-1]]
    assert listed == [*ids[:10], "…", *ids[-10:]]
    assert lines[-1] == "40 of 60 cells not shown: --all lists every row, --json every cell"
    every = cli("plan", "big.yaml", "--all", cwd=tmp_path).stdout.splitlines()
    assert [line.split()[0] for line in every[2:]] == ids
    assert every[-1] == ' 1.60  big    {"lr": 0.3, "seed": 19}'
    assert [c["cell"] for c in cli_json("plan", str(spec))] == ids
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.yaml"]


def test_status_and_show_json_fields(done_sweep: tuple[Path, Path]) -> None:
    spec, root = done_sweep
    status = cli_json("status", str(spec))  # the root found from the sweep file
    assert [c["cell"] for c in status] == ["1.1", "1.2", "2.1", "2.2"]
    for c in status:
        assert {"cell", "state", "step", "epoch", "progress", "attempts", "last_reason", "metrics", "best"} <= set(c)
        assert c["state"] == "done" and c["step"] == 20 and c["progress"] == 1.0 and c["attempts"] == 1
        assert c["last_reason"] == "completed" and "loss" in c["metrics"]
        ckpts = cli_json("show", c["cell"], "--root", str(root))["checkpoints"]
        assert [k["step"] for k in ckpts] == [5, 10, 15, 20]  # rows outlive retention's deletions
        assert c["best"] == max(k["metrics"]["score"] for k in ckpts if "score" in k["metrics"])
    show = cli_json("show", "2.2", "--root", str(root))
    assert show["cell"] == "2.2" and show["state"] == "done" and show["cfg"] == {"steps": 20, "seed": 3, "lr": 2.0}
    (a,) = show["attempts"]
    assert {"number", "reason", "start_step", "end_step", "started_at", "ended_at"} <= set(a)
    assert a["number"] == 1 and a["reason"] == "completed" and a["start_step"] == 0 and a["end_step"] == 20
    assert a["started_at"].endswith("Z") and a["ended_at"] > a["started_at"]
    committed = [k for k in show["checkpoints"] if k["state"] == "committed"]
    best_step = next(c["best_step"] for c in status if c["cell"] == "2.2")
    assert best_step in (10, 20)
    assert [k["step"] for k in committed] == sorted({15, 20, best_step})  # keep_last: 2, and the best
    for k in show["checkpoints"]:
        assert {"step", "state", "metrics", "path"} <= set(k)
    done = show["done"]
    assert done["checkpoint"] == "checkpoints/step-20" and done["attempt"] == 1
    assert set(done) >= {"cell", "cfg_hash", "metrics", "checkpoint", "attempt", "finished_at"}
    human = cli("status", "--root", str(root))
    assert human.returncode == 0 and "4 cells: 4 done" in human.stdout
    # the header: how long the sweep took (a settled sweep has no ETA) and the counts; each cell's speed
    assert re.fullmatch(r"took (\d+s|\d+m\d\ds|\d+h\d\dm) · 4 done", human.stdout.splitlines()[0]), human.stdout
    # a settled cell has no ETA; its speed is there when its attempt spanned two timed points (a 20-step cell
    # may end within the worker's one-second flush of its first checkpoint: test_forecast.py checks the rates)
    assert all(c["eta_seconds"] is None for c in status)
    assert all(c["rate_steps_per_second"] is None or c["rate_steps_per_second"] > 0 for c in status)


def test_relaunch_of_a_done_sweep_adds_no_attempt(done_sweep: tuple[Path, Path]) -> None:
    spec, root = done_sweep
    r = cli("launch", str(spec), cwd=spec.parent)
    assert r.returncode == 0 and "nothing to do" in r.stdout
    assert len(cli_json("attempts", "--root", str(root))) == 4


@pytest.mark.parametrize(
    "text, message",
    [
        ("name: x\ntrain: trainers:train\ngroups: [\n", "line"),
        ("name: x\ntrain: trainers:train\ncolour: red\ngrid: {seed: [1]}\n", "colour"),
        ("name: x\ntrain: trainers:train\ngrid: {}\n", "grid"),
        (
            "name: x\ntrain: trainers:train\ngroups:\n  - {name: a, grid: {s: [1]}}\n  - {name: a, grid: {s: [2]}}\n",
            "a",
        ),
        ("name: x\ngrid: {seed: [1]}\n", "train"),
    ],
)
def test_bad_sweep_files_exit_2_and_write_nothing(tmp_path: Path, text: str, message: str) -> None:
    spec = write(tmp_path / "bad.yaml", text)
    for args in (["plan", str(spec)], ["launch", str(spec)]):
        r = cli(*args, cwd=tmp_path)
        assert r.returncode == 2, r.stdout + r.stderr
        assert r.stderr.startswith("error: ") and message in r.stderr and "bad.yaml" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


def test_unknown_cell_and_missing_root_and_unwritable_root(done_sweep: tuple[Path, Path], tmp_path: Path) -> None:
    spec, root = done_sweep
    r = cli("show", "9.9", "--root", str(root))
    assert r.returncode == 2 and "9.9" in r.stderr and "q1" in r.stderr
    r = cli("status", "--root", str(tmp_path / "nowhere"))
    assert r.returncode == 2 and "not a sweep root" in r.stderr
    r = cli("status", cwd=tmp_path)
    assert r.returncode == 2 and "no sweep root given" in r.stderr
    blocker = write(tmp_path / "a-file", "")
    r = cli("launch", str(spec), "--root", str(blocker / "sub"))
    assert r.returncode == 2 and "not writable" in r.stderr
    assert blocker.read_text() == ""


def test_changed_cfg_refused_then_accepted_and_recorded(done_sweep: tuple[Path, Path]) -> None:
    spec, root = done_sweep
    before = (root / "sweepq.db").read_bytes()
    write(spec, SPEC.replace("lr: [0.5, 2.0]", "lr: [0.5, 3.0]").replace("seed: [1, 2]", "seed: [1, 2, 7]"))
    r = cli("launch", str(spec), cwd=spec.parent)
    assert r.returncode == 2
    assert "2.2: lr: 2.0 -> 3.0" in r.stderr and "--accept-changed" in r.stderr
    assert "1.1" not in r.stderr.split("\n", 1)[1]  # only the changed cell is named
    assert (root / "sweepq.db").read_bytes() == before  # nothing written
    r = cli("launch", str(spec), "--accept-changed", cwd=spec.parent)
    assert r.returncode == 0, r.stdout + r.stderr
    show = cli_json("show", "2.2", "--root", str(root))
    # done: its result stays beside the cfg it ran with; the file's new cfg runs when asked
    assert (show["cfg"]["lr"], show["new_cfg"]["lr"]) == (2.0, 3.0)
    assert any(e["kind"] == "cfg_changed" and e["detail"]["changes"] == {"lr": [2.0, 3.0]} for e in show["history"])
    assert [c["cell"] for c in cli_json("status", "--root", str(root))] == ["1.1", "1.2", "1.3", "2.1", "2.2"]


def test_done_marker_wins_over_the_database(done_sweep: tuple[Path, Path]) -> None:
    """A crash after DONE.json but before the database heard: the relaunch repairs, no new attempt."""
    spec, root = done_sweep
    con = sqlite3.connect(root / "sweepq.db")
    with con:
        con.execute("update cells set state='running' where id='1.1'")
        con.execute("update attempts set reason=NULL, ended_at=NULL where cell_id='1.1'")
        con.execute("update cells set state='queued', finished_at=NULL where id='1.2'")
    con.close()
    (root / "cells" / "2.1" / "DONE.json").unlink()  # and a marker that vanished: not done any more
    r = cli("launch", str(spec), cwd=spec.parent)
    assert r.returncode == 0, r.stdout + r.stderr
    cells = {c["cell"]: c for c in cli_json("status", "--root", str(root))}
    assert cells["1.1"]["state"] == cells["1.2"]["state"] == "done"
    assert cells["1.1"]["attempts"] == cells["1.2"]["attempts"] == 1
    a11 = cli_json("show", "1.1", "--root", str(root))["attempts"]
    assert [a["reason"] for a in a11] == ["completed"] and "receipt" in a11[0]["note"]
    a21 = cli_json("show", "2.1", "--root", str(root))
    assert [a["reason"] for a in a21["attempts"]] == ["completed", "completed"]
    assert any(e["kind"] == "marker_invalid" for e in a21["history"])
    assert json.loads((root / "cells" / "2.1" / "DONE.json").read_text())["attempt"] == 2
