"""A launch and workers started by hand (other machines, a scheduler) share one queue and never train a cell twice.

A second `launch` on a live root is refused (test_terminal.py); more workers join with `sweepq worker --root`.
"""

from __future__ import annotations

from pathlib import Path

from conftest import cli_json, start, wait_for, write

SPEC = """
name: race
train: trainers:train
root: runs/race
params: {steps: 30, delay: 0.05}
checkpoint: {every_steps: 10}
groups:
  - name: a
    grid: {seed: [1, 2, 3, 4, 5, 6, 7, 8]}
"""


def test_a_launch_and_workers_by_hand_share_the_queue_without_overlap(sweep_dir: Path) -> None:
    spec = write(sweep_dir / "race.yaml", SPEC)
    root = sweep_dir / "runs" / "race"
    launch = start("launch", str(spec), "--workers", "2", cwd=sweep_dir)
    wait_for(lambda: (root / "sweepq.db").exists() or launch.poll() is not None, what="the root")
    extra = [start("worker", "--root", str(root), "--name", f"by-hand-{i}", cwd=sweep_dir) for i in range(2)]
    outputs = [p.communicate(timeout=300)[0] for p in (launch, *extra)]
    assert [p.returncode for p in (launch, *extra)] == [0, 0, 0], outputs

    receipts = cli_json("attempts", "--root", str(root))
    by_cell: dict[str, list[dict]] = {}
    for a in receipts:
        by_cell.setdefault(a["cell"], []).append(a)
    assert sorted(by_cell) == [f"1.{i}" for i in range(1, 9)]
    for cell, items in by_cell.items():
        # a second writer would have raised "two writers" in the training code
        assert [a["reason"] for a in items] == ["completed"], (cell, items)
    workers = {a["worker"] for a in receipts}
    assert any(w.startswith("by-hand-") for w in workers), f"the workers by hand trained nothing: {workers}"
    assert any("/w" in w for w in workers), f"the launch's workers trained nothing: {workers}"
    status = cli_json("status", "--root", str(root))
    assert all(c["state"] == "done" for c in status)
