"""The human tables (sweepq/cli/render.py, sweepq/results/report.py) as golden text, from records built in-process."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len
from rich.console import RenderableType

from sweepq.cli import render, render_cell
from sweepq.cli.plain import SafeConsole
from sweepq.queue.records import AttemptRecord, CellRecord, CheckpointRecord, EventRecord
from sweepq.queue.states import CellState
from sweepq.results import failures, report, spelling
from sweepq.spec.sweep import Metric
from unit.support import T0, Launch, sweep_from

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
cell  group  state           epoch       step  progress    eta  val_acc    best  attempts  last reason
1.1   q1     done                     300/300      100%          0.6512    0.66         1  completed
2.1   q2     done          150/150  1500/1500      100%          0.7045  0.7045         1  completed
2.2   q2     interrupted    83/150   830/1500       55%            0.61    0.62         1  lost
2.3   q2     running      42.5/150   425/1500       28%  1h06m                          2  preempted
2.4   q2     running                  10/1500        1%                                 1
2.5   q2     queued                                                                     1  oom
2.6   q2     queued
2.4: no live process: reaped at the next launch
2.5: retry due

7 cells: 2 queued, 2 running, 1 interrupted, 2 done
"""


def test_status_table_of_the_story() -> None:
    # 120 columns: the story's table needs about 105 without its notes, which go under it (see the next test for 100).
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
#  started      ended        host  pid  steps  reason   wall  peak mem  note
1  03-01 12:00  03-01 13:23  box   501  0→830  lost    1h23m   3.0 GiB  reaped: lock free
2  03-01 13:30  running      box   777  800→?

checkpoints
step  epoch  state                     metrics          size  path
 800     80  committed (best val_acc)  val_acc=0.61  5.0 MiB  cells/2.2/checkpoints/step-800
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
    assert text(render_cell.show_cell(c, attempts, checkpoints, events, VAL_ACC)) == SHOW_GOLDEN


SHOW_EMPTY_GOLDEN = """\
cell   2.6 (group q2)
state  queued
cfg    lr     0.001
       width  256

attempts
none yet
"""


def test_show_cell_without_attempts() -> None:
    c = cell("2.6", CellState.QUEUED, cfg={"lr": 0.001, "width": 256})
    assert text(render_cell.show_cell(c, [], [], [], VAL_ACC)) == SHOW_EMPTY_GOLDEN


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
cell  #  started              ended                host  pid  steps     reason       wall
1.1   1  2025-03-01 12:00:00  2025-03-01 12:30:00  box    11  0→300     completed  30m00s
2.2   1  2025-03-01 12:00:00  2025-03-01 13:23:20  box    12  0→830     lost        1h23m
2.2   2  2025-03-01 13:30:00  2025-03-01 14:40:00  box    13  800→1500  completed   1h10m
2.3   1  2025-03-01 12:00:00  2025-03-01 12:42:00  box    14  0→420     preempted  42m00s
2.3   2  2025-03-01 12:45:00  running              box    15  400→?
2.5   1  2025-03-01 12:00:00  2025-03-01 12:00:36  box    16  0→5       oom         36.0s
2.5 #1: torch.OutOfMemoryError: CUDA out of memory
"""


def test_attempts_table_across_the_sweep() -> None:
    assert text(render.attempts_table(SWEEP_ATTEMPTS)) == ATTEMPTS_GOLDEN


def test_steps_lost_counts_what_the_next_attempt_trained_again() -> None:
    assert report.steps_lost(SWEEP_ATTEMPTS) == {("2.2", 1): 30, ("2.3", 1): 20}


REPORT_GOLDEN = """\
reason     attempts  wall hours  gpu hours  steps run  steps lost  share of wall  training lost h
completed         2       1.667      1.667       1000           0          44.3%            0.000
preempted         1       0.700      1.400        420          20          18.6%            0.700
lost              1       1.389      1.389        830          30          36.9%            1.389
oom               1       0.010      0.010          5           0           0.3%            0.000
running           1       0.000      0.000          0           0           0.0%            0.000
hidden: downtime h (a wider terminal or --json shows them)
training lost: 2.089 h (2h05m20s), from the checkpoint each next attempt resumed from to the last
sign of life of the attempt before it; downtime: 0.000 h (0s), from an attempt's last sign of life
until a later launch found it dead, not counted in wall hours
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
    assert "\nlost              1 " in shown and "0+?" in shown
    assert "+?: 2 attempt(s) ran a program that does not report its steps" in shown


# -- why a cell failed (sweepq/results/failures.py): one line in status and launch, and where the logs are

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
    ranks = (  # two ranks' marked lines, interleaved: the exception is rank 1's, whose traceback is last
        "[rank0]:Traceback (most recent call last):\n[rank1]:Traceback (most recent call last):\n"
        '[rank0]:  File "ddp.py", line 9\n[rank1]:  File "ddp.py", line 7\n[rank0]:KeyError: 3\n'
        "[rank1]:RuntimeError: rank 1 fails on purpose\n"
    )
    assert line(error_tail=ranks) == "RuntimeError: rank 1 fails on purpose"
    long = line(error_tail=f"Traceback (most recent call last):\nKeyError: '{'x' * 200}'")
    assert long is not None and len(long) == failures.FAILURE_WIDTH and long.endswith("…")


FAILED_GOLDEN = """\
cell  group  state        progress  attempts  last reason
1.1   q1     failed                        2  error
1.2   q1     queued                        1  oom
1.3   q1     done             100%         1  completed
1.4   q1     interrupted                   1  lost
1.1: ValueError: bug at step 7 (see sweepq logs 1.1 runs/x)
1.2: retry due; MemoryError: out of memory (see sweepq logs 1.2 runs/x)

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


# -- the cfg beside the results, every table within the terminal's width (cli/fit.py, params.py, columns.py)

ACC = Metric("validation/accuracy_top1", "max")
LLAMA, QWEN = "meta-llama/Llama-3.2-1B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"
VARYING = ("model.name", "optim.lr", "optim.weight_decay", "scheduler.warmup_steps")
SAME = ("model.dropout", "optim.name", "optim.betas", "data.path", "data.seq_len", "seed")


def llm_cfg(model: str, lr: float, wd: float = 0.01, warmup: int = 100) -> dict[str, Any]:
    return {
        "model": {"name": model, "dropout": 0.1},
        "optim": {"name": "adamw", "lr": lr, "weight_decay": wd, "betas": [0.9, 0.999]},
        "data": {"path": "/datasets/openwebtext/tokenized-2048", "seq_len": 2048},
        "scheduler": {"warmup_steps": warmup},
        "seed": 1234,
    }


def trained(steps: int, acc: float | None = None, best: float | None = None, **fields: Any) -> dict[str, Any]:
    metrics = {} if acc is None else {"validation/accuracy_top1": acc, "train/loss": 1.234}
    return {"step": steps, "total_steps": 12000, "metrics": metrics, "best": best, **fields}


OK = "completed"
# Two models x three learning rates; weight decay and warm-up vary too; six keys are the same everywhere.
FINETUNE = [
    cell(
        "1.1", CellState.DONE, cfg=llm_cfg(LLAMA, 3e-4), **trained(12000, 0.61234, 0.6213, attempts=1, last_reason=OK)
    ),
    cell(
        "1.2",
        CellState.DONE,
        cfg=llm_cfg(LLAMA, 1e-4, wd=0.1),
        **trained(12000, 0.601, 0.6047, attempts=2, last_reason=OK),
    ),
    cell("1.3", CellState.RUNNING, cfg=llm_cfg(LLAMA, 3e-5, warmup=500), **trained(7340, 0.55012, 0.5502, attempts=1)),
    cell("2.1", CellState.FAILED, cfg=llm_cfg(QWEN, 3e-4), **trained(12, attempts=1, last_reason="error")),
    cell(
        "2.2",
        CellState.INTERRUPTED,
        cfg=llm_cfg(QWEN, 1e-4, wd=0.1),
        **trained(4100, 0.48, 0.4811, attempts=1, last_reason="lost"),
    ),
    cell("2.3", CellState.QUEUED, cfg=llm_cfg(QWEN, 3e-5, warmup=500)),
]
FINETUNE_NOTES = {"2.1": "ValueError: the tokenizer has no pad token (see sweepq logs 2.1)"}

FINETUNE_80 = """\
cell  state        progress  name                lr  weight_decay  valida…_top1
1.1   done             100%  Llama-3.2-1B-…  0.0003          0.01        0.6123
1.2   done             100%  Llama-3.2-1B-…  0.0001           0.1         0.601
1.3   running           61%  Llama-3.2-1B-…   3e-05          0.01        0.5501
2.1   failed             0%  Qwen2.5-0.5B-…  0.0003          0.01
2.2   interrupted       34%  Qwen2.5-0.5B-…  0.0001           0.1          0.48
2.3   queued                 Qwen2.5-0.5B-…   3e-05          0.01
2.1: ValueError: the tokenizer has no pad token (see sweepq logs 2.1)
hidden: warmup_steps, best, … 5 more (a wider terminal or --json shows them)
same in every cell: model.dropout=0.1, … 5 more (--all-params shows them)

6 cells: 1 queued, 1 running, 1 interrupted, 2 done, 1 failed
"""

FINETUNE_160 = """\
cell  group  state               step  progress    eta  name                lr  weight_decay  warmup_steps  valida…_top1    best  attempts  last reason
1.1   q1     done         12000/12000      100%         Llama-3.2-1B-…  0.0003          0.01           100        0.6123  0.6213         1  completed
1.2   q1     done         12000/12000      100%         Llama-3.2-1B-…  0.0001           0.1           100         0.601  0.6047         2  completed
1.3   q1     running       7340/12000       61%  1h30m  Llama-3.2-1B-…   3e-05          0.01           500        0.5501  0.5502         1
2.1   q2     failed          12/12000        0%         Qwen2.5-0.5B-…  0.0003          0.01           100                               1  error
2.2   q2     interrupted   4100/12000       34%         Qwen2.5-0.5B-…  0.0001           0.1           100          0.48  0.4811         1  lost
2.3   q2     queued                                     Qwen2.5-0.5B-…   3e-05          0.01           500
2.1: ValueError: the tokenizer has no pad token (see sweepq logs 2.1)
same in every cell: model.dropout=0.1, optim.name=adamw, optim.betas=[0.9,0.999], data.path=/datasets/op…enized-2048, data.seq_len=2048, seed=1234

6 cells: 1 queued, 1 running, 1 interrupted, 2 done, 1 failed
"""  # noqa: E501


def finetune(width: int, all_params: bool = False) -> tuple[str, list[str]]:
    """The status table as `width` columns show it (golden text), and its lines as rich wrote them."""
    table = render.status_table(
        FINETUNE, ACC, etas={"1.3": 5400.0}, notes=FINETUNE_NOTES, now=T0, all_params=all_params
    )
    return text(table, width), render.to_text(table, width).splitlines()


def hidden(shown: str) -> list[str]:
    """The columns the footnote names as left out."""
    line = next((x for x in shown.splitlines() if x.startswith("hidden: ")), "hidden:  (")
    return line.removeprefix("hidden: ").split(" (")[0].split(", ")


@pytest.mark.parametrize("width, golden", [(80, FINETUNE_80), (160, FINETUNE_160)])
def test_status_shows_the_cfg_keys_that_vary_within_the_width(width: int, golden: str) -> None:
    shown, lines = finetune(width)
    assert shown == golden
    assert max(cell_len(line) for line in lines) <= width
    header = shown.splitlines()[0].split()
    cfg_columns = ["name", "lr", "weight_decay", "warmup_steps"]  # unambiguous last names: `optim.name` is the same
    assert [h for h in header if h in cfg_columns] == cfg_columns[: 3 if width == 80 else 4]
    assert width != 80 or hidden(shown)[0] == "warmup_steps"
    assert not set(header) & {"dropout", "betas", "path", "seq_len", "seed", *SAME}
    same_line = next(x for x in shown.splitlines() if x.startswith("same in every cell: "))
    assert same_line.startswith("same in every cell: model.dropout=0.1, ")


@pytest.mark.parametrize("width", [80, 160])
def test_all_params_shows_every_key_the_varying_ones_first(width: int) -> None:
    shown, lines = finetune(width, all_params=True)
    assert max(cell_len(line) for line in lines) <= width
    header = shown.splitlines()[0].split()
    named = set(header) | set(hidden(shown))
    assert "same in every cell" not in shown
    if width == 80:  # the keys that vary first, each named by its path where its last name is ambiguous
        assert header[:6] == ["cell", "state", "progress", "model.name", "lr", "weight_decay"], shown
        assert hidden(shown)[:2] == ["warmup_steps", "dropout"] and "… 11 more" in shown
    else:
        assert {"model.name", "optim.name", "lr", "weight_decay", "dropout", "betas", "path", "seed"} <= named


def test_every_table_fits_every_width_and_no_number_is_cut() -> None:
    rows = report.by_reason(SWEEP_ATTEMPTS)
    best = [
        {"rank": None, "cell": c.id, "state": str(c.state), "best": c.best, "step": 10, "checkpoint": None}
        | {"cfg": c.cfg}
        for c in FINETUNE
    ]
    accs = {c.id: spelling.fmt_num(c.metrics["validation/accuracy_top1"]) for c in FINETUNE if c.metrics}
    for width in (40, 47, 55, 64, 72, 80, 91, 100, 120, 140, 160, 200):
        status = render.to_text(render.status_table(FINETUNE, ACC, notes=FINETUNE_NOTES, now=T0), width)
        for table in (
            status,
            render.to_text(render.best_table(best, ACC), width),
            render.to_text(render.attempts_table(SWEEP_ATTEMPTS), width),
            render.to_text(render.report_table(rows), width),
            render.to_text(render_cell.show_cell(STORY[2], SWEEP_ATTEMPTS[1:3], [], [], VAL_ACC), width),
        ):
            assert max(cell_len(line) for line in table.splitlines()) <= width, (width, table)
        for line in status.splitlines():  # the metric is always kept, whole
            cid = line.split(" ")[0]
            if cid in accs:
                assert f" {accs[cid]}" in line, (width, line)
                assert all(w.startswith(("Llama", "Qwen")) for w in line.split() if "…" in w), (width, line)


def test_a_long_table_is_written_line_by_line_as_rich_lays_it_out(monkeypatch: pytest.MonkeyPatch) -> None:
    from sweepq.cli import fit

    best = [
        {"rank": i, "cell": c.id, "state": str(c.state), "best": c.best, "step": 10, "checkpoint": None}
        | {"cfg": c.cfg}
        for i, c in enumerate(FINETUNE)
    ]
    wide = [replace(c, group_name="漢字é" * (i % 3)) for i, c in enumerate(FINETUNE)]  # cells two columns wide

    def tables(width: int, streamed: bool = False, colors: bool = False) -> list[str]:
        shown = [
            render.status_table(wide, ACC, notes=FINETUNE_NOTES, now=T0, etas={"1.2": 99.0}),
            render.status_table(STORY, VAL_ACC, dead={"2.4"}, etas={"2.3": 4000.0}),
            render.best_table(best, ACC),
            render.report_table(report.by_reason(SWEEP_ATTEMPTS)),
        ]
        if not streamed:
            return [render.to_text(t, width) for t in shown]
        texts = []
        for t in shown:  # as `status` prints (app.out()'s console): two rows a call
            console = SafeConsole(
                width=width,
                color_system="truecolor" if colors else None,
                force_terminal=colors,
                record=True,
                file=io.StringIO(),
            )
            fit.print_streamed(console, t, rows_at_once=2)
            texts.append(console.file.getvalue() if colors else console.export_text())  # type: ignore[attr-defined]
        return texts

    monkeypatch.setattr(fit, "SHARE_FROM", 1)  # each column keeps one string per value, as long ones do
    for width in (40, 80, 120, 200):
        monkeypatch.setattr(fit, "LINES_FROM", 10**9)
        laid_out, in_color = tables(width), tables(width, streamed=True, colors=True)
        assert tables(width, streamed=True) == laid_out
        monkeypatch.setattr(fit, "LINES_FROM", 1)
        assert tables(width) == laid_out
        assert tables(width, streamed=True) == laid_out
        assert tables(width, streamed=True, colors=True) == in_color  # the same bytes to a terminal: styles too
    assert any("漢字é" in t for t in laid_out) and any("hidden: " in t for t in tables(40))
    assert "\x1b[32mdone" in in_color[1]  # a state's color, which the lines once left out


def test_cfg_keys_flattened_named_and_shortened() -> None:
    from sweepq.cli import param_columns
    from sweepq.results import params

    assert params.flatten({"optim": {"lr": 0.1, "betas": [0.9]}, "seed": 1, "extra": {}}) == {
        "optim.lr": 0.1,
        "optim.betas": [0.9],
        "seed": 1,
        "extra": {},
    }
    varying, same = params.split_keys([{"a": 1, "b": {"c": 2}}, {"a": 1, "b": {"c": 3}, "d": True}])
    assert (varying, same) == (["b.c", "d"], ["a"])  # a key missing from some cells varies
    assert params.headers(["model.name", "optim.name", "optim.lr", "lr"]) == {
        "model.name": "model.name",
        "optim.name": "optim.name",
        "optim.lr": "optim.lr",
        "lr": "lr",
    }
    assert params.headers(["model.name", "optim.lr"]) == {"model.name": "name", "optim.lr": "lr"}
    assert [params.full(v) for v in (3e-4, 1e-05, True, None, [1, 2])] == ["0.0003", "1e-05", "true", "null", "[1,2]"]
    assert param_columns.short(0.000123456) == "0.0001235" and param_columns.short(1e-05) == "1e-05"
    assert param_columns.short(list(range(100, 120))) == "[100,101,…]"  # cut between numbers, never inside one
    assert param_columns.short(LLAMA) == "Llama-3.2-1B-…" and param_columns.short("/data/set/") == "set"
    assert param_columns.short(LLAMA, by_name=False) == "meta-ll…struct"
    odd = [0.0, -0.0, 1, True, 1.0, None, "1", [1], float("nan"), float("nan"), 0.25, 0.25]  # equal, or hashed alike
    (column,) = param_columns.columns([{"x": v} for v in odd] + [{}], every=False, rank=1, same_rank=2)
    assert list(column.values) == [params.full(v) for v in odd] + [""]  # each value spelt as its own type
    assert column.values[-3] is column.values[-2]  # a value met again: the string spelt the first time


def test_json_of_status_best_and_show_has_each_cells_full_cfg(tmp_path: Path, launch: Launch) -> None:
    from click.testing import CliRunner

    from sweepq.cli.main import main

    nested = """\
name: nested
train: trainers:train
params: {model: {name: meta-llama/Llama-3.2-1B-Instruct, dropout: 0.1}, seed: 7}
metric: {name: validation/accuracy_top1, goal: max}
grid: {optim.lr: [0.0003, 0.0001], optim.name: [adamw]}
"""
    root = tmp_path / "root"
    launch(root, sweep_from(nested, tmp_path))
    runner = CliRunner()

    def ran(*args: str, columns: str = "") -> str:
        result = runner.invoke(main, [*args, "--root", str(root)], env={"COLUMNS": columns or None})
        assert result.exit_code == 0, result.output
        return result.output

    want = {
        "model": {"name": LLAMA, "dropout": 0.1},
        "seed": 7,
        "optim": {"lr": 0.0003, "name": "adamw"},
    }
    status = json.loads(ran("status", "--json"))
    assert [c["cfg"] for c in status] == [want, want | {"optim": {"lr": 0.0001, "name": "adamw"}}]
    assert {"cell", "group", "state", "step", "progress", "attempts", "last_reason", "metrics", "best", "alive"} <= set(
        status[0]
    )
    best = json.loads(ran("best", "--json"))
    assert [(r["cell"], r["cfg"]) for r in best] == [(c["cell"], c["cfg"]) for c in status]
    assert {"rank", "cell", "state", "best", "step", "checkpoint"} <= set(best[0])
    assert json.loads(ran("show", "1.1", "--json"))["cfg"] == want

    def table(out: str) -> list[str]:  # below the header (cli/header.py)
        lines = out.splitlines()
        return lines[next(i for i, line in enumerate(lines) if line.startswith("cell ")) :]

    wide = table(ran("status"))  # a pipe without COLUMNS: as wide as the table
    assert wide[0].split() == ["cell", "group", "state", "optim.lr"]
    assert (
        wide[3]
        == "same in every cell: model.name=meta-llama/L…1B-Instruct, model.dropout=0.1, seed=7, optim.name=adamw"
    )
    narrow = ran("status", columns="25").splitlines()  # COLUMNS: how wide a pipe is
    assert max(map(cell_len, narrow)) <= 25
    narrow = table("\n".join(narrow))
    assert narrow[0].split() == ["cell", "state", "optim.lr"], narrow
    assert narrow[3].startswith("hidden: group ")
    every = table(ran("status", "--all-params", columns="200"))[0].split()
    assert every == ["cell", "group", "state", "model.name", "model.dropout", "seed", "optim.lr", "optim.name"]
    assert ran("best", columns="50").splitlines()[0].split() == ["rank", "cell", "state", "optim.lr", "valida…_top1"]


def test_a_done_cells_epochs_are_counted_whole_a_running_cells_as_reached() -> None:
    """Lightning counts epochs from 0: a fit of 38 epochs ends having logged epoch 37.5, never 38/38."""
    assert render.fmt_epoch(cell("1.1", CellState.RUNNING, epoch=37.5, total_epochs=38)) == "37.5/38"
    assert render.fmt_epoch(cell("1.1", CellState.DONE, epoch=37.5, total_epochs=38)) == "38/38"
    assert render.fmt_epoch(cell("1.1", CellState.DONE, epoch=20.0, total_epochs=38)) == "20/38"  # stopped early
    assert render.fmt_epoch(cell("1.1", CellState.DONE, epoch=2.5, total_epochs=None)) == "3"
