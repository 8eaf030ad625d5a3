"""Helpers of the fast unit layer: a settable clock, the sweep YAML, a root opened the way launch opens it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

from sweepq.queue import reconcile
from sweepq.queue.records import WorkerInfo
from sweepq.queue.store import Store
from sweepq.spec.sweep import Sweep, parse_sweep

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)

# Group 1 has eleven cells so that 1.10 and 1.11 test the numeric order.
SWEEP_YAML = """\
name: unit
train: trainers:train
params: {epochs: 3}
metric: {name: val_acc, goal: max}
retries: {lost: 2, oom: 1, nan: 1, error: 0, data_error: 0, timeout: 1, backoff_seconds: 30, backoff_max_seconds: 100}
groups:
  - name: wide
    grid: {lr: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]}
  - name: narrow
    grid: {lr: [0.5, 0.25]}
"""

WORKER = WorkerInfo(worker="host-a:100", host="host-a", pid=100)


class FakeClock:
    """Injected into Store.open: time moves only when a test says so."""

    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def sweep_from(text: str, folder: Path) -> Sweep:
    """A sweep parsed from YAML text as if read from folder/sweep.yaml (nothing is read or written)."""
    return parse_sweep(text, folder / "sweep.yaml")


def launch_store(root: Path, sweep: Sweep, clock: FakeClock, accept_changed: bool = False) -> Store:
    """What `sweepq launch` does before starting workers: open (create, migrate), then reconcile."""
    store = Store.open(root, create=True, clock=clock)
    try:
        store.apply_reconcile(
            sweep.settings, str(sweep.path), lambda existing: reconcile.plan(sweep, existing, accept_changed)
        )
    except BaseException:
        store.close()
        raise
    return store


class Launch(Protocol):
    """The `launch` fixture: launch_store on a root copied from a migrated template, closed at teardown."""

    def __call__(self, root: Path, sweep: Sweep, accept_changed: bool = False) -> Store: ...
