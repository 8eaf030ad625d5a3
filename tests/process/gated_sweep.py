"""A sweep whose cells wait at their checkpoints while a gate file exists: surely mid-training at a chosen
moment, whatever the machine's speed (tests/process/test_supervision.py, test_terminal.py)."""

from __future__ import annotations

from pathlib import Path

from conftest import write

SPEC = """
name: NAME
train: gated:train
root: runs/NAME
params: {steps: 40, delay: 0.01}
checkpoint: {every_steps: 20}
groups:
  - name: a
    grid: {seed: SEEDS}
"""
GATED = '''
"""tests/trainers.train, held after each checkpoint while the file gate-<cell> exists (or until a stop)."""
import time
from pathlib import Path

import trainers


def train(cfg, run):
    gate = Path(f"gate-{run.cell}")  # in the sweep file's folder, the training process's working folder
    checkpoint = run.checkpoint

    def held(*args, **kwargs):
        taken = checkpoint(*args, **kwargs)
        while taken and gate.exists() and not run.should_stop:
            time.sleep(0.01)
        return taken

    run.checkpoint = held
    return trainers.train(cfg, run)
'''
HANG_GUARD_S = 120.0  # only against a hang: every wait on a gated sweep is for a condition


def gated_sweep(sweep_dir: Path, cells: int, name: str) -> tuple[Path, Path]:
    """The sweep file `<name>.yaml` of `cells` cells, each held at its checkpoints until its gate is opened,
    and its root (runs/<name>)."""
    write(sweep_dir / "gated.py", GATED)
    for i in range(1, cells + 1):
        write(sweep_dir / f"gate-1.{i}", "")
    text = SPEC.replace("NAME", name).replace("SEEDS", str(list(range(1, cells + 1))))
    return write(sweep_dir / f"{name}.yaml", text), sweep_dir / "runs" / name


def held(root: Path, *cells: str) -> bool:
    """Every cell of `cells` has committed a checkpoint (and so waits at its gate, or has stopped)."""
    return all(any((root / "cells" / c / "checkpoints").glob("step-*")) for c in cells)
