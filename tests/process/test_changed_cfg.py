"""A result is always shown with the cfg that produced it, whatever `--accept-changed` did to the cell.

A real sweep of the manual's training loop (docs/guide/training.md) with `epochs: 2` runs to done; the file
is edited to `epochs: 4` and launched again: refused (the paragraph says what each flag does to done
cells), then `--accept-changed` (the done cells keep their result beside `epochs 2`, marked, in
`status`, `show` and `best`, as text and JSON), then `--rerun-changed` (the same cells train on under
`epochs: 4` for real: a second attempt from step 6 to step 12). `--rerun-changed` straight after the
edit does the same in one launch.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import cli, env_with, write
from readme_loop import write_module

from sweepq.checkpoint.marker import read_done
from sweepq.layout import CellPaths

pytestmark = pytest.mark.process

SPEC = """
name: grow
train: loop:train
root: runs/grow
params: {epochs: 2, peak: 1}
checkpoint: {every_steps: 1000}
metric: {name: val_acc, goal: max}
grid: {seed: [1, 2]}
"""

REFUSAL = """\
error: grow.yaml now gives 2 existing cell(s) a different cfg; their checkpoints and results belong to the old one:
  1.1: epochs: 2 -> 4
  1.2: epochs: 2 -> 4
Nothing was changed. Put the new values in new cells (a new group), use a new root, or relaunch with \
--accept-changed to give these cells the new cfg (recorded in their history): cells not done run it, resuming \
from their checkpoints; done cells stay done with their results, shown with the cfg they ran with, until \
`sweepq reset CELL` runs the new one from scratch. Relaunch with --rerun-changed instead to queue the done ones \
again now: they resume from their last checkpoint under the new cfg, their old results kept in their history.
"""
KEPT = (
    "  done under their old cfg (results kept and shown with the cfg they ran with; "
    "`sweepq reset CELL` or --rerun-changed runs the new one): 1.1, 1.2"
)
REQUEUED = "  queued again under their new cfg (old results in their history): 1.1, 1.2"


def note(cell: str) -> str:
    return f"ran with an older cfg (epochs=2, now 4); `sweepq reset {cell}` runs the new one"


@pytest.fixture(scope="module")
def ran_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with grow.yaml (epochs: 2), the manual's loop and its root, both cells done: copy it."""
    d = tmp_path_factory.mktemp("grow")
    write_module(d)
    spec = write(d / "grow.yaml", SPEC)
    r = launch(spec)
    assert r.returncode == 0, r.stdout + r.stderr
    return d


@pytest.fixture
def grown(ran_once: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The done sweep's copy, its file edited to epochs: 4: (spec, root)."""
    d = tmp_path / "grow"
    shutil.copytree(ran_once, d)
    spec = d / "grow.yaml"
    write(spec, SPEC.replace("epochs: 2", "epochs: 4"))
    return spec, d / "runs" / "grow"


def launch(spec: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return cli("launch", str(spec), "--workers", "2", "--no-live", *flags, cwd=spec.parent)


def read(*args: str) -> str:
    r = cli(*args, env=env_with(COLUMNS="1000"))
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def as_json(*args: str) -> Any:
    return json.loads(read(*args, "--json"))


def row_of(table: str, cell: str) -> str:
    (line,) = [line for line in table.splitlines() if cell in line.split()[:2]]  # status: first; best: after rank
    return line


def test_refused_then_kept_under_the_cfg_it_ran_with_then_rerun(grown: tuple[Path, Path]) -> None:
    spec, root = grown
    before = (root / "sweepq.db").read_bytes()
    refused = launch(spec)
    assert refused.returncode == 2 and refused.stderr == REFUSAL
    assert (root / "sweepq.db").read_bytes() == before

    kept = launch(spec, "--accept-changed")
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert KEPT in kept.stdout.splitlines() and "nothing to do: every cell is done" in kept.stdout

    # status --json: each result beside the cfg it came from; new_cfg what the file gives now
    for c in as_json("status", "--root", str(root)):
        assert (c["state"], c["epoch"], c["total_epochs"], c["step"]) == ("done", 2.0, 2.0, 6)
        assert c["cfg"]["epochs"] == 2 and c["new_cfg"]["epochs"] == 4
        assert c["metrics"]["val_acc"] == pytest.approx(0.9) and c["attempts"] == 1
    status = read("status", "--root", str(root))
    header = status.splitlines()[1]
    assert "epochs" not in header  # every cell ran with epochs=2: not a varying key
    assert "same in every cell: epochs=2, peak=1" in status
    for cell in ("1.1", "1.2"):
        assert row_of(status, cell).rstrip().endswith(note(cell))
        assert "2/2" in row_of(status, cell)

    shown = as_json("show", "1.1", "--root", str(root))
    assert (shown["cfg"], shown["new_cfg"]) == (
        {"epochs": 2, "peak": 1, "seed": 1},
        {"epochs": 4, "peak": 1, "seed": 1},
    )
    assert shown["epoch"] == 2.0 and shown["done"]["step"] == 6
    (changed,) = [e for e in shown["history"] if e["kind"] == "cfg_changed"]
    assert changed["detail"] == {
        "accepted": True,
        "changes": {"epochs": [2, 4]},
        "done": "kept under the cfg it ran with",
        "ran_with": {"epochs": 2, "peak": 1, "seed": 1},
    }
    page = read("show", "1.1", "--root", str(root)).splitlines()
    at = next(i for i, line in enumerate(page) if line.startswith("cfg "))
    assert page[at].split() == ["cfg", "epochs", "2"]
    assert page[at + 3].strip() == note("1.1")
    assert page[at + 4].split()[:3] == ["progress", "epoch", "2/2"]

    best = as_json("best", "--root", str(root))
    assert [(r["cell"], r["cfg"]["epochs"], r["new_cfg"]["epochs"]) for r in best] == [("1.1", 2, 4), ("1.2", 2, 4)]
    table = read("best", "--root", str(root))
    assert "done (ran with an older cfg)" in row_of(table, "1.1")
    assert "same in every cell: epochs=2, peak=1" in table

    # exports pair each result with the cfg it came from too
    exported = cli("export", "csv", str(root.parent / "csv"), "--root", str(root))
    assert exported.returncode == 0, exported.stderr
    with (root.parent / "csv" / "cells.csv").open() as f:
        assert [(r["cell"], r["cfg.epochs"], r["state"]) for r in csv.DictReader(f)] == [
            ("1.1", "2", "done"),
            ("1.2", "2", "done"),
        ]

    # The same file again, asking for the new cfg: both cells train on from step 6 under epochs: 4
    rerun = launch(spec, "--rerun-changed")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert REQUEUED in rerun.stdout.splitlines()
    assert_retrained(root)
    history = as_json("show", "1.1", "--root", str(root))["history"]
    assert [e["kind"] for e in history] == ["cfg_changed", "rerun_changed"]
    old = history[1]["detail"]
    assert old["ran_with"] == {"epochs": 2, "peak": 1, "seed": 1}
    assert (old["result"]["step"], old["result"]["epoch"], old["result"]["metrics"]["val_acc"]) == (6, 2.0, 0.9)


def test_rerun_changed_at_once(grown: tuple[Path, Path]) -> None:
    spec, root = grown
    rerun = launch(spec, "--rerun-changed")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert REQUEUED in rerun.stdout.splitlines() and KEPT not in rerun.stdout
    assert_retrained(root)
    history = as_json("show", "1.2", "--root", str(root))["history"]
    assert [e["kind"] for e in history] == ["cfg_changed", "rerun_changed"]


def assert_retrained(root: Path) -> None:
    """Both cells done under epochs: 4 by a second attempt that resumed at step 6, shown with no marker."""
    for c in as_json("status", "--root", str(root)):
        assert (c["state"], c["epoch"], c["total_epochs"], c["step"]) == ("done", 4.0, 4.0, 12)
        assert c["cfg"]["epochs"] == 4 and c["new_cfg"] is None and c["attempts"] == 2
        done = read_done(CellPaths(root, c["cell"]))
        assert done is not None and (done["step"], done["attempt"]) == (12, 2)
        assert done["cfg_hash"] == as_json("show", c["cell"], "--root", str(root))["cfg_hash"]
    attempts = as_json("attempts", "--root", str(root))
    assert sorted((a["cell"], a["number"], a["start_step"], a["end_step"], a["reason"]) for a in attempts) == [
        ("1.1", 1, 0, 6, "completed"),
        ("1.1", 2, 6, 12, "completed"),
        ("1.2", 1, 0, 6, "completed"),
        ("1.2", 2, 6, 12, "completed"),
    ]
    status = read("status", "--root", str(root))
    assert "ran with an older cfg" not in status and "same in every cell: epochs=4, peak=1" in status
    assert "4/4" in row_of(status, "1.1")


def test_status_counts_time_from_the_reset_not_from_attempts_before_it(ran_once: Path, tmp_path: Path) -> None:
    """`took` is the sweep's time since its cells were last run afresh: a reset's earlier attempts drop out."""
    from datetime import datetime

    from sweepq.cli.header import duration

    d = tmp_path / "grow"
    shutil.copytree(ran_once, d)
    root = d / "runs" / "grow"
    assert read("status", "--root", str(root)).startswith("took ")
    reset = cli("reset", "1.1", "1.2", "--root", str(root))
    assert reset.returncode == 0 and "reset: 1.1, 1.2" in reset.stdout
    head = read("status", "--root", str(root)).splitlines()[0]  # no time yet: the old attempts measure speed only
    assert head.startswith("eta ") and head.endswith(" · 2 queued") and "elapsed" not in head and "took" not in head
    again = launch(d / "grow.yaml")
    assert again.returncode == 0, again.stdout + again.stderr
    second = [a for a in as_json("attempts", "--root", str(root)) if a["number"] == 2]
    assert len(second) == 2

    def at(text: str) -> datetime:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))

    took = max(at(a["ended_at"]) for a in second) - min(at(a["started_at"]) for a in second)
    assert read("status", "--root", str(root)).splitlines()[0] == f"took {duration(took.total_seconds())} · 2 done"
