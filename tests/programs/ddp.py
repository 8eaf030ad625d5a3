"""A torchrun script that knows nothing of sweepq: a tiny DDP model on gloo, run by `processes: 2`.

It reads torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) through
`init_process_group`, keeps its own checkpoint in $SWEEPQ_OUTPUT_DIR (rank 0 writes it every
`save_every` steps, every rank loads it), and writes each rank's pid to `pid-<rank>` there so a
test can kill one rank. `fail_rank1_at`: rank 1 raises at that step of the cell's first run while
rank 0 sleeps for an hour, standing in for a collective that never returns (NCCL's hang).
Flags: --steps, --delay, --save_every, --fail_rank1_at (0: never).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=40)
p.add_argument("--delay", type=float, default=0.05)
p.add_argument("--save_every", type=int, default=5)
p.add_argument("--fail_rank1_at", type=int, default=0)
args = p.parse_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
out = Path(os.environ["SWEEPQ_OUTPUT_DIR"])
(out / f"pid-{rank}").write_text(str(os.getpid()))
env = {k: os.environ[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR")}
print(f"rank {rank} of {world}: env {env} port {os.environ['MASTER_PORT']}", flush=True)

torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
ckpt = out / "ckpt.pt"
step = 0
if ckpt.exists():
    state = torch.load(ckpt)
    model.module.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    step = state["step"]
runs_file = out / f"runs-{rank}"
runs = int(runs_file.read_text()) + 1 if runs_file.exists() else 1
runs_file.write_text(str(runs))
print(f"rank {rank}: run {runs}, starting at step {step}", flush=True)

gen = torch.Generator().manual_seed(1000 + rank)
while step < args.steps:
    if args.fail_rank1_at and step == args.fail_rank1_at and runs == 1:
        if rank == 1:
            raise RuntimeError("rank 1 fails on purpose")
        time.sleep(3600)  # a collective whose peer is gone, never returning
    x = torch.randn(8, 4, generator=gen)
    loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
    opt.zero_grad()
    loss.backward()  # DDP's allreduce: both ranks meet here every step
    opt.step()
    step += 1
    time.sleep(args.delay)
    if step % args.save_every == 0:
        if rank == 0:
            tmp = ckpt.with_suffix(".tmp")
            torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
            os.replace(tmp, ckpt)
        dist.barrier()  # no rank runs ahead of the saved step
        print(f"rank {rank}: saved step {step}", flush=True)

print(f"rank {rank}: finished {step} steps", flush=True)
dist.destroy_process_group()
