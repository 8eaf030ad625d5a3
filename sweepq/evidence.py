"""What a witness saw of an attempt's end: the input of the rules in outcome.py.

Plain frozen values, so that the rules stay pure. Who gathers what: the
exception by sweepq.run.errors, the kernel's OOM counters by
sweepq.host.memory, exit statuses, receipts and the outcome file by the
witness itself.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

#: The signals that mean "stop now, resume later" (a scheduler's preemption, Ctrl-C, a hang-up).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP)


class Witness(StrEnum):
    """Who judges how an attempt ended, from where it stands."""

    TRAINING = "training"  # the attempt process, as train(cfg, run) returned or raised
    PROGRAM_RUN = "program_run"  # a program's Run.from_env(), writing the outcome file as the program ends
    PROGRAM = "program"  # the attempt process: its program's exit status and outcome file
    WORKER = "worker"  # the worker: its attempt process's exit status and own account
    REAPER = "reaper"  # any later process: the files of an attempt whose processes are gone


class Intent(StrEnum):
    """Why the worker stopped its training process (cancel and timeout name the reason they impose)."""

    CANCEL = "cancelled"
    TIMEOUT = "timeout"
    STOP = "stop"  # the worker itself was asked to stop


class Kind(StrEnum):
    """What sort of exception ended training code."""

    NON_FINITE_LOSS = "non_finite_loss"  # sweepq.NonFiniteLoss
    DATA_ERROR = "data_error"  # sweepq.DataError
    MEMORY_ERROR = "memory_error"  # MemoryError
    CUDA_OOM = "cuda_oom"  # torch.cuda.OutOfMemoryError (a RuntimeError, not a MemoryError)
    DISK_FULL = "disk_full"  # an OSError ENOSPC, EDQUOT or EROFS, itself or as a cause or context
    OTHER = "other"


@dataclass(frozen=True)
class Raised:
    """An exception that ended training code."""

    kind: Kind
    name: str  # its type's name
    tail: str  # the end of its traceback
    step: int | None = None  # a NonFiniteLoss's step
    disk: str | None = None  # DISK_FULL: "disk full on <file system> (<mount point>, <free> free)"


@dataclass(frozen=True)
class Report:
    """A program's outcome file (written by Run.from_env(), or by any program): the keys sweepq reads."""

    reason: str | None = None
    note: str | None = None
    error_tail: str | None = None
    nan_step: int | None = None
    metrics: dict[str, Any] | None = None
    written_by: str | None = None  # "sweepq.Run" for the file a program's Run writes
    end_step: int | None = None  # a Run's last step trained
    total_steps: int | None = None  # a Run's declared last step (run.set_total), None when it declared none

    @property
    def by_run(self) -> bool:
        return self.written_by == "sweepq.Run"

    @property
    def reached_end(self) -> bool:
        """A Run's last step trained is its declared last one."""
        return self.end_step is not None and self.total_steps is not None and self.end_step >= self.total_steps

    @classmethod
    def parse(cls, d: Mapping[str, Any]) -> Report:
        """Lenient: a program's own file may hold anything; what is unusable counts as absent."""
        metrics = d.get("metrics")
        if metrics is not None:
            metrics = {str(k): v for k, v in metrics.items()} if isinstance(metrics, dict) else {"result": str(metrics)}
        return cls(
            reason=as_text(d.get("reason")),
            note=as_text(d.get("note")),
            error_tail=as_text(d.get("error_tail")),
            nan_step=as_int(d.get("nan_step")),
            metrics=metrics,
            written_by=as_text(d.get("written_by")),
            end_step=as_int(d.get("end_step")),
            total_steps=as_int(d.get("total_steps")),
        )


@dataclass(frozen=True)
class Evidence:
    """What one witness saw; what it cannot see stays at the default."""

    witness: Witness
    # -- training code (TRAINING, PROGRAM_RUN)
    raised: Raised | None = None
    finished: bool = False  # train returned, or the program called run.finish()
    nan_step: int | None = None  # the Run saw a non-finite loss at this step
    reached_end: bool = False  # the last step trained is the declared last one (run.set_total)
    step: int | None = None  # the last step trained (REAPER: the newest known)
    total_steps: int | None = None
    metrics: Mapping[str, Any] | None = None  # what train returned or run.finish() got, as JSON
    stop_requested: bool = False  # a stop signal reached this process
    stop_signal: int | None = None  # the first one, when known
    flooded: str | None = None  # TRAINING, PROGRAM: the attempt printed past its flood limit (the words)
    # -- an exit (PROGRAM: the program's; WORKER: the attempt process's)
    exit_code: int | None = None  # os.waitstatus_to_exitcode (negative: a signal); None: it never ran
    start_failure: tuple[str, str] | None = None  # PROGRAM: (what failed, its detail): it never ran
    report: Report | None = None  # PROGRAM: the program's outcome file
    bad_outcome_file: str | None = None  # PROGRAM: what was at the outcome file instead of a file (the words)
    stop_forwarded: bool = False  # PROGRAM: a stop was forwarded to the program as SIGTERM
    killed_after_grace: bool = False  # PROGRAM, WORKER: SIGKILLed by its parent after the grace period
    reported_only: bool = False  # PROGRAM: `done_when: reported`: only a reported completion is done
    grace_seconds: float = 0.0
    oom: tuple[bool, str] | None = None  # memory.judge_sigkill's (verdict, evidence) on a SIGKILL
    # -- the worker's knowledge (WORKER); the files (REAPER)
    account: Mapping[str, Any] | None = None  # the attempt's own receipt: its last message, else its file
    intent: Intent | None = None
    hard_stop: bool = False  # the worker SIGKILLed at once (a second interrupt)
    done: Mapping[str, Any] | None = None  # REAPER: a verified DONE.json written by this attempt

    @property
    def signal(self) -> int | None:
        return -self.exit_code if self.exit_code is not None and self.exit_code < 0 else None

    @property
    def stop_name(self) -> str:
        return signame(self.stop_signal) if self.stop_signal else "a signal"

    @property
    def status(self) -> str:
        """How the process ended, in words: "was killed by SIGSEGV", "exited with code 1"."""
        return f"was killed by {signame(self.signal)}" if self.signal else f"exited with code {self.exit_code}"

    @property
    def forwarded(self) -> str:
        """The stop signal a PROGRAM's attempt forwarded, in words."""
        return f"{signame(self.stop_signal)} (forwarded as SIGTERM)" if self.stop_signal else "SIGTERM"


def signame(sig: int | None) -> str:
    try:
        return signal.Signals(sig).name  # type: ignore[arg-type]
    except ValueError:
        return f"signal {sig}"


def as_text(v: Any) -> str | None:
    """A value from a program's file as text (None when absent)."""
    return None if v is None else str(v)


def as_int(v: Any) -> int | None:
    """A value from a program's file as an int (None when absent or not a number)."""
    try:
        return None if v is None else int(v)
    except (TypeError, ValueError):
        return None
