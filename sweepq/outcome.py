"""How an attempt ended: every rule that turns evidence into a termination reason.

Five witnesses see an attempt end (evidence.Witness). `decide` takes the
first rule of RULES that serves the evidence's witness and applies, then every
amendment of AMENDMENTS that does. The rules neither read files nor clocks nor
signals, so the whole table is checked in-process (tests/unit/test_outcome.py).

It sits beside the packages rather than in sweepq.worker or sweepq.attempt
because the reaper (sweepq.queue) closes the attempts of dead processes by the
same rules, and the queue imports none of the processes' packages.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sweepq.evidence import STOP_SIGNALS, Evidence, Intent, Kind, Report, Witness, signame
from sweepq.queue.records import Outcome
from sweepq.queue.states import Reason

#: Exit code of a process that stopped early and wants to be run again (EX_TEMPFAIL).
EXIT_PREEMPTED = 75
#: The training code's own failures: what a program may report, besides completed and preempted.
FAILURES = frozenset({Reason.ERROR, Reason.DATA_ERROR, Reason.OOM, Reason.NAN, Reason.DISK_FULL})
REPORTABLE = FAILURES | {Reason.COMPLETED, Reason.PREEMPTED}


@dataclass(frozen=True)
class Rule:
    """For `witnesses`: when `applies`, the attempt ended as `then` says."""

    name: str
    witnesses: frozenset[Witness]
    applies: Callable[[Evidence], bool]
    then: Callable[[Evidence], Outcome | None]


@dataclass(frozen=True)
class Amendment:
    """After the rule: what a witness knows that the author of its evidence did not."""

    name: str
    witnesses: frozenset[Witness]
    applies: Callable[[Evidence, Outcome], bool]
    then: Callable[[Evidence, Outcome], None]


def decide(e: Evidence) -> Outcome | None:
    """How the attempt ended, as `e.witness` tells it.

    None only for a program's Run that neither finished nor saw a stop or a
    non-finite loss: the program's exit status decides (Witness.PROGRAM).
    """
    o = rule_for(e).then(e)
    if o is not None:
        for a in AMENDMENTS:
            if e.witness in a.witnesses and a.applies(e, o):
                a.then(e, o)
    return o


def rule_for(e: Evidence) -> Rule:
    for rule in RULES:
        if e.witness in rule.witnesses and rule.applies(e):
            return rule
    raise LookupError(f"no rule of sweepq.outcome applies to {e}")


def account_of(d: Mapping[str, Any] | None) -> Outcome | None:
    """A receipt as an Outcome; None when it is none (not a mapping, no reason)."""
    if not isinstance(d, Mapping) or not isinstance(d.get("reason"), str):
        return None
    return Outcome.from_json(dict(d))


def _only(*witnesses: Witness) -> frozenset[Witness]:
    return frozenset(witnesses)


# -- training code: how train(cfg, run), or a program's own Run, ended ------------------------------

_CODE = _only(Witness.TRAINING, Witness.PROGRAM_RUN)
# Their reason even while stopping (a full disk: the emergency checkpoint was not written).
_UNSTOPPABLE = (Kind.NON_FINITE_LOSS, Kind.DATA_ERROR, Kind.MEMORY_ERROR, Kind.DISK_FULL)


def _raised(e: Evidence, *kinds: Kind) -> bool:
    return e.raised is not None and (not kinds or e.raised.kind in kinds)


def _tail(e: Evidence) -> str | None:
    return e.raised.tail if e.raised is not None else None


def _raised_while_stopping(e: Evidence) -> Outcome:
    if e.witness is Witness.TRAINING:
        note = "stopped by a signal; the training code raised while stopping"
    else:
        note = f"stopped by {e.stop_name}; the program raised while stopping"
    return Outcome(Reason.PREEMPTED, error_tail=_tail(e), note=note)


def _nan(e: Evidence) -> Outcome:
    step = e.raised.step if e.raised is not None and e.raised.kind is Kind.NON_FINITE_LOSS else e.nan_step
    return Outcome(Reason.NAN, error_tail=_tail(e), nan_step=step, note=f"non-finite loss at step {step}")


def _oom_raised(e: Evidence) -> Outcome:
    name = e.raised.name if e.raised is not None else "an exception"
    return Outcome(Reason.OOM, error_tail=_tail(e), note=f"{name} raised in the training process")


def _disk_full(e: Evidence) -> Outcome:
    words = e.raised.disk if e.raised is not None else None
    return Outcome(Reason.DISK_FULL, error_tail=_tail(e), note=words or "disk full")


def _finished_early(e: Evidence) -> Outcome:
    if e.witness is Witness.TRAINING:
        note = f"{e.stop_name} received; emergency checkpoint written by the training code"
    else:
        of = f" of {e.total_steps}" if e.total_steps is not None else ""
        note = f"{e.stop_name} received; run.finish() was called at step {e.step}{of}"
    return Outcome(Reason.PREEMPTED, note=note)


def _while_stopping(e: Evidence) -> bool:
    return _raised(e) and e.stop_requested and not _raised(e, *_UNSTOPPABLE)


def _raised_nan(e: Evidence) -> bool:
    return _raised(e, Kind.NON_FINITE_LOSS) or (_raised(e) and e.nan_step is not None)


_TRAIN, _RUN = _only(Witness.TRAINING), _only(Witness.PROGRAM_RUN)

# fmt: off
TRAINING_RULES = (
    Rule("raised while stopping (not NaN, DataError, MemoryError)", _CODE, _while_stopping, _raised_while_stopping),
    Rule("raised NonFiniteLoss, or after a non-finite loss", _CODE, _raised_nan, _nan),
    Rule("raised on a full or read-only disk (ENOSPC, EDQUOT, EROFS)", _CODE,
         lambda e: _raised(e, Kind.DISK_FULL), _disk_full),
    Rule("raised DataError", _CODE,
         lambda e: _raised(e, Kind.DATA_ERROR), lambda e: Outcome(Reason.DATA_ERROR, error_tail=_tail(e))),
    Rule("raised MemoryError or CUDA OOM", _CODE, lambda e: _raised(e, Kind.MEMORY_ERROR, Kind.CUDA_OOM), _oom_raised),
    Rule("raised anything else", _CODE, _raised, lambda e: Outcome(Reason.ERROR, error_tail=_tail(e))),
    Rule("returned after a non-finite loss it swallowed", _TRAIN,
         lambda e: e.finished and e.nan_step is not None, _nan),
    Rule("finished after a stop, short of the declared end", _CODE,
         lambda e: e.finished and e.stop_requested and not e.reached_end, _finished_early),
    # train() that returns None after a stop returned from its stop branch, not its end: its results
    # (DONE.json's metrics) would be lost; the next attempt resumes at the end and returns them.
    Rule("returned nothing after a stop, at its declared end", _TRAIN,
         lambda e: e.finished and e.stop_requested and e.metrics is None, _finished_early),
    Rule("finished", _CODE, lambda e: e.finished,
         lambda e: Outcome(Reason.COMPLETED, metrics=None if e.metrics is None else dict(e.metrics))),
    Rule("exits without run.finish() after a non-finite loss", _RUN, lambda e: e.nan_step is not None, _nan),
    Rule("exits without run.finish() after a stop", _RUN, lambda e: e.stop_requested,
         lambda e: Outcome(Reason.PREEMPTED, note=f"{e.stop_name} received; the program stopped at step {e.step}")),
    Rule("exits without run.finish(): the exit status decides", _RUN, lambda e: True, lambda e: None),
)
# fmt: on


# -- a program, as its attempt process sees it end: exit status and outcome file ---------------------

_PROGRAM = _only(Witness.PROGRAM)


def _reported(e: Evidence) -> Reason | None:
    """The reason the outcome file names, when a program may name it."""
    try:
        reason = Reason(e.report.reason) if e.report is not None and e.report.reason is not None else None
    except ValueError:
        return None
    return reason if reason in REPORTABLE else None


def _said(e: Evidence) -> Report:
    return e.report or Report()


def _stop_exit(e: Evidence) -> bool:
    code = e.exit_code or 0
    by_stop_signal = e.signal in STOP_SIGNALS or (code > 128 and code - 128 in STOP_SIGNALS)
    return code == EXIT_PREEMPTED or by_stop_signal or e.stop_forwarded or _reported(e) is Reason.PREEMPTED


def _not_started(e: Evidence) -> Outcome:
    what, detail = e.start_failure or ("the program did not start", "")
    return Outcome(Reason.ERROR, note=what, error_tail=detail)


def _killed_after_grace(e: Evidence) -> Outcome:
    note = f"the program did not stop within {e.grace_seconds:.0f} s after SIGTERM and was killed"
    return Outcome(Reason.PREEMPTED, note=note + " (no emergency checkpoint)")


def _program_killed(e: Evidence) -> Outcome:
    is_oom, evidence = e.oom or (False, "")
    note = "the program was killed by SIGKILL" + (f": {evidence}" if evidence else "")
    return Outcome(Reason.OOM if is_oom else Reason.LOST, note=note)


def _reported_failure(e: Evidence) -> Outcome:
    r = _said(e)
    note = r.note or f"reported by the program, which {e.status}"
    return Outcome(_reported(e) or Reason.ERROR, note=note, error_tail=r.error_tail, nan_step=r.nan_step)


def _completed_on(evidence: str) -> Callable[[Evidence], Outcome]:
    """A completion noting on what evidence it was decided (then the program's own note)."""

    def then(e: Evidence) -> Outcome:
        notes = (f"completed: {evidence.format(e=_said(e))}", _said(e).note)
        return Outcome(Reason.COMPLETED, metrics=_said(e).metrics, note="; ".join(n for n in notes if n))

    return then


def _exited_0_stopped(e: Evidence) -> Outcome:
    how = f"after {e.forwarded}" if e.stop_forwarded else f"while sweepq was stopping it ({e.stop_name})"
    note = f"the program exited 0 {how} without reporting completion: not done"
    return Outcome(Reason.PREEMPTED, note=_said(e).note or note)


_NOT_REPORTED = "not done: the program exited 0 without reporting completion (done_when: reported counts only "
_NOT_REPORTED += 'run.finish() or {"reason": "completed"} in $SWEEPQ_OUTCOME_FILE)'


def _run_short_of_its_end(e: Evidence) -> Outcome:
    r = _said(e)
    of = f" of {r.total_steps}" if r.total_steps is not None else " (its Run declared no total: run.set_total)"
    note = (
        f"not done: the program exited 0 at step {r.end_step}{of} without calling run.finish() and without a stop"
        " signal sweepq saw (a signal handler of its own, or an early exit); call run.finish() at the end"
    )
    return Outcome(Reason.ERROR, note=note)


def _stopped(e: Evidence) -> Outcome:
    how = f"the program {e.status}" + (f" after {e.forwarded}" if e.stop_forwarded else "")
    return Outcome(Reason.PREEMPTED, note=_said(e).note or how)


def _failed(e: Evidence) -> Outcome:
    after = " after calling run.finish()" if _reported(e) is Reason.COMPLETED else ""
    cause = _SIGNAL_CAUSES.get(e.signal, "") if e.signal is not None else ""
    return Outcome(Reason.ERROR, note=f"the program {e.status}{after}{cause}", error_tail=_said(e).error_tail)


# The likely cause of a death by a signal whose name alone tells a user nothing.
_SIGNAL_CAUSES: dict[int, str] = {
    int(signal.SIGBUS): (
        " (SIGBUS: most often a memory-mapped file it was reading, a checkpoint, a .safetensors file or a "
        "dataset, was truncated or replaced under it: is another cell or process writing the same files, "
        "e.g. one output_dir shared by every cell?)"
    ),
}


def _sigkill(e: Evidence) -> bool:
    return e.signal == signal.SIGKILL


def _bad_outcome_file(e: Evidence) -> bool:
    return e.bad_outcome_file is not None and not e.stop_requested and not _stop_exit(e)


# fmt: off
PROGRAM_RULES = (
    Rule("could not be started", _PROGRAM, lambda e: e.start_failure is not None, _not_started),
    Rule("a stop arrived before it started", _PROGRAM,
         lambda e: e.exit_code is None and e.stop_requested,
         lambda e: Outcome(Reason.PREEMPTED, note=f"{e.stop_name} arrived before the program started")),
    Rule("SIGKILLed by its attempt after the grace period", _PROGRAM,
         lambda e: _sigkill(e) and e.killed_after_grace, _killed_after_grace),
    Rule("SIGKILLed from outside: oom on kernel evidence, else lost", _PROGRAM, _sigkill, _program_killed),
    Rule("left something other than a regular file at its outcome file (a FIFO, a link, a folder)", _PROGRAM,
         _bad_outcome_file, lambda e: Outcome(Reason.ERROR, note=e.bad_outcome_file)),
    Rule("its outcome file names a failure", _PROGRAM, lambda e: _reported(e) in FAILURES, _reported_failure),
    Rule("exit 0, its file says completed (run.finish())", _PROGRAM,
         lambda e: e.exit_code == 0 and _reported(e) is Reason.COMPLETED,
         _completed_on("the program reported completion")),
    Rule("exit 0 after a stop signal reached the attempt, or its file says preempted", _PROGRAM,
         lambda e: e.exit_code == 0 and (e.stop_requested or e.stop_forwarded or _reported(e) is Reason.PREEMPTED),
         _exited_0_stopped),
    Rule("exit 0 without a reported completion, under done_when: reported", _PROGRAM,
         lambda e: e.exit_code == 0 and e.reported_only, lambda e: Outcome(Reason.ERROR, note=_NOT_REPORTED)),
    Rule("exit 0, its Run neither finished nor reached its declared end", _PROGRAM,
         lambda e: e.exit_code == 0 and _said(e).by_run and not _said(e).reached_end, _run_short_of_its_end),
    Rule("exit 0, its Run at its declared end", _PROGRAM,
         lambda e: e.exit_code == 0 and _said(e).by_run,
         _completed_on("exit status 0 at the declared last step {e.end_step} (no run.finish(): no final metrics)")),
    Rule("exit 0, no Run: a program that does not report to sweepq", _PROGRAM,
         lambda e: e.exit_code == 0 and e.report is None,
         _completed_on("exit status 0 (the program does not report to sweepq)")),
    Rule("exit 0, its own outcome file, which names no reason", _PROGRAM,
         lambda e: e.exit_code == 0, _completed_on("exit status 0 (its outcome file does not say completed)")),
    Rule("exit 75, by a stop signal (or 128 + it), a forwarded stop, or its file says preempted", _PROGRAM,
         _stop_exit, _stopped),
    Rule("any other exit code or signal", _PROGRAM, lambda e: e.exit_code is not None, _failed),
)
# fmt: on


# -- the attempt process, as its worker sees it end ---------------------------------------------------

_WORKER = _only(Witness.WORKER)


def _own_account(e: Evidence) -> Outcome:
    o = account_of(e.account)
    assert o is not None
    return o


def _outside_sigkill(e: Evidence) -> Outcome:
    is_oom, evidence = e.oom or (False, "")
    if not is_oom and e.intent is not None:  # most often the platform's own SIGTERM-then-SIGKILL (docker stop)
        return Outcome(Reason.PREEMPTED, note="killed by a SIGKILL from outside sweepq while it was stopping")
    return Outcome(Reason.OOM if is_oom else Reason.LOST, note=evidence or None)


def _sweepq_sigkill(e: Evidence) -> Outcome:
    why = "hard stop (second interrupt)" if e.hard_stop else "did not stop within the grace period"
    return Outcome(Reason.PREEMPTED, note=f"killed by sweepq: {why}")


def _stop_signal_early(e: Evidence) -> Outcome:
    note = f"{signame(e.signal)} arrived before the training process could handle it (no emergency checkpoint)"
    return Outcome(Reason.PREEMPTED, note=note)


def _silent_exit(e: Evidence) -> Outcome:
    return Outcome(Reason.ERROR, note=f"exited with code {e.exit_code} before reporting how training ended")


def _has_account(e: Evidence) -> bool:
    return account_of(e.account) is not None


# fmt: off
WORKER_RULES = (
    Rule("its own account (its last message, else its receipt file)", _WORKER, _has_account, _own_account),
    Rule("SIGKILL the worker sent: a hard stop, or the grace period over", _WORKER,
         lambda e: _sigkill(e) and (e.hard_stop or e.killed_after_grace), _sweepq_sigkill),
    Rule("SIGKILL from outside: oom, else preempted if stopping, else lost", _WORKER, _sigkill, _outside_sigkill),
    Rule("a stop signal before its handlers were installed", _WORKER,
         lambda e: e.signal in STOP_SIGNALS, _stop_signal_early),
    Rule("any other signal", _WORKER,
         lambda e: e.signal is not None, lambda e: Outcome(Reason.ERROR, note=f"killed by {signame(e.signal)}")),
    Rule("exited without an account", _WORKER, lambda e: True, _silent_exit),
)
# fmt: on


# -- the files of an attempt whose processes are all gone -------------------------------------------

_REAPER = _only(Witness.REAPER)


def _from_receipt(e: Evidence) -> Outcome:
    o = _own_account(e)
    o.note = ((o.note + "; ") if o.note else "") + "closed from its receipt file"
    return o


def _from_done(e: Evidence) -> Outcome:
    done = e.done or {}
    return Outcome(
        Reason.COMPLETED,
        end_step=done.get("step"),
        metrics=done.get("metrics"),
        note="closed from DONE.json: its process ended before the database was told",
    )


def _vanished(e: Evidence) -> Outcome:
    note = "the process vanished (no receipt, lock free): kill -9, reboot or power loss"
    return Outcome(Reason.LOST, end_step=e.step, note=note)


# fmt: off
REAPER_RULES = (
    Rule("its receipt file", _REAPER, _has_account, _from_receipt),
    Rule("a DONE.json of this attempt that verifies", _REAPER, lambda e: e.done is not None, _from_done),
    Rule("nothing left behind", _REAPER, lambda e: True, _vanished),
)
# fmt: on

# -- an attempt that printed past its flood limit (host/logkeeper.py stopped it) ------------------


def _flooded(e: Evidence) -> bool:
    """Stopped for its flood of output, unless it finished first (train returned, or exit 0 after run.finish())."""
    completed = e.exit_code == 0 and _reported(e) is Reason.COMPLETED
    return e.flooded is not None and not e.finished and not completed


FLOOD_RULES = (
    Rule(
        "printed past its flood limit (SWEEPQ_LOG_FLOOD) and was stopped",
        _only(Witness.TRAINING, Witness.PROGRAM),
        _flooded,
        lambda e: Outcome(Reason.LOG_FLOOD, note=e.flooded),
    ),
)

RULES: tuple[Rule, ...] = FLOOD_RULES + TRAINING_RULES + PROGRAM_RULES + WORKER_RULES + REAPER_RULES


# -- amendments ----------------------------------------------------------------------------------------


def _impose_intent(e: Evidence, o: Outcome) -> None:
    o.note = f"{e.intent} by sweepq (was: {o.reason}){'; ' + o.note if o.note else ''}"
    o.reason = Reason(str(e.intent))


def _exit_status(e: Evidence, o: Outcome) -> None:
    o.exit_code = e.exit_code if e.exit_code is not None and e.exit_code >= 0 else None
    o.exit_signal = e.signal


AMENDMENTS: tuple[Amendment, ...] = (
    Amendment(
        "a cancel or timeout by the worker wins over anything but completed",
        _WORKER,
        lambda e, o: e.intent in (Intent.CANCEL, Intent.TIMEOUT) and o.reason != Reason.COMPLETED,
        _impose_intent,
    ),
    Amendment(
        "the exit status goes in the receipt", _only(Witness.PROGRAM, Witness.WORKER), lambda e, o: True, _exit_status
    ),
)
