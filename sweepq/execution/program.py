"""Subprocess cells: run the user's own program for a cell (`program:` or a W&B sweep file).

The training process of the attempt (sweepq.execution.attempt) starts the program as its
child and watches it:

* The program gets its cfg from the command's macros (`${args}` and friends,
  see command.py) and from a JSON file, and its cell from the environment (ENV
  below, documented in docs/byo.md).
* It inherits the cell's lock (so the lock lives exactly as long as the
  program), the channel to the worker (so `Run.from_env()` reports progress
  and checkpoints like in-process training), and the attempt's stdout.log and
  stderr.log.
* A stop signal reaching the attempt (preemption, cancel, timeout, the worker's
  death) is forwarded to the program as SIGTERM; a program still running a
  grace period later is killed. The program dies at once (SIGKILL) if the
  attempt process dies, like in-process training would.
* How the attempt ended comes from the program's exit status and, when there
  is one, the outcome file the program wrote (`classify_exit`). `Run.from_env()`
  writes that file itself; any program may write it (OUTCOME_KEYS).

The attempt process then exits the way the program did (`exit_like`), so the
receipt's exit_code / exit_signal are the program's.
"""

from __future__ import annotations

import atexit
import os
import re
import resource
import shlex
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweepq.atomic import atomic_write_bytes, atomic_write_json, read_json
from sweepq.checkpoint import manifest
from sweepq.errors import SpecError
from sweepq.execution import signals
from sweepq.execution.channel import ENV_FD as ENV_CHANNEL_FD
from sweepq.execution.memory import OomCounters, judge_sigkill
from sweepq.layout import CellPaths
from sweepq.queue.lock import ENV_LOCK_FD
from sweepq.queue.records import Outcome
from sweepq.queue.states import Reason
from sweepq.spec.command import args_json, render_command

if TYPE_CHECKING:
    from sweepq.execution.channel import Channel
    from sweepq.execution.run import AttemptSpec, Run
    from sweepq.spec.sweep import Settings

#: The environment a program sees (documented in docs/byo.md; names are a contract).
ENV = {
    "root": "SWEEPQ_ROOT",  # the sweep root
    "cell": "SWEEPQ_CELL",  # the cell id, "2.3"
    "attempt": "SWEEPQ_ATTEMPT",  # the attempt number, 1 for the first
    "previous_reason": "SWEEPQ_PREVIOUS_REASON",  # how the previous attempt ended ("" on the first)
    "cfg_file": "SWEEPQ_CFG_FILE",  # the cell's cfg as JSON
    "cell_dir": "SWEEPQ_CELL_DIR",  # cells/<cell>/
    "output_dir": "SWEEPQ_OUTPUT_DIR",  # cells/<cell>/output/: the program's own files, kept across attempts
    "checkpoint_dir": "SWEEPQ_CHECKPOINT_DIR",  # cells/<cell>/checkpoints/: sweepq's committed checkpoints
    "resume": "SWEEPQ_RESUME_CHECKPOINT",  # the checkpoint Run.restore() would load, "" when none
    "attempt_dir": "SWEEPQ_ATTEMPT_DIR",  # cells/<cell>/attempts/<n>/: stdout.log, stderr.log, receipt.json
    "outcome_file": "SWEEPQ_OUTCOME_FILE",  # where a program may say how it ended (OUTCOME_KEYS)
}
ARGS_FILE = "args.json"  # what ${args_json_file} stands for, in the cell folder (as `sweepq plan` shows)
OUTPUT_DIR = "output"
OUTCOME_FILE = "outcome.json"

#: Exit code of a program that stopped early and wants to be run again (EX_TEMPFAIL, as sweepq's own).
EXIT_PREEMPTED = 75
STOP_SIGNALS = frozenset(int(s) for s in signals.STOP_SIGNALS)  # TERM, INT, USR1, HUP
FAILURES = frozenset({Reason.ERROR, Reason.DATA_ERROR, Reason.OOM, Reason.NAN})
#: Reasons a program may name in its outcome file (`preempted` and `completed` as well as FAILURES).
REPORTABLE = FAILURES | {Reason.COMPLETED, Reason.PREEMPTED}
#: Keys of the outcome file that sweepq reads (others are kept out of the receipt).
OUTCOME_KEYS = (
    "reason",
    "metrics",
    "note",
    "error_tail",
    "nan_step",
    "end_step",
    "start_step",
    "start_checkpoint_sha",
    "epoch",
    "best",
    "best_step",
)
POLL_S = 0.05
TAIL_LINES = 40

# The program is started through this tiny launcher, which asks Linux to kill it
# when the attempt process dies and then execs the command (same pid, same
# environment). A preexec_fn would do the same between fork and exec, which is not
# safe in a process with threads (the attempt's hashing and torch threads).
_EXEC = """
import ctypes, os, signal, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
except (OSError, AttributeError):
    pass
if os.getppid() != int(sys.argv[1]):
    os._exit(137)  # the attempt died before prctl took effect
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as e:
    print(f"sweepq: cannot run {sys.argv[2]!r}: {e}", file=sys.stderr, flush=True)
    os._exit(127)
"""


def grace_seconds() -> float:
    """How long a program may take to stop after SIGTERM before the attempt kills it.

    A little less than the worker's SWEEPQ_GRACE_SECONDS, so that the attempt
    (which can still write a receipt) acts before the worker kills the attempt.
    """
    worker_grace = float(os.environ.get("SWEEPQ_GRACE_SECONDS", "60"))
    return max(0.0, worker_grace - min(2.0, worker_grace / 4))


# -- the attempt side: start, watch, classify ----------------------------------------------------


def resume_checkpoint(spec: AttemptSpec, paths: CellPaths) -> str:
    """The checkpoint `Run.restore()` would load for this attempt, "" when it starts fresh.

    The newest committed checkpoint whose manifest verifies; after a `nan`
    attempt, the newest before the one the bad interval started from (as Run does).
    """
    steps = paths.committed_steps()
    limit = manifest.rollback_limit(steps, spec.nan_step)
    if limit is not None:
        steps = [s for s in steps if s <= limit]
    for step in steps:
        try:
            manifest.verify(paths.checkpoint(step))
        except (manifest.CheckpointCorrupt, OSError, ValueError):
            continue
        return str(paths.checkpoint(step))
    return ""


def program_env(spec: AttemptSpec, paths: CellPaths) -> dict[str, str]:
    """The SWEEPQ_* variables of one attempt (see ENV)."""
    return {
        ENV["root"]: str(spec.root),
        ENV["cell"]: spec.cell,
        ENV["attempt"]: str(spec.attempt),
        ENV["previous_reason"]: spec.previous_reason or "",
        ENV["cfg_file"]: str(paths.cfg),
        ENV["cell_dir"]: str(paths.dir),
        ENV["output_dir"]: str(paths.dir / OUTPUT_DIR),
        ENV["checkpoint_dir"]: str(paths.checkpoints),
        ENV["resume"]: resume_checkpoint(spec, paths),
        ENV["attempt_dir"]: str(paths.attempt_dir(spec.attempt)),
        ENV["outcome_file"]: str(outcome_path(paths, spec.attempt)),
    }


def outcome_path(paths: CellPaths, attempt: int) -> Path:
    return paths.attempt_dir(attempt) / OUTCOME_FILE


def launcher_argv(argv: list[str]) -> list[str]:
    """`argv` behind the launcher that ties the program's life to this process (see _EXEC)."""
    return [sys.executable, "-I", "-S", "-c", _EXEC, str(os.getpid()), *argv]


def run_program(spec: AttemptSpec, settings: Settings, channel: Channel) -> tuple[Outcome, ProgramRun | None]:
    """Run the cell's program to its end; (how the attempt ended, what the program reported)."""
    from sweepq.queue.records import ENV_ATTEMPT_FILE

    paths = CellPaths(Path(spec.root), spec.cell)
    adir = paths.attempt_dir(spec.attempt)
    adir.mkdir(parents=True, exist_ok=True)
    (paths.dir / OUTPUT_DIR).mkdir(exist_ok=True)
    atomic_write_json(paths.cfg, spec.cfg)
    args_file = paths.dir / ARGS_FILE
    atomic_write_bytes(args_file, args_json(spec.cfg).encode())
    outcome_path(paths, spec.attempt).unlink(missing_ok=True)
    try:
        argv = render_command(settings, spec.cfg, args_json_file=str(args_file), environ=os.environ)
    except SpecError as e:
        return Outcome(Reason.ERROR, error_tail=str(e), note="the command could not be rendered"), None
    env = dict(os.environ)
    env.update(program_env(spec, paths))
    # `python` in a command is the interpreter sweepq runs under (as in an activated venv).
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    attempt_file = adir / "attempt.json"
    spec.save(attempt_file)  # now with fingerprints, for Run.from_env()
    env[ENV_ATTEMPT_FILE] = str(attempt_file)
    # The lock (held while the program lives) and the channel (for Run.from_env()).
    fds = tuple(int(env[k]) for k in (ENV_LOCK_FD, ENV_CHANNEL_FD) if env.get(k))
    if signals.requested():
        return Outcome(Reason.PREEMPTED, note=f"{signals.describe()} arrived before the program started"), None
    print(f"sweepq: cell {spec.cell} attempt {spec.attempt}: {shell_join(argv)}", flush=True)
    sys.stderr.flush()
    before = OomCounters.read()
    try:
        proc = subprocess.Popen(
            launcher_argv(argv), cwd=settings.spec_dir, env=env, pass_fds=fds, stdin=subprocess.DEVNULL
        )
    except OSError as e:
        return Outcome(Reason.ERROR, error_tail=f"{argv[0]}: {e}", note=f"could not start {argv[0]!r}"), None
    forwarded_at: float | None = None
    killed = False
    grace = grace_seconds()
    while True:
        pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if signals.requested() and forwarded_at is None:
            _signal(proc.pid, signal.SIGTERM)
            forwarded_at = time.monotonic()
        elif forwarded_at is not None and not killed and time.monotonic() - forwarded_at > grace:
            _signal(proc.pid, signal.SIGKILL)
            killed = True
        time.sleep(POLL_S)
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code
    report = read_outcome(outcome_path(paths, spec.attempt))
    outcome = classify_exit(
        code,
        report,
        stopped=forwarded_at is not None,
        killed_by_us=killed,
        oom_evidence=(before, int(rusage.ru_maxrss) * 1024),
    )
    outcome.peak_memory_bytes = int(rusage.ru_maxrss) * 1024
    if outcome.reason in FAILURES | {Reason.LOST} and not outcome.error_tail:
        outcome.error_tail = tail_file(paths.stderr(spec.attempt))
    return outcome, (ProgramRun.from_report(paths, report) if report is not None else None)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


_SHELL_SAFE = re.compile(r"[\w@%+=:,./-]+", re.ASCII)


def shell_join(argv: list[str]) -> str:
    """A command line to copy into a shell, quoted for people: double quotes around a token
    with single quotes (W&B prints nested values as Python dicts), shlex elsewhere."""
    out = []
    for token in argv:
        if _SHELL_SAFE.fullmatch(token):
            out.append(token)
        elif "'" in token and not any(c in token for c in '"$`\\!'):
            out.append(f'"{token}"')
        else:
            out.append(shlex.quote(token))
    return " ".join(out)


def read_outcome(path: Path) -> dict[str, Any] | None:
    """The outcome file, or None when the program wrote none (or an unreadable one)."""
    try:
        data = read_json(path)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _reported_reason(report: dict[str, Any] | None) -> Reason | None:
    if report is None or report.get("reason") is None:
        return None
    try:
        reason = Reason(str(report["reason"]))
    except ValueError:
        return None
    return reason if reason in REPORTABLE else None


def classify_exit(
    code: int,
    report: dict[str, Any] | None,
    *,
    stopped: bool,
    killed_by_us: bool = False,
    oom_evidence: tuple[OomCounters, int | None] | None = None,
) -> Outcome:
    """How an attempt ended, from the program's exit status and its outcome file (if any).

    code: os.waitstatus_to_exitcode (negative for a signal); stopped: sweepq
    forwarded a stop signal; killed_by_us: the program outlived the grace period.
    In order:
      killed by SIGKILL                 -> preempted if sweepq sent it, else oom (kernel
                                           evidence) or lost
      outcome file names a failure      -> that reason (error, data_error, oom, nan)
      exit 0, file says completed       -> completed (finish() was called)
      exit 0 after a stop signal        -> preempted (finish() was not called)
      exit 0                            -> completed
      exit 75, a stop signal (or 128+it), after a stop signal, or file says preempted
                                        -> preempted
      any other signal or exit code     -> error (the stderr tail goes in the receipt)
    """
    sig = -code if code < 0 else None
    reported = _reported_reason(report)
    r = report or {}
    status = f"killed by {_signame(sig)}" if sig else f"exited with code {code}"
    stop_sig = sig in STOP_SIGNALS or (code > 128 and code - 128 in STOP_SIGNALS)
    o: Outcome
    if sig == signal.SIGKILL:
        if killed_by_us:
            o = Outcome(
                Reason.PREEMPTED,
                note=f"the program did not stop within {grace_seconds():.0f} s "
                "after SIGTERM and was killed (no emergency checkpoint)",
            )
        else:
            before, peak = oom_evidence or (None, None)
            is_oom, evidence = judge_sigkill(before, OomCounters.read(), peak) if before else (False, "")
            o = Outcome(
                Reason.OOM if is_oom else Reason.LOST,
                note="the program was killed by SIGKILL" + (f": {evidence}" if evidence else ""),
            )
    elif reported in FAILURES:
        o = Outcome(
            reported,
            note=r.get("note") or f"reported by the program, which {status}",
            error_tail=_str(r.get("error_tail")),
            nan_step=_int(r.get("nan_step")),
        )
    elif code == 0 and reported is Reason.COMPLETED:
        o = Outcome(Reason.COMPLETED, metrics=_metrics(r.get("metrics")), note=r.get("note"))
    elif code == 0 and (stopped or reported is Reason.PREEMPTED):
        o = Outcome(
            Reason.PREEMPTED,
            note=r.get("note") or (f"the program exited 0 after {_stop_name()} without calling run.finish()"),
        )
    elif code == 0:
        note = r.get("note")
        if report is not None and note is None and r.get("written_by") == "sweepq.Run":
            note = "the program exited 0 without calling run.finish(): no final metrics"
        o = Outcome(Reason.COMPLETED, metrics=_metrics(r.get("metrics")), note=note)
    elif code == EXIT_PREEMPTED or stop_sig or stopped or reported is Reason.PREEMPTED:
        how = f"the program {status}" + (f" after {_stop_name()}" if stopped else "")
        o = Outcome(Reason.PREEMPTED, note=r.get("note") or how)
    else:
        note = f"the program {status}"
        if reported is Reason.COMPLETED:
            note += " after calling run.finish()"
        o = Outcome(Reason.ERROR, note=note, error_tail=_str(r.get("error_tail")))
    o.exit_code = code if code >= 0 else None
    o.exit_signal = sig
    return o


def _stop_name() -> str:
    return f"{signals.describe()} (forwarded as SIGTERM)" if signals.first_signal() else "SIGTERM"


def _signame(sig: int | None) -> str:
    try:
        return signal.Signals(sig).name  # type: ignore[arg-type]
    except ValueError:
        return f"signal {sig}"


def _str(v: Any) -> str | None:
    return None if v is None else str(v)


def _int(v: Any) -> int | None:
    try:
        return None if v is None else int(v)
    except (TypeError, ValueError):
        return None


def _metrics(v: Any) -> dict[str, Any] | None:
    if v is None:
        return None
    return {str(k): x for k, x in v.items()} if isinstance(v, dict) else {"result": str(v)}


def tail_file(path: Path, lines: int = TAIL_LINES) -> str | None:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64_000))
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    text = "\n".join(text.rstrip().splitlines()[-lines:])
    return text or None


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

    @classmethod
    def from_report(cls, paths: CellPaths, r: dict[str, Any]) -> ProgramRun:
        newest = cls._newest(paths)
        end = _int(r.get("end_step"))
        return cls(
            paths=paths,
            last_step=end if end is not None else (newest[0] if newest else None),
            start_step=_int(r.get("start_step")),
            start_sha=_str(r.get("start_checkpoint_sha")),
            epoch=r.get("epoch") if isinstance(r.get("epoch"), (int, float)) else None,
            best=r.get("best") if isinstance(r.get("best"), (int, float)) else None,
            best_step=_int(r.get("best_step")),
        )

    @staticmethod
    def _newest(paths: CellPaths) -> tuple[int, dict[str, Any]] | None:
        found = manifest.committed_manifests(paths)
        return (max(found), found[max(found)]) if found else None

    def newest_committed(self) -> tuple[int, dict[str, Any]] | None:
        return self._newest(self.paths)


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


# -- the program side: what Run.from_env() adds --------------------------------------------------


class Reporter:
    """Writes the outcome file of a program that uses `Run.from_env()`.

    Installed by `Run.from_env()`: an excepthook classifies an uncaught
    exception as in-process training would (DataError -> data_error,
    MemoryError / CUDA OOM -> oom, a non-finite loss -> nan, else error, and
    anything raised while stopping after a signal -> preempted), and an atexit
    hook waits for the checkpoint in flight (the writer thread is a daemon) and
    writes what the Run knows: start step, last step, best, final metrics.
    """

    def __init__(self, run: Run, path: Path) -> None:
        self.run = run
        self.path = path
        self.reason: str | None = None
        self.extra: dict[str, Any] = {}
        self.finished = False
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
        run = self.run
        reached_end = run.total_steps is not None and run.last_step >= run.total_steps
        self.finished = True
        if signals.requested() and not reached_end:
            self.reason = Reason.PREEMPTED
            self.extra = {
                "note": f"{signals.describe()} received; run.finish() was called at step {run.last_step}"
                + (f" of {run.total_steps}" if run.total_steps is not None else "")
            }
        else:
            self.reason = Reason.COMPLETED
            self.extra = {"metrics": metrics}
        self.write()

    def _excepthook(self, etype: type[BaseException], e: BaseException, tb: Any) -> None:
        if os.getpid() != self.pid:
            return self._previous_hook(etype, e, tb)
        try:
            from sweepq.execution.attempt import classify_exception, tail
            from sweepq.execution.run import DataError, NonFiniteLoss

            stopping = signals.requested() and not isinstance(e, (NonFiniteLoss, DataError, MemoryError))
            if stopping:
                o = Outcome(
                    Reason.PREEMPTED,
                    error_tail=tail("".join(traceback.format_exception(e))),
                    note=f"stopped by {signals.describe()}; the program raised while stopping",
                )
            else:
                o = classify_exception(e, self.run)
            self.reason = o.reason
            self.extra = {"note": o.note, "error_tail": o.error_tail, "nan_step": o.nan_step}
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
        if self.reason is None:
            if self.run.nan_step is not None:  # the program swallowed NonFiniteLoss
                self.reason = Reason.NAN
                self.extra = {"nan_step": self.run.nan_step, "note": f"non-finite loss at step {self.run.nan_step}"}
            elif signals.requested():
                self.reason = Reason.PREEMPTED
                note = f"{signals.describe()} received; the program stopped at step {self.run.last_step}"
                self.extra = {"note": note}
        self.write()

    def write(self) -> None:
        if os.getpid() != self.pid:
            return
        run = self.run
        data: dict[str, Any] = {
            "written_by": "sweepq.Run",
            "reason": None if self.reason is None else str(self.reason),
            "start_step": run.start_step,
            "start_checkpoint_sha": run.start_sha,
            "end_step": run.last_step,
            "epoch": run.epoch,
            "best": run.best,
            "best_step": run.best_step,
            **self.extra,
        }
        try:
            atomic_write_json(self.path, data)
        except OSError:
            traceback.print_exc()


def attach(run: Run) -> Reporter | None:
    """Called by `Run.from_env()`: report this program's outcome to its attempt."""
    path = os.environ.get(ENV["outcome_file"])
    if not path:
        return None
    reporter = Reporter(run, Path(path))
    reporter.install()
    return reporter


__all__ = [
    "ENV",
    "EXIT_PREEMPTED",
    "OUTCOME_KEYS",
    "ProgramRun",
    "Reporter",
    "attach",
    "classify_exit",
    "exit_like",
    "program_env",
    "run_program",
]
