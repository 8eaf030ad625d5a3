"""A job of `launch --on slurm` that reaches its real time limit: warned by Slurm, it requeues and its cells finish.

Nothing here sends a signal by hand. The sweep file gives the job one minute (`slurm: {time: 1}`)
and the cells need more than that. slurmctld looks at time limits every 30 s and sends the warning
at the first look that finds the end within the warning and one period more, so the job asks for
it 10 s ahead (`--signal=B:USR2@10`, sweepq/slurm/submit.py's warning_s): it comes 20 to 50 s into
the job, never at its start. The warned worker ends its attempt `preempted` with its emergency
checkpoint and requeues its job, which starts again (about 12 s later on this cluster,
`cred_expire=10`) and resumes the cell where it stopped, until every cell is done with an
uninterrupted run's weights.

The wait is bounded by what the sweep configures, never by this machine's speed (see RUNS).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch
from conftest import cli_json, start, write
from services.slurm import SlurmCluster
from test_slurm_postgres import final_weights, uninterrupted

from sweepq.slurm.submit import CHECK_S, time_limit_s, warning_s

pytestmark = pytest.mark.slow

TIME_MIN = 1  # the jobs' time limit (sbatch --time)
REQUEUE_S = 12 + 2 * 2  # a requeued job waits out cred_expire=10 (~12 s) and one or two sched_interval=2
STEPS, DELAY = 400, 0.1  # each cell sleeps 40 s in all: the two outlast a job's minute on any machine
SEEDS = (1, 2)
# A job runs at least until its warning (limit - warning - CHECK_S), at most until the limit and one
# look more, then waits to start again; RUNS of them is far more than two cells of 40 s need (three
# or four), whatever the machine: the bound is derived from the configuration.
RUNS = 8
SPEC = """
name: timelimit
train: trainers:train
params: {{steps: {steps}, delay: {delay}}}
checkpoint: {{every_steps: 5}}
metric: {{name: score, goal: max}}
grid: {{seed: {seeds}}}
slurm: {{cpus_per_task: 1, time: {time}}}
"""


def test_a_job_at_its_time_limit_is_warned_requeues_and_its_cells_finish(
    sweep_dir: Path, slurm_cluster: SlurmCluster
) -> None:
    limit_s = time_limit_s(TIME_MIN)
    warning = warning_s(TIME_MIN)
    assert limit_s - warning - CHECK_S >= limit_s // 3  # the job trains a third of its minute at least
    spec = write(sweep_dir / "s.yaml", SPEC.format(steps=STEPS, delay=DELAY, seeds=list(SEEDS), time=TIME_MIN))
    root = sweep_dir / "runs"
    launch = start(
        "launch", str(spec), "--root", str(root), "--on", "slurm", "--workers", "1", "--no-live", cwd=sweep_dir
    )
    out = launch.communicate(timeout=RUNS * (limit_s + CHECK_S + REQUEUE_S))[0]
    assert launch.returncode == 0, out

    receipts = cli_json("attempts", "--root", str(root))
    assert not [a for a in receipts if a["reason"] == "lost"], receipts
    preempted = [a for a in receipts if a["reason"] == "preempted"]
    assert preempted, receipts  # the job did not finish in one minute: its warning stopped it
    for p in preempted:  # zero lost steps
        (nxt,) = [a for a in receipts if a["cell"] == p["cell"] and a["number"] == p["number"] + 1]
        assert nxt["start_step"] == p["end_step"] > 0, (p, nxt)
    (job,) = {a["worker"].removeprefix("slurm:") for a in receipts}  # one job, started again each time
    (log,) = (root / "slurm" / "logs").glob("*/*_log.out")
    warned = log.read_text().count("sweepq worker: SIGUSR2 from the scheduler")
    assert warned == len(preempted), log.read_text()[-3000:]  # Slurm's time-limit warning, nothing else
    shown = subprocess.run(["scontrol", "show", "job", "--oneliner", job], capture_output=True, text=True).stdout
    assert f"Restarts={len(preempted)} " in shown, shown  # requeued at each warning, not failed

    (script,) = (root / "slurm" / "logs").glob("*/*_submission.sh")
    assert f"#SBATCH --signal=B:USR2@{warning}" in script.read_text()
    cells = cli_json("status", "--root", str(root))
    assert [c["state"] for c in cells] == ["done"] * len(SEEDS), cells
    for c in cells:
        step, w = final_weights(root, c["cell"])
        assert step == STEPS
        assert torch.equal(w, uninterrupted(int(c["cfg"]["seed"]), STEPS)), c["cell"]
