"""Training functions for tests (copied next to each test's sweep file).

They train a real (tiny) torch state with real checkpoints, fast enough for
tests, and each can be steered into one way of ending.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch

import sweepq


def _guard(run: sweepq.Run) -> Path:
    """Fail loudly if another live process trains this cell right now."""
    marker = run.paths.dir / "training.pid"
    if marker.exists():
        try:
            other = int(marker.read_text())
        except ValueError:
            other = 0
        if other and other != os.getpid():
            try:
                os.kill(other, 0)
                raise RuntimeError(f"two writers: process {other} is training cell {run.cell}")
            except ProcessLookupError:
                pass
    marker.write_text(str(os.getpid()))
    return marker


def train(cfg: dict[str, Any], run: sweepq.Run) -> dict[str, Any] | None:
    """A random walk of a small tensor: deterministic given the RNG, checkpointed fully."""
    marker = _guard(run)
    if cfg.get("crash_at") and run.attempt == 1:
        # Test-only fault injection (sweepq.checkpoint.crashpoints), per cell.
        from sweepq.checkpoint import crashpoints

        crashpoints.arm(cfg["crash_at"], int(cfg.get("crash_after", 2)))
    steps = int(cfg.get("steps", 50))
    delay = float(cfg.get("delay", 0.0))
    torch.manual_seed(int(cfg.get("seed", 0)))
    state: dict[str, Any] = {"w": torch.zeros(8), "step": 0}
    run.restore(state)
    run.set_total(steps)
    while state["step"] < steps:
        state["w"] = state["w"] + torch.randn(8) * float(cfg.get("lr", 1.0))
        state["step"] += 1
        step = state["step"]
        loss = float(state["w"].abs().mean())
        if (
            cfg.get("nan_at") is not None
            and step >= int(cfg["nan_at"])
            and run.attempt <= int(cfg.get("nan_attempts", 99))
        ):
            loss = float("nan")
        run.log(step, loss=loss)
        if cfg.get("fail_at") is not None and step == int(cfg["fail_at"]):
            kind = cfg.get("fail", "error")
            if kind == "data":
                raise sweepq.DataError(f"corrupt shard at step {step}")
            if kind == "memory":
                raise MemoryError("simulated allocation failure")
            raise ValueError(f"bug at step {step}")
        if delay:
            time.sleep(delay)
        if run.should_stop:
            if cfg.get("stopping_file"):  # tells a test that the stop signal has arrived
                Path(cfg["stopping_file"]).touch()
            time.sleep(float(cfg.get("stop_delay", 0.0)))  # a slow emergency checkpoint
            run.checkpoint(state, step, force=True)
            marker.unlink(missing_ok=True)
            return None
        run.checkpoint(state, step, metrics={"score": -loss} if step % 10 == 0 else None)
    marker.unlink(missing_ok=True)
    return {"score": -float(state["w"].abs().mean()), "w_sum": float(state["w"].sum())}
