"""Submit a sweep's workers to Slurm as one job array (through submitit), and watch or stop them.

submitit writes the sbatch script (the sweep file's `slurm:` options, `--signal=B:USR2@90` so a job
is warned 90 s before its time limit) and keeps each job's output under ROOT/slurm/. The script's
process becomes the worker (`exec python`, no `srun` step): at a preemption, a `scancel` or the time
limit Slurm sends SIGTERM to every process of the job, and an `srun` turns the SIGTERM it receives
into a SIGKILL of its tasks (srun(1)), and a batch shell without a trap dies of it, ending the job
with it: either would kill the worker before its emergency checkpoint. The warning (`B:`) goes to
the script's process, the worker itself, which hands it on to its attempt. The jobs' ids go to
ROOT/slurm/jobs.json so that `status` and `stop` find them. Their states come from `squeue` only: a
cluster without accounting has no `sacct`.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweepq.errors import UsageError

if TYPE_CHECKING:  # `status` imports this module: no sweep-file reading for it
    from sweepq.spec.slurm import SlurmOptions

WARNING_S = 90  # how long before its time limit a job hears SIGUSR2 (sbatch --signal)
DEFAULT_TIME_MIN = 60 * 24  # a job's time limit when the sweep file sets none
CHECK_S = 30  # slurmctld's period for time limits and their warnings (PERIODIC_TIMEOUT in its source)
MIN_WARNING_S = 10  # the least time asked between the warning and the limit (an emergency checkpoint)


def time_limit_s(time: int | str) -> int:
    """A `slurm.time` in seconds: minutes, or sbatch's forms (MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS)."""
    if isinstance(time, int):
        return time * 60
    days, _, clock = time.rpartition("-")
    parts = [int(x) for x in clock.split(":")]
    if days:  # after a day count the fields are hours, then minutes and seconds
        h, m, s = [*parts, 0, 0][:3]
    elif len(parts) == 1:  # minutes alone
        h, m, s = 0, parts[0], 0
    else:  # MM:SS or HH:MM:SS
        h, m, s = [0, *parts][-3:]
    return ((int(days or 0) * 24 + h) * 60 + m) * 60 + s


def warning_s(time: int | str) -> int:
    """How long before its time limit a job asks to be warned (sbatch --signal=B:USR2@<this>).

    slurmctld looks at time limits every 30 s (CHECK_S) and sends the warning at the first look that
    finds the end within the warning and one more period: the warning comes 0-30 s earlier than asked,
    never later, and the job ends at the first look past its limit, at least one period after it.
    So a job warned `w` s ahead trains for at least `limit - w - 30` s. WARNING_S where the limit
    leaves room for it; a shorter limit is warned late enough to train half of it first (never less
    than MIN_WARNING_S ahead): a 1-minute job warned 90 s ahead would hear it at its first look,
    before any step, and requeue forever.
    """
    limit = time_limit_s(time)
    return min(WARNING_S, max(MIN_WARNING_S, limit // 2 - CHECK_S))


def folder(root: Path) -> Path:
    return root / "slurm"


def jobs_file(root: Path) -> Path:
    return folder(root) / "jobs.json"


def submit(root: Path, options: SlurmOptions, workers: int) -> list[str]:
    """Submit `workers` jobs as one array, each running a worker on `root`; their ids (ARRAY_TASK)."""
    try:
        import submitit
    except ImportError as e:
        raise UsageError("`--on slurm` needs submitit: pip install 'sweepq[slurm]'") from e
    from sweepq.slurm.job import WorkerJob

    # `exec`: the batch script's process becomes the worker (the module's docstring says why)
    python = "exec " + shlex.quote(sys.executable)
    executor = submitit.SlurmExecutor(folder=folder(root) / "logs" / "%j", max_num_timeout=1000, python=python)
    limit = options.time if options.time is not None else DEFAULT_TIME_MIN
    params: dict[str, Any] = {
        "job_name": f"sweepq-{root.name}",
        "use_srun": False,
        "array_parallelism": workers,
        "stderr_to_stdout": True,
        "time": limit,
    }
    for key in ("partition", "gpus_per_task", "cpus_per_task", "mem", "account", "qos"):
        value = getattr(options, key)
        if value is not None:
            params[key] = value
    additional = {k.replace("-", "_"): v for k, v in options.additional.items()}
    # to the batch script's process (B:), the worker: with no step, a plain --signal would reach no one
    additional["signal"] = f"B:USR2@{warning_s(limit)}"
    params["additional_parameters"] = additional
    executor.update_parameters(**params)
    try:
        jobs = executor.map_array(WorkerJob(str(root)), list(range(workers)))
    except (subprocess.CalledProcessError, OSError, RuntimeError) as e:
        raise UsageError(f"sbatch refused the workers' array: {_said(e)}") from e
    ids = [job.job_id for job in jobs]
    jobs_file(root).write_text(json.dumps({"jobs": ids}) + "\n")
    return ids


def recorded_jobs(root: Path) -> list[str]:
    """The jobs of the last `launch --on slurm` of this root ([] if none)."""
    try:
        return list(json.loads(jobs_file(root).read_text())["jobs"])
    except (OSError, ValueError, KeyError, TypeError):
        return []


def states(jobs: list[str]) -> dict[str, str] | None:
    """squeue's state of each job it still lists (a finished job leaves it); None if squeue failed."""
    if not jobs:
        return {}
    arrays = sorted({j.split("_")[0] for j in jobs})
    r = subprocess.run(
        ["squeue", "--noheader", "--array", "--format=%i %T", "--jobs=" + ",".join(arrays)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if r.returncode != 0:
        return None
    listed = dict(line.split(None, 1) for line in r.stdout.splitlines() if line.strip())
    return {j: listed[j] for j in jobs if j in listed}


def stop(jobs: list[str], hard: bool = False) -> None:
    """Stop the jobs: pending ones are cancelled; running ones hear SIGINT (a user's stop: their workers
    end their attempts gracefully, `preempted`, and the jobs end without requeueing). `hard`: cancel."""
    if not jobs:
        return
    arrays = sorted({j.split("_")[0] for j in jobs})
    cancel_pending(jobs)
    if hard:
        subprocess.run(["scancel", *arrays], capture_output=True, timeout=60)
    else:
        # --batch: the job's script process, the worker (no step holds it)
        cmd = ["scancel", "--batch", "--signal=INT", "--state=RUNNING", *arrays]
        subprocess.run(cmd, capture_output=True, timeout=60)


def cancel_pending(jobs: list[str]) -> None:
    """Cancel the jobs still waiting for a node (a requeued one, once every cell is settled: it would
    only start to find nothing to do)."""
    arrays = sorted({j.split("_")[0] for j in jobs})
    subprocess.run(["scancel", "--state=PENDING", *arrays], capture_output=True, timeout=60)


def _said(e: BaseException) -> str:
    out = getattr(e, "stderr", None) or getattr(e, "output", None) or str(e)
    return (out.decode() if isinstance(out, bytes) else str(out)).strip()[-1000:]


def describe_jobs(root: Path) -> str | None:
    """`status`'s line on the workers of the root's last `launch --on slurm`: each job and its state."""
    jobs = recorded_jobs(root)
    if not jobs:
        return None
    try:
        seen = states(jobs)
    except (OSError, subprocess.SubprocessError):  # no Slurm client on this machine
        seen = None
    if seen is None:
        return f"Slurm workers: {', '.join(jobs)} (squeue did not answer)"
    # a job squeue no longer lists has ended (without accounting there is no sacct to ask how)
    return "Slurm workers: " + ", ".join(f"{j} {seen.get(j, 'ended').lower()}" for j in jobs)
