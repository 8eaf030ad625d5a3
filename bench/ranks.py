"""The ranks benchmark: what `processes: 2` costs a `train:` cell against one process and a bare torchrun.

Prints ONE JSON object on stdout (progress goes to stderr). Nothing here asserts a time: each figure
is beside its reference measured in the same run, with the machine's load.

- `pause`: the training loop's pause per checkpoint (Run's own `stall_seconds`: from `run.checkpoint`
  taking a checkpoint to its return) of the same cell run by one process and by two ranks (DDP on
  gloo; CPU). With two ranks rank 0's pause includes waiting for the other rank's RNG states; the
  other rank's pause (capturing and handing them over) is given apart.
- `start`: a two-rank attempt, from the worker's claim (attempt.json's `started_monotonic`) to the
  moment both ranks have imported torch and joined their process group (`init_process_group("gloo")`,
  the first line of the train function), against `torchrun --standalone --nproc-per-node 2` of the
  same script, from spawning torchrun to the same moment.

`--full` runs more rounds (the smoke run: 3 starts of each, 40 steps).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import load, log

SCRIPT = """
import json, os, time
from pathlib import Path

import torch
import torch.distributed as dist


def ready():
    if "WORLD_SIZE" in os.environ:
        dist.init_process_group("gloo")
    return time.monotonic()


def train(cfg, run):
    t0 = ready()
    out = run.paths.output
    out.mkdir(parents=True, exist_ok=True)
    (out / f"t0-{run.rank}").write_text(repr(t0))
    steps, width = cfg["steps"], cfg["width"]
    if steps:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Tanh(), torch.nn.Linear(width, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        state = {"model": model, "optimizer": opt, "step": 0}
        run.restore(state)
        net = torch.nn.parallel.DistributedDataParallel(model) if run.world_size > 1 else model
        for step in range(1, steps + 1):
            x = torch.randn(64, width)
            loss = net(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            state["step"] = step
            time.sleep(0.05)  # the write of the last checkpoint ends before the next: the pause alone is timed
            run.checkpoint(state, step)
        (out / f"stall-{run.rank}").write_text(json.dumps(run.stall_seconds))
    if run.world_size > 1:
        dist.destroy_process_group()


if __name__ == "__main__":  # the bare torchrun of the same script
    t0 = ready()
    Path(f"t0-{os.environ['RANK']}").write_text(repr(t0))
    dist.destroy_process_group()
"""

SWEEP = """name: {name}
train: rankbench:train
root: runs/{name}
processes: {processes}
params: {{steps: {steps}, width: {width}}}
checkpoint: {{every_steps: 4, keep_last: 2}}
grid: {{x: {xs}}}
"""


def launch(folder: Path, name: str, processes: int, cells: int, steps: int, width: int) -> Path:
    spec = folder / f"{name}.yaml"
    spec.write_text(SWEEP.format(name=name, processes=processes, steps=steps, width=width, xs=list(range(cells))))
    subprocess.run(
        [sys.executable, "-m", "sweepq.cli", "launch", str(spec), "--workers", "1", "--no-live"],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
    )
    return folder / "runs" / name


def ranks_ready(folder: Path, ranks: int) -> float:
    return max(float((folder / f"t0-{r}").read_text()) for r in range(ranks))


def quartiles(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {
        "median": round(statistics.median(xs), 5),
        "p90": round(xs[int(0.9 * (len(xs) - 1))], 5),
        "n": len(xs),
    }


def pauses(folder: Path, steps: int, width: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for processes in (1, 2):
        root = launch(folder, f"pause{processes}", processes, 1, steps, width)
        output = root / "cells" / "1.1" / "output"
        for rank in range(processes):
            stalls = json.loads((output / f"stall-{rank}").read_text())
            out[f"{processes}_rank{'s' if processes > 1 else ''}_rank{rank}_s"] = quartiles(stalls)
        log(f"pause with {processes} process(es): {out}")
    one, two = out["1_rank_rank0_s"]["median"], out["2_ranks_rank0_s"]["median"]
    out["ratio_2_to_1_median"] = round(two / one, 2) if one else None
    out["state_mib"] = round((width * width + 2 * width + 1) * 4 * 2 / 2**20, 2)  # weights and momentum
    return out


def starts(folder: Path, rounds: int) -> dict[str, Any]:
    root = launch(folder, "start", 2, rounds, 0, 8)
    sweepq_s = []
    for cell in sorted((root / "cells").iterdir()):
        spec = json.loads((cell / "attempts" / "1" / "attempt.json").read_text())
        sweepq_s.append(ranks_ready(cell / "output", 2) - spec["started_monotonic"])
    bare = folder / "bare"
    bare.mkdir()
    (bare / "rankbench.py").write_text(SCRIPT)
    torchrun_s = []
    for _ in range(rounds):
        for r in range(2):
            (bare / f"t0-{r}").unlink(missing_ok=True)
        before = time.monotonic()
        subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "rankbench.py"],
            cwd=bare,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=True,
        )
        torchrun_s.append(ranks_ready(bare, 2) - before)
    out: dict[str, Any] = {
        "sweepq_claim_to_ranks_ready_s": quartiles(sweepq_s),
        "torchrun_spawn_to_ranks_ready_s": quartiles(torchrun_s),
    }
    out["ratio_median"] = round(
        out["sweepq_claim_to_ranks_ready_s"]["median"] / out["torchrun_spawn_to_ranks_ready_s"]["median"], 2
    )
    log(f"start: {out}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true")
    args = parser.parse_args()
    rounds, steps, width = (10, 80, 1024) if args.full else (3, 40, 1024)
    with tempfile.TemporaryDirectory(prefix="sweepq-bench-ranks-") as tmp:
        folder = Path(tmp)
        (folder / "rankbench.py").write_text(SCRIPT)
        before = load()
        result = {
            "bench": "ranks",
            "python": platform.python_version(),
            "cores": len(os.sched_getaffinity(0)),
            "load_before": before,
            "pause": pauses(folder, steps, width),
            "start": starts(folder, rounds),
            "load_after": load(),
        }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
