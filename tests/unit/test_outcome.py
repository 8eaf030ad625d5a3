"""The termination rules (sweepq.outcome) as a table: every rule has a row, every row can fail on its own."""

from __future__ import annotations

import signal
import sys
import types
from dataclasses import dataclass, field
from typing import Any

import pytest

from sweepq.evidence import Evidence, Intent, Kind, Raised, Report, Witness
from sweepq.outcome import AMENDMENTS, RULES, decide, rule_for
from sweepq.run.errors import DataError, NonFiniteLoss, raised

T, PR, P, W, X = Witness.TRAINING, Witness.PROGRAM_RUN, Witness.PROGRAM, Witness.WORKER, Witness.REAPER
TERM, KILL = int(signal.SIGTERM), int(signal.SIGKILL)


def exc(kind: Kind, step: int | None = None) -> Raised:
    return Raised(kind, kind.value, f"Traceback ...\n{kind.value}", step)


FLOOD = "printed 1.0 GiB to stdout.log and stderr.log, past its flood limit"
FIFO = "$SWEEPQ_OUTCOME_FILE (/r/o.json) is a FIFO, not a file"
FULL = Raised(Kind.DISK_FULL, "OSError", "Traceback ...\ndisk_full", disk="disk full on tmpfs (/mnt/x, 0 B free)")


@dataclass(frozen=True)
class Row:
    name: str
    seen: Evidence
    reason: str | None  # None: no verdict
    note: str | None = None  # a part of the note
    fields: dict[str, Any] = field(default_factory=dict)  # other Outcome fields, exactly


def rows() -> list[Row]:
    stopping: dict[str, Any] = {"stop_requested": True, "stop_signal": TERM}
    at_5_of_10: dict[str, Any] = {"step": 5, "total_steps": 10}
    return [
        # -- in-process training
        Row("raise while stopping", Evidence(T, raised=exc(Kind.OTHER), **stopping), "preempted",
            "the training code raised while stopping", {"error_tail": "Traceback ...\nother"}),
        Row("CUDA OOM while stopping", Evidence(T, raised=exc(Kind.CUDA_OOM), **stopping), "preempted"),
        Row("DataError while stopping", Evidence(T, raised=exc(Kind.DATA_ERROR), **stopping), "data_error"),
        Row("MemoryError while stopping", Evidence(T, raised=exc(Kind.MEMORY_ERROR), **stopping), "oom"),
        Row("NonFiniteLoss", Evidence(T, raised=exc(Kind.NON_FINITE_LOSS, 23), nan_step=23), "nan",
            "non-finite loss at step 23", {"nan_step": 23}),
        Row("raise after a NaN", Evidence(T, raised=exc(Kind.OTHER), nan_step=7), "nan", None, {"nan_step": 7}),
        Row("raise after a NaN while stopping", Evidence(T, raised=exc(Kind.OTHER), nan_step=7, **stopping),
            "preempted"),
        Row("DataError after a NaN", Evidence(T, raised=exc(Kind.DATA_ERROR), nan_step=7), "nan"),
        Row("DataError", Evidence(T, raised=exc(Kind.DATA_ERROR)), "data_error", None, {"note": None}),
        Row("MemoryError", Evidence(T, raised=exc(Kind.MEMORY_ERROR)), "oom", "memory_error raised in the training"),
        Row("CUDA OOM", Evidence(T, raised=exc(Kind.CUDA_OOM)), "oom"),
        Row("ValueError", Evidence(T, raised=exc(Kind.OTHER)), "error", None, {"error_tail": "Traceback ...\nother"}),
        Row("disk full", Evidence(T, raised=FULL), "disk_full", None,
            {"note": "disk full on tmpfs (/mnt/x, 0 B free)", "error_tail": "Traceback ...\ndisk_full"}),
        Row("disk full while stopping: no emergency checkpoint", Evidence(T, raised=FULL, **stopping), "disk_full"),
        Row("disk full after a NaN", Evidence(T, raised=FULL, nan_step=7), "nan"),
        Row("program's Run on a full disk", Evidence(PR, raised=FULL), "disk_full", "disk full on tmpfs"),
        Row("returned after a NaN", Evidence(T, finished=True, nan_step=9), "nan", "step 9", {"nan_step": 9}),
        Row("returned early after a NaN and a stop", Evidence(T, finished=True, nan_step=9, **stopping), "nan"),
        Row("returned early after a stop", Evidence(T, finished=True, **stopping), "preempted",
            "SIGTERM received; emergency checkpoint written by the training code"),
        Row("returned its results at the end after a stop",
            Evidence(T, finished=True, reached_end=True, metrics={"acc": 1}, **stopping), "completed", None,
            {"metrics": {"acc": 1}}),
        # None after a stop came from the stop branch: completed, DONE.json would hold no results
        Row("returned nothing at the end after a stop", Evidence(T, finished=True, reached_end=True, **stopping),
            "preempted", "SIGTERM received; emergency checkpoint written by the training code"),
        Row("returned", Evidence(T, finished=True, metrics={"acc": 1}), "completed", None, {"metrics": {"acc": 1}}),
        # -- a program's Run.from_env()
        Row("program raised while stopping", Evidence(PR, raised=exc(Kind.OTHER), **stopping), "preempted",
            "stopped by SIGTERM; the program raised while stopping"),
        Row("program raised DataError", Evidence(PR, raised=exc(Kind.DATA_ERROR)), "data_error"),
        Row("finish() early after a stop", Evidence(PR, finished=True, **at_5_of_10, **stopping), "preempted",
            "run.finish() was called at step 5 of 10"),
        Row("finish() ignores a NaN", Evidence(PR, finished=True, nan_step=3, metrics={}), "completed", None,
            {"metrics": {}}),
        Row("exit without finish() after a NaN", Evidence(PR, nan_step=3), "nan", "step 3"),
        Row("exit without finish() after a NaN and a stop", Evidence(PR, nan_step=3, **stopping), "nan"),
        Row("exit without finish() after a stop", Evidence(PR, **at_5_of_10, **stopping), "preempted",
            "the program stopped at step 5"),
        Row("exit without finish()", Evidence(PR, **at_5_of_10), None),
        # -- a program's exit, seen by its attempt
        Row("command not rendered", Evidence(P, start_failure=("the command could not be rendered", "bad ${x}")),
            "error", "could not be rendered", {"error_tail": "bad ${x}", "exit_code": None, "exit_signal": None}),
        Row("stopped before start", Evidence(P, **stopping), "preempted", "SIGTERM arrived before the program started"),
        Row("not rendered, then a stop", Evidence(P, start_failure=("not rendered", ""), **stopping), "error"),
        Row("killed after grace", Evidence(P, exit_code=-KILL, killed_after_grace=True, grace_seconds=58),
            "preempted", "did not stop within 58 s", {"exit_signal": KILL, "exit_code": None}),
        Row("SIGKILL, OOM counter moved", Evidence(P, exit_code=-KILL, oom=(True, "counter rose 1->2")), "oom",
            "the program was killed by SIGKILL: counter rose 1->2"),
        Row("SIGKILL, no evidence", Evidence(P, exit_code=-KILL), "lost", "the program was killed by SIGKILL"),
        Row("SIGKILL beats the outcome file", Evidence(P, exit_code=-KILL, report=Report(reason="error")), "lost"),
        Row("file names data_error", Evidence(P, exit_code=0, report=Report(reason="data_error")), "data_error",
            "reported by the program, which exited with code 0", {"exit_code": 0}),
        Row("file names nan", Evidence(P, exit_code=1, report=Report(reason="nan", nan_step=12)), "nan", None,
            {"nan_step": 12}),
        Row("file names disk_full", Evidence(P, exit_code=1, report=Report(reason="disk_full", note="disk full on X")),
            "disk_full", "disk full on X"),
        # A program is done only on evidence that it finished: a reported completion; a Run at its declared
        # end; or, for a program that does not report, exit 0 with no stop signal that sweepq saw.
        Row("exit 0, file says completed",
            Evidence(P, exit_code=0, report=Report(reason="completed", metrics={"a": 1})), "completed", None,
            {"metrics": {"a": 1}, "note": "completed: the program reported completion"}),
        Row("exit 0, file says completed, after a stop",
            Evidence(P, exit_code=0, stop_forwarded=True, report=Report(reason="completed")), "completed"),
        Row("exit 0, file says completed with a note",
            Evidence(P, exit_code=0, report=Report(reason="completed", note="early stopping")), "completed", None,
            {"note": "completed: the program reported completion; early stopping"}),
        Row("exit 0 after a forwarded stop", Evidence(P, exit_code=0, stop_forwarded=True), "preempted",
            "the program exited 0 after SIGTERM without reporting completion: not done"),
        Row("exit 0 while the attempt was stopping, before forwarding", Evidence(P, exit_code=0, **stopping),
            "preempted", "exited 0 while sweepq was stopping it (SIGTERM)"),
        Row("exit 0, file says preempted", Evidence(P, exit_code=0, report=Report(reason="preempted")), "preempted"),
        Row("exit 0, the Run saw a SIGTERM sent to the program alone",
            Evidence(P, exit_code=0, report=Report(reason="preempted", written_by="sweepq.Run", end_step=78,
                                                   total_steps=100, note="SIGTERM received; the program stopped")),
            "preempted", "SIGTERM received; the program stopped"),
        Row("exit 0, done_when: reported, no report", Evidence(P, exit_code=0, reported_only=True), "error",
            "not done: the program exited 0 without reporting completion (done_when: reported",
            {"exit_code": 0}),
        Row("exit 0, done_when: reported, Run at its end without finish()",
            Evidence(P, exit_code=0, reported_only=True,
                     report=Report(written_by="sweepq.Run", end_step=100, total_steps=100)), "error",
            "done_when: reported"),
        Row("exit 0, done_when: reported, reported completion",
            Evidence(P, exit_code=0, reported_only=True, report=Report(reason="completed")), "completed",
            "the program reported completion"),
        Row("exit 0, done_when: reported, after a stop", Evidence(P, exit_code=0, reported_only=True, **stopping),
            "preempted"),
        Row("exit 0, Run short of its declared end without finish() (its own SIGTERM handler)",
            Evidence(P, exit_code=0, report=Report(written_by="sweepq.Run", end_step=78, total_steps=100)),
            "error", "not done: the program exited 0 at step 78 of 100 without calling run.finish()"),
        Row("exit 0, Run without finish() and without a declared total",
            Evidence(P, exit_code=0, report=Report(written_by="sweepq.Run", end_step=78)), "error",
            "at step 78 (its Run declared no total: run.set_total)"),
        Row("exit 0, Run at its declared end without finish()",
            Evidence(P, exit_code=0, report=Report(written_by="sweepq.Run", end_step=100, total_steps=100)),
            "completed", None,
            {"note": "completed: exit status 0 at the declared last step 100 (no run.finish(): no final metrics)"}),
        Row("exit 0, no report", Evidence(P, exit_code=0), "completed", None,
            {"note": "completed: exit status 0 (the program does not report to sweepq)", "exit_code": 0}),
        Row("exit 0, own outcome file with metrics only",
            Evidence(P, exit_code=0, report=Report(metrics={"steps": 3})), "completed", None,
            {"note": "completed: exit status 0 (its outcome file does not say completed)", "metrics": {"steps": 3}}),
        Row("exit 0, unknown reason", Evidence(P, exit_code=0, report=Report(reason="no-such-reason")), "completed"),
        Row("exit 75", Evidence(P, exit_code=75), "preempted", "exited with code 75"),
        Row("exit 143", Evidence(P, exit_code=143), "preempted", "exited with code 143"),
        Row("killed by SIGTERM", Evidence(P, exit_code=-TERM), "preempted", "killed by SIGTERM"),
        Row("exit 1 after a forwarded stop", Evidence(P, exit_code=1, stop_forwarded=True), "preempted",
            "after SIGTERM"),
        Row("exit 1", Evidence(P, exit_code=1), "error", "the program exited with code 1", {"exit_code": 1}),
        Row("exit 1 after finish()", Evidence(P, exit_code=1, report=Report(reason="completed")), "error",
            "after calling run.finish()"),
        Row("SIGSEGV", Evidence(P, exit_code=-11), "error", "killed by SIGSEGV", {"exit_signal": 11}),
        Row("SIGBUS names its likely cause", Evidence(P, exit_code=-signal.SIGBUS), "error",
            "killed by SIGBUS (SIGBUS: most often a memory-mapped file", {"exit_signal": signal.SIGBUS}),
        # -- the attempt process, seen by its worker
        Row("own account", Evidence(W, exit_code=75, account={"reason": "preempted", "note": "n", "end_step": 8}),
            "preempted", None, {"note": "n", "end_step": 8, "exit_code": 75}),
        Row("own account beats SIGKILL", Evidence(W, exit_code=-KILL, account={"reason": "preempted"}), "preempted"),
        Row("timeout over an account",
            Evidence(W, exit_code=75, account={"reason": "preempted"}, intent=Intent.TIMEOUT), "timeout",
            "timeout by sweepq (was: preempted)"),
        Row("cancel over an error", Evidence(W, exit_code=1, account={"reason": "error", "note": "x"},
            intent=Intent.CANCEL), "cancelled", "cancelled by sweepq (was: error); x"),
        Row("completed beats a timeout",
            Evidence(W, exit_code=0, account={"reason": "completed"}, intent=Intent.TIMEOUT), "completed"),
        Row("a stop imposes nothing", Evidence(W, exit_code=75, account={"reason": "preempted"}, intent=Intent.STOP),
            "preempted", None, {"note": None}),
        Row("SIGKILL from outside, OOM", Evidence(W, exit_code=-KILL, oom=(True, "peak 7 GiB")), "oom", "peak 7 GiB",
            {"exit_signal": KILL}),
        Row("SIGKILL from outside", Evidence(W, exit_code=-KILL, oom=(False, "no counter moved")), "lost",
            "no counter moved"),
        Row("SIGKILL after grace", Evidence(W, exit_code=-KILL, intent=Intent.STOP, killed_after_grace=True),
            "preempted", "killed by sweepq: did not stop within the grace period"),
        # A SIGKILL while the worker waits out the grace period is not the worker's (docker stop, systemd).
        Row("SIGKILL from outside while stopping", Evidence(W, exit_code=-KILL, intent=Intent.STOP,
            oom=(False, "no counter moved")), "preempted", "a SIGKILL from outside sweepq while it was stopping"),
        Row("SIGKILL from outside while stopping, OOM", Evidence(W, exit_code=-KILL, intent=Intent.STOP,
            oom=(True, "peak 7 GiB")), "oom", "peak 7 GiB"),
        Row("SIGKILL on a hard stop", Evidence(W, exit_code=-KILL, intent=Intent.STOP, hard_stop=True), "preempted",
            "killed by sweepq: hard stop (second interrupt)"),
        # A second interrupt can reach the worker before its loop has recorded the first as an intent.
        Row("SIGKILL on a hard stop before any intent", Evidence(W, exit_code=-KILL, hard_stop=True), "preempted",
            "killed by sweepq: hard stop (second interrupt)"),
        Row("SIGKILL after cancel", Evidence(W, exit_code=-KILL, intent=Intent.CANCEL, killed_after_grace=True),
            "cancelled", "cancelled by sweepq (was: preempted); killed by sweepq"),
        Row("SIGTERM before handlers", Evidence(W, exit_code=-TERM), "preempted",
            "SIGTERM arrived before the training process could handle it"),
        Row("SIGSEGV, no account", Evidence(W, exit_code=-11), "error", "killed by SIGSEGV"),
        Row("exit 1, no account", Evidence(W, exit_code=1), "error", "exited with code 1 before reporting"),
        Row("an account without a reason", Evidence(W, exit_code=1, account={"note": "half"}), "error",
            "before reporting"),
        # -- the files of a dead attempt
        Row("receipt file", Evidence(X, account={"reason": "preempted", "note": "SIGTERM"}), "preempted",
            "SIGTERM; closed from its receipt file"),
        Row("receipt of a full disk, not lost", Evidence(X, account={"reason": "disk_full", "note": "disk full on X"}),
            "disk_full", "disk full on X; closed from its receipt file"),
        Row("receipt beats DONE.json", Evidence(X, account={"reason": "error"}, done={"step": 1}), "error"),
        Row("DONE.json", Evidence(X, done={"step": 40, "metrics": {"a": 1}}), "completed", "closed from DONE.json",
            {"end_step": 40, "metrics": {"a": 1}}),
        Row("nothing left", Evidence(X, step=12), "lost", "the process vanished", {"end_step": 12}),
        # -- a flood of output, stopped by its attempt
        Row("train flooded its logs", Evidence(T, raised=exc(Kind.OTHER), flooded=FLOOD), "log_flood", FLOOD),
        Row("train returned after a flood: done", Evidence(T, finished=True, flooded=FLOOD), "completed"),
        Row("program flooded its logs", Evidence(P, exit_code=-TERM, stop_forwarded=True, flooded=FLOOD),
            "log_flood", FLOOD, {"exit_signal": TERM}),
        Row("program flooded, killed after grace", Evidence(P, exit_code=-KILL, killed_after_grace=True,
            flooded=FLOOD), "log_flood"),
        Row("program finished after a flood: done", Evidence(P, exit_code=0, report=Report(reason="completed"),
            flooded=FLOOD), "completed"),
        # -- a program that left no file at its outcome file
        Row("a FIFO at the outcome file", Evidence(P, exit_code=0, bad_outcome_file=FIFO), "error", FIFO),
        Row("a FIFO at the outcome file, stopped", Evidence(P, exit_code=75, bad_outcome_file=FIFO), "preempted"),
    ]  # fmt: skip


ROWS = rows()


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_row(row: Row) -> None:
    o = decide(row.seen)
    if row.reason is None:
        assert o is None
        return
    assert o is not None and o.reason == row.reason, f"rule: {rule_for(row.seen).name}"
    if row.note is not None:
        assert row.note in (o.note or ""), o.note
    for name, value in row.fields.items():
        assert getattr(o, name) == value, name


def test_every_rule_has_a_row() -> None:
    used = {rule_for(r.seen).name for r in ROWS}
    assert [r.name for r in RULES if r.name not in used] == []


def test_every_amendment_is_exercised() -> None:
    applied = set()
    for r in ROWS:
        o = rule_for(r.seen).then(r.seen)
        applied |= {
            a.name for a in AMENDMENTS if o is not None and r.seen.witness in a.witnesses and a.applies(r.seen, o)
        }
    assert applied == {a.name for a in AMENDMENTS}


def test_each_witness_ends_in_a_catch_all() -> None:
    for witness in (PR, P, W, X):
        assert decide(Evidence(witness, exit_code=0)) is not None or witness is PR
    with pytest.raises(LookupError, match="no rule"):
        rule_for(Evidence(T))  # training evidence says either how train raised or that it returned


def test_evidence_of_exceptions() -> None:
    assert raised(DataError("bad shard")).kind is Kind.DATA_ERROR
    nan = raised(NonFiniteLoss(23, "loss", float("nan")))
    assert (nan.kind, nan.step, nan.name) == (Kind.NON_FINITE_LOSS, 23, "NonFiniteLoss")
    assert raised(MemoryError()).kind is Kind.MEMORY_ERROR
    try:
        raise ValueError("bug at step 12")
    except ValueError as e:
        err = raised(e)
    assert err.kind is Kind.OTHER and "Traceback" in err.tail and "ValueError: bug at step 12" in err.tail


def test_a_cuda_oom_is_told_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    class OutOfMemoryError(RuntimeError):
        pass

    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(OutOfMemoryError=OutOfMemoryError))
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert raised(OutOfMemoryError("CUDA out of memory")).kind is Kind.CUDA_OOM
    assert raised(RuntimeError("other")).kind is Kind.OTHER


def test_a_report_is_read_leniently() -> None:
    r = Report.parse({"reason": "nan", "nan_step": "12", "metrics": 0.5, "error_tail": 3, "extra": 1})
    assert r == Report(reason="nan", nan_step=12, metrics={"result": "0.5"}, error_tail="3")
    assert Report.parse({"nan_step": "x", "metrics": {1: 2}}) == Report(metrics={"1": 2})
    run = Report.parse({"written_by": "sweepq.Run", "end_step": 100, "total_steps": "100"})
    assert run.by_run and run.reached_end
    assert not Report.parse({"written_by": "sweepq.Run", "end_step": 99, "total_steps": 100}).reached_end
    assert not Report.parse({"end_step": 99, "total_steps": None}).reached_end
