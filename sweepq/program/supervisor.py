"""Subprocess cells: the attempt process runs the user's own program (`program:` or a W&B sweep file).

launch.py prepares what the program starts with; this module starts
it, watches it and tells how it ended:

* A stop signal reaching the attempt (preemption, cancel, timeout, the worker's
  death) is forwarded to the program as SIGTERM; a program still running a
  grace period later is killed.
* How the attempt ended comes from the program's exit status and, when there
  is one, the outcome file the program wrote (`Run.from_env()` writes it
  itself, see reporter.py; any program may write it: OUTCOME_KEYS), judged by
  the rules of sweepq.outcome (Witness.PROGRAM). An exit 0 is done only on
  evidence that the program finished: a reported completion, its Run at its
  declared end, or, for a program that does not report, no stop signal seen
  by this attempt (`done_when: reported` asks for a reported completion).

The attempt process then exits the way the program did (`exit_like`), so the
receipt's exit_code / exit_signal are the program's.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import select
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sweepq import layout
from sweepq.checkpoint import storage
from sweepq.checkpoint.manifest import CheckpointTooNew
from sweepq.errors import SpecError
from sweepq.evidence import Evidence, Report, Witness, as_int, as_text
from sweepq.host import logkeeper, signals
from sweepq.host.memory import OomCounters, judge_sigkill
from sweepq.host.procs import pidfd
from sweepq.host.tails import tail_file
from sweepq.layout import CellPaths
from sweepq.outcome import EXIT_PREEMPTED, FAILURES, decide
from sweepq.program import ranks
from sweepq.program.launch import ENV, note_started, prepare, program_env, shell_join, trusted_checkpoints
from sweepq.queue.records import Outcome
from sweepq.queue.states import Reason
from sweepq.spec.sweep import Settings
from sweepq.wire.attempt_spec import AttemptSpec
from sweepq.wire.channel import Channel

#: Keys of the outcome file that sweepq reads (others are kept out of the receipt).
OUTCOME_KEYS = (
    "reason",
    "metrics",
    "note",
    "error_tail",
    "nan_step",
    "end_step",
    "total_steps",
    "start_step",
    "start_checkpoint_sha",
    "epoch",
    "best",
    "best_step",
)
POLL_S = 0.05


def grace_seconds() -> float:
    """How long a program may take to stop after SIGTERM before the attempt kills it.

    A little less than the worker's SWEEPQ_GRACE_SECONDS, so that the attempt
    (which can still write a receipt) acts before the worker kills the attempt.
    """
    worker_grace = float(os.environ.get("SWEEPQ_GRACE_SECONDS", "60"))
    return max(0.0, worker_grace - min(2.0, worker_grace / 4))


def run_program(spec: AttemptSpec, settings: Settings, channel: Channel) -> tuple[Outcome, ProgramRun | None]:
    """Run the cell's program to its end; (how the attempt ended, what the program reported)."""
    paths = CellPaths(Path(spec.root), spec.cell)
    if settings.train:  # a train: cell of several processes: each rank calls train(cfg, run) (ranks.py)
        settings = ranks.train_settings(settings)
    try:
        launch = prepare(spec, settings, paths)
    except SpecError as e:
        return _not_started("the command could not be rendered", str(e)), None
    except CheckpointTooNew as e:
        return _not_started("a checkpoint of this cell is from a newer sweepq", str(e)), None
    if signals.requested():
        return _never_started(launch.env.get(ENV["resume"], "")), None
    print(f"sweepq: cell {spec.cell} attempt {spec.attempt}: {shell_join(launch.argv)}", flush=True)
    sys.stderr.flush()
    before = OomCounters.read()
    world = settings.processes_of(spec.cell)
    try:
        if world > 1:  # `processes: N`: N ranks with torchrun's environment (ranks.py)
            procs = ranks.start(launch, world, f"sweepq-{spec.cell}-{spec.attempt}", store=bool(settings.train))
        else:
            procs = [
                subprocess.Popen(
                    launch.popen_argv(), cwd=launch.cwd, env=launch.env, pass_fds=launch.fds, stdin=subprocess.DEVNULL
                )
            ]
    except OSError as e:
        argv0 = launch.argv[0]
        return _not_started(f"could not start {argv0!r}", f"{argv0}: {e}"), None
    note_started(spec, settings, paths)  # a later attempt of the cell resumes its work (resume_args:)
    ended: ranks.Ended | None = None
    if world > 1:
        ended = ranks.supervise(procs, grace_seconds())
        status, peak, forwarded, killed = (
            ended.status,
            ended.peak_memory_bytes,
            ended.forwarded,
            ended.killed_after_grace,
        )
    else:
        status, rusage, forwarded, killed = _supervise(procs[0])
        peak = int(rusage.ru_maxrss) * 1024
    bad: str | None = None
    try:
        report = read_outcome(paths.outcome(spec.attempt))
    except BadOutcomeFile as e:
        report, bad = None, str(e)
    outcome = classify_exit(
        os.waitstatus_to_exitcode(status),
        report,
        bad_outcome_file=bad,
        flooded=logkeeper.flood_words(),
        stopped=forwarded,
        killed_by_us=killed,
        oom_evidence=(before, peak),
        reported_only=settings.done_when == "reported",
    )
    outcome.peak_memory_bytes = peak
    if ended is not None:
        outcome.ranks = [end.to_json() for end in ended.ranks]
        note = ended.note()
        if note is not None:
            outcome.note = f"{outcome.note}; {note}" if outcome.note else note
    logkeeper.sync()  # all the program printed is in its logs before their tail is read
    if outcome.reason in FAILURES | {Reason.LOST, Reason.LOG_FLOOD} and not outcome.error_tail:
        outcome.error_tail = tail_file(paths.stderr(spec.attempt))
    return outcome, (
        ProgramRun.from_report(paths, report, trusted_checkpoints(spec, paths)) if report is not None else None
    )


def _supervise(proc: subprocess.Popen[bytes]) -> tuple[int, Any, bool, bool]:
    """Wait for the program, forwarding a stop; (wait status, rusage, stop forwarded, killed after grace)."""
    exited = pidfd(proc.pid)  # wakes the wait below when the program exits
    try:
        return _wait_forwarding(proc, exited)
    finally:
        if exited is not None:
            os.close(exited)


def _wait_forwarding(proc: subprocess.Popen[bytes], exited: int | None) -> tuple[int, Any, bool, bool]:
    forwarded_at: float | None = None
    killed = False
    grace = grace_seconds()
    while True:
        pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return status, rusage, forwarded_at is not None, killed
        if (signals.requested() or logkeeper.flooded()) and forwarded_at is None:
            _signal(proc.pid, signal.SIGTERM)
            forwarded_at = time.monotonic()
        elif forwarded_at is not None and not killed and time.monotonic() - forwarded_at > grace:
            _signal(proc.pid, signal.SIGKILL)
            killed = True
        if exited is None:
            time.sleep(POLL_S)
        else:
            select.select([exited], [], [], POLL_S)


def _never_started(resume: str) -> Outcome:
    """Stopped before the program started: it trained nothing, from where it would have resumed.

    Recorded as starting and ending at that checkpoint's step (0 when none), so
    that the work lost by the attempt before it is counted up to the step the
    cell really resumes from, not to 0.
    """
    o = _judged(Evidence(Witness.PROGRAM, stop_requested=True, stop_signal=signals.first_signal()))
    found = layout.STEP_DIR.match(Path(resume).name) if resume else None
    o.start_step = o.end_step = int(found.group(1)) if found else 0
    return o


def _not_started(what: str, detail: str) -> Outcome:
    return _judged(Evidence(Witness.PROGRAM, start_failure=(what, detail)))


def _judged(e: Evidence) -> Outcome:
    o = decide(e)
    assert o is not None  # every program evidence has a verdict
    return o


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def classify_exit(
    code: int,
    report: dict[str, Any] | None,
    *,
    stopped: bool,
    killed_by_us: bool = False,
    oom_evidence: tuple[OomCounters, int | None] | None = None,
    reported_only: bool = False,
    bad_outcome_file: str | None = None,
    flooded: str | None = None,
) -> Outcome:
    """How an attempt ended, from the program's exit status and its outcome file (if any).

    code: os.waitstatus_to_exitcode (negative for a signal); stopped: sweepq
    forwarded a stop signal; killed_by_us: the program outlived the grace period;
    reported_only: `done_when: reported`. The rules are sweepq.outcome's PROGRAM_RULES.
    """
    evidence = Evidence(
        Witness.PROGRAM,
        exit_code=code,
        report=Report.parse(report) if report is not None else None,
        stop_requested=signals.requested(),
        stop_signal=signals.first_signal(),
        stop_forwarded=stopped,
        killed_after_grace=killed_by_us,
        grace_seconds=grace_seconds(),
        reported_only=reported_only,
        bad_outcome_file=bad_outcome_file,
        flooded=flooded,
    )
    if evidence.signal == signal.SIGKILL and not killed_by_us and oom_evidence is not None:
        before, peak = oom_evidence
        evidence = replace(evidence, oom=judge_sigkill(before, OomCounters.read(), peak))
    return _judged(evidence)


#: The most of an outcome file that is read: a few keys of JSON (a bigger one is not an outcome file).
OUTCOME_MAX_BYTES = 16 << 20


class BadOutcomeFile(Exception):
    """Something other than a regular file at $SWEEPQ_OUTCOME_FILE: a FIFO, a link, a folder, a device."""


def read_outcome(path: Path) -> dict[str, Any] | None:
    """The outcome file, or None when the program wrote none (or an unreadable one).

    Raises BadOutcomeFile for what is there but is no regular file. It is opened without
    blocking and without following a link (O_NONBLOCK | O_NOFOLLOW), then checked with
    fstat: a FIFO left there would otherwise block this supervisor for ever (no writer
    will come), and a link could make it read any file of the machine.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:  # O_NOFOLLOW met a link
            raise BadOutcomeFile(_not_a_file(path, "a symbolic link")) from e
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadOutcomeFile(_not_a_file(path, _kind(st.st_mode)))
        with os.fdopen(fd, "rb", closefd=False) as f:
            raw = f.read(OUTCOME_MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > OUTCOME_MAX_BYTES:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a folder"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"


def _not_a_file(path: Path, what: str) -> str:
    return (
        f"the outcome file {path} ($SWEEPQ_OUTCOME_FILE) is {what}, not a regular file: sweepq ignored it. "
        "A program that reports its outcome writes a JSON file there (or uses Run.from_env()); "
        "leave nothing else at that path"
    )


@dataclass
class ProgramRun:
    """What the attempt runner reads from a Run (steps, best, newest checkpoint), for a program.

    Filled from the outcome file, so a receipt and DONE.json carry the same
    facts for a program using `Run.from_env()` as for in-process training.
    """

    paths: CellPaths
    last_step: int | None
    start_step: int | None
    start_sha: str | None
    epoch: float | None
    best: float | None
    best_step: int | None
    checkpoints: storage.CheckpointStorage | None = None  # the cell's, as the attempt trusts them (Witnessed)

    @classmethod
    def from_report(cls, paths: CellPaths, r: dict[str, Any], checkpoints: storage.CheckpointStorage) -> ProgramRun:
        newest = cls._newest(checkpoints)
        end = as_int(r.get("end_step"))
        return cls(
            paths=paths,
            last_step=end if end is not None else (newest[0] if newest else None),
            start_step=as_int(r.get("start_step")),
            start_sha=as_text(r.get("start_checkpoint_sha")),
            epoch=r.get("epoch") if isinstance(r.get("epoch"), (int, float)) else None,
            best=r.get("best") if isinstance(r.get("best"), (int, float)) else None,
            best_step=as_int(r.get("best_step")),
            checkpoints=checkpoints,
        )

    @staticmethod
    def _newest(checkpoints: storage.CheckpointStorage | None) -> tuple[int, dict[str, Any]] | None:
        found = storage.committed_manifests(checkpoints) if checkpoints is not None else {}
        return (max(found), found[max(found)]) if found else None

    def newest_committed(self) -> tuple[int, dict[str, Any]] | None:
        return self._newest(self.checkpoints)


def exit_like(outcome: Outcome) -> int:
    """End the attempt process the way its program ended (its exit code, or its signal).

    The worker records the attempt process's own exit status in the receipt, so
    this keeps the program's there. Called last, when every file is durable.
    """
    sig = outcome.exit_signal
    if sig:
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # SIGSEGV and friends: no core file
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        except (OSError, ValueError):
            pass
        os.kill(os.getpid(), sig)
        time.sleep(1.0)  # not reached for a fatal signal
        return 128 + sig
    if outcome.exit_code is not None:
        return outcome.exit_code & 0xFF
    return EXIT_PREEMPTED if outcome.reason == Reason.PREEMPTED else 0 if outcome.reason == Reason.COMPLETED else 1


__all__ = [
    "ENV",
    "EXIT_PREEMPTED",
    "OUTCOME_KEYS",
    "ProgramRun",
    "classify_exit",
    "exit_like",
    "program_env",
    "run_program",
    "shell_join",
]
