"""The story of DESIGN.md, with real processes: a reboot mid-sweep, then the same command again.

Q1 finished (1.1-1.3). Q2 produced 2.1 and 2.4. The machine "reboots" (every
sweepq process gets SIGKILL at once) with 2.2 and 2.3 mid-training; 2.5 and 2.6
never started (another machine held them: the test holds their locks during
the first launch). After the reboot the user types the same launch command:
2.2 and 2.3 continue from their last checkpoints, then 2.5 and 2.6 run in
order, and every cell ends with exactly one completed attempt.
"""

from __future__ import annotations

import functools
import json
import signal
from pathlib import Path

from conftest import cli, cli_json, db_rows, kill_tree, start, trainer_of, wait_for, wait_gone, write

from sweepq.layout import CellPaths
from sweepq.queue.lock import CellLock
from sweepq.queue.store import Store

SPEC = """
name: story
train: sweepq.examples.llm_analysis:train
root: runs/story
params: {epochs: 12, batch_size: 64, n_train: 512, n_val: 256, width: 32}
checkpoint: {every_steps: 10, keep_last: 3}
metric: {name: val_acc, goal: max}
groups:
  - name: q1
    grid: {lr: [0.003, 0.001, 0.0003]}
  - name: q2
    # 2.2, 2.3, 2.5 and 2.6 are slow; 2.1 and 2.4 are quick
    grid: {lr: [0.003, 0.001], step_delay: [0.0, 0.06, 0.061]}
"""


def test_reboot_mid_sweep_then_same_command(tmp_path: Path) -> None:
    spec = write(tmp_path / "story.yaml", SPEC)
    root = tmp_path / "runs" / "story"
    Store.open(root, create=True).close()  # the root exists: the other machine works in it
    other_machine = [CellLock(CellPaths(root, c).lock) for c in ("2.5", "2.6")]
    assert all(lock.try_acquire() for lock in other_machine)

    first = start("launch", str(spec), "--workers", "3", cwd=tmp_path)
    frozen: set[str] = set()

    def mid_training() -> bool:
        assert first.poll() is None, first.communicate()[0]
        # A slow cell is frozen (SIGSTOP) once it has committed step 30, so that it is still
        # mid-training when the quick cells are done, however slowly this machine runs them.
        for cell in {"2.2", "2.3"} - frozen:
            steps = CellPaths(root, cell).committed_steps()
            if steps and steps[0] >= 30:
                trainer = wait_for(functools.partial(trainer_of, first.pid, cell), what=f"{cell}'s trainer")
                trainer.send_signal(signal.SIGSTOP)
                frozen.add(cell)
        quick_done = all(CellPaths(root, c).done.exists() for c in ("1.1", "1.2", "1.3", "2.1", "2.4"))
        return quick_done and frozen == {"2.2", "2.3"}

    wait_for(mid_training, timeout=300, what="Q1, 2.1 and 2.4 done with 2.2 and 2.3 mid-training")
    pids = kill_tree(first.pid)  # the reboot: every process at once
    wait_gone(pids)
    for lock in other_machine:
        lock.release()

    before = {c["cell"]: c for c in cli_json("status", "--root", str(root))}
    assert [before[c]["state"] for c in ("2.2", "2.3", "2.5", "2.6")] == ["running", "running", "queued", "queued"]
    assert before["2.2"]["step"] < before["2.2"]["total_steps"]
    resume_from = {c: CellPaths(root, c).committed_steps()[0] for c in ("2.2", "2.3")}
    attempts_before = db_rows(root, "select cell_id, number from attempts")

    again = cli("launch", str(spec), "--workers", "2", cwd=tmp_path, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "skipping (done): 1.1, 1.2, 1.3, 2.1, 2.4" in again.stdout
    assert f"2.2 (from checkpoint step {resume_from['2.2']})" in again.stdout
    assert f"2.3 (from checkpoint step {resume_from['2.3']})" in again.stdout

    cells = {c["cell"]: c for c in cli_json("status", "--root", str(root))}
    assert all(c["state"] == "done" and c["progress"] == 1.0 for c in cells.values())

    attempts = {}
    for cell in cells:
        shown = cli_json("show", cell, "--root", str(root))
        attempts[cell] = shown["attempts"]
        # exactly one completed attempt and one verified DONE.json per cell
        assert [a["reason"] for a in shown["attempts"]].count("completed") == 1, cell
        done = json.loads((root / "cells" / cell / "DONE.json").read_text())
        assert done["cell"] == cell and done["metrics"]["val_acc"] == shown["metrics"]["val_acc"]
        assert (root / "cells" / cell / done["checkpoint"] / "manifest.json").exists()

    # done cells were skipped: no new attempt
    for cell in ("1.1", "1.2", "1.3", "2.1", "2.4"):
        assert len(attempts[cell]) == 1
        assert (cell, 1) in attempts_before
    # interrupted cells: the reboot is recorded as lost, the resume starts at the checkpoint
    for cell in ("2.2", "2.3"):
        first_try, resumed = attempts[cell]
        assert first_try["reason"] == "lost"
        assert resumed["start_step"] == resume_from[cell] > 0
        assert resumed["end_step"] == cells[cell]["total_steps"]
    # interrupted cells were claimed before queued ones, queued ones in cell order
    resumed_start = max(attempts[c][1]["started_at"] for c in ("2.2", "2.3"))
    assert resumed_start <= attempts["2.5"][0]["started_at"] <= attempts["2.6"][0]["started_at"]
    assert len(attempts["2.5"]) == len(attempts["2.6"]) == 1
