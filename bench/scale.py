"""The scale benchmark: plan, first launch and relaunch of a sweep of many cells (100,000 with --full).

Prints ONE JSON object on stdout (progress goes to stderr). Nothing here asserts a
time: each figure carries its target and a pass flag, with the machine's load
beside it (other processes share these cores, and every figure moves with them).
The targets are set for 100,000 cells; the smoke size (10,000) checks the benchmark
and shows how the figures grow.

The sweep: two groups of N/2 cells each, five keys per cfg (three grid keys, a
group's param and a shared one), `train:` a function that returns at once, in a
module beside the sweep file. Each figure runs `sweepq` as a child process and
takes its wall time, its CPU time (the machine is shared: CPU seconds move less
with its load than wall seconds), its peak RSS (for `plan`, from `os.wait4`; for
a launch, the VmHWM of the launch and of its worker when the first cell starts,
each a process of its own under the target; the training process, which imports
torch, is not counted), and its ratio to the reference measured in the same run:
`cli_help_s`, the best of three `sweepq --help`, the bare cost of starting the
command on this machine as loaded as it is.

- `plan_json`: `sweepq plan SPEC --json` (stdout to a file) on a new root, start to exit.
- `first_launch`: `sweepq launch SPEC --workers 1 --no-live` on a new root, from its start
  until the first cell's attempt.json appears (the worker writes it just before it
  starts the training process); the launch is then stopped with SIGTERM (untimed).
- `relaunch`: the same command on a mostly-done root, until the attempt.json of the
  first cell not done appears. Mostly done, made cheaply but honestly (untimed): every
  cell but the last `--left` has a DONE.json of the marker's shape in its folder
  (written without fsync), and then, as a worker tells the queue after its training
  process wrote the marker, is done in the queue (state, reason, finish time, one
  completed attempt row each, written by SQL). No checkpoint, receipt or log files:
  a relaunch reads none of them for a done cell.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

import psutil
from benchlib import load, log  # bench/ is on sys.path: the scripts run from it

REPO = Path(__file__).resolve().parents[1]
SMOKE_CELLS = 10_000
FULL_CELLS = 100_000
TARGETS_S = {"plan_json": 5.0, "first_launch": 5.0, "relaunch": 2.0}
TARGET_RSS_MB = 300.0
POLL_S = 0.005
WAIT_LIMIT_S = 600.0  # a figure that takes longer than this is reported as not reached

TRAINER = '''"""A training function that returns at once: the benchmark measures sweepq, not training."""


def train(cfg, run):
    return {"score": 1.0}
'''


def sweep_text(cells: int, root: Path) -> str:
    """Two groups of cells/2 cells; five keys a cfg (lr, wd, seed by grid; width a group's; epochs shared)."""
    half = cells // 2
    lrs = [round(1e-4 * (i + 1), 8) for i in range(half // 100)]
    lines = [
        "name: scale",
        f"root: {root}",
        "train: trivial:train",
        f"max_cells: {cells}",
        "checkpoint: {every_steps: 1}",
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


def sweepq_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "sweepq.cli", *args]


class Child:
    """A `sweepq` child process: its wall time, and its peak RSS (VmHWM) and CPU time as they grow."""

    def __init__(self, args: list[str], out: Path, cwd: Path) -> None:
        self.out = out
        self.err = out.with_name(out.name + ".err")
        with open(out, "wb") as file, open(self.err, "wb") as err:
            self.started = time.perf_counter()
            self.proc = subprocess.Popen(args, stdout=file, stderr=err, cwd=cwd)
        self.process = psutil.Process(self.proc.pid)
        self.seen_mb = 0.0  # its own VmHWM, as last read while it ran
        self.rusage_mb = 0.0  # wait4's: its own peak or that of a child it waited for, whichever is larger

    def until(self, seen: Callable[[], bool]) -> float | None:
        """Seconds from the start until `seen()` (None: the child exited first, or the limit passed)."""
        while not seen():
            if self.proc.poll() is not None or time.perf_counter() - self.started > WAIT_LIMIT_S:
                return None
            time.sleep(POLL_S)
        return time.perf_counter() - self.started

    def wait(self) -> tuple[float, int, float]:
        """(seconds since the start, exit code, CPU seconds), watching the peak RSS until it exits."""
        while True:
            pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
            if pid:
                break
            self.seen_mb = max(self.seen_mb, peak_mb(self.proc.pid))
            time.sleep(POLL_S)
        seconds = time.perf_counter() - self.started
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.rusage_mb = usage.ru_maxrss / 1024
        return seconds, self.proc.returncode, usage.ru_utime + usage.ru_stime

    def workers(self) -> list[psutil.Process]:
        return self.process.children()

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.wait()[1]

    def tail(self) -> str:
        return (self.out.read_text(errors="replace") + self.err.read_text(errors="replace"))[-2000:]


def peak_mb(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM), 0 when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def cpu_s(process: psutil.Process) -> float:
    try:
        times = process.cpu_times()
    except psutil.Error:
        return 0.0
    return float(times.user + times.system)


def figure(name: str, seconds: float | None, rss_mb: float, reference_s: float, **extra: Any) -> dict[str, Any]:
    target = TARGETS_S[name]
    out: dict[str, Any] = {
        "seconds": None if seconds is None else round(seconds, 3),
        "target_s": target,
        "ratio_to_target": None if seconds is None else round(seconds / target, 3),
        "ratio_to_cli_start": None if seconds is None else round(seconds / reference_s, 1),
        "peak_rss_mb": round(rss_mb, 1),
        "target_rss_mb": TARGET_RSS_MB,
    }
    out["pass"] = seconds is not None and seconds < target and rss_mb < TARGET_RSS_MB
    out.update(extra)
    out["machine_load"] = load()
    return out


def fig_plan(spec: Path, tmp: Path, reference_s: float) -> dict[str, Any]:
    os.sync()  # untimed: what earlier steps wrote is not flushed on this figure's clock
    child = Child(sweepq_cmd("plan", str(spec), "--json"), tmp / "plan.json", tmp)
    seconds, code, cpu = child.wait()
    if code != 0:
        raise SystemExit(f"plan failed ({code}): {child.tail()}")
    rows = len(json.loads((tmp / "plan.json").read_text()))
    size = round((tmp / "plan.json").stat().st_size / 2**20, 1)
    extra = {"cpu_s": round(cpu, 2), "cells_listed": rows, "output_mb": size}
    return figure("plan_json", seconds, child.rusage_mb, reference_s, **extra)


def attempt_file(root: Path, cell: str) -> Path:
    return root / "cells" / cell / "attempts" / "1" / "attempt.json"


def fig_launch(name: str, spec: Path, root: Path, first: str, tmp: Path, reference_s: float) -> dict[str, Any]:
    """Until `first` starts: the launch's and its worker's peak RSS and CPU time then; the launch's to its end."""
    os.sync()  # untimed: the 100,000 markers just written are not flushed on the relaunch's clock
    child = Child(sweepq_cmd("launch", str(spec), "--workers", "1", "--no-live"), tmp / f"{name}.log", tmp)
    seconds = child.until(attempt_file(root, first).exists)
    workers = child.workers()
    launch_mb, worker_mb = peak_mb(child.proc.pid), max((peak_mb(w.pid) for w in workers), default=0.0)
    cpu = cpu_s(child.process) + sum(cpu_s(w) for w in workers)
    code = child.stop()
    if seconds is None:
        log(f"{name}: {first} never started (exit {code}):\n{child.tail()}")
    said = child.out.read_text(errors="replace")
    return figure(
        name,
        seconds,
        max(launch_mb, worker_mb),
        reference_s,
        launch_peak_rss_mb=round(launch_mb, 1),
        worker_peak_rss_mb=round(worker_mb, 1),
        cpu_s=round(cpu, 2),
        launch_peak_rss_mb_to_its_end=round(max(child.seen_mb, launch_mb), 1),  # its summary included
        first_cell=first,
        output_bytes=len(said.encode()),
        exit_code=code,
    )


def mostly_done(root: Path, left: int) -> tuple[str, int]:
    """Every cell but the last `left` done (DONE.json, then the queue); returns the first cell left and the done count.

    In that order, as a training process and its worker write them: the marker first, the queue after.
    """
    db = sqlite3.connect(root / "sweepq.db")
    cells = db.execute('select id, cfg_hash from cells order by group_number, "index"').fetchall()
    done, rest = cells[:-left], cells[-left:]
    shutil.rmtree(root / "cells", ignore_errors=True)
    stamp = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    for cell, cfg_hash in done:
        folder = root / "cells" / cell
        folder.mkdir(parents=True)
        marker = {
            "cell": cell,
            "cfg_hash": cfg_hash,
            "metrics": {"score": 1.0},
            "checkpoint": None,
            "checkpoint_manifest_sha256": None,
            "attempt": 1,
            "finished_at": stamp,
            "step": None,
            "epoch": None,
            "best": None,
            "best_step": None,
        }
        (folder / "DONE.json").write_text(json.dumps(marker, indent=1))
    now = datetime.now(UTC).replace(tzinfo=None).isoformat(sep=" ")
    with db:
        db.execute("delete from attempts")
        db.execute("delete from events")
        db.execute("delete from checkpoints")
        db.execute("update cells set state='queued', attempts=0, last_reason=null, finished_at=null")
        db.executemany(
            "update cells set state='done', attempts=1, last_reason='completed', metrics=?, finished_at=?, "
            "updated_at=? where id=?",
            ((json.dumps({"score": 1.0}), now, now, cell) for cell, _ in done),
        )
        db.executemany(
            "insert into attempts (cell_id, number, worker, host, started_at, ended_at, start_step, reason, "
            "exit_code, wall_seconds, gpu_seconds) values (?, 1, 'bench', 'bench', ?, ?, 0, 'completed', 0, 0.1, 0)",
            ((cell, now, now) for cell, _ in done),
        )
    db.close()
    return rest[0][0], len(done)


def fig_cli_help(tmp: Path) -> float:
    times = []
    for _ in range(3):
        child = Child(sweepq_cmd("--help"), tmp / "help.txt", tmp)
        times.append(child.wait()[0])
    return round(min(times), 3)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help=f"{FULL_CELLS:,} cells (the targets' size)")
    ap.add_argument("--cells", type=int, default=None, help=f"cells in the sweep (default {SMOKE_CELLS:,})")
    ap.add_argument("--left", type=int, default=10, help="cells not done in the relaunch's root")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (the roots, the outputs)")
    args, ignored = ap.parse_known_args()  # make bench passes the same BENCH_ARGS to every benchmark
    if ignored:
        log(f"ignored (other benchmarks' options): {' '.join(ignored)}")
    cells = args.cells or (FULL_CELLS if args.full else SMOKE_CELLS)
    if cells < 400 or cells % 200:
        ap.error("--cells must be a multiple of 200, at least 400")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the temporary folder is removed
    t0 = time.perf_counter()
    (REPO / ".bench").mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="scale-", dir=REPO / ".bench"))
    out: dict[str, Any] = {
        "benchmark": "sweepq at scale: plan, first launch, relaunch",
        "cells": cells,
        "mode": "full" if cells == FULL_CELLS else "smoke" if cells == SMOKE_CELLS else "custom",
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(), "tmp": str(tmp)},
        "machine_load_before": load(),
        "targets": f"set for {FULL_CELLS:,} cells: seconds below target_s and peak RSS below {TARGET_RSS_MB:.0f} MB",
        "figures": {},
    }
    try:
        (tmp / "trivial.py").write_text(TRAINER)
        spec = tmp / "scale.yaml"
        root = tmp / "root"
        spec.write_text(sweep_text(cells, root))
        figs: dict[str, Any] = out["figures"]
        out["cli_help_s"] = fig_cli_help(tmp)
        log(f"-- plan_json ({cells:,} cells)")
        figs["plan_json"] = fig_plan(spec, tmp, out["cli_help_s"])
        log("-- first_launch")
        figs["first_launch"] = fig_launch("first_launch", spec, root, "1.1", tmp, out["cli_help_s"])
        log(f"-- making the root mostly done ({cells - args.left:,} cells)")
        began = time.perf_counter()
        first_left, done = mostly_done(root, args.left)
        out["mostly_done_setup_s"] = round(time.perf_counter() - began, 1)
        log("-- relaunch")
        figs["relaunch"] = fig_launch("relaunch", spec, root, first_left, tmp, out["cli_help_s"])
        figs["relaunch"]["cells_done_before"] = done
        for name, fig in figs.items():
            log(f"{name}: {fig['seconds']} s, {fig['peak_rss_mb']} MB, pass={fig['pass']}")
        out["passed"] = sorted(k for k, v in figs.items() if v["pass"])
        out["failed"] = sorted(k for k, v in figs.items() if not v["pass"])
        out["all_pass"] = not out["failed"]
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
