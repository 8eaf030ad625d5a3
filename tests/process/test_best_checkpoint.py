"""`sweepq best` names a checkpoint that holds each done cell's best, for the manual's training loop.

The loop (docs/guide/training.md) passes its validation score to `run.checkpoint(..., metrics=...)` once an epoch.
With a cadence that never comes due in the run (`every_steps: 1000`), those calls used to be
dropped: only the final step was committed, without metrics, and `best` said `"checkpoint": null`
for every cell. Now a checkpoint whose metric beats every checkpoint the cell keeps is committed
whatever the cadence, and retention keeps it beside the newest `keep_last`. Each cell's best epoch
is known (the loop's made-up score peaks at the cfg's `peak`), so the test knows which step must
be named; that checkpoint is there and every file of it verifies against its manifest.
With `keep_best: false` no best checkpoint is kept, and `best` says so in one line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import cli, env_with, write
from readme_loop import write_module

from sweepq.checkpoint import storage
from sweepq.layout import CellPaths

pytestmark = pytest.mark.process

STEPS_PER_EPOCH = 3  # readme_loop.HELPERS
SPEC = """
name: peaks
train: loop:train
root: runs/peaks
params: {epochs: 4}
checkpoint: {every_steps: 1000, keep_last: 1}
metric: {name: val_acc, goal: max}
grid: {peak: [2, 3]}
"""
WARNING = (
    "warning: no checkpoint holds the best val_acc of 2 done cell(s) (1.1, 1.2): sweepq keeps the best "
    "checkpoint when your loop passes metrics={'val_acc': ...} to run.checkpoint where it evaluates "
    "(with checkpoint: {keep_best: true}, the default)\n"
)


def launched(folder: Path, text: str) -> Path:
    folder.mkdir()
    write_module(folder)
    spec = write(folder / "peaks.yaml", text)
    r = cli("launch", str(spec), "--workers", "2", "--no-live", cwd=folder)
    assert r.returncode == 0, r.stdout + r.stderr
    return folder / "runs" / "peaks"


def test_best_names_the_checkpoint_of_the_best_step_for_every_cell(tmp_path: Path) -> None:
    root = launched(tmp_path / "sweep", SPEC)
    r = cli("best", "--root", str(root), "--json")
    assert r.returncode == 0 and r.stderr == ""  # no warning: every done cell has its checkpoint
    rows = {row["cell"]: row for row in json.loads(r.stdout)}
    assert set(rows) == {"1.1", "1.2"}
    for cell, row in rows.items():
        best_step = row["cfg"]["peak"] * STEPS_PER_EPOCH
        assert (row["state"], row["best"], row["step"]) == ("done", 1.0, best_step)
        assert row["checkpoint"] == f"cells/{cell}/checkpoints/step-{best_step}"
        assert (root / row["checkpoint"]).is_dir()
        manifest = storage.verify(storage.for_cell(CellPaths(root, cell), None), best_step)  # every file's sha256
        assert manifest["metrics"] == {"val_acc": 1.0}
        # kept apart from keep_last: 1, beside the final step, which keeps the metrics given for it
        shown = json.loads(cli("show", cell, "--root", str(root), "--json").stdout)
        committed = {c["step"]: c["metrics"] for c in shown["checkpoints"] if c["state"] == "committed"}
        final = 4 * STEPS_PER_EPOCH
        assert sorted(committed) == [best_step, final]
        assert committed[final] == {"val_acc": pytest.approx(1.0 - 0.1 * (4 - row["cfg"]["peak"]))}
        page = cli("show", cell, "--root", str(root), env=env_with(COLUMNS="1000")).stdout
        (line,) = [x for x in page.splitlines() if x.strip().startswith(f"{best_step} ")]
        assert "committed (best val_acc)" in line
    table = cli("best", "--root", str(root), env=env_with(COLUMNS="1000"))
    assert table.stderr == "" and "cells/1.2/checkpoints/step-9" in table.stdout


def test_best_warns_in_one_line_when_no_checkpoint_holds_a_done_cells_best(tmp_path: Path) -> None:
    root = launched(tmp_path / "sweep", SPEC.replace("keep_last: 1}", "keep_last: 1, keep_best: false}"))
    r = cli("best", "--root", str(root), "--json")
    assert r.returncode == 0 and r.stderr == WARNING
    assert [row["checkpoint"] for row in json.loads(r.stdout)] == [None, None]
    assert cli("best", "--root", str(root)).stderr == WARNING
