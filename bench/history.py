"""The metric-history benchmark: what keeping every `run.log` point costs the training loop.

`make bench` runs it at the smoke size (under a minute); `--full` runs more rounds
and blocks. Prints ONE JSON object on stdout
(progress goes to stderr). Nothing here asserts a time: each figure carries its
target and a pass flag, with the machine's load average beside it (other
processes share these cores, and every figure moves with them).

- `run_log_ns`: the training thread's time per `run.log(step, loss=, acc=, lr=, epoch=)`
  call (a tight loop of calls on a Run whose history thread runs), beside
  `history_append_ns`, the history's own share of it (`HistoryWriter.append`), and
  `writer_ns_per_point`, the background thread's work per point (encode and write),
  paid on another thread but under the same interpreter lock.
- `slowdown_<mlp>`: a real torch MLP training loop (forward, cross-entropy, backward,
  SGD step, `loss.item()`) with `run.log` every step, against the same loop without
  it. One loop runs blocks of about 50 ms, one block of each mode a cycle, the order
  alternating (A B C, C B A, ...; the first cycle uncounted), so that the machine's
  load moves every mode alike. The background thread's work is done at the end of
  each logging block, inside its time (conservative: the real thread overlaps with
  torch's compute on another core). Figure: the median over cycles of the logging
  block's time over the plain block's of the same cycle, minus one (adjacent blocks
  share the machine's load more often than medians of all blocks do); target under
  1 %. A third mode calls a `run.log` whose history append does nothing (run.log as it
  was before the history): `history_share` is what the history adds to it. A fourth
  runs without logging again: `noise_floor`, how far two identical modes differ here,
  the resolution of every other figure. `close_ms`: the final write and fsync, once
  an attempt. `cpu_share_per_step` is not measured on a loop: the per-call figures
  (run.log plus the writer's work per point) over the step's time.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

import torch
import torch.nn.functional as F
from benchlib import interleave, load, log  # bench/ is on sys.path: the scripts run from it
from torch import nn

from sweepq.run.history_writer import HistoryWriter
from sweepq.run.run import Run
from sweepq.spec.sweep import CheckpointPolicy, Settings
from sweepq.wire.attempt_spec import AttemptSpec

REPO = Path(__file__).resolve().parents[1]
TARGET_SLOWDOWN = 0.01
BLOCK_SECONDS = 0.05
# (name, layer widths, batch): "small" steps in about a millisecond on one core, "reference" is
# bench/checkpoint.py's MLP (784-512-512-10, batch 128), several milliseconds a step.
MLPS = {"small": ((128, 256, 256, 10), 64), "reference": ((784, 512, 512, 10), 128)}


def new_run(root: Path) -> Run:
    """A Run as a training process gets it (no checkpoint comes due: only logging is measured)."""
    policy = CheckpointPolicy(every_steps=10**9, auto=False)
    settings = Settings(name="b", form="grouped", spec_dir=".", train="m:f", checkpoint=policy).to_json()
    return Run(AttemptSpec(root=str(root), cell="1.1", attempt=1, cfg={}, cfg_hash="x", settings=settings))


# -- per call ---------------------------------------------------------------------------------------


def fig_per_call(tmp: Path, calls: int, rounds: int) -> dict[str, Any]:
    values = {"loss": 0.5, "acc": 0.25, "lr": 1e-3, "epoch": 0.5}

    def run_log(r: int) -> float:
        run = new_run(tmp / f"log-{r}")
        t = time.perf_counter()
        for step in range(calls):
            run.log(step, loss=0.5, acc=0.25, lr=1e-3, epoch=0.5)
        elapsed = time.perf_counter() - t
        run.close(completed=False)
        return elapsed

    def append(r: int) -> float:
        w = HistoryWriter(tmp / f"append-{r}" / "metrics.jsonl", "1.1", 1)
        t = time.perf_counter()
        for step in range(calls):
            w.append(step, values)
        elapsed = time.perf_counter() - t
        w.close()
        return elapsed

    def writer(r: int) -> float:
        """The background thread's work, done here: N appends (untimed), then one write of them all."""
        w = HistoryWriter(tmp / f"writer-{r}" / "metrics.jsonl", "1.1", 1)
        w._thread = object()  # type: ignore[assignment]  # no thread: this call does its work, timed
        for step in range(calls):
            w.append(step, values)
        t = time.perf_counter()
        w.flush()
        elapsed = time.perf_counter() - t
        w._thread = None
        w.close()
        return elapsed

    samples = interleave({"run_log": run_log, "append": append, "writer": writer}, rounds, "per call")
    ns = {n: round(statistics.median(v) / calls * 1e9, 1) for n, v in samples.items()}
    return {
        "calls_per_round": calls,
        "run_log_ns": ns["run_log"],
        "history_append_ns": ns["append"],
        "writer_ns_per_point": ns["writer"],
        "append_share_of_run_log": round(ns["append"] / ns["run_log"], 3),
        "min_ns": {n: round(min(v) / calls * 1e9, 1) for n, v in samples.items()},
        "max_ns": {n: round(max(v) / calls * 1e9, 1) for n, v in samples.items()},
    }


# -- the training loop ----------------------------------------------------------------------------


class MLP:
    def __init__(self, widths: tuple[int, ...], batch: int) -> None:
        torch.manual_seed(0)
        layers: list[nn.Module] = []
        for a, b in itertools.pairwise(widths):
            layers += [nn.Linear(a, b), nn.ReLU()]
        self.model = nn.Sequential(*layers[:-1])
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.x = torch.randn(batch * 16, widths[0])
        self.y = torch.randint(0, widths[-1], (batch * 16,))
        self.batch = batch

    def step(self, i: int) -> float:
        sl = slice((i % 16) * self.batch, (i % 16 + 1) * self.batch)
        loss = F.cross_entropy(self.model(self.x[sl]), self.y[sl])
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss.item()


def fig_slowdown(tmp: Path, name: str, cycles: int) -> dict[str, Any]:
    """Blocks of ~50 ms of training, one block of each mode a cycle (the order alternating), so that the
    machine's load moves all modes alike; the history thread's work is written at the end of each
    logging block, inside its time (conservative: the real thread overlaps with torch's compute)."""
    widths, batch = MLPS[name]
    mlp = MLP(widths, batch)
    for i in range(20):
        mlp.step(i)
    t = time.perf_counter()
    for i in range(50):
        mlp.step(i)
    step_s = (time.perf_counter() - t) / 50
    block = max(16, int(BLOCK_SECONDS / step_s))
    log(f"{name}: {step_s * 1e3:.3f} ms a step, blocks of {block} steps, {cycles} cycles")
    run = new_run(tmp / f"{name}-history")
    bare = new_run(tmp / f"{name}-bare")
    bare._history.append = lambda step, values: None  # type: ignore[method-assign]  # run.log before the history
    # In this order the headline pair is adjacent, and the A/A pair (the noise floor) is as far
    # apart as the history's pair.
    modes: dict[str, Run | None] = {
        "log_without_history": bare,
        "without_log": None,
        "with_log": run,
        "without_log_again": None,
    }
    names = list(modes)
    times: dict[str, list[float]] = {n: [] for n in names}
    first = 0  # the step a block starts at: steps keep counting across blocks and modes
    gc.collect()
    for cycle in range(cycles + 1):  # the first cycle warms up, uncounted
        for mode in names if cycle % 2 == 0 else names[::-1]:
            r, steps = modes[mode], range(first, first + block)
            t = time.perf_counter()
            if r is None:
                for i in steps:
                    mlp.step(i)
            else:
                for i in steps:
                    r.log(i, loss=mlp.step(i), lr=0.01, epoch=i / 16)
                r._history.flush()
            if cycle:
                times[mode].append(time.perf_counter() - t)
            first += block
    t = time.perf_counter()
    run.close(completed=False)
    close_ms = (time.perf_counter() - t) * 1e3
    bare.close(completed=False)
    med = {n: statistics.median(v) for n, v in times.items()}

    def paired(base: str, other: str) -> float:
        """The median over cycles of one block's time over the other's in the same cycle, minus one."""
        return round(statistics.median(b / a - 1 for a, b in zip(times[base], times[other], strict=True)), 5)

    slowdown = paired("without_log", "with_log")
    return {
        "mlp": "-".join(map(str, widths)) + f", batch {batch}, SGD",
        "step_ms": round(step_s * 1e3, 4),
        "steps_per_block": block,
        "blocks_per_mode": cycles,
        "slowdown": slowdown,
        "target": f"< {TARGET_SLOWDOWN}",
        "pass": slowdown < TARGET_SLOWDOWN,
        "noise_floor": paired("without_log", "without_log_again"),
        "slowdown_of_medians": round(med["with_log"] / med["without_log"] - 1, 5),
        "slowdown_of_run_log_without_history": paired("without_log", "log_without_history"),
        "history_share": paired("log_without_history", "with_log"),
        "block_median_ms": {n: round(v * 1e3, 3) for n, v in med.items()},
        "close_ms": round(close_ms, 3),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="more rounds and blocks (a few minutes)")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds of the per-call figure (>= 9)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (0 keeps torch's default)")
    args, ignored = ap.parse_known_args()  # `make bench BENCH_ARGS=...` also passes checkpoint.py's flags
    if ignored:
        log(f"ignoring {' '.join(ignored)} (bench/checkpoint.py's)")
    rounds = args.rounds or (21 if args.full else 9)
    if rounds < 9:
        ap.error("--rounds must be at least 9")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    t0 = time.perf_counter()
    (REPO / ".bench").mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="history-", dir=REPO / ".bench"))
    out: dict[str, Any] = {
        "benchmark": "sweepq metric history",
        "mode": "full" if args.full else "smoke",
        "rounds": rounds,
        "method": "medians of methods measured in this process, interleaved (order alternating), after an "
        "uncounted warm-up round; see the docstring",
        "host": {
            "cpus": os.cpu_count(),
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(),
        },
        "machine_load_before": load(),
        "figures": {},
    }
    try:
        figs: dict[str, Any] = out["figures"]
        figs["per_call"] = fig_per_call(tmp, 200_000 if args.full else 10_000, rounds)
        figs["per_call"]["machine_load_after"] = load()
        per_point_ns = figs["per_call"]["run_log_ns"] + figs["per_call"]["writer_ns_per_point"]
        for name in MLPS:
            fig = figs[f"slowdown_{name}_mlp"] = fig_slowdown(tmp, name, 300 if args.full else 16)
            fig["cpu_share_per_step"] = round(per_point_ns / (fig["step_ms"] * 1e6), 5)
            fig["machine_load_after"] = load()
        slow = {k: v for k, v in figs.items() if "pass" in v}
        out["passed"] = sorted(k for k, v in slow.items() if v["pass"])
        out["failed"] = sorted(k for k, v in slow.items() if not v["pass"])
        out["all_pass"] = not out["failed"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
