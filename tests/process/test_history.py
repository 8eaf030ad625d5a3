"""Metric history through a reboot: kill -9 of every process mid-training, the same launch again, one honest curve.

Two cells train the same deterministic walk. Cell 1.1 is frozen (SIGSTOP) once
it has committed a checkpoint and its history file holds points past it; cell
1.2 runs to the end undisturbed; then the whole tree gets SIGKILL and the same
launch runs again. Each cell's stitched curve has every step once and equals,
exactly, what 1.2 logged uninterrupted (the RNG is restored from the
checkpoint); the killed attempt's points after its checkpoint are its lost tail,
marked `lost`; and `sweepq export csv` holds every value of every attempt's
file, read back exactly.
"""

from __future__ import annotations

import contextlib
import csv
import json
import signal
from pathlib import Path

import psutil
from click.testing import CliRunner
from conftest import cli, db_rows, kill_tree, start, trainer_of, wait_for, wait_gone, write

from sweepq.cli.main import main
from sweepq.history import attempt_log, stitched
from sweepq.layout import CellPaths
from sweepq.queue.store import Store

STEPS = 40
# Two cells train the same walk (same seed; `copy` only names them): 1.2 runs undisturbed, the reference.
SPEC = f"""
name: hist
train: trainers:train
root: runs/hist
params: {{steps: {STEPS}, delay: 0.03, seed: 7}}
checkpoint: {{every_steps: 10, keep_last: 10}}
grid: {{copy: [killed, whole]}}
"""
KILLED, WHOLE = "1.1", "1.2"


def raw_values(root: Path, cell: str, attempt: int) -> list[tuple[str, int, int, str, float, float]]:
    """Every value of an attempt's file, read here line by line (not with sweepq's reader): whole lines only."""
    text = CellPaths(root, cell).metrics(attempt).read_text()
    out = []
    for line in text.split("\n")[1:-1]:  # the header; what follows the last newline
        d = json.loads(line)
        out += [(cell, attempt, d["step"], k, float(v), d["time"]) for k, v in d["values"].items()]
    return out


def test_killed_mid_training_then_relaunched_keeps_one_curve_and_the_lost_tail(sweep_dir: Path) -> None:
    spec = write(sweep_dir / "hist.yaml", SPEC)
    root = sweep_dir / "runs" / "hist"
    first = start("launch", str(spec), "--workers", "2", "--no-live", cwd=sweep_dir)
    frozen: list[tuple[int, int]] = []  # (newest committed step, newest step in the history file)

    def killed_cell_past_a_checkpoint_and_the_other_done() -> bool:
        assert first.poll() is None, first.communicate()[0]
        trainer = None if frozen else trainer_of(first.pid, KILLED)
        if trainer is not None:
            with contextlib.suppress(psutil.NoSuchProcess):
                trainer.send_signal(signal.SIGSTOP)  # nothing commits or writes while we look
                committed = CellPaths(root, KILLED).committed_steps()
                logged = [p.step for p in attempt_log(root, KILLED, 1).points]
                if committed and logged and logged[-1] > committed[0]:
                    frozen.append((committed[0], logged[-1]))
                else:
                    trainer.send_signal(signal.SIGCONT)
        return bool(frozen) and db_rows(root, f"select state from cells where id = '{WHOLE}'") == [("done",)]

    wait_for(killed_cell_past_a_checkpoint_and_the_other_done, timeout=120, what="1.1 frozen, 1.2 done")
    wait_gone(kill_tree(first.pid))  # the reboot: every process at once
    r = cli("launch", str(spec), "--workers", "1", "--no-live", cwd=sweep_dir)
    assert r.returncode == 0, r.stdout + r.stderr

    (checkpoint, last_logged), cells = frozen[0], (KILLED, WHOLE)
    store = Store.open_readonly(root)
    try:
        assert [store.cell(c).cfg["copy"] for c in cells] == ["killed", "whole"]
        assert sorted((a.cell, a.number, a.reason, a.start_step) for a in store.attempts()) == [
            (KILLED, 1, "lost", 0),
            (KILLED, 2, "completed", checkpoint),
            (WHOLE, 1, "completed", 0),
        ]
        killed, whole = (stitched(root, c, store) for c in cells)
    finally:
        store.close()
    expected = [(s, v) for _, _, s, _, v, _ in raw_values(root, WHOLE, 1)]  # logged uninterrupted
    assert [s for s, _ in expected] == list(range(1, STEPS + 1))
    for h in (killed, whole):
        assert [(p.step, p.value) for p in h.series["loss"].points] == expected  # each step once, exact values
        assert h.repeated == () and h.damaged == {}
    assert [(a, pts[0].step, pts[-1].step) for a, pts in killed.series["loss"].segments()] == [
        (1, 1, checkpoint),
        (2, checkpoint + 1, STEPS),
    ]
    (tail,) = killed.lost
    assert (tail.attempt, tail.reason, tail.metric) == (1, "lost", "loss")
    assert [(p.step, p.value) for p in tail.points] == expected[checkpoint:last_logged]  # the same walk, lost
    assert whole.lost == ()

    out = sweep_dir / "export"
    exported_now = CliRunner().invoke(main, ["export", "csv", str(out), str(root)])  # in this process: no start-up
    assert exported_now.exit_code == 0, exported_now.output
    with open(out / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    exported = sorted(
        (r["cell"], int(r["attempt"]), int(r["step"]), r["name"], float(r["value"]), float(r["time"])) for r in rows
    )
    files = [(KILLED, 1), (KILLED, 2), (WHOLE, 1)]
    assert exported == sorted(v for cell, n in files for v in raw_values(root, cell, n))
    lost = [(int(r["step"]), r["reason"]) for r in rows if r["status"] == "lost"]
    assert [r["cell"] for r in rows if r["status"] == "lost"] == [KILLED] * len(lost)
    assert lost == [(s, "lost") for s in range(checkpoint + 1, last_logged + 1)]
    for cell in cells:
        kept = [int(r["step"]) for r in rows if r["cell"] == cell and r["status"] == "kept"]
        assert sorted(kept) == list(range(1, STEPS + 1))
