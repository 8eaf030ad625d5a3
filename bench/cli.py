"""The CLI benchmark: how long a read command takes to answer, against starting Python with sqlite3.

`make bench` runs it at the smoke size (3 rounds after a warm-up round); `--full`
runs 21. Prints ONE JSON object on stdout (progress goes to stderr). Nothing here asserts a
time: each command carries its median, its ratio to the reference measured in the same
run, and, for those with a target, the target and a pass flag, with the machine's load
beside them.

The reference is `python -c "import sqlite3"` (the same interpreter): the least any
command that reads a SQLite file can cost. Every command runs as its own process, as a
user types it (`sweepq status --root R`, ...), with its output thrown away; the commands
and the reference run interleaved round by round (the order alternating), so the
machine's load moves them alike. A command that exits non-zero stops the benchmark: a
fast error is not an answer.

The root: 100 cells of a trivial `train:`, written through the queue's own verbs, those
`sweepq launch` and its workers call (the reconcile of the sweep file, then per cell
`claim_next` with the cell's folder lock, `attempt_started`, `progress`,
`record_checkpoint` and `finish`, an attempt's writes in one transaction as a worker's
flush), so that its rows are those a real sweep leaves, without waiting for 100 training
processes to start (six minutes here). It is left half-finished: 76 cells done, 9 failed
(an error, no retry budget), 5 interrupted (stopped mid-way, as by a Ctrl-C), 10 never
started. `--root DIR` times an existing root instead (e.g. one made by `sweepq launch`);
`show` then reads its first cell.

`plan` is timed on two grids of a trivial `train:` (no root: plan writes nothing), of
PLAN_CELLS[0] and PLAN_CELLS[1] cells, in the same rounds: `plan_scale` gives the ratio
of the large grid's median to the small one's, against PLAN_TARGET_RATIO (a large grid is
summarised, so its time is its expansion's, not that of printing every row).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchlib import interleave, load, log  # bench/ is on sys.path: the scripts run from it

TARGET_RATIO = 6.0
PLAN_CELLS = (1_000, 100_000)  # plan's grids: 10 or 1,000 seeds x 100 learning rates
PLAN_TARGET_RATIO = 8.0  # plan of the large grid against the small one's
PLAN_SPEC = """\
name: plan-%d
train: trivial:train
max_cells: %d
grid:
  seed: [%s]
  lr: [%s]
"""
TARGETED = ("status", "--help")  # the commands the target is set for
CELLS = 100
SEEDS, LRS = 10, 10  # the grid: SEEDS x LRS = CELLS
SPEC = """\
name: hundred
train: trivial:train
metric: {name: score, goal: max}
checkpoint: {every_steps: 50, keep_last: 2}
retries: {error: 0}
grid:
  seed: [%s]
  lr: [%s]
"""
TRAIN = "def train(cfg, run):\n    return None\n"
STEPS = 200
FINISHED, STOPPED = 85, 5  # attempts run to their end; attempts stopped by a Ctrl-C; the rest never start


def sweepq_argv() -> list[str]:
    """The installed `sweepq` command beside this interpreter (else `python -m sweepq.cli`)."""
    script = Path(sys.executable).with_name("sweepq")
    return [str(script)] if script.exists() else [sys.executable, "-m", "sweepq.cli"]


def write_spec(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trivial.py").write_text(TRAIN)
    seeds = ", ".join(str(s) for s in range(SEEDS))
    lrs = ", ".join(f"{0.1 * (i + 1):.1f}" for i in range(LRS))
    spec = folder / "hundred.yaml"
    spec.write_text(SPEC % (seeds, lrs))
    return spec


def seed_root(folder: Path) -> Path:
    """A half-finished 100-cell root, written through the queue's verbs (see the module's docstring)."""
    from sweepq.cli.roots import default_root
    from sweepq.queue import reconcile
    from sweepq.queue.liveness import FileLockLiveness
    from sweepq.queue.records import WorkerInfo
    from sweepq.queue.store import Store
    from sweepq.spec.sweep import load_sweep

    sweep = load_sweep(write_spec(folder))
    root = default_root(sweep)
    store = Store.open(root, create=True)
    try:
        store.apply_reconcile(sweep.settings, str(sweep.path), lambda have: reconcile.plan(sweep, have, False))
        worker = WorkerInfo(f"{platform.node()}:{os.getpid()}", platform.node(), os.getpid())
        owners = FileLockLiveness(root)
        for n in range(FINISHED):  # one worker's attempts, one after another
            _run(store, worker, owners, [n])
        _run(store, worker, owners, list(range(FINISHED, FINISHED + STOPPED)))  # stopped together
    finally:
        store.close()
    return root


def _run(store: Any, worker: Any, owners: Any, ns: list[int]) -> None:
    """Claim one cell per number in `ns` (all held at once), write their attempts, close them."""
    held = [store.claim_next(worker, owners.take) for _ in ns]
    try:
        for n, (claim, _owner) in zip(ns, held, strict=True):
            with store.batch():  # one transaction an attempt, as a worker flushes once a second
                _attempt(store, claim.cell, claim.number, n)
    finally:
        for _claim, owner in held:
            owner.release()


def _attempt(store: Any, cell: str, number: int, n: int) -> None:
    """One attempt's writes, as a worker flushes them: most complete, every 10th fails, the stopped are preempted."""
    from sweepq.queue.records import Outcome

    store.attempt_started(cell, number, pid=os.getpid(), start_step=0)
    stopped, failed = n >= FINISHED, n % 10 == 0
    end = STEPS // 2 if stopped or failed else STEPS
    for step in range(50, end + 1, 50):
        score = round(0.5 + 0.001 * n + 0.0001 * step, 6)
        metrics = {"loss": round(1.0 / step, 6), "score": score}
        store.progress(cell, number, step=step, total_steps=STEPS, metrics=metrics, best=score, best_step=step)
        path = f"cells/{cell}/checkpoints/step-{step}"
        store.record_checkpoint(cell, step, path=path, metrics=metrics, attempt=number, size_bytes=4096)
    if stopped:
        reason, error = "preempted", None  # interrupted: claimed first by the next launch
    elif failed:
        reason, error = "error", "Traceback (most recent call last):\nValueError: diverged"
    else:
        reason, error = "completed", None
    final = {"score": score} if reason == "completed" else None
    outcome = Outcome(reason=reason, end_step=end, wall_seconds=1.0 + n % 7, error_tail=error, metrics=final)
    store.finish(cell, number, outcome)


def write_plan_specs(folder: Path) -> list[Path]:
    """The grids `plan` is timed on, beside the trivial module (which plan never imports)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trivial.py").write_text(TRAIN)
    lrs = ", ".join(f"{0.001 * (i + 1):.3f}" for i in range(100))
    specs = []
    for n in PLAN_CELLS:
        spec = folder / f"plan-{n}.yaml"
        spec.write_text(PLAN_SPEC % (n, n, ", ".join(str(s) for s in range(n // 100)), lrs))
        specs.append(spec)
    return specs


def plan_commands(specs: list[Path]) -> dict[str, list[str]]:
    return {f"plan {n:,} cells": [*sweepq_argv(), "plan", str(spec)] for n, spec in zip(PLAN_CELLS, specs, strict=True)}


def plan_scale(times: dict[str, list[float]]) -> dict[str, Any]:
    small, large = (statistics.median(times[f"plan {n:,} cells"]) for n in PLAN_CELLS)
    ratio = round(large / small, 2)
    return {"cells": list(PLAN_CELLS), "ratio": ratio, "target": PLAN_TARGET_RATIO, "pass": ratio <= PLAN_TARGET_RATIO}


def commands(root: Path, cell: str) -> dict[str, list[str]]:
    cli, r = sweepq_argv(), str(root)
    return {
        "reference": [sys.executable, "-c", "import sqlite3"],
        "status": [*cli, "status", "--root", r],
        "status --json": [*cli, "status", "--json", "--root", r],
        "show": [*cli, "show", cell, "--root", r],
        "best": [*cli, "best", "--root", r],
        "report": [*cli, "report", "--root", r],
        "--help": [*cli, "--help"],
        "status --help": [*cli, "status", "--help"],
    }


def timed(argv: list[str]) -> float:
    t = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    took = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"bench: {' '.join(argv)} exited {done.returncode}:\n{done.stderr}")
    return took


def runner(argv: list[str]) -> Callable[[int], float]:
    return lambda _round: timed(argv)


def check(root: Path) -> tuple[int, str]:
    """The root answers (`status --json`): its number of cells and the first cell's id."""
    out = subprocess.run([*sweepq_argv(), "status", "--json", "--root", str(root)], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"bench: status --json on {root} exited {out.returncode}:\n{out.stderr}")
    cells = json.loads(out.stdout)
    return len(cells), cells[0]["cell"]


def figures(times: dict[str, list[float]]) -> dict[str, Any]:
    ref = statistics.median(times["reference"])
    out: dict[str, Any] = {}
    for name, ts in times.items():
        med = statistics.median(ts)
        fig: dict[str, Any] = {"median_s": round(med, 4), "min_s": round(min(ts), 4), "max_s": round(max(ts), 4)}
        if name != "reference":
            fig["ratio"] = round(med / ref, 2)
            if name in TARGETED:
                fig["target"] = TARGET_RATIO
                fig["pass"] = fig["ratio"] <= TARGET_RATIO
        out[name] = fig
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="21 rounds (default: the smoke run's 3)")
    ap.add_argument("--rounds", type=int, help="rounds counted (after one warm-up round)")
    ap.add_argument("--root", type=Path, help="time this existing sweep root instead of a seeded one")
    args = ap.parse_args()
    rounds = args.rounds or (21 if args.full else 3)
    tmp = Path(tempfile.mkdtemp(prefix="sweepq-bench-cli-"))
    try:
        started = time.perf_counter()
        if args.root is None:
            log(f"seeding a {CELLS}-cell root through the queue's verbs")
            root = seed_root(tmp)
        else:
            root = args.root.resolve()
        seeded_s = time.perf_counter() - started
        n, first = check(root)
        log(f"{root}: {n} cells; timing {rounds} rounds")
        argvs = commands(root, first) | plan_commands(write_plan_specs(tmp / "plan"))
        before = load()
        methods = {name: runner(argv) for name, argv in argvs.items()}
        times = interleave(methods, rounds, "cli")
        result = {
            "benchmark": "cli",
            "cells": n,
            "root": "seeded" if args.root is None else "given",
            "seed_s": round(seeded_s, 2),
            "rounds": rounds,
            "reference": "python -c 'import sqlite3'",
            "figures": figures(times),
            "plan_scale": plan_scale(times),
            "load_before": before,
            "load_after": load(),
            "python": platform.python_version(),
        }
        print(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
