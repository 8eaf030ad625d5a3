"""The status benchmark: `status`, `status --all` and `status --json` on a sweep of many cells.

Prints ONE JSON object on stdout (progress goes to stderr). Nothing here asserts a time:
each figure carries its target and a pass flag, with the machine's load beside it (other
processes share these cores). The targets are set for 100,000 cells (`--full`); the smoke
size (10,000) checks the benchmark and shows how the figures grow.

The root (made untimed): the cells written by the Store's own reconcile of a sweep file
(two groups, five cfg keys a cell), then moved into every state by bulk SQL in the shapes the
Store writes: 60% done (a completed attempt with its usage summary, metrics, a committed
checkpoint row), 1% failed (an error attempt with a traceback), 0.5% interrupted (a preempted
attempt, committed checkpoints), 0.2% cancelled, 0.2% queued in a retry back-off after an
error, 16 running (an open attempt with a latest usage sample and checkpoint rows; this
process holds the folder lock of half of them, as their workers would, so that the other
half have a dead owner), the rest queued. Then each ended attempt's span is kept on its row, as
`Store.finish` keeps it when an attempt ends (`Store.keep_spans`, all at once).

Each figure runs `sweepq status --root R` (with `--all`, or `--json`) as a child process,
stdout to a file, and takes its wall time and peak RSS (`os.wait4`; the root is made in a child process, so
that the process that starts the commands stays small: a peak counts its parent's at exec), best of `--rounds`.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import random
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchlib import load, log  # bench/ is on sys.path: the scripts run from it

REPO = Path(__file__).resolve().parents[1]
SMOKE_CELLS = 10_000
FULL_CELLS = 100_000
TARGETS_S = {"status": 1.0, "status --all": None, "status --json": 3.0}
TARGET_RSS_MB = 300.0
RUNNING = 16
STEPS = 200
TRAINER = "def train(cfg, run):\n    return {'score': 1.0}\n"


def sweep_text(cells: int) -> str:
    """Two groups of cells/2 cells; five keys a cfg (lr, wd, seed by grid; width a group's; epochs shared)."""
    lrs = [round(1e-4 * (i + 1), 8) for i in range(cells // 200)]
    lines = [
        "name: status-scale",
        "train: trivial:train",
        f"max_cells: {cells}",
        "metric: {name: score, goal: max}",
        "checkpoint: {every_steps: 50}",
        "params: {epochs: 1}",
        "groups:",
    ]
    for name, width in (("small", 64), ("large", 1024)):
        lines += [
            f"  - name: {name}",
            f"    params: {{model: {{width: {width}}}}}",
            "    grid:",
            f"      lr: {json.dumps(lrs)}",
            f"      wd: {json.dumps([round(0.01 * i, 2) for i in range(10)])}",
            f"      seed: {json.dumps(list(range(10)))}",
        ]
    return "\n".join(lines) + "\n"


def stamp(t: datetime) -> str:
    """A time as SQLAlchemy's SQLite DateTime stores it (naive UTC, microseconds always)."""
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def make_root(folder: Path, cells: int) -> Path:
    """The cells through the Store's reconcile, then their states by bulk SQL (see the module's docstring)."""
    from sweepq.queue import reconcile
    from sweepq.queue.store import Store
    from sweepq.spec.sweep import load_sweep

    (folder / "trivial.py").write_text(TRAINER)
    spec = folder / "sweep.yaml"
    spec.write_text(sweep_text(cells))
    root = folder / "root"
    sweep = load_sweep(spec)
    store = Store.open(root, create=True)
    try:
        store.apply_reconcile(sweep.settings, str(spec), lambda have: reconcile.plan(sweep, have, False))
    finally:
        store.close()
    db = sqlite3.connect(root / "sweepq.db")
    try:
        with db:
            _states(db, root)
    finally:
        db.close()
    store = Store.open(root)
    try:
        store.keep_spans()  # what each attempt's end (Store.finish) keeps of it, for all at once
    finally:
        store.close()
    return root


def _states(db: sqlite3.Connection, root: Path) -> None:
    ids = [r[0] for r in db.execute('select id from cells order by group_number, "index"')]
    rng = random.Random(17)
    rng.shuffle(ids)
    n = len(ids)
    cuts = [RUNNING, n // 100, n // 200, n // 500, n // 500]
    running, failed, interrupted, cancelled, backing_off = (ids[sum(cuts[:i]) : sum(cuts[: i + 1])] for i in range(5))
    rest = ids[sum(cuts) :]
    done = rest[: int(n * 0.6)]
    now = datetime.now(UTC)
    t0, t1 = stamp(now - timedelta(hours=2)), stamp(now - timedelta(hours=1))
    recent = stamp(now - timedelta(seconds=5))
    summary = {"samples": 60, "cpu_percent_mean": 97.0, "cpu_percent_p95": 140.0, "rss_peak_bytes": 410 * 2**20}
    attempt_sql = (
        "insert into attempts (cell_id, number, worker, host, pid, worker_pid, started_at, ended_at, start_step, "
        "end_step, reason, exit_code, error_tail, wall_seconds, gpu_seconds, usage) "
        "values (?, 1, 'bench:1', 'bench', 1, 1, ?, ?, 0, ?, ?, ?, ?, ?, 0, ?)"
    )
    ckpt_sql = (
        "insert into checkpoints (cell_id, step, state, metrics, path, attempt, size_bytes, created_at) "
        "values (?, ?, 'committed', ?, ?, 1, 4096, ?)"
    )
    cell_sql = (
        "update cells set state=?, attempts=?, last_reason=?, step=?, total_steps=?, metrics=?, best=?, "
        "best_step=?, progress_at=?, retry_after=?, finished_at=?, updated_at=? where id=?"
    )

    def score(cell: str) -> float:
        return round(0.5 + rng.random() / 2, 6)

    cell_rows: list[tuple[Any, ...]] = []
    attempts: list[tuple[Any, ...]] = []
    ckpts: list[tuple[Any, ...]] = []
    for cell in done:
        s = score(cell)
        metrics = json.dumps({"loss": round(1 - s, 6), "score": s})
        cell_rows.append(("done", 1, "completed", STEPS, STEPS, metrics, s, STEPS, t1, None, t1, t1, cell))
        attempts.append((cell, t0, t1, STEPS, "completed", 0, None, 3600.0, json.dumps(summary)))
        ckpts.append((cell, STEPS, metrics, f"cells/{cell}/checkpoints/step-{STEPS}", t1))
    error = 'Traceback (most recent call last):\n  File "trivial.py", line 2\nValueError: diverged at step 100'
    for cell in failed + backing_off:
        wait = stamp(now + timedelta(minutes=10)) if cell in backing_off else None
        state = "queued" if wait else "failed"
        cell_rows.append((state, 1, "error", 100, STEPS, None, None, None, t1, wait, None if wait else t1, t1, cell))
        attempts.append((cell, t0, t1, 100, "error", 1, error, 1800.0, json.dumps(summary)))
    for cell in interrupted:
        cell_rows.append(("interrupted", 1, "preempted", 100, STEPS, None, None, None, t1, None, None, t1, cell))
        attempts.append((cell, t0, t1, 100, "preempted", None, None, 1800.0, json.dumps(summary)))
        for step in (50, 100):
            ckpts.append((cell, step, None, f"cells/{cell}/checkpoints/step-{step}", t1))
    for cell in cancelled:
        cell_rows.append(("cancelled", 0, None, None, None, None, None, None, None, None, t1, t1, cell))
    latest = summary | {"latest": {"cpu_percent": 99.0, "rss_bytes": 400 * 2**20}}
    for cell in running:
        cell_rows.append(("running", 1, None, 120, STEPS, None, None, None, recent, None, None, recent, cell))
        attempts.append((cell, t1, None, None, None, None, None, None, json.dumps(latest)))
        for step in (50, 100):
            ckpts.append((cell, step, None, f"cells/{cell}/checkpoints/step-{step}", recent))
        (root / "cells" / cell).mkdir(parents=True, exist_ok=True)
    db.executemany(cell_sql, cell_rows)
    db.executemany(attempt_sql, attempts)
    db.executemany(ckpt_sql, ckpts)


def hold_owners(root: Path) -> list[Any]:
    """The folder locks of half the running cells, held by this process as their workers would hold them."""
    from sweepq.queue.liveness import FileLockLiveness

    db = sqlite3.connect(root / "sweepq.db")
    running = [r[0] for r in db.execute("select id from cells where state='running' order by id")]
    db.close()
    owners = FileLockLiveness(root)
    return [owners.take(cell) for cell in running[: len(running) // 2]]


def run_child(argv: list[str], out: Path) -> tuple[float, float, int]:
    """(wall seconds, peak RSS in MB, bytes written) of one child process; a failure stops the benchmark."""
    with open(out, "wb") as file:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=file, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"bench: {' '.join(argv)} exited {proc.returncode}:\n{err}")
    return seconds, usage.ru_maxrss / 1024, out.stat().st_size


def figure(name: str, argv: list[str], tmp: Path, rounds: int) -> dict[str, Any]:
    runs = [run_child(argv, tmp / "out.txt") for _ in range(rounds)]
    seconds, rss = min(r[0] for r in runs), max(r[1] for r in runs)
    target = TARGETS_S[name]
    fig: dict[str, Any] = {
        "seconds": round(seconds, 3),
        "all_seconds": [round(r[0], 3) for r in runs],
        "target_s": target,
        "peak_rss_mb": round(rss, 1),
        "target_rss_mb": TARGET_RSS_MB,
        "output_bytes": runs[-1][2],
    }
    if target is not None:
        fig["ratio_to_target"] = round(seconds / target, 3)
    fig["pass"] = (target is None or seconds < target) and rss < TARGET_RSS_MB
    fig["machine_load"] = load()
    log(f"{name}: {fig['seconds']} s, {fig['peak_rss_mb']} MB, pass={fig['pass']}")
    return fig


def count_cells(root: Path) -> int:
    db = sqlite3.connect(f"file:{root / 'sweepq.db'}?mode=ro", uri=True)
    try:
        return int(db.execute("select count(*) from cells").fetchone()[0])
    finally:
        db.close()


def made(tmp: Path, cells: int, out: dict[str, Any]) -> Path:
    """The root, made in a child process: a process's peak RSS counts its parent's at the child's exec
    (Linux records the old image's when exec replaces it), so the commands measured are started from a
    process that stays small (`spawner_rss_mb`, under which no command's peak can be told)."""
    log(f"making a {cells:,}-cell root")
    began = time.perf_counter()
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        root = pool.submit(make_root, tmp, cells).result()
    out["setup_s"] = round(time.perf_counter() - began, 1)
    return root


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help=f"{FULL_CELLS:,} cells (the targets' size)")
    ap.add_argument("--cells", type=int, default=None, help=f"cells in the sweep (default {SMOKE_CELLS:,})")
    ap.add_argument("--rounds", type=int, default=2, help="runs of each command (the fastest is reported)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (the root, the outputs)")
    ap.add_argument(
        "--root",
        type=Path,
        default=None,
        help="measure this root, made by an earlier run with --keep, instead of making one (its running "
        "cells' progress has aged since: they count as stalled)",
    )
    ap.add_argument(
        "--only", action="append", choices=sorted(TARGETS_S), default=None, help="this figure only (repeatable)"
    )
    args, ignored = ap.parse_known_args()  # make bench passes the same BENCH_ARGS to every benchmark
    if ignored:
        log(f"ignored (other benchmarks' options): {' '.join(ignored)}")
    cells = args.cells or (FULL_CELLS if args.full else SMOKE_CELLS)
    if args.root is not None:
        cells = count_cells(args.root)
    if cells < 2000 or cells % 200:
        ap.error("--cells must be a multiple of 200, at least 2000")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the temporary folder is removed
    (REPO / ".bench").mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="status-scale-", dir=REPO / ".bench"))
    out: dict[str, Any] = {
        "benchmark": "sweepq status at scale",
        "cells": cells,
        "mode": "full" if cells == FULL_CELLS else "smoke" if cells == SMOKE_CELLS else "custom",
        "host": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "machine_load_before": load(),
        "targets": f"set for {FULL_CELLS:,} cells: seconds below target_s and peak RSS below {TARGET_RSS_MB:.0f} MB",
        "figures": {},
    }
    try:
        root = args.root or made(tmp, cells, out)
        owners = hold_owners(root)
        out["spawner_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        cli = [sys.executable, "-m", "sweepq.cli", "status", "--root", str(root)]
        for name, extra in (("status", []), ("status --all", ["--all"]), ("status --json", ["--json"])):
            if args.only is None or name in args.only:
                out["figures"][name] = figure(name, [*cli, *extra], tmp, args.rounds)
        for owner in owners:
            owner.release()
        figs = out["figures"]
        out["failed"] = sorted(k for k, v in figs.items() if not v["pass"])
        out["all_pass"] = not out["failed"]
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
