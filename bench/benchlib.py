"""What the benchmarks share: progress lines, how busy the machine was, interleaved rounds."""

from __future__ import annotations

import gc
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def load() -> dict[str, Any]:
    """How busy the machine was (other processes share these cores): load average, CPU pressure."""
    out: dict[str, Any] = {"loadavg_1m": round(os.getloadavg()[0], 2)}
    try:
        some = Path("/proc/pressure/cpu").read_text().splitlines()[0].split()
        out["cpu_pressure_some_avg60"] = float(some[2].split("=")[1])
    except (OSError, IndexError, ValueError):
        pass
    return out


def interleave(
    methods: dict[str, Callable[[int], float]], rounds: int, what: str, warmup: int = 1
) -> dict[str, list[float]]:
    """Run each method once per round (the order alternates between rounds), after uncounted warm-up rounds.

    A method returns the seconds it measured itself (so that set-up and clean-up stay untimed).
    """
    names = list(methods)
    out: dict[str, list[float]] = {n: [] for n in names}
    # The collection before each method keeps the last one's garbage out of the next one's time. With torch
    # loaded a full collection walks some 200,000 objects (0.1 s, seconds a benchmark): what lives before the
    # rounds is set aside for their duration, so each collection walks only what the rounds made.
    gc.collect()
    gc.freeze()
    try:
        for r in range(rounds + warmup):
            order = names if r % 2 == 0 else names[::-1]
            for n in order:
                gc.collect()
                t = methods[n](r)
                if r >= warmup:  # warm-up: caches, allocators, the page cache, the VM's second vCPU
                    out[n].append(t)
            if r >= warmup:
                log(f"{what} round {r - warmup + 1}/{rounds}: " + ", ".join(f"{n}={out[n][-1]:.4f}s" for n in names))
    finally:
        gc.unfreeze()
    return out
