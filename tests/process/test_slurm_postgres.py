"""`launch --on slurm` of a sweep on PostgreSQL and shared storage: one job preempted, one job killed outright.

The queue is on the server (`database:`), the checkpoints in a folder every node would mount
(`storage:`); the root holds neither. At a preemption, a `scancel` or the time limit Slurm sends
SIGTERM to every process of a job; here it is delivered that way (`scancel --signal=TERM --full`:
no test can wait for a real preemption) to one job of a two-job array while both train. That
attempt must end `preempted` with its emergency checkpoint, nothing may be `lost`, the cell must
resume where it stopped, and every cell must end with an uninterrupted run's weights, bit for bit.
A job killed outright (every process SIGKILLed, as a node's death) leaves its cell to its lease:
the other job's worker reaps it `lost` once the lease expires and resumes it from its checkpoint.
Every attempt's worker is a task of the array (`slurm:ARRAY_TASK`, from the job's own SLURM_ARRAY_*
variables): nothing ran outside Slurm.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
import torch
from conftest import cli_json, start, wait_for, write
from services.slurm import SlurmCluster

from sweepq.checkpoint import commit
from sweepq.checkpoint.storage import LocalFolder

SEEDS = (1, 2, 3, 4)
STEPS = 150
EXPIRE_S = 5  # the lease's term (lease: expire_seconds)
SPEC = """
name: slurmpg
train: trainers:train
database: '{url}'
storage: '{storage}'
lease: {{renew_seconds: 1, expire_seconds: {expire}}}
params: {{steps: {steps}, delay: 0.1}}
checkpoint: {{every_steps: 5}}
metric: {{name: score, goal: max}}
grid: {{seed: {seeds}}}
slurm: {{cpus_per_task: 1, time: 10}}
"""


def uninterrupted(seed: int, steps: int) -> torch.Tensor:
    """trainers.train's final weights, computed here in one go."""
    torch.manual_seed(seed)
    w = torch.zeros(8)
    for _ in range(steps):
        w = w + torch.randn(8) * 1.0
    return w


def final_weights(folder: Path, cell: str) -> tuple[int, torch.Tensor]:
    """The newest committed checkpoint of a cell under a storage folder: its step and its weights."""
    storage = LocalFolder(folder / "cells" / cell / "checkpoints", folder)
    step = max(storage.steps())
    return step, commit.load(storage, step).state["w"]


def signal_one_job_mid_training(
    sweep_dir: Path, url: str, deliver: Callable[[dict[str, Any]], None]
) -> tuple[Path, str]:
    """Launch the sweep as a two-job array, `deliver` a signal to one job (given its running attempt's
    receipt) while both train, and wait for the launch to end (0: every cell settled); the root and that
    job's worker."""
    storage = sweep_dir / "shared"  # the folder every node would mount
    text = SPEC.format(url=url, storage=storage, steps=STEPS, seeds=list(SEEDS), expire=EXPIRE_S)
    spec = write(sweep_dir / "s.yaml", text)
    root = sweep_dir / "runs"
    launch = start(
        "launch", str(spec), "--root", str(root), "--on", "slurm", "--workers", "2", "--no-live", cwd=sweep_dir
    )

    def two_training() -> bool:
        if not (root / "slurm" / "jobs.json").exists():
            return False
        busy = [c for c in status(root) if c["state"] == "running" and (c.get("step") or 0) >= 10]
        return len(busy) == 2

    wait_for(two_training, timeout=240, what="both jobs' cells past step 10")
    running = [a for a in cli_json("attempts", "--root", str(root)) if a["reason"] in (None, "running")]
    assert len({a["worker"] for a in running}) == 2, running
    worker = running[0]["worker"]
    deliver(running[0])
    out = launch.communicate(timeout=600)[0]
    assert launch.returncode == 0, out
    # the queue was on the server and the checkpoints in the storage: the root holds neither
    assert not (root / "sweepq.db").exists()
    assert not list(root.glob("cells/*/checkpoints/step-*")) and list(storage.glob("cells/*/checkpoints/step-*"))
    assert json.loads((root / "database.json").read_text())["sweep"] == "slurmpg"
    return root, worker


def status(root: Path) -> list[dict[str, Any]]:
    return list(cli_json("status", "--root", str(root)))


def check_done_bit_exactly(root: Path, receipts: list[dict[str, Any]]) -> None:
    storage = root.parent / "shared"
    """Every cell done with an uninterrupted run's weights, and every attempt run by a job of the array."""
    assert all(a["worker"].startswith("slurm:") and a["worker"].count("_") == 1 for a in receipts), receipts
    cells = status(root)
    assert [c["state"] for c in cells] == ["done"] * len(SEEDS), cells
    for c in cells:
        step, w = final_weights(storage, c["cell"])
        assert step == STEPS
        assert torch.equal(w, uninterrupted(int(c["cfg"]["seed"]), STEPS)), c["cell"]


def test_slurms_sigterm_to_a_whole_job_preempts_its_attempt_and_every_cell_finishes_bit_exactly(
    sweep_dir: Path, slurm_cluster: SlurmCluster, postgres_url: str
) -> None:
    def sigterm(attempt: dict[str, Any]) -> None:
        # What a preemption, a scancel or the time limit does: SIGTERM to every process of the job
        subprocess.run(["scancel", "--signal=TERM", "--full", attempt["worker"].removeprefix("slurm:")], check=True)

    root, worker = signal_one_job_mid_training(sweep_dir, postgres_url, sigterm)
    receipts = cli_json("attempts", "--root", str(root))
    assert not [a for a in receipts if a["reason"] == "lost"], receipts
    preempted = [a for a in receipts if a["reason"] == "preempted"]
    assert [a["worker"] for a in preempted] == [worker], receipts  # that job's attempt, no other
    (p,) = preempted
    (nxt,) = [a for a in receipts if a["cell"] == p["cell"] and a["number"] == p["number"] + 1]
    assert nxt["start_step"] == p["end_step"] > 0, (p, nxt)  # zero lost steps
    assert nxt["reason"] == "completed", nxt
    check_done_bit_exactly(root, receipts)


def test_a_job_killed_outright_leaves_its_cell_to_the_lease_and_the_other_job_finishes_it(
    sweep_dir: Path, slurm_cluster: SlurmCluster, postgres_url: str
) -> None:
    # A node failure: no warning, no checkpoint. The cell's lease expires (expire_seconds: 5) and the
    # other job's worker reaps the attempt `lost` and resumes the cell from its last checkpoint.
    killed_at: list[datetime] = []

    def node_failure(attempt: dict[str, Any]) -> None:
        # SIGKILL to the job's worker and its attempt at once, as a node's death would. Not with scancel:
        # Slurm's `scancel --signal=KILL` sends SIGTERM first, a warning the worker honours.
        worker = psutil.Process(attempt["worker_pid"])
        doomed = [worker, *worker.children(recursive=True)]
        for p in doomed:
            p.kill()
        psutil.wait_procs(doomed, timeout=30)
        killed_at.append(datetime.now(UTC))

    root, worker = signal_one_job_mid_training(sweep_dir, postgres_url, node_failure)
    receipts = cli_json("attempts", "--root", str(root))
    lost_ones = [a for a in receipts if a["reason"] == "lost"]
    assert len(lost_ones) == 1, receipts
    (lost,) = lost_ones
    assert lost["worker"] == worker, receipts
    (nxt,) = [a for a in receipts if a["cell"] == lost["cell"] and a["number"] == lost["number"] + 1]
    assert nxt["worker"] != worker and nxt["reason"] == "completed", nxt
    assert 0 < nxt["start_step"] <= lost["end_step"], (lost, nxt)  # its last checkpoint, not step 0
    # claimed again once the lease expired and the other worker's reaper trusts its expiry (a term of
    # its own, settle_seconds = expire_seconds): a bound from the lease's terms, with room for a slow
    # machine's polls, far below the minutes a reaper that never settles took to reach it
    again = datetime.fromisoformat(nxt["started_at"].replace("Z", "+00:00"))
    assert again - killed_at[0] < timedelta(seconds=4 * (EXPIRE_S + EXPIRE_S)), (killed_at, nxt)
    assert not [a for a in receipts if a["reason"] == "preempted"], receipts
    check_done_bit_exactly(root, receipts)
