"""`sweepq launch SPEC --on slurm` against a real single-node Slurm (tests/services/slurm.py).

The workers are a job array submitted through submitit; every attempt's worker is named by its job
(`slurm:ARRAY_TASK`), so a worker started outside Slurm would show. A job warned by Slurm (the signal
it asked for before its time limit, delivered here with `scancel --signal`: Slurm itself checks time
limits only every 30 s) ends its attempt `preempted` with nothing lost and requeues itself; `stop`
ends the jobs gracefully, and none is requeued.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import torch
from conftest import cli, cli_json, start, wait_for, write
from services.slurm import SlurmCluster

SPEC = """
name: onslurm
train: trainers:train
params: {{steps: {steps}, delay: {delay}}}
checkpoint: {{every_steps: 5}}
metric: {{name: score, goal: max}}
grid: {{seed: [1, 2, 3, 4]}}
slurm: {{cpus_per_task: 1, time: 10}}
"""


def expected_w_sum(seed: int, steps: int) -> float:
    """trainers.train's result, computed here in one go: a resumed cell must match it bit for bit."""
    torch.manual_seed(seed)
    w = torch.zeros(8)
    for _ in range(steps):
        w = w + torch.randn(8) * 1.0
    return float(w.sum())


def attempts(root: Path) -> list[dict[str, Any]]:
    return list(cli_json("attempts", "--root", str(root)))


def check_finished(root: Path, steps: int) -> None:
    status = cli_json("status", "--root", str(root))
    assert [c["state"] for c in status] == ["done"] * 4, status
    for c in status:
        seed = int(c["cfg"]["seed"])
        assert c["metrics"]["w_sum"] == expected_w_sum(seed, steps), c
    receipts = attempts(root)
    assert all(a["worker"].startswith("slurm:") for a in receipts), [a["worker"] for a in receipts]
    assert not [a for a in receipts if a["reason"] == "lost"], receipts


def test_a_two_worker_array_finishes_the_sweep(sweep_dir: Path, slurm_cluster: SlurmCluster) -> None:
    spec = write(sweep_dir / "s.yaml", SPEC.format(steps=10, delay=0))
    root = sweep_dir / "runs"
    r = cli("launch", str(spec), "--root", str(root), "--on", "slurm", "--workers", "2", "--no-live", cwd=sweep_dir)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "submitted 2 workers to Slurm" in r.stdout
    check_finished(root, 10)
    jobs = {a["worker"] for a in attempts(root)}
    assert len(jobs) <= 2 and all(j.count("_") == 1 for j in jobs), jobs  # tasks of one array


def test_a_warned_job_preempts_gracefully_and_requeues(sweep_dir: Path, slurm_cluster: SlurmCluster) -> None:
    steps = 60
    spec = write(sweep_dir / "s.yaml", SPEC.format(steps=steps, delay=0.1))
    root = sweep_dir / "runs"
    launch = start(
        "launch", str(spec), "--root", str(root), "--on", "slurm", "--workers", "2", "--no-live", cwd=sweep_dir
    )

    def training() -> dict[str, Any] | None:
        for c in cli_json("status", "--root", str(root)):
            if c["state"] == "running" and (c.get("step") or 0) >= 10:
                return c
        return None

    wait_for(lambda: (root / "slurm" / "jobs.json").exists() and training(), timeout=180, what="a cell past step 10")
    worker = next(a["worker"] for a in attempts(root) if a["reason"] is None or a["reason"] == "running")
    job = worker.removeprefix("slurm:")
    # The time-limit warning the job asks for (--signal=B:USR2@90): to the job's script process, the worker
    subprocess.run(["scancel", "--batch", "--signal=USR2", job], check=True)
    out = launch.communicate(timeout=400)[0]
    assert launch.returncode == 0, out
    receipts = attempts(root)
    preempted = [a for a in receipts if a["reason"] == "preempted"]
    assert preempted and all(a["worker"] == worker for a in preempted), receipts
    check_finished(root, steps)
    for p in preempted:  # zero lost steps: the cell's next attempt starts where the preempted one ended
        (nxt,) = [a for a in receipts if a["cell"] == p["cell"] and a["number"] == p["number"] + 1]
        assert nxt["start_step"] == p["end_step"] > 0, (p, nxt)
    # the warned job requeued itself (same job id, a new start) rather than leaving its node idle
    shown = subprocess.run(["scontrol", "show", "job", "--oneliner", job], capture_output=True, text=True).stdout
    assert "Restarts=1 " in shown, shown


def test_stop_ends_the_jobs_gracefully(sweep_dir: Path, slurm_cluster: SlurmCluster) -> None:
    spec = write(sweep_dir / "s.yaml", SPEC.format(steps=400, delay=0.1))
    root = sweep_dir / "runs"
    launch = start(
        "launch", str(spec), "--root", str(root), "--on", "slurm", "--workers", "2", "--no-live", cwd=sweep_dir
    )
    wait_for(
        lambda: (
            (root / "slurm" / "jobs.json").exists()
            and sum(
                c["state"] == "running" and (c.get("step") or 0) >= 5 for c in cli_json("status", "--root", str(root))
            )
            == 2
        ),
        timeout=180,
        what="two cells training",
    )
    jobs = sorted({a["worker"].removeprefix("slurm:") for a in attempts(root)})
    shown = cli("status", str(root)).stdout  # each worker's job and its state
    assert "Slurm workers: " + ", ".join(f"{j} running" for j in jobs) in " ".join(shown.split()), shown
    r = cli("stop", str(root))
    assert r.returncode == 0, r.stdout + r.stderr
    out = launch.communicate(timeout=200)[0]
    assert launch.returncode == 130, out
    receipts = attempts(root)
    assert sorted(a["reason"] for a in receipts) == ["preempted", "preempted"], receipts
    time.sleep(1)
    assert not slurm_cluster.squeue(*jobs), "a stopped job is still queued (requeued?)"
