"""A program that knows nothing of sweepq: argparse flags in, exit code out.

It keeps its own progress in $SWEEPQ_OUTPUT_DIR (a folder of the cell that
outlives attempts) when there is one, so a rerun continues where it stopped.
--on_term=exit75 saves and exits 75 on SIGTERM; --on_term=die keeps Python's
default (killed by the signal). --fail_first exits 1 with a traceback on the
cell's first run. STEP_DELAY in the environment overrides --delay. Its final
metrics go to $SWEEPQ_OUTCOME_FILE (JSON), which sweepq keeps in DONE.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=20)
p.add_argument("--delay", type=float, default=0.01)
p.add_argument("--on_term", choices=["exit75", "die"], default="die")
p.add_argument("--fail_first", default="False")
p.add_argument("--name", default="plain")
args = p.parse_args()
delay = float(os.environ.get("STEP_DELAY", args.delay))

out = Path(os.environ.get("SWEEPQ_OUTPUT_DIR", "."))
progress = out / "progress.json"
step = json.loads(progress.read_text())["step"] if progress.exists() else 0
runs_file = out / "runs.txt"
runs = int(runs_file.read_text()) + 1 if runs_file.exists() else 1
runs_file.write_text(str(runs))
print(f"{args.name}: run {runs}, starting at step {step}", flush=True)

if args.fail_first == "True" and runs == 1:
    print("about to fail", flush=True)
    raise RuntimeError("flaky first run: the NFS mount was not ready")


def save() -> None:
    tmp = progress.with_suffix(".tmp")
    tmp.write_text(json.dumps({"step": step}))
    os.replace(tmp, progress)


if args.on_term == "exit75":

    def on_term(signum, frame):
        save()
        print(f"{args.name}: SIGTERM at step {step}, saved, exiting 75", flush=True)
        sys.exit(75)

    signal.signal(signal.SIGTERM, on_term)

while step < args.steps:
    time.sleep(delay)
    step += 1
    if step % 5 == 0:
        save()
save()
print(f"{args.name}: finished {args.steps} steps", flush=True)
if os.environ.get("SWEEPQ_OUTCOME_FILE"):  # final metrics for DONE.json, without importing sweepq
    Path(os.environ["SWEEPQ_OUTCOME_FILE"]).write_text(json.dumps({"metrics": {"steps": step}}))
