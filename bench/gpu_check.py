"""`make gpu-check`: run sweepq's CUDA paths where a GPU exists and print what was seen, as JSON.

Checks, each on CUDA where a device exists, else on the CPU (said in the output):
- checkpoint and resume: a Run commits a model, an optimizer and a tensor on the device, a second
  attempt's Run restores them onto the device, equal, with the device's RNG state back;
- NVML sampling: the worker's sampler reads utilisation and memory of the visible GPUs;
- a two-rank cell: `sweepq launch` of a `program:` sweep with `processes: 2` whose ranks allreduce
  on NCCL where two GPUs exist, on gloo otherwise.
Exits 0 when every check that could run passed (on a machine without CUDA: the CPU paths), 1 otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from sweepq.run.run import Run
from sweepq.spec.sweep import CheckpointPolicy, Settings
from sweepq.wire.attempt_spec import AttemptSpec
from sweepq.worker.usage import Gpus, import_nvml

CUDA = torch.cuda.is_available()
DEVICE = "cuda:0" if CUDA else "cpu"


def _run(root: Path, attempt: int) -> Run:
    policy = CheckpointPolicy(every_steps=1, auto=False, keep_last=5, keep_best=False)
    settings = Settings(name="gpu-check", form="grouped", spec_dir=".", train="m:f", checkpoint=policy)
    spec = AttemptSpec(root=str(root), cell="1.1", attempt=attempt, cfg={}, cfg_hash="h", settings=settings.to_json())
    return Run(spec)


def check_checkpoint(work: Path) -> dict[str, Any]:
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 8).to(DEVICE)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 64, device=DEVICE)).sum().backward()
    opt.step()
    state: dict[str, Any] = {"model": model, "opt": opt, "w": torch.randn(1000, device=DEVICE)}
    first = _run(work, 1)
    assert first.checkpoint(state, 1, force=True)
    rng = torch.cuda.get_rng_state() if CUDA else torch.get_rng_state()
    first.close(completed=False)
    torch.manual_seed(123)  # another RNG state: the restore must bring the saved one back
    if CUDA:
        torch.cuda.manual_seed(123)
    again = torch.nn.Linear(64, 8).to(DEVICE)
    target: dict[str, Any] = {"model": again, "opt": torch.optim.Adam(again.parameters()), "w": None}
    second = _run(work, 2)
    assert second.restore(target, map_location=DEVICE), "nothing restored"
    second.close(completed=False)
    same = all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values(), strict=True))
    assert same, "the model's weights differ after the restore"
    assert torch.equal(target["w"], state["w"]), "the tensor differs after the restore"
    assert target["w"].device.type == torch.device(DEVICE).type, f"restored onto {target['w'].device}"
    rng_back = torch.equal(rng, torch.cuda.get_rng_state() if CUDA else torch.get_rng_state())
    assert rng_back, "the RNG state did not come back"
    return {"device": str(target["w"].device), "start_step": second.start_step, "rng_restored": rng_back}


def check_nvml(work: Path) -> dict[str, Any]:
    nvml = import_nvml()
    if nvml is None:
        return {"ran": False, "why": "no NVML library (pynvml) or driver"}
    gpus = Gpus.open(os.environ.get("CUDA_VISIBLE_DEVICES"), nvml=nvml)
    if gpus is None:
        return {"ran": False, "why": "NVML found no GPU"}
    try:
        util, memory = gpus.read()
    finally:
        gpus.close()
    assert memory is not None, "NVML read no memory"
    return {"ran": True, "utilisation": util, "memory_used_bytes": memory}


PROGRAM = textwrap.dedent(
    """
    import os, torch, torch.distributed as dist
    nccl = torch.cuda.is_available() and torch.cuda.device_count() >= 2
    dist.init_process_group("nccl" if nccl else "gloo")
    device = f"cuda:{os.environ['LOCAL_RANK']}" if nccl else "cpu"
    x = torch.tensor([dist.get_rank() + 1.0], device=device)
    dist.all_reduce(x)
    assert x.item() == 3.0, x
    print(f"rank {dist.get_rank()} {'nccl' if nccl else 'gloo'} on {device}: allreduce {x.item()}", flush=True)
    dist.destroy_process_group()
    """
)


def check_two_ranks(work: Path) -> dict[str, Any]:
    (work / "allreduce.py").write_text(PROGRAM)
    (work / "s.yaml").write_text("name: ranks\nprogram: allreduce.py\nprocesses: 2\ngrid: {x: [1]}\n")
    gpus = ["--gpus", "0,1"] if CUDA and torch.cuda.device_count() >= 2 else []
    cmd = [sys.executable, "-m", "sweepq.cli", "launch", "s.yaml", "--no-live", *gpus]
    done = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=300)
    log = (work / "runs" / "ranks" / "cells" / "1.1" / "attempts" / "1" / "stdout.log").read_text()
    assert done.returncode == 0, done.stdout + done.stderr + log
    lines = [line for line in log.splitlines() if line.startswith("rank ")]
    assert len(lines) == 2, log
    return {"backend": "nccl" if gpus else "gloo", "ranks": lines}


def main() -> int:
    seen: dict[str, Any] = {
        "cuda": CUDA,
        "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if CUDA else [],
        "torch": torch.__version__,
    }
    if not CUDA:
        seen["note"] = "no CUDA device here: the checks below ran their CPU paths only"
    checks: list[tuple[str, Callable[[Path], dict[str, Any]]]] = [
        ("checkpoint_resume", check_checkpoint),
        ("nvml", check_nvml),
        ("two_rank_cell", check_two_ranks),
    ]
    ok = True
    for name, check in checks:
        with tempfile.TemporaryDirectory(prefix=f"sweepq-gpu-check-{name}-") as work:
            try:
                seen[name] = {"ok": True, **check(Path(work))}
            except Exception as e:  # each check says what failed; the others still run
                ok = False
                seen[name] = {"ok": False, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]}
    seen["ok"] = ok
    print(json.dumps(seen, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
