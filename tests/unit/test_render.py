"""The human tables (sweepq/cli/render.py, sweepq/cli/report.py) as golden text, from records built in-process."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from rich.console import RenderableType

from sweepq.cli import failures, render, report
from sweepq.queue.records import AttemptRecord, CellRecord, CheckpointRecord, EventRecord
from sweepq.queue.states import CellState
from sweepq.spec.sweep import Metric
from unit.support import T0

VAL_ACC = Metric("val_acc", "max")

BLANK_CELL = CellRecord(
    id="1.1",
    group=1,
    index=1,
    group_name="q1",
    cfg={},
    cfg_hash="h",
    state=CellState.QUEUED,
    attempts=0,
    last_reason=None,
    retry_after=None,
    step=None,
    total_steps=None,
    epoch=None,
    total_epochs=None,
    metrics={},
    best=None,
    best_step=None,
    removed=False,
    cancel_requested=False,
    updated_at=T0,
    finished_at=None,
)

BLANK_ATTEMPT = AttemptRecord(
    cell="2.2",
    number=1,
    worker="box:10",
    host="box",
    pid=None,
    worker_pid=10,
    gpus=[],
    started_at=T0,
    ended_at=None,
    start_step=0,
    start_checkpoint_sha=None,
    nan_step=None,
    end_step=None,
    reason=None,
    exit_code=None,
    exit_signal=None,
    error_tail=None,
    wall_seconds=None,
    gpu_seconds=None,
    peak_memory_bytes=None,
    peak_gpu_memory_bytes=None,
    environment={},
    code_fingerprint={},
    data_fingerprint={},
    note=None,
)


def cell(cid: str, state: CellState, **fields: Any) -> CellRecord:
    group, index = (int(x) for x in cid.split("."))
    return replace(BLANK_CELL, id=cid, group=group, index=index, group_name=f"q{group}", state=state, **fields)


def attempt(number: int, minutes: float, **fields: Any) -> AttemptRecord:
    """An attempt started `minutes` after T0; it ended wall_seconds later when a reason is given."""
    started = T0 + timedelta(minutes=minutes)
    wall = fields.get("wall_seconds")
    ended = started + timedelta(seconds=wall) if wall is not None and fields.get("reason") else None
    return replace(BLANK_ATTEMPT, number=number, started_at=started, ended_at=ended, **fields)


def text(renderable: RenderableType, width: int = 100) -> str:
    """What a terminal of `width` columns without colour shows (trailing blanks dropped)."""
    return "\n".join(line.rstrip() for line in render.to_text(renderable, width).splitlines()) + "\n"


# After a reboot, the design's story: 1.1 and 2.1 finished, 2.2 was lost at epoch 83/150, 2.3 runs again
# after a preemption, 2.4's process is gone, 2.5 waits out an OOM back-off, 2.6 never started.
STORY = [
    cell(
        "1.1",
        CellState.DONE,
        step=300,
        total_steps=300,
        metrics={"val_acc": 0.6512},
        best=0.66,
        best_step=250,
        attempts=1,
        last_reason="completed",
    ),
    cell(
        "2.1",
        CellState.DONE,
        epoch=150.0,
        total_epochs=150,
        step=1500,
        total_steps=1500,
        metrics={"val_acc": 0.7045},
        best=0.7045,
        best_step=1500,
        attempts=1,
        last_reason="completed",
    ),
    cell(
        "2.2",
        CellState.INTERRUPTED,
        epoch=83.0,
        total_epochs=150,
        step=830,
        total_steps=1500,
        metrics={"val_acc": 0.61},
        best=0.62,
        best_step=700,
        attempts=1,
        last_reason="lost",
    ),
    cell(
        "2.3",
        CellState.RUNNING,
        epoch=42.5,
        total_epochs=150,
        step=425,
        total_steps=1500,
        attempts=2,
        last_reason="preempted",
    ),
    cell("2.4", CellState.RUNNING, step=10, total_steps=1500, attempts=1),
    cell("2.5", CellState.QUEUED, attempts=1, last_reason="oom", retry_after=T0),
    cell("2.6", CellState.QUEUED),
]

STATUS_GOLDEN = """\
sweep llm
cell  group  state           epoch       step  progress    eta  val_acc    best  attempts  last reason  note
1.1   q1     done                     300/300      100%          0.6512    0.66         1  completed
2.1   q2     done          150/150  1500/1500      100%          0.7045  0.7045         1  completed
2.2   q2     interrupted    83/150   830/1500       55%            0.61    0.62         1  lost
2.3   q2     running      42.5/150   425/1500       28%  1h06m                          2  preempted
2.4   q2     running                  10/1500        1%                                 1               no live process:
                                                                                                        reaped at the
                                                                                                        next launch
2.5   q2     queued                                                                     1  oom          retry due
2.6   q2     queued

7 cells: 2 queued, 2 running, 1 interrupted, 2 done
"""


def test_status_table_of_the_story() -> None:
    # 120 columns: the story's table needs about 105 without its notes (see the next test for 100).
    table = render.status_table(STORY, VAL_ACC, title="sweep llm", dead={"2.4"}, etas={"2.3": 4000.0, "2.4": 50.0})
    assert text(table, width=120) == STATUS_GOLDEN


def test_status_table_keeps_states_and_reasons_whole_at_100_columns() -> None:
    """What happened must stay readable on a common terminal: no state or reason cut to "interr…"."""
    shown = text(render.status_table(STORY, VAL_ACC, etas={"2.3": 4000.0}))
    words = set(shown.split())
    cut = sorted({w for c in STORY for w in (str(c.state), c.last_reason) if w and w not in words})
    assert not cut, f"cut at 100 columns: {cut}\n{shown}"


FRESH_GOLDEN = """\
cell        group  state
1.1         q1     queued
1.2         q1     queued
1.3 (gone)  q1     queued

2 cells: 2 queued (1 no longer in the sweep file)
"""


def test_status_table_shows_only_columns_with_data() -> None:
    fresh = [cell("1.1", CellState.QUEUED), cell("1.2", CellState.QUEUED), cell("1.3", CellState.QUEUED, removed=True)]
    assert text(render.status_table(fresh, None)) == FRESH_GOLDEN


SHOW_GOLDEN = """\
cell      2.2 (group q2)
state     interrupted
cfg       {}
progress  epoch 83/150 step 830/1500 55%
metrics   val_acc=0.61
best      val_acc=0.62 at step 700

attempts
 #  started           ended             host  pid  steps  reason   wall  peak mem  note
 1  2025-03-01        2025-03-01        box   501  0→830  lost    1h23m   3.0 GiB  reaped: lock
    12:00:00          13:23:20                                                     free
 2  2025-03-01        running           box   777  800→?
    13:30:00

checkpoints
 step  epoch  state      metrics          size  path
  800     80  committed  val_acc=0.61  5.0 MiB  cells/2.2/checkpoints/step-800
(1 superseded checkpoint(s) deleted by retention not shown; --json lists all)

history
 time                 event  detail
 2025-03-01 13:24:00  lost   {"attempt": 1}
"""


def test_show_cell() -> None:
    c = STORY[2]
    attempts = [
        attempt(
            1,
            0,
            pid=501,
            end_step=830,
            reason="lost",
            wall_seconds=5000.0,
            peak_memory_bytes=3 * 2**30,
            note="reaped: lock free",
        ),
        attempt(2, 90, pid=777, start_step=800),
    ]
    checkpoints = [
        CheckpointRecord(
            "2.2",
            600,
            60.0,
            "superseded",
            {"val_acc": 0.58},
            "cells/2.2/checkpoints/step-600",
            None,
            1,
            2048,
            T0,
            "retention",
        ),
        CheckpointRecord(
            "2.2",
            800,
            80.0,
            "committed",
            {"val_acc": 0.61},
            "cells/2.2/checkpoints/step-800",
            None,
            1,
            5 * 2**20,
            T0,
            None,
        ),
    ]
    events = [EventRecord("2.2", T0 + timedelta(minutes=84), "lost", {"attempt": 1})]
    assert text(render.show_cell(c, attempts, checkpoints, events, VAL_ACC)) == SHOW_GOLDEN


SHOW_EMPTY_GOLDEN = """\
cell   2.6 (group q2)
state  queued
cfg    {"lr": 0.001, "width": 256}

attempts
none yet
"""


def test_show_cell_without_attempts() -> None:
    c = cell("2.6", CellState.QUEUED, cfg={"lr": 0.001, "width": 256})
    assert text(render.show_cell(c, [], [], [], VAL_ACC)) == SHOW_EMPTY_GOLDEN


SWEEP_ATTEMPTS = [
    attempt(1, 0, cell="1.1", pid=11, end_step=300, reason="completed", wall_seconds=1800.0, gpu_seconds=1800.0),
    attempt(1, 0, cell="2.2", pid=12, end_step=830, reason="lost", wall_seconds=5000.0, gpu_seconds=5000.0),
    attempt(
        2,
        90,
        cell="2.2",
        pid=13,
        start_step=800,
        end_step=1500,
        reason="completed",
        wall_seconds=4200.0,
        gpu_seconds=4200.0,
    ),
    attempt(1, 0, cell="2.3", pid=14, end_step=420, reason="preempted", wall_seconds=2520.0, gpu_seconds=5040.0),
    attempt(2, 45, cell="2.3", pid=15, start_step=400),
    attempt(
        1,
        0,
        cell="2.5",
        pid=16,
        end_step=5,
        reason="oom",
        wall_seconds=36.0,
        gpu_seconds=36.0,
        error_tail="Traceback ...\ntorch.OutOfMemoryError: CUDA out of memory\n",
    ),
]


ATTEMPTS_GOLDEN = """\
 cell  #  started       ended        host  pid  steps     reason       wall  peak mem  note
 1.1   1  2025-03-01    2025-03-01   box    11  0→300     completed  30m00s
          12:00:00      12:30:00
 2.2   1  2025-03-01    2025-03-01   box    12  0→830     lost        1h23m
          12:00:00      13:23:20
 2.2   2  2025-03-01    2025-03-01   box    13  800→1500  completed   1h10m
          13:30:00      14:40:00
 2.3   1  2025-03-01    2025-03-01   box    14  0→420     preempted  42m00s
          12:00:00      12:42:00
 2.3   2  2025-03-01    running      box    15  400→?
          12:45:00
 2.5   1  2025-03-01    2025-03-01   box    16  0→5       oom         36.0s            torch.OutOf…
          12:00:00      12:00:36                                                       CUDA out of
                                                                                       memory
"""


def test_attempts_table_across_the_sweep() -> None:
    assert text(render.attempts_table(SWEEP_ATTEMPTS)) == ATTEMPTS_GOLDEN


def test_steps_lost_counts_what_the_next_attempt_trained_again() -> None:
    assert report.steps_lost(SWEEP_ATTEMPTS) == {("2.2", 1): 30, ("2.3", 1): 20}


REPORT_GOLDEN = """\
 reason     attempts  wall hours  gpu hours  steps run  steps lost  share of wall
 completed         2       1.667      1.667       1000           0          44.3%
 preempted         1       0.700      1.400        420          20          18.6%
 lost              1       1.389      1.389        830          30          36.9%
 oom               1       0.010      0.010          5           0           0.3%
 running           1       0.000      0.000          0           0           0.0%
"""


def test_report_by_reason() -> None:
    rows = report.by_reason(SWEEP_ATTEMPTS)
    assert [(r["reason"], r["attempts"], r["steps_run"], r["steps_lost"]) for r in rows] == [
        ("completed", 2, 1000, 0),
        ("preempted", 1, 420, 20),
        ("lost", 1, 830, 30),
        ("oom", 1, 5, 0),
        ("running", 1, 0, 0),
    ]
    assert text(render.report_table(rows)) == REPORT_GOLDEN


# A program cell: 3.1 reports its steps (Run.from_env()); its attempt 2 was stopped before its program
# started, so it "ran" from the checkpoint it would have resumed from (step 100) to the same step. 3.2's
# program reports nothing: what it ran and lost is unknown, never 0.
PROGRAM_ATTEMPTS = [
    attempt(1, 0, cell="3.1", end_step=116, exit_code=0, reason="preempted", wall_seconds=60.0),
    attempt(2, 2, cell="3.1", start_step=100, end_step=100, reason="preempted", wall_seconds=1.0),
    attempt(3, 3, cell="3.1", start_step=100, end_step=300, exit_code=0, reason="completed", wall_seconds=90.0),
    attempt(1, 0, cell="3.2", exit_signal=9, reason="lost", wall_seconds=60.0),
    attempt(2, 2, cell="3.2", exit_code=0, reason="completed", wall_seconds=90.0),
]


def test_lost_work_of_programs_is_counted_to_the_real_resume_point_or_said_unknown() -> None:
    assert report.steps_lost(PROGRAM_ATTEMPTS) == {("3.1", 1): 16, ("3.1", 2): 0, ("3.2", 1): None}
    rows = {r["reason"]: r for r in report.by_reason(PROGRAM_ATTEMPTS)}
    assert (rows["preempted"]["steps_lost"], rows["preempted"]["steps_unknown"]) == (16, 0)
    assert (rows["lost"]["steps_run"], rows["lost"]["steps_lost"], rows["lost"]["steps_unknown"]) == (0, 0, 1)
    shown = text(render.report_table(list(rows.values())), width=120)
    assert " lost              1 " in shown and "0+?" in shown
    assert "+?: 2 attempt(s) ran a program that does not report its steps" in shown


# -- why a cell failed (sweepq/cli/failures.py): one line in status and launch, and where the logs are

CHAINED = """\
Traceback (most recent call last):
  File "train.py", line 3, in load
    open(path)
FileNotFoundError: [Errno 2] No such file or directory: 'data.csv'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "train.py", line 9, in <module>
    raise ValueError(
    ^^^^^^^^^^^^^^^^^
ValueError: bug at step 7
and the message goes on
"""


def test_failure_line_names_the_exception_else_the_last_words_and_the_exit_status() -> None:
    def line(**fields: Any) -> str | None:
        return failures.failure_line(attempt(1, 0, reason="error", wall_seconds=1.0, **fields))

    assert line(error_tail=CHAINED, note="the program exited with code 1") == "ValueError: bug at step 7"
    argparse_tail = "usage: train.py [-h] [--lr LR]\ntrain.py: error: unrecognized arguments: --optim.name=sgd\n"
    assert (
        line(error_tail=argparse_tail, note="the program exited with code 2", exit_code=2)
        == "train.py: error: unrecognized arguments: --optim.name=sgd (the program exited with code 2)"
    )
    assert line(note="timeout by sweepq after 20 s") == "timeout by sweepq after 20 s"
    assert line(exit_signal=11) == "killed by SIGSEGV" and line(exit_code=3) == "exited with code 3"
    assert line() is None
    long = line(error_tail=f"Traceback (most recent call last):\nKeyError: '{'x' * 200}'")
    assert long is not None and len(long) == failures.FAILURE_WIDTH and long.endswith("…")


FAILED_GOLDEN = """\
cell  group  state        progress  attempts  last reason  note
1.1   q1     failed                        2  error        ValueError: bug at step 7 (see sweepq
                                                           logs 1.1 runs/x)
1.2   q1     queued                        1  oom          retry due; MemoryError: out of memory
                                                           (see sweepq logs 1.2 runs/x)
1.3   q1     done             100%         1  completed
1.4   q1     interrupted                   1  lost

4 cells: 1 queued, 1 interrupted, 1 done, 1 failed
"""


def test_status_says_why_cells_failed_and_where_their_logs_are() -> None:
    cells = [
        cell("1.1", CellState.FAILED, attempts=2, last_reason="error"),
        cell("1.2", CellState.QUEUED, attempts=1, last_reason="oom", retry_after=T0),
        cell("1.3", CellState.DONE, attempts=1, last_reason="completed"),
        cell("1.4", CellState.INTERRUPTED, attempts=1, last_reason="lost"),  # nothing failed: resumes
    ]
    ended = [
        attempt(
            1,
            0,
            cell="1.1",
            reason="error",
            wall_seconds=1.0,
            error_tail="Traceback (most recent call last):\nValueError: bug at step 6",
        ),
        attempt(2, 1, cell="1.1", reason="error", wall_seconds=1.0, error_tail=CHAINED),
        attempt(1, 0, cell="1.2", reason="oom", wall_seconds=1.0, error_tail="MemoryError: out of memory"),
        attempt(1, 0, cell="1.4", reason="lost", wall_seconds=1.0, note="the process vanished"),
    ]
    asked: list[str] = []

    def ended_by(reason: str) -> list[AttemptRecord]:
        asked.append(reason)
        return [a for a in ended if a.reason == reason]

    notes = failures.failure_notes(cells, ended_by, "runs/x")
    assert sorted(asked) == ["error", "oom"]  # one question per reason shown, none for lost or completed
    assert text(render.status_table(cells, None, notes=notes, now=T0)) == FAILED_GOLDEN
    assert failures.failure_notes(cells[:1], ended_by, ".")["1.1"].endswith("(see sweepq logs 1.1)")


def test_a_launch_names_at_most_twenty_cells_per_line() -> None:
    from sweepq.cli.launch_summary import listed

    ids = [f"1.{i}" for i in range(1, 100_001)]
    line = listed(ids)
    assert line.startswith("1.1, 1.2, ") and "1.20, … and 99,980 more (sweepq status lists every cell)" in line
    assert len(line) < 200
    assert listed(ids[:20]) == ", ".join(ids[:20])
