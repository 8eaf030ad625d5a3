"""The sweep file's `slurm:` section: Slurm's own options for `sweepq launch SPEC --on slurm`.

Each key is one sbatch option, passed through submitit (sweepq/slurm/submit.py); `additional` takes
any other sbatch option by its long name (`constraint: a100`, `exclude: node7`). Checked here so that
a typo fails before anything is submitted, not in a job's log an hour later.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from sweepq.spec.read import SpecContext, check_keys, describe, require_mapping

SLURM_KEYS = ("partition", "time", "gpus_per_task", "cpus_per_task", "mem", "account", "qos", "additional")
_EXAMPLE = "slurm: {partition: gpu, time: 240, gpus_per_task: 1, cpus_per_task: 8, mem: 32G}"
_MEM = re.compile(r"^[0-9]+[KMGT]?$")
# sbatch's --time forms: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS
_TIME = re.compile(r"^(\d+-)?\d+(:\d+){0,2}$")
_OPTION = re.compile(r"^[a-z][a-z0-9_-]*$")
# options sweepq sets itself: the array, the signal before the time limit, the outputs, the job's name
_OWN = ("array", "signal", "output", "error", "job_name", "job-name", "requeue", "wrap")


@dataclass(frozen=True)
class SlurmOptions:
    partition: str | None = None
    time: int | str | None = None  # minutes, or sbatch's own forms ("1-00:00:00")
    gpus_per_task: int | None = None
    cpus_per_task: int | None = None
    mem: str | None = None  # "16G"; Slurm's units
    account: str | None = None
    qos: str | None = None
    additional: dict[str, Any] = field(default_factory=dict)


def read_slurm(ctx: SpecContext, value: Any) -> SlurmOptions | None:
    if value is None:
        return None
    data = require_mapping(ctx, value, "slurm", _EXAMPLE)
    check_keys(ctx, data, SLURM_KEYS, "slurm")
    texts = {}
    for key in ("partition", "account", "qos"):
        v = data.get(key)
        if v is not None and (not isinstance(v, str) or not v.strip() or any(c.isspace() for c in v)):
            raise ctx.error(f"slurm.{key}", f"expected a name, got {describe(v)}", f"Write e.g. {key}: gpu")
        texts[key] = v
    counts = {}
    for key in ("gpus_per_task", "cpus_per_task"):
        v = data.get(key)
        if v is not None and (
            isinstance(v, bool) or not isinstance(v, int) or v < (0 if key == "gpus_per_task" else 1)
        ):
            raise ctx.error(
                f"slurm.{key}",
                f"expected a whole number of {key.split('_')[0]}, got {describe(v)}",
                f"Write e.g. {key}: 1",
            )
        counts[key] = v
    time = data.get("time")
    if time is not None:
        ok = (isinstance(time, int) and not isinstance(time, bool) and time > 0) or (
            isinstance(time, str) and _TIME.match(time) is not None
        )
        if not ok:
            raise ctx.error(
                "slurm.time",
                f"expected a time limit, got {describe(time)}",
                'Write minutes (time: 240) or sbatch\'s form (time: "1-00:00:00", time: "04:00:00")',
            )
    mem = data.get("mem")
    if mem is not None:
        mem = str(mem) if isinstance(mem, int) and not isinstance(mem, bool) else mem
        if not isinstance(mem, str) or not _MEM.match(mem):
            raise ctx.error("slurm.mem", f"expected a memory size, got {describe(mem)}", "Write e.g. mem: 32G")
    extra = data.get("additional") or {}
    extra = require_mapping(ctx, extra, "slurm.additional", "additional: {constraint: a100}")
    for key, v in extra.items():
        if not isinstance(key, str) or not _OPTION.match(key):
            raise ctx.error(
                "slurm.additional",
                f"{key!r} is not an sbatch option's long name",
                "Write options as sbatch spells them without the dashes, e.g. constraint: a100",
            )
        if key.replace("-", "_") in _OWN:
            raise ctx.error(
                f"slurm.additional.{key}",
                "sweepq sets this option itself",
                "Leave it out: the workers' array, signal and logs are sweepq's",
            )
        if not isinstance(v, (str, int)) or isinstance(v, bool):
            raise ctx.error(
                f"slurm.additional.{key}", f"expected a text or a number, got {describe(v)}", f"Write e.g. {key}: value"
            )
    return SlurmOptions(
        partition=texts["partition"],
        time=time,
        gpus_per_task=counts["gpus_per_task"],
        cpus_per_task=counts["cpus_per_task"],
        mem=mem,
        account=texts["account"],
        qos=texts["qos"],
        additional=dict(extra),
    )
