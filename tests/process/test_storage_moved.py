"""A relaunch that names another storage: accepted when it holds the sweep's checkpoints (a share mounted
at another path), refused before anything is written when an interrupted cell would start over there.

Real processes and real files: a launch is stopped with SIGTERM after its cell committed checkpoints in
`nas1`; relaunching with --storage pointing at an empty folder is refused and changes nothing, then a
copy of `nas1` at another path is accepted and the cell resumes from its newest checkpoint there.
"""

from __future__ import annotations

import json
import shutil
import signal
import sqlite3
from pathlib import Path

import pytest
from conftest import cli, db_rows, start, wait_for, write

pytestmark = pytest.mark.process

SPEC = """
name: moved
train: trainers:train
root: runs/moved
storage: nas1
params: {steps: 200, delay: 0.05, seed: 3}
checkpoint: {every_steps: 4, keep_last: 2}
groups:
  - name: a
"""


def committed(root: Path) -> int:
    try:
        rows = db_rows(root, "SELECT max(step) FROM checkpoints WHERE cell_id = '1.1' AND state = 'committed'")
    except sqlite3.OperationalError:  # the launch has not made its queue yet
        return 0
    return rows[0][0] or 0


def test_a_relaunch_refuses_a_storage_without_the_checkpoints_and_takes_one_with_them(sweep_dir: Path) -> None:
    spec = write(sweep_dir / "moved.yaml", SPEC)
    root = sweep_dir / "runs" / "moved"
    launch = start("launch", str(spec), "--no-live", cwd=sweep_dir)
    wait_for(lambda: committed(root) >= 8, what="two committed checkpoints")
    launch.send_signal(signal.SIGTERM)  # stopped as `sweepq stop` does: the cell goes back to the queue
    out, _ = launch.communicate(timeout=300)
    assert "1.1 interrupted" in out, out
    saved = committed(root)
    settings = db_rows(root, "SELECT settings FROM sweep")

    empty = sweep_dir / "elsewhere"
    refused = cli("launch", str(spec), "--no-live", "--storage", str(empty), cwd=sweep_dir)
    assert refused.returncode != 0, refused.stdout
    said = " ".join(refused.stderr.split())
    assert f"checkpoints are in {sweep_dir / 'nas1'}" in said and f"1.1 (step {saved}) would start over" in said
    assert f"--storage '{sweep_dir / 'nas1'}'" in said
    assert db_rows(root, "SELECT settings FROM sweep") == settings  # nothing written
    assert db_rows(root, "SELECT count(*) FROM attempts") == [(1,)]
    assert not empty.exists()

    remounted = sweep_dir / "mnt" / "nas1"  # the same files at another path
    shutil.copytree(sweep_dir / "nas1", remounted)
    shutil.rmtree(sweep_dir / "nas1")
    done = cli("launch", str(spec), "--no-live", "--storage", str(remounted), cwd=sweep_dir, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    attempts = db_rows(root, "SELECT number, reason, start_step FROM attempts ORDER BY number")
    assert [(n, r) for n, r, _ in attempts] == [(1, "preempted"), (2, "completed")], attempts
    assert attempts[1][2] >= saved  # resumed from the copy, not from step 0
    assert json.loads(db_rows(root, "SELECT settings FROM sweep")[0][0])["storage"] == str(remounted)
