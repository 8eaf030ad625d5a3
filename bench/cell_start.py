"""The cell start benchmark: how fast attempts start, and how fast a sweep of trivial cells drains.

Prints ONE JSON object on stdout (progress goes to stderr). Nothing here asserts a time: each
figure is a ratio to its reference measured in the same run, with its target and a pass flag,
and the machine's load beside it.

- `drain`: a sweep of trivial `train:` cells (train returns at once) launched with 2 workers,
  attempts forked from each worker's template (the default) against fresh interpreters
  (`SWEEPQ_START=fresh`, how every attempt started before). Cells per second between the
  first and the last claim. Target: 10x.
- `claim_to_train`: from the worker's claim (attempt.json's `started_monotonic`, taken right
  after the claim commits) to the first line of `train` (its `time.monotonic()`; one clock for
  every process of a machine), for each way of starting. Target: under 0.3 s at the median.
- `program_start`: a `program:` cell whose program writes `time.monotonic()` first thing: from
  the claim to that line, against the bare cost of starting the same program
  (`python prog.py` from this process, from spawn to the same line).

`--full` runs 300 forked and 30 fresh cells (the smoke run: 40 and 6).
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
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import load, log

TRAIN = "import time\n\n\ndef train(cfg, run):\n    return {'t0': time.monotonic()}\n"
PROGRAM = "import time\nt0 = time.monotonic()\nopen('t0', 'w').write(repr(t0))\n"
SWEEP = """name: {name}
{entry}
root: runs/{name}
groups:
  - name: a
    grid: {{x: {xs}}}
"""


def sweepq() -> list[str]:
    return [sys.executable, "-m", "sweepq.cli"]


def launch(folder: Path, name: str, entry: str, cells: int, env: dict[str, str]) -> Path:
    spec = folder / f"{name}.yaml"
    spec.write_text(SWEEP.format(name=name, entry=entry, xs=list(range(cells))))
    subprocess.run(
        [*sweepq(), "launch", str(spec), "--workers", "2"],
        cwd=folder,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
    )
    return folder / "runs" / name


def attempts(root: Path) -> list[dict[str, Any]]:
    """Each cell's attempt: its claim time, how it started, and when train's (or the program's) first line ran."""
    out = []
    for cell in sorted((root / "cells").iterdir()):
        spec = json.loads((cell / "attempts" / "1" / "attempt.json").read_text())
        receipt = json.loads((cell / "attempts" / "1" / "receipt.json").read_text())
        t0_file = cell / "output" / "t0"
        t0 = float(t0_file.read_text()) if t0_file.exists() else (receipt.get("metrics") or {}).get("t0")
        out.append({"claimed": spec["started_monotonic"], "t0": t0, "started_by": receipt.get("started_by")})
    return out


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    claims = sorted(r["claimed"] for r in rows)
    lat = sorted(r["t0"] - r["claimed"] for r in rows if r["t0"] is not None)
    return {
        "cells": len(rows),
        "cells_per_s": round((len(claims) - 1) / (claims[-1] - claims[0]), 3),
        "claim_to_first_line_s": {
            "median": round(statistics.median(lat), 4),
            "p90": round(lat[int(0.9 * (len(lat) - 1))], 4),
            "max": round(lat[-1], 4),
        },
        "started_by": sorted({str(r["started_by"]) for r in rows}),
    }


def bare_program(folder: Path, rounds: int) -> float:
    """The median time from spawning `python prog.py` to its first line."""
    times = []
    for _ in range(rounds):
        (folder / "t0").unlink(missing_ok=True)
        before = time.monotonic()
        subprocess.run([sys.executable, "prog.py"], cwd=folder, check=True)
        times.append(float((folder / "t0").read_text()) - before)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="300 forked and 30 fresh cells (default: 40 and 6)")
    args = ap.parse_args()
    forked_n, fresh_n, program_n = (300, 30, 30) if args.full else (40, 6, 8)
    tmp = Path(tempfile.mkdtemp(prefix="sweepq-bench-start-"))
    try:
        (tmp / "trivial.py").write_text(TRAIN)
        (tmp / "prog.py").write_text(PROGRAM)
        before = load()
        log(f"{fresh_n} trivial cells, each attempt a fresh interpreter")
        fresh = summary(attempts(launch(tmp, "fresh", "train: trivial:train", fresh_n, {"SWEEPQ_START": "fresh"})))
        log(f"{forked_n} trivial cells, each attempt forked from its worker's template")
        forked = summary(attempts(launch(tmp, "forked", "train: trivial:train", forked_n, {})))
        log(f"{program_n} program cells, and the bare program {program_n} times")
        program = summary(attempts(launch(tmp, "program", "program: prog.py", program_n, {})))
        bare = bare_program(tmp, program_n)
        drain = forked["cells_per_s"] / fresh["cells_per_s"]
        to_train = forked["claim_to_first_line_s"]["median"]
        to_program = program["claim_to_first_line_s"]["median"]
        result = {
            "benchmark": "cell_start",
            "figures": {
                "drain": {
                    "forked": forked,
                    "fresh": fresh,
                    "ratio": round(drain, 2),
                    "target": ">= 10",
                    "pass": drain >= 10,
                },
                "claim_to_train_s": {"median": to_train, "target": "< 0.3", "pass": to_train < 0.3},
                "program_start": {
                    "claim_to_program_first_line_s": to_program,
                    "bare_program_first_line_s": round(bare, 4),
                    "ratio": round(to_program / bare, 2),
                    "overhead_s": round(to_program - bare, 4),
                },
            },
            "load_before": before,
            "load_after": load(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        }
        print(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
