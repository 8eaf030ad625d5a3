"""Submit a sweep's workers to Slurm as one job array (through submitit), and watch or stop them.

submitit writes the sbatch script (the sweep file's `slurm:` options, `--signal=USR2@90` so a job is
warned 90 s before its time limit, one `srun` step running sweepq/slurm/job.py's WorkerJob) and keeps
each job's output under ROOT/slurm/. The jobs' ids go to ROOT/slurm/jobs.json so that `status` and
`stop` find them. Their states come from `squeue` only: a cluster without accounting has no `sacct`.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweepq.errors import UsageError

if TYPE_CHECKING:  # `status` imports this module: no sweep-file reading for it
    from sweepq.spec.slurm import SlurmOptions

WARNING_S = 90  # how long before its time limit a job hears SIGUSR2 (sbatch --signal)


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

    executor = submitit.SlurmExecutor(folder=folder(root) / "logs" / "%j", max_num_timeout=1000)
    params: dict[str, Any] = {
        "job_name": f"sweepq-{root.name}",
        "signal_delay_s": WARNING_S,
        "array_parallelism": workers,
        "stderr_to_stdout": True,
        "time": options.time if options.time is not None else 60 * 24,
    }
    for key in ("partition", "gpus_per_task", "cpus_per_task", "mem", "account", "qos"):
        value = getattr(options, key)
        if value is not None:
            params[key] = value
    if options.additional:
        params["additional_parameters"] = {k.replace("-", "_"): v for k, v in options.additional.items()}
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
        subprocess.run(["scancel", "--signal=INT", "--state=RUNNING", *arrays], capture_output=True, timeout=60)


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
