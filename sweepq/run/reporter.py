"""The program side of a subprocess cell: what `Run.from_env()` adds, the outcome file.

An excepthook judges an uncaught exception as in-process training would, and
an atexit hook waits for the checkpoint in flight (the writer thread is a
daemon) and writes what the Run knows: start step, last step, best, final
metrics. The rules are sweepq.outcome's, as Witness.PROGRAM_RUN; the attempt
process reads the file (program/supervisor.py, Witness.PROGRAM).
"""

from __future__ import annotations

import atexit
import os
import sys
import traceback
from pathlib import Path
from typing import Any, Protocol

from sweepq.atomic import atomic_write_json
from sweepq.evidence import Evidence, Witness
from sweepq.host import signals
from sweepq.outcome import decide
from sweepq.program.launch import ENV
from sweepq.queue.records import Outcome
from sweepq.run.errors import raised


class RunState(Protocol):
    """What the reporter reads of a Run (run.py), without importing it."""

    start_step: int
    start_sha: str | None
    last_step: int
    epoch: float | None
    total_steps: int | None
    best: float | None
    best_step: int | None
    nan_step: int | None
    warnings: list[str]  # what the attempt warned of (also sent as Warned): the receipt's note begins with them

    def close(self, completed: bool) -> None: ...


class Reporter:
    """Writes the outcome file of a program that uses `Run.from_env()`."""

    def __init__(self, run: RunState, path: Path) -> None:
        self.run = run
        self.path = path
        self.outcome: Outcome | None = None
        self.pid = os.getpid()  # a forked child (a data loader worker) inherits the hooks: not its report
        self._previous_hook = sys.excepthook

    def install(self) -> None:
        sys.excepthook = self._excepthook
        atexit.register(self._at_exit)

    def finished_with(self, metrics: dict[str, Any]) -> None:
        """`run.finish()`: completed, unless a stop signal came before the declared last step.

        As for in-process training: a loop that breaks on `should_stop` and then
        finishes has not completed (without `set_total` sweepq cannot tell, so a
        signal means preempted; the next attempt restores the final checkpoint and
        finishes at once).
        """
        self.outcome = self._judge(finished=True, metrics=metrics)
        self.write()

    def _judge(self, **seen: Any) -> Outcome | None:
        run = self.run
        reached_end = run.total_steps is not None and run.last_step >= run.total_steps
        return decide(
            Evidence(
                Witness.PROGRAM_RUN,
                nan_step=run.nan_step,
                reached_end=reached_end,
                step=run.last_step,
                total_steps=run.total_steps,
                stop_requested=signals.requested(),
                stop_signal=signals.first_signal(),
                **seen,
            )
        )

    def _excepthook(self, etype: type[BaseException], e: BaseException, tb: Any) -> None:
        if os.getpid() != self.pid:
            return self._previous_hook(etype, e, tb)
        try:
            self.outcome = self._judge(raised=raised(e))
        except Exception as err:
            print(f"sweepq: could not classify the exception: {err!r}", file=sys.stderr)
        self._previous_hook(etype, e, tb)

    def _at_exit(self) -> None:
        if os.getpid() != self.pid:
            return
        try:
            self.run.close(completed=False)  # waits for the checkpoint in flight
        except Exception:
            traceback.print_exc()
        if self.outcome is None:
            self.outcome = self._judge()
        self.write()

    def write(self) -> None:
        if os.getpid() != self.pid:
            return
        run = self.run
        o = self.outcome
        data: dict[str, Any] = {
            "written_by": "sweepq.Run",
            "reason": None if o is None else str(o.reason),
            "start_step": run.start_step,
            "start_checkpoint_sha": run.start_sha,
            "end_step": run.last_step,
            "total_steps": run.total_steps,  # with end_step: whether a Run that never finished reached its end
            "epoch": run.epoch,
            "best": run.best,
            "best_step": run.best_step,
            **_told(o),
        }
        if run.warnings:  # an inexact resume, changed code: the receipt says so, not only the database
            data["note"] = "; ".join([*run.warnings, *([data["note"]] if data.get("note") else [])])
        try:
            atomic_write_json(self.path, data)
        except OSError:
            traceback.print_exc()


def _told(o: Outcome | None) -> dict[str, Any]:
    """What the outcome file says beyond the reason (the keys program.OUTCOME_KEYS reads)."""
    if o is None:
        return {}
    told = {"note": o.note, "error_tail": o.error_tail, "nan_step": o.nan_step, "metrics": o.metrics}
    return {k: v for k, v in told.items() if v is not None}


def attach(run: RunState) -> Reporter | None:
    """Called by `Run.from_env()`: report this program's outcome to its attempt."""
    path = os.environ.get(ENV["outcome_file"])
    if not path:
        return None
    reporter = Reporter(run, Path(path))
    reporter.install()
    return reporter
