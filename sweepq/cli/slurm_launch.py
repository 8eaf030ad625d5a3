"""`sweepq launch SPEC --on slurm`: the workers are a Slurm job array instead of local processes.

Everything else is a local launch's (cli/launch.py): the reconcile, the live table or lines, the
summary and exit code. The launch submits the array once the cells are written (the jobs have no
gate to wait at: a job may start on another node long after), follows the jobs with `squeue` until
none is left, and on a stop (Ctrl-C, `sweepq stop`) sends the running jobs SIGINT (their workers end
their attempts with an emergency checkpoint) and cancels the pending ones; a second stop cancels all.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from sweepq.cli.launch import Launcher, Prepared
from sweepq.cli.terminal import Terminal
from sweepq.slurm import submit
from sweepq.spec.slurm import SlurmOptions


def slurm_launcher(prepared: Prepared, workers: int, terminal: Terminal, live: bool) -> Launcher:
    """`launch(make_launcher=...)`'s choice for `--on slurm`."""
    return SlurmLauncher(prepared.root, workers, prepared.sweep.slurm, terminal.console(), live, terminal)


SQUEUE_EVERY_S = 2.0  # squeue asks slurmctld: not twice a second per launch


class SlurmLauncher(Launcher):
    def __init__(
        self, root: Path, workers: int, options: SlurmOptions | None, console: Console, live: bool, terminal: Terminal
    ) -> None:
        super().__init__(root, workers, [], console, live, terminal)
        self.options = options or SlurmOptions()
        self.jobs: list[str] = []
        self.job_states: dict[str, str] = {}
        self.looked = 0.0
        self.submitted = False

    def start_workers(self) -> None:
        """Nothing before the cells are written: `open_gate` submits (a job may start at once)."""

    def open_gate(self, go: bool = True) -> None:
        if not go or self.submitted:
            return
        self.submitted = True
        self.jobs = submit.submit(self.root, self.options, self.n)
        self.job_states = {j: "PENDING" for j in self.jobs}
        self.console.print(f"submitted {len(self.jobs)} workers to Slurm: job array {self.jobs[0].split('_')[0]}")

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if self.stops and signum != signal.SIGINT:
            return  # a repeated SIGTERM is no second Ctrl-C (as a local launch)
        self.stops += 1
        self.signals.append(signum)
        submit.stop(self.jobs, hard=self.stops >= 2)

    def _alive(self) -> bool:
        if not self.jobs:
            return False
        now = time.monotonic()
        if now - self.looked >= SQUEUE_EVERY_S:
            self.looked = now
            seen = submit.states(self.jobs)
            if seen is not None:  # squeue failed (slurmctld busy): keep what was seen last
                self.job_states = seen
            waiting = any(state == "PENDING" for state in self.job_states.values())
            if waiting and self.store is not None and self.store.unsettled() == 0:
                submit.cancel_pending(self.jobs)  # nothing left for them: no node started for nothing
        return bool(self.job_states)

    def live_workers(self) -> int:
        return sum(1 for s in self.job_states.values() if s == "RUNNING")
