"""A cooperating program: a plain argparse script that adds sweepq's Run when sweepq starts it.

    python coop.py --steps=60 --lr=0.05          # on its own: prints the final weights' sha
    (under sweepq: restores, checkpoints, logs, stops on SIGTERM, finish(metrics))

--fail=data|memory|nan|error makes it end one way at --fail_at, for classification tests.
--hold=ATTEMPT:STEP,... makes that attempt wait at that step (after its checkpoint call) until it is
stopped or killed, so that a test acts mid-run without racing the program.
"""

from __future__ import annotations

import argparse
import hashlib
import time
from typing import Any

import torch

import sweepq

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=60)
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--delay", type=float, default=0.0)
p.add_argument("--fail", default="none")
p.add_argument("--fail_at", type=int, default=5)
p.add_argument("--hold", default="")
args = p.parse_args()
holds = {tuple(int(n) for n in pair.split(":")) for pair in args.hold.split(",") if pair}

run = sweepq.Run.from_env(required=False)
torch.manual_seed(args.seed)
g = torch.Generator().manual_seed(1234)
X = torch.randn(256, 8, generator=g)
y = X @ torch.randn(8, 1, generator=g) + 0.1 * torch.randn(256, 1, generator=g)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
# SGD with momentum by hand (torch.optim costs a 2 s import on the test machine); the momentum
# buffers are part of the state like an optimizer's.
state: dict[str, Any] = {"model": model, "momentum": [torch.zeros_like(w) for w in model.parameters()], "step": 0}
if run is not None:
    resumed = run.restore(state)
    print(f"resumed from step {state['step']}" if resumed else "fresh start", flush=True)
    run.set_total(args.steps)

while state["step"] < args.steps:
    idx = torch.randint(0, 256, (32,))  # the RNG is part of the checkpoint: same batches after a resume
    loss = torch.nn.functional.mse_loss(model(X[idx]), y[idx])
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for w, m in zip(model.parameters(), state["momentum"], strict=True):
            m.mul_(0.9).add_(w.grad)
            w.sub_(args.lr * m)
    state["step"] += 1
    step = state["step"]
    if args.fail != "none" and step == args.fail_at:
        if args.fail == "data":
            raise sweepq.DataError(f"corrupt shard at step {step}")
        if args.fail == "memory":
            raise MemoryError("simulated allocation failure")
        if args.fail == "nan":
            loss = torch.tensor(float("nan"))
        if args.fail == "error":
            raise ValueError(f"bug at step {step}")
    if args.delay:
        time.sleep(args.delay)
    if run is not None:
        run.log(step, loss=loss)
        if run.should_stop:
            run.checkpoint(state, step, force=True)
            print(f"stopping at step {step}", flush=True)
            raise SystemExit(0)
        run.checkpoint(state, step, metrics={"loss": loss.item()})
        if (run.attempt, step) in holds:
            print(f"holding at step {step}", flush=True)
            while not run.should_stop:
                time.sleep(0.01)

# The final loss over all the data, not the last batch's: an attempt that resumes from the final
# checkpoint (killed after committing it, before exiting) trains no batch at all.
with torch.no_grad():
    final_loss = torch.nn.functional.mse_loss(model(X), y)
sha = hashlib.sha256(b"".join(t.detach().numpy().tobytes() for t in model.state_dict().values())).hexdigest()
metrics = {"loss": final_loss.item(), "weights_sha": sha}
print(metrics, flush=True)
if run is not None:
    run.finish(metrics)
