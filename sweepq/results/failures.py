"""Why a cell failed, in one line: for the status table's notes and launch's lines (pure, like render.py).

An attempt's receipt holds the tail of its traceback or stderr, a note and its exit
status; people scanning a table want the exception ("ValueError: bug at step 7")
and the command that shows the whole log.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence

from sweepq.queue.records import AttemptRecord, CellRecord
from sweepq.queue.states import CellState

#: Reasons whose attempt's own words (an exception, an exit status) say why a cell is not done.
TOLD_FAILURES = frozenset({"error", "data_error", "oom", "nan", "timeout"})
FAILURE_WIDTH = 100


def failure_line(a: AttemptRecord, width: int = FAILURE_WIDTH) -> str | None:
    """Why an attempt failed, in one line: the exception ("ValueError: bug at step 7"), else the
    last line of its stderr tail with the receipt's note, else the note or the exit status."""
    tail = (a.error_tail or "").strip()
    raised = exception_line(tail)
    if raised is not None:
        words = raised
    elif tail:
        last = tail.splitlines()[-1].strip()
        words = f"{last} ({a.note})" if a.note and a.note not in last else last
    elif a.note:
        words = a.note
    elif a.exit_signal:
        words = f"killed by {_signal_name(a.exit_signal)}"
    elif a.exit_code:
        words = f"exited with code {a.exit_code}"
    else:
        return None
    return words if len(words) <= width else words[: width - 1] + "…"


def exception_line(tail: str) -> str | None:
    """The "Type: message" line of the last Python traceback in `tail` (None without a traceback).

    It is the first unindented line after the last "Traceback" header: frames are indented, and
    a message may go on over more lines, or a chained exception may follow.
    """
    # A rank of a cell of several processes marks its lines (`[rank1]:`, host/logkeeper.py), and the
    # ranks' lines interleave: the traceback is followed among the lines of the rank that printed it.
    lines = [_unmarked(line) for line in tail.splitlines()]
    starts = [i for i, (_, line) in enumerate(lines) if line.startswith("Traceback (most recent call last):")]
    if not starts:
        return None
    rank = lines[starts[-1]][0]
    for mark, line in lines[starts[-1] + 1 :]:
        if mark == rank and line.strip() and not line[0].isspace():
            return line.strip()
    return None


def _unmarked(line: str) -> tuple[str, str]:
    """(a rank's mark or "", the line without it)."""
    if line.startswith("[rank"):
        mark, sep, rest = line.partition("]:")
        if sep and mark[5:].isdigit():
            return mark + sep, rest
    return "", line


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def logs_hint(cell_id: str, where: str) -> str:
    """The command that prints a cell's logs; `where` is the root as the user would type it ("." inside it)."""
    return f"sweepq logs {cell_id}" + ("" if where in ("", ".") else f" {where}")


def failure_notes(
    cells: Sequence[CellRecord], attempts_ended_by: Callable[[str], Sequence[AttemptRecord]], where: str
) -> dict[str, str]:
    """Per cell whose last attempt failed: its one-line reason and how to see its logs.

    `attempts_ended_by(reason)` gives the attempts that ended with `reason` (one query
    per reason shown, not one per cell); `where` is the root as `logs_hint` takes it.
    """
    told = [c for c in cells if told_failure(c)]
    last: dict[tuple[str, int], AttemptRecord] = {}
    for reason in sorted({c.last_reason for c in told if c.last_reason}):
        last.update(((a.cell, a.number), a) for a in attempts_ended_by(reason))
    notes = {}
    for c in told:
        a = last.get((c.id, c.attempts))
        line = failure_line(a) if a is not None else None
        if line is not None:
            notes[c.id] = f"{line} (see {logs_hint(c.id, where)})"
    return notes


def told_failure(c: CellRecord) -> bool:
    """Does the status say why this cell failed? Failed cells, and cells waiting to retry a failure."""
    if c.state is CellState.RUNNING or c.state is CellState.DONE or not c.attempts:
        return False
    return c.state is CellState.FAILED or c.last_reason in TOLD_FAILURES
