"""Never two writers, whatever happens to the lock: lock files deleted, a cell folder moved under a stopped trainer.

The lock is the cell folder itself, so deleting files cannot free it; and every
durable write of an attempt is fenced by its attempt number, so a process that
lost its cell anyway (its folder moved away while it was SIGSTOPped, a new
attempt started in a new folder) commits nothing when it is continued.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from conftest import cli, cli_json, db_rows, start, trainer_of, wait_for, write

from sweepq.layout import CellPaths

SPEC = """
name: fencing
train: trainers:train
root: runs/fencing
params: {steps: 40, delay: 0.05, seed: 3}
checkpoint: {every_steps: 4, keep_last: 2}
retries: {lost: 3}
groups:
  - name: a
"""


def _manifests(cell: CellPaths) -> list[dict]:
    return [json.loads(m.read_text()) for m in sorted(cell.checkpoints.glob("step-*/manifest.json"))]


def _launched_with_a_checkpoint(sweep_dir: Path) -> tuple[Path, CellPaths, subprocess.Popen[str]]:
    """The sweep's launch, once cell 1.1 has committed its first checkpoint: (root, cell 1.1, launch)."""
    spec = write(sweep_dir / "fencing.yaml", SPEC)
    root = sweep_dir / "runs" / "fencing"
    cell = CellPaths(root, "1.1")
    first = start("launch", str(spec), "--no-live", cwd=sweep_dir)
    wait_for(lambda: cell.committed_steps(), what="a first checkpoint")
    return root, cell, first


def test_deleting_lock_files_never_lets_a_second_process_take_a_live_cell(sweep_dir: Path) -> None:
    root, cell, first = _launched_with_a_checkpoint(sweep_dir)
    # What a tmp cleaner or a tidy user does: every lock-looking file goes.
    for f in root.rglob("*"):
        if f.is_file() and ("lock" in f.name) and f.suffix != ".db":
            f.unlink()
    second = cli("worker", "--root", str(root), timeout=120)  # reaps and claims what it may, then leaves
    assert second.returncode == 0, second.stdout + second.stderr
    out, _ = first.communicate(timeout=120)
    assert first.returncode == 0, out
    assert db_rows(root, "SELECT number, reason FROM attempts WHERE cell_id = '1.1'") == [(1, "completed")]
    assert {m["attempt"] for m in _manifests(cell)} == {1}


def test_a_stopped_trainer_whose_cell_moved_on_commits_nothing_when_continued(sweep_dir: Path) -> None:
    root, cell, first = _launched_with_a_checkpoint(sweep_dir)
    old = wait_for(lambda: trainer_of(first.pid), what="the training process")
    old.send_signal(signal.SIGSTOP)
    try:
        # A user tidies cells/ while the trainer is stopped: its folder (and its lock) move away,
        # and the next worker finds the cell running with nobody holding it.
        tidied = root / "cells" / "1.1-tidied"
        cell.dir.rename(tidied)
        second = start("worker", "--root", str(root), cwd=sweep_dir)
        wait_for(lambda: cell.committed_steps(), what="the new attempt's first checkpoint")
    finally:
        old.send_signal(signal.SIGCONT)
    out2, _ = second.communicate(timeout=120)
    out1, _ = first.communicate(timeout=120)
    assert second.returncode == 0, out2
    assert first.returncode == 0, out1

    attempts = db_rows(root, "SELECT number, reason FROM attempts WHERE cell_id = '1.1' ORDER BY number")
    assert attempts == [(1, "lost"), (2, "completed")], attempts
    # Nothing of attempt 1 landed in the cell's folder once attempt 2 owned it.
    assert {m["attempt"] for m in _manifests(cell)} == {2}
    assert json.loads(cell.done.read_text())["attempt"] == 2
    rows = db_rows(root, "SELECT DISTINCT attempt FROM checkpoints WHERE cell_id = '1.1' AND state = 'committed'")
    assert rows == [(2,)], rows
    # The continued trainer was refused and said so; its worker's writes were refused and recorded.
    stderr = (tidied / "attempts" / "1" / "stderr.log").read_text()
    assert "refused: attempt 1 no longer owns the cell" in stderr, stderr[-2000:]
    kinds = [e["kind"] for e in cli_json("show", "1.1", "--root", str(root))["history"]]
    assert "fenced_write" in kinds, kinds
    done = cli("status", "--root", str(root), "--json")
    assert [c["state"] for c in json.loads(done.stdout)] == ["done"]
