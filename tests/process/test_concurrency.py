"""Two `sweepq launch` on the same root at once never train a cell twice at the same time."""

from __future__ import annotations

from pathlib import Path

from conftest import cli_json, start, write

SPEC = """
name: race
train: trainers:train
root: runs/race
params: {steps: 30, delay: 0.01}
checkpoint: {every_steps: 10}
groups:
  - name: a
    grid: {seed: [1, 2, 3, 4, 5, 6, 7, 8]}
"""


def test_two_launches_share_the_queue_without_overlap(sweep_dir: Path) -> None:
    spec = write(sweep_dir / "race.yaml", SPEC)
    root = sweep_dir / "runs" / "race"
    launches = [start("launch", str(spec), "--workers", "2", cwd=sweep_dir) for _ in range(2)]
    outputs = [p.communicate(timeout=300)[0] for p in launches]
    assert [p.returncode for p in launches] == [0, 0], outputs

    receipts = cli_json("attempts", "--root", str(root))
    by_cell: dict[str, list[dict]] = {}
    for a in receipts:
        by_cell.setdefault(a["cell"], []).append(a)
    assert sorted(by_cell) == [f"1.{i}" for i in range(1, 9)]
    for cell, items in by_cell.items():
        # a second writer would have raised "two writers" in the training code
        assert [a["reason"] for a in items] == ["completed"], (cell, items)
    workers = {a["worker"] for a in receipts}
    launchers = {w.split("/")[0] for w in workers}
    assert len(launchers) == 2, f"both launches should have trained cells: {workers}"
    status = cli_json("status", "--root", str(root))
    assert all(c["state"] == "done" for c in status)
