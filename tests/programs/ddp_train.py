"""A `train:` function for `processes: 2`: DDP on gloo, every rank with its own Run.

Each rank draws its batches from the global torch, numpy and python random streams, seeded per rank
(so a resume is exact only when every rank gets its own streams back), trains a DDP-wrapped model,
and reads `run.should_stop` and calls `run.checkpoint` at the same points as every other rank. It
writes its pid to `pid-<rank>` in $SWEEPQ_OUTPUT_DIR, prints each step it finished and where it
stopped, and returns the sha256 of its final weights (rank 0's is the cell's result).
"""

from __future__ import annotations

import hashlib
import os
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def weights_sha(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def train(cfg: dict[str, Any], run: Any) -> dict[str, Any] | None:
    dist.init_process_group("gloo")  # the user's own group, as a DDP script makes it
    rank = run.rank
    (Path(os.environ["SWEEPQ_OUTPUT_DIR"]) / f"pid-{rank}").write_text(str(os.getpid()))
    torch.manual_seed(1000 + rank)
    np.random.seed(2000 + rank)
    random.seed(3000 + rank)
    model = torch.nn.Linear(4, 1)
    with torch.no_grad():  # the same start on every rank (DDP would broadcast rank 0's anyway)
        model.weight.copy_(torch.arange(4, dtype=torch.float32).reshape(1, 4) / 10)
        model.bias.zero_()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    state: dict[str, Any] = {"model": model, "optimizer": opt, "step": 0}
    steps = int(cfg["steps"])
    run.set_total(steps)
    run.restore(state)
    ddp = DistributedDataParallel(model)
    print(f"rank {rank} of {run.world_size}: attempt {run.attempt}, starting at step {state['step']}", flush=True)
    while state["step"] < steps:
        if run.should_stop:
            run.checkpoint(state, state["step"], force=True)
            print(f"rank {rank}: stopped at step {state['step']}", flush=True)
            return None
        x = torch.randn(8, 4) * (1 + random.random()) + float(np.random.rand())
        loss = (ddp(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        state["step"] += 1
        run.log(state["step"], loss=loss.item())
        print(f"rank {rank}: step {state['step']} done", flush=True)
        time.sleep(float(cfg.get("delay", 0.0)))
        run.checkpoint(state, state["step"])
    sha = weights_sha(model)
    print(f"rank {rank}: finished {steps} steps, weights {sha}", flush=True)
    dist.destroy_process_group()
    return {"loss": loss.item(), "weights": sha}
