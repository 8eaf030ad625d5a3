"""The ETA benchmark: how far the sweep's forecast (queue/forecast/model.py) is from the sweep's real end.

`make bench-eta` (a few minutes: the whole bundled sweep runs). Prints ONE JSON object on stdout,
progress on stderr. Nothing is asserted; the machine's load is reported beside the figures (other
processes share these cores and move every speed the forecast measures).

What it does: launches the bundled sweep (`sweeps/llm-analysis.yaml`, what `make run` launches)
into a temporary root with its default two workers, and samples the forecast every
`--every` seconds in this process, through a read-only Store, with the launch's worker count.
Once `--kill-at` of the sweep's steps are done, it kills the launch **hard**: SIGKILL to every
process of its tree at once (the training processes, the workers, the launch; the workers run
in sessions of their own, so a signal to the launch's process group would reach the launch
alone, and its workers would then stop gracefully with a checkpoint). The cells lose the steps
since their last checkpoint, and the relaunch, started at once, reaps them as `lost` and resumes
them. When the sweep has ended, the actual end is the end of its last attempt.

Figures: for the samples taken at 10, 25, 50 and 75 % of the wall time (launch to actual end),
the predicted end against the actual one as the relative error of the remaining time,
(predicted remaining - actual remaining) / actual remaining: positive when the forecast was
pessimistic. Each says whether the ETA was complete or a lower bound.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

import psutil
from benchlib import load, log  # bench/ is on sys.path: the scripts run from it
from sqlalchemy.exc import OperationalError

from sweepq.errors import UsageError
from sweepq.queue.database import Database
from sweepq.queue.states import TERMINAL
from sweepq.queue.store import Store

REPO = Path(__file__).resolve().parents[1]
SPEC = REPO / "sweeps" / "llm-analysis.yaml"
WORKERS = 2
FRACTIONS = (0.10, 0.25, 0.50, 0.75)
WAIT_LIMIT_S = 1800.0  # the whole sweep takes minutes here: past this, something is wrong


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--every", type=float, default=2.0, help="seconds between two samples of the forecast")
    ap.add_argument("--kill-at", type=float, default=0.40, help="kill when this share of the steps is done")
    ap.add_argument("--trace", type=Path, default=None, help="write every sample here (JSON lines)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sweepq-bench-eta-") as tmp:
        print(json.dumps(run(Path(tmp), args.every, args.kill_at, args.trace), indent=2))


def run(tmp: Path, every: float, kill_at: float, trace: Path | None = None) -> dict[str, Any]:
    root = tmp / "root"
    before = load()
    began = datetime.now(UTC)
    launch = _launch(root, tmp / "launch-1.log")
    store = _open(root, launch)
    samples: list[dict[str, Any]] = []
    killed: dict[str, Any] | None = None
    deadline = time.monotonic() + WAIT_LIMIT_S
    while time.monotonic() < deadline:
        samples.append(_sample(store))
        done = _done_share(store)
        if killed is None and done >= kill_at:
            killed = {"at_steps_share": round(done, 3), "at": datetime.now(UTC), "processes": _kill_tree(launch)}
            log(f"killed {killed['processes']} processes at {100 * done:.0f} % of the steps; relaunching")
            launch = _launch(root, tmp / "launch-2.log")
        if launch.poll() is not None:
            break
        time.sleep(every)
    else:
        raise SystemExit(f"the sweep did not end within {WAIT_LIMIT_S:.0f} s\n{_logs(tmp)}")
    end = store.forecast(WORKERS).last_end
    if killed is None or end is None or not _settled(store):
        raise SystemExit(f"the launch exited with {launch.returncode} before the kill or the sweep's end\n{_logs(tmp)}")
    killed["relaunch"] = {"exit_code": launch.returncode, "cells": [str(c.state) for c in store.cells()]}
    store.close()
    if trace is not None:
        _write_trace(trace, began, end, samples)
    return _report(began, end, samples, killed, before)


def _write_trace(path: Path, began: datetime, end: datetime, samples: list[dict[str, Any]]) -> None:
    """Each sample as seconds since the launch: predicted and actual remaining time."""
    with open(path, "w") as f:
        for s in samples:
            at = (s["at"] - began).total_seconds()
            predicted = None if s["ends_at"] is None else round((s["ends_at"] - s["at"]).total_seconds(), 1)
            actual = round((end - s["at"]).total_seconds(), 1)
            f.write(json.dumps({"at_s": round(at, 1), "predicted_s": predicted, "actual_s": actual, **s["cells"]}))
            f.write("\n")


def _logs(tmp: Path) -> str:
    """The end of the launches' output (the temporary folder goes away with the benchmark)."""
    return "\n".join(f"{p.name}:\n{p.read_text(errors='replace')[-2000:]}" for p in sorted(tmp.glob("launch-*.log")))


def _launch(root: Path, out: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "sweepq.cli", "launch", str(SPEC), "--root", str(root), "--workers", str(WORKERS)]
    with open(out, "wb") as f:
        return subprocess.Popen([*cmd, "--no-live"], stdout=f, stderr=subprocess.STDOUT, start_new_session=True)


def _open(root: Path, launch: subprocess.Popen[bytes]) -> Store:
    """The root's store, read-only, once the launch has made it (and its cells)."""
    while launch.poll() is None:
        if Database.for_root(root).exists():
            try:
                store = Store.open_readonly(root)
            except UsageError:  # being made or migrated
                pass
            else:
                try:
                    if store.cells():
                        return store
                except OperationalError:  # its tables are being made
                    pass
                store.close()
        time.sleep(0.2)
    raise SystemExit(f"the launch exited with {launch.returncode} before its root was made")


def _sample(store: Store) -> dict[str, Any]:
    fc = store.forecast(WORKERS)
    cells = {c: round(f.seconds_per_step * 1000, 2) for c, f in fc.cells.items() if f.seconds_per_step}
    sample = {"at": fc.now, "ends_at": fc.ends_at, "complete": fc.complete, "why": fc.why}
    return sample | {"cells": {"startup_s": fc.startup_seconds, "ms_per_step": cells}}


def _done_share(store: Store) -> float:
    """The share of the sweep's steps done (a cell that has not started yet counts the mean length)."""
    cells = store.cells()
    known = [c.total_steps for c in cells if c.total_steps]
    if not known:
        return 0.0
    totals = [c.total_steps or sum(known) / len(known) for c in cells]
    done = sum(t if c.state in TERMINAL else (c.step or 0) for c, t in zip(cells, totals, strict=True))
    return done / sum(totals)


def _settled(store: Store) -> bool:
    return store.unsettled() == 0


def _kill_tree(launch: subprocess.Popen[bytes]) -> int:
    """SIGKILL the launch and every descendant at once, deepest first; wait until all are gone."""
    procs = [*psutil.Process(launch.pid).children(recursive=True)[::-1], psutil.Process(launch.pid)]
    for p in procs:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    launch.wait()
    psutil.wait_procs(procs, timeout=30)
    return len(procs)


def _report(
    began: datetime, end: datetime, samples: list[dict[str, Any]], killed: dict[str, Any], before: dict[str, Any]
) -> dict[str, Any]:
    wall = (end - began).total_seconds()
    points = {}
    for f in FRACTIONS:
        when = began.timestamp() + f * wall
        s = min(samples, key=lambda s: abs(s["at"].timestamp() - when))
        actual = (end - s["at"]).total_seconds()
        predicted = None if s["ends_at"] is None else (s["ends_at"] - s["at"]).total_seconds()
        points[f"{100 * f:.0f}%"] = {
            "at_s": round((s["at"] - began).total_seconds(), 1),
            "predicted_remaining_s": None if predicted is None else round(predicted, 1),
            "actual_remaining_s": round(actual, 1),
            "relative_error": None if predicted is None else round((predicted - actual) / actual, 3),
            "eta": "none" if predicted is None else "complete" if s["complete"] else f"lower bound ({s['why']})",
        }
    return {
        "sweep": str(SPEC.relative_to(REPO)),
        "workers": WORKERS,
        "kill": {
            "how": "SIGKILL to the launch, its workers and their training processes at once, then a relaunch",
            "at_steps_share": killed["at_steps_share"],
            "at_wall_share": round((killed["at"] - began).total_seconds() / wall, 3),
            "processes": killed["processes"],
            "relaunch_exit_code": killed["relaunch"]["exit_code"],
            "cells_after": dict(Counter(killed["relaunch"]["cells"])),
        },
        "wall_s": round(wall, 1),
        "samples": len(samples),
        "relative_error_of_remaining_time": points,
        "load_before": before,
        "load_after": load(),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }


if __name__ == "__main__":
    main()
