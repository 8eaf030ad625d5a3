"""A torchrun script that adds sweepq's Run on rank 0: DDP on gloo under `processes: 2`.

Rank 0 holds the Run (`Run.from_env()` raises on other ranks): it restores, commits checkpoints at
the sweep's cadence and finishes. DDP broadcasts rank 0's weights when it wraps the model, and the
step is broadcast with them, so every rank resumes where rank 0's checkpoint left the cell. Each
rank writes its pid to `pid-<rank>` in $SWEEPQ_OUTPUT_DIR so a test can kill one.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import sweepq

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=40)
p.add_argument("--delay", type=float, default=0.05)
p.add_argument("--save_every", type=int, default=5)  # the grid's axis; the cadence is the sweep's checkpoint:
args = p.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
(Path(os.environ["SWEEPQ_OUTPUT_DIR"]) / f"pid-{rank}").write_text(str(os.getpid()))
run = sweepq.Run.from_env() if rank == 0 else None
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
state = {"model": model, "step": 0}
if run is not None:
    run.set_total(args.steps)
    run.restore(state)
step = torch.tensor([state["step"]])
dist.broadcast(step, 0)  # the step rank 0 restored, on every rank
ddp = DistributedDataParallel(model)  # rank 0's weights, on every rank
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
print(f"rank {rank}: starting at step {int(step)}", flush=True)
gen = torch.Generator().manual_seed(1000 + rank)
while int(step) < args.steps:
    x = torch.randn(8, 4, generator=gen)
    loss = (ddp(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    time.sleep(args.delay)
    if run is not None:
        state["step"] = int(step)
        run.log(int(step), loss=loss.item())
        run.checkpoint(state, int(step))
print(f"rank {rank}: finished {int(step)} steps", flush=True)
if run is not None:
    run.finish({"loss": loss.item()})
dist.destroy_process_group()
