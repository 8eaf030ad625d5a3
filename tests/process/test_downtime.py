"""A sweep killed whole (a reboot: every process SIGKILLed at once) and relaunched after a wait.

The lost attempts end at their last sign of life, not when the relaunch found them dead: their wall
time is their life, the gap until the reap is downtime, shown apart by `report`, `report --json` and
the HTML report. Every expected figure is derived from what was recorded (the database's rows, the
files' times), never from how long anything took here.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import cli, cli_json, db_rows, kill_tree, start, wait_for, wait_gone, write

from sweepq.layout import CellPaths
from sweepq.results.report import _clock

pytestmark = pytest.mark.process

SPEC = """
name: down
train: trainers:train
root: runs/down
params: {steps: 500, delay: 0.02}  # 10 s a cell: killed at its second checkpoint, far from its end
checkpoint: {every_steps: 100, keep_last: 10}  # 2 s apart: progress flushed after the last one is lost
groups:
  - name: a
    grid: {seed: [1, 2]}
"""
CELLS = ("1.1", "1.2")
WAIT_S = 3.0  # the downtime this test makes: at least this long between the kill and the relaunch


def at(text: str | None) -> datetime:
    assert text is not None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def stored(text: str) -> datetime:
    """A time as the queue stores it (naive UTC text)."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def files_last_written(root: Path, cell: str, number: int) -> datetime:
    """The newest write of the attempt's files and of the manifests of the checkpoints it committed."""
    paths = CellPaths(root, cell)
    times = [p.lstat().st_mtime for p in paths.attempt_dir(number).iterdir() if p.is_file()]
    for manifest in paths.checkpoints.glob("step-*/manifest.json"):  # the disk's: its worker may not have heard
        if json.loads(manifest.read_text()).get("attempt") == number:
            times.append(manifest.lstat().st_mtime)
    return datetime.fromtimestamp(max(times), UTC)


def training(root: Path) -> bool:
    """Both cells train: each has committed two checkpoints and its worker flushed a sign of life."""
    if not (root / "sweepq.db").exists():
        return False
    try:
        rows = db_rows(
            root,
            "SELECT a.cell_id, a.seen_at, (SELECT count(*) FROM checkpoints k WHERE k.cell_id = a.cell_id) "
            "FROM attempts a WHERE a.number = 1 AND a.reason IS NULL",
        )
    except Exception:  # the schema is being made
        return False
    return len(rows) == 2 and all(seen is not None and n >= 2 for _, seen, n in rows)


def test_a_sweep_killed_whole_ends_its_attempts_at_their_last_sign_of_life(sweep_dir: Path) -> None:
    spec = write(sweep_dir / "down.yaml", SPEC)
    root = sweep_dir / "runs" / "down"
    launch = start("launch", str(spec), "--workers", "2", "--no-live", cwd=sweep_dir)
    wait_for(lambda: training(root), what="both cells training, their progress flushed")

    wait_gone(kill_tree(launch.pid, signal.SIGKILL))
    # Taken once every process is gone, not before the signals: the tree is killed one process at a time,
    # and on a loaded machine a log keeper or a flush still writes between the first SIGKILL and the last.
    killed_at = datetime.now(UTC)
    launch.communicate()
    # What the dead attempts left, read before anything reaps them.
    seen = dict(db_rows(root, "SELECT cell_id, seen_at FROM attempts WHERE number = 1"))
    expected = {c: max(stored(seen[c]), files_last_written(root, c, 1)) for c in CELLS}
    assert all(t <= killed_at for t in expected.values())

    time.sleep(WAIT_S)  # the machine is down
    relaunched_at = datetime.now(UTC)
    r = cli("launch", str(spec), "--workers", "2", "--no-live", cwd=sweep_dir)
    assert r.returncode == 0, r.stdout + r.stderr

    listed = {(a["cell"], a["number"]): a for a in cli_json("attempts", "--root", str(root))}
    made = {
        (c, a, s): stored(t)
        for c, a, s, t in db_rows(
            root, "SELECT cell_id, attempt, step, min(created_at) FROM checkpoints GROUP BY 1, 2, 3"
        )
    }
    lost_s = down_s = 0.0
    for cell in CELLS:
        first, second = cli_json("show", cell, "--root", str(root))["attempts"]
        assert all(first[k] == listed[(cell, 1)][k] for k in ("ended_at", "seen_at", "closed_at", "wall_seconds"))
        assert first["reason"] == "lost" and second["reason"] == "completed"
        ended, closed, started = at(first["ended_at"]), at(first["closed_at"]), at(first["started_at"])
        # Its end is its last sign of life (the worker's last flush, or a later write of its files), not the reap.
        assert ended == expected[cell] == at(first["seen_at"])
        assert started < ended <= killed_at < relaunched_at <= closed <= at(second["started_at"])
        assert first["wall_seconds"] == pytest.approx((ended - started).total_seconds(), abs=1e-6)
        resumed = made[(cell, 1, second["start_step"])]  # the next attempt resumed from a checkpoint it made
        assert started < resumed <= ended  # made before its last sign of life
        lost_s += (ended - resumed).total_seconds()
        down_s += (closed - ended).total_seconds()
    assert down_s >= 2 * WAIT_S

    rows = {row["reason"]: row for row in cli_json("report", "--root", str(root))}
    assert rows["lost"]["attempts"] == 2
    assert rows["lost"]["downtime_hours"] == pytest.approx(down_s / 3600, rel=1e-9)
    assert rows["lost"]["training_lost_hours"] == pytest.approx(lost_s / 3600, rel=1e-9)
    wall = sum(listed[(c, 1)]["wall_seconds"] for c in CELLS) / 3600
    assert rows["lost"]["wall_hours"] == pytest.approx(wall, rel=1e-9)  # the downtime is not in it
    assert rows["completed"]["downtime_hours"] == 0.0 and rows["completed"]["training_lost_hours"] == 0.0

    words = (
        f"training lost: {lost_s / 3600:.3f} h ({_clock(lost_s / 3600)}), from the checkpoint each next attempt "
        "resumed from to the last sign of life of the attempt before it; downtime: "
        f"{down_s / 3600:.3f} h ({_clock(down_s / 3600)}), from an attempt's last sign of life until a later "
        "launch found it dead, not counted in wall hours"
    )
    text = cli("report", "--root", str(root), env={**os.environ, "COLUMNS": "200"})
    assert text.returncode == 0, text.stderr
    assert words in " ".join(text.stdout.split())
    lost_line = next(line for line in text.stdout.splitlines() if line.startswith("lost "))
    assert lost_line.split()[-2:] == [f"{lost_s / 3600:.3f}", f"{down_s / 3600:.3f}"]

    page = sweep_dir / "down.html"
    assert cli("report", "--root", str(root), "--html", str(page)).returncode == 0
    hours = re.search(r'<section id="hours">.*?</section>', page.read_text(), re.S)
    assert hours is not None
    assert "<th" in hours.group(0) and "training lost h" in hours.group(0) and "downtime h" in hours.group(0)
    assert f"<td>{lost_s / 3600:.3f}<td>{down_s / 3600:.3f}" in hours.group(0)
    assert words.replace("'", "&#x27;") in hours.group(0)
