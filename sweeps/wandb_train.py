"""A small training script of the kind W&B sweeps run: argparse flags in, metrics out.

    python sweeps/wandb_train.py --lr=0.01                 # on its own (no sweepq needed at run time)
    sweepq launch sweeps/wandb-grid.yaml                   # every cell of the W&B grid, resumable

It fits a small MLP to generated regression data on the CPU (a few seconds).
Its flags are what W&B's `${args}` renders: `--lr=0.03`, and a nested parameter
as a Python dict, `--optimizer={'momentum': 0.9, 'name': 'sgd'}`.

The lines marked `# sweepq` are all it takes to gain exact resume: under
sweepq, `Run.from_env()` returns the cell's Run (restore, checkpoint, log,
should_stop, finish); on its own it returns None and the script trains as
before. The whole training state (model, optimizer, RNG, position in the
epoch) is in `state`, so an interrupted cell continues bit-exactly.
--step_delay slows each step down, to try interruptions by hand.
"""

from __future__ import annotations

import argparse
import ast
import time

import torch
from torch import nn

from sweepq import Run  # sweepq


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--optimizer", type=ast.literal_eval, default={"name": "adam", "momentum": 0.9},
                   help="a dict, as W&B renders nested parameters")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--step_delay", type=float, default=0.0)
    return p.parse_args()


def make_data(n: int = 1024, dim: int = 16, seed: int = 1234) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2 * n, dim, generator=g)
    y = torch.sin(x @ torch.randn(dim, 1, generator=g) / dim**0.5) + 0.1 * torch.randn(2 * n, 1, generator=g)
    return x[:n], y[:n], x[n:], y[n:]


def main() -> None:
    args = parse_args()
    run = Run.from_env(required=False)  # sweepq: None when run on its own
    torch.manual_seed(args.seed)
    x, y, x_val, y_val = make_data()
    model = nn.Sequential(nn.Linear(x.shape[1], args.hidden), nn.ReLU(), nn.Linear(args.hidden, 1))
    opt_cfg = args.optimizer
    if opt_cfg["name"] == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=opt_cfg.get("momentum", 0.0))
    else:
        opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    steps_per_epoch = len(x) // args.batch_size
    # Everything that changes while training, including where we are in the epoch.
    state = {"model": model, "optimizer": opt, "step": 0, "perm": torch.randperm(len(x))}
    if run is not None:  # sweepq
        run.restore(state)  # sweepq: fills `state` from the newest checkpoint (and the RNG)
        run.set_total(args.epochs * steps_per_epoch, epochs=args.epochs)  # sweepq
    val_loss = float("nan")
    while state["step"] < args.epochs * steps_per_epoch:
        batch = state["step"] % steps_per_epoch
        idx = state["perm"][batch * args.batch_size:(batch + 1) * args.batch_size]
        loss = nn.functional.mse_loss(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        state["step"] += 1
        step = state["step"]
        if step % steps_per_epoch == 0:  # end of an epoch: validate, reshuffle
            with torch.no_grad():
                val_loss = nn.functional.mse_loss(model(x_val), y_val).item()
            state["perm"] = torch.randperm(len(x))
            print(f"epoch {step // steps_per_epoch}: loss {loss.item():.4f} val_loss {val_loss:.4f}", flush=True)
        time.sleep(args.step_delay)
        if run is not None:  # sweepq
            metrics = {"val_loss": val_loss} if step % steps_per_epoch == 0 else {}  # sweepq
            run.log(step, loss=loss.item(), epoch=step / steps_per_epoch, **metrics)  # sweepq
            if run.should_stop:  # sweepq: preempted; save everything and exit
                run.checkpoint(state, step, metrics=metrics, force=True)  # sweepq
                return  # sweepq: exit 0 without finish() -> `preempted`, resumed later
            run.checkpoint(state, step, metrics=metrics)  # sweepq: when the cadence says so
    print(f"final val_loss {val_loss:.4f}")
    if run is not None:  # sweepq
        run.finish({"val_loss": val_loss})  # sweepq: final metrics, kept in DONE.json


if __name__ == "__main__":
    main()
