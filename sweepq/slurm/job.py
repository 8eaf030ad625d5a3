"""What one job of a `launch --on slurm` array runs: a worker that treats Slurm's warnings as a stop.

Slurm warns before it ends a job: the signal asked for with `--signal` before the time limit (SIGUSR2
90 s before it, less for a short limit: submit.py's warning_s; `B:`, to the job script's process, which
is this worker), SIGTERM to every process of the job at a preemption, a `scancel` or the limit. Any
of them, and SIGUSR1, is the first Ctrl-C of a local worker: the attempt makes its emergency
checkpoint and ends `preempted`. Then the job requeues itself while cells remain (`scontrol requeue`:
it starts again, on this node or another, and resumes the cells from their checkpoints) or ends: it
never holds a node to wait. SIGINT is the launch's `stop` (sweepq/cli/slurm_launch.py): the worker
stops the same way and the job ends.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from sweepq.slurm.exits import EXIT_DONE, EXIT_FAILED, EXIT_REQUEUE

# Slurm's warnings; SIGINT (a user's stop) is the worker's own
WARNINGS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)


def job_id() -> str | None:
    """This job's id as squeue and scancel name it: ARRAY_TASK for a task of an array."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return f"{array}_{task}"
    return os.environ.get("SLURM_JOB_ID")


def worker_name() -> str | None:
    """The worker's name in receipts and `status`: the Slurm job it runs in (None outside Slurm)."""
    job = job_id()
    return f"slurm:{job}" if job else None


def run_worker(root: Path, name: str | None = None, requeue: bool = True) -> int:
    """Run a worker on `root` until it ends; the exit code of sweepq/slurm/exits.py. `requeue`: in a
    Slurm job, requeue it (`scontrol requeue`) before answering EXIT_REQUEUE."""
    from sweepq.queue.store import Store
    from sweepq.worker.loop import Worker

    worker = Worker(root, name=name or worker_name(), extra_signals=(signal.SIGUSR1, signal.SIGUSR2))
    code = worker.run()
    if code == 0:
        return EXIT_DONE
    if not worker.stopping:
        return EXIT_FAILED
    if worker.first_signal not in WARNINGS:
        return EXIT_DONE  # a user's stop: the job ends for good
    store = Store.open(root)
    try:
        left = store.unsettled()
    finally:
        store.close()
    if not left:
        return EXIT_DONE
    job = job_id()
    warned = signal.Signals(worker.first_signal).name if worker.first_signal else "a signal"
    # the job's log says why it stopped: a warning before the time limit, a preemption
    then = f"requeueing job {job}" if job else f"exit {EXIT_REQUEUE} (start me again)"
    print(f"sweepq worker: {warned} from the scheduler, {left} cells left: {then}", flush=True)
    if requeue and job and os.environ.get("SLURM_JOB_ID"):
        # Requeue this task only, named ARRAY_TASK: one task's SLURM_JOB_ID is the array's own id, and
        # requeueing that would requeue every task. Slurm ends this job and puts it back in the queue;
        # a cluster with RequeueExit=75 would do the same from the exit code.
        subprocess.run(["scontrol", "requeue", job], check=False, timeout=60)
    return EXIT_REQUEUE


class WorkerJob:
    """The callable submitit runs in each job of the array (pickled by reference to this module)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def __call__(self, place: int) -> int:
        code = run_worker(Path(self.root))
        if code != EXIT_DONE:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)  # the job's exit code is the contract's (submitit would end it with 0)
        return code
