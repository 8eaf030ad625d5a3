"""Reading a sweep's metric history: the attempts' files, stitched by what the queue knows of each attempt.

Read-only: the queue is opened for reading (or the caller's store is used), the
files are only read, and a running attempt's file is read as far as its last
whole line. Attempt folders the queue has no row for are not read (where an
attempt started is what stitching needs, and only its row knows).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from sweepq.durable import cache
from sweepq.history.format import read_attempt
from sweepq.history.records import AttemptInfo, AttemptLog, CellHistory, CheckpointMark
from sweepq.history.stitch import stitch
from sweepq.history.stream import CellStream
from sweepq.layout import CellPaths

if TYPE_CHECKING:
    from sweepq.queue.records import AttemptRecord
    from sweepq.queue.store import Store


def attempt_log(root: Path, cell: str, attempt: int) -> AttemptLog:
    """What attempt `attempt` of `cell` logged, in order (none when it logged nothing)."""
    return read_attempt(CellPaths(root, cell).metrics(attempt), attempt)


def stitched(root: Path, cell: str, store: Store | None = None) -> CellHistory:
    """The cell's stitched history (stitch.py says how). Pass `store` to read many cells with one."""
    with _store(root, store) as s:
        cache.fill(s, [cell])
        return _history(root, cell, s.attempts(cell), s)


def stitched_all(store: Store, cells: Iterable[str] | None = None) -> Iterator[CellHistory]:
    """Every cell's history (or those of `cells`), in the queue's cell order; attempts read in one query."""
    by_cell: dict[str, list[AttemptRecord]] = {}
    for a in store.attempts():
        by_cell.setdefault(a.cell, []).append(a)
    wanted = [c.id for c in store.cells()] if cells is None else list(cells)
    cache.fill(store, wanted)  # what only the sweep's storage has (its machine gone), copied into the root
    for cell in wanted:
        yield _history(store.root, cell, by_cell.get(cell, []), store)


def streams(store: Store, cells: Iterable[str] | None = None) -> Iterator[CellStream]:
    """Every cell's history as a CellStream (stream.py: stitched while read, in bounded memory), in the queue's
    cell order or that of `cells`; each cell's files are scanned when its stream is made."""
    by_cell: dict[str, list[AttemptRecord]] = {}
    for a in store.attempts():
        by_cell.setdefault(a.cell, []).append(a)
    wanted = [c.id for c in store.cells()] if cells is None else list(cells)
    cache.fill(store, wanted)  # what only the sweep's storage has (its machine gone), copied into the root
    for cell in wanted:
        marks = [CheckpointMark(c.step, c.attempt, c.state) for c in store.checkpoints(cell)]
        yield CellStream(store.root, cell, [AttemptInfo.of(a) for a in by_cell.get(cell, [])], marks)


def _history(root: Path, cell: str, records: list[AttemptRecord], store: Store) -> CellHistory:
    logs = [attempt_log(root, cell, a.number) for a in records]
    marks = [CheckpointMark(c.step, c.attempt, c.state) for c in store.checkpoints(cell)]
    return stitch(
        cell,
        [AttemptInfo.of(a) for a in records],
        {log.attempt: log.points for log in logs},
        marks,
        damaged={log.attempt: log.damaged for log in logs},
        out_of_range={log.attempt: log.out_of_range for log in logs},
    )


@contextmanager
def _store(root: Path, given: Store | None) -> Iterator[Store]:
    if given is not None:
        yield given
        return
    from sweepq.queue.store import Store  # the queue's engine only when asked: the writer side never needs it

    opened = Store.open_readonly(root)
    try:
        yield opened
    finally:
        opened.close()


def skipped_lines(root: Path, cell: str, damaged: dict[int, int], out_of_range: dict[int, int]) -> Iterator[str]:
    """A warning a metrics.jsonl whose lines were skipped: unreadable ones, numbers out of range (format.py)."""
    for attempt in sorted({*damaged, *out_of_range}):
        path = CellPaths(root, cell).metrics(attempt)
        if damaged.get(attempt):
            yield f"warning: {path}: {damaged[attempt]} unreadable line(s) skipped"
        if out_of_range.get(attempt):
            yield (
                f"warning: {path}: {out_of_range[attempt]} line(s) held numbers out of range, skipped (a step "
                "beyond 64-bit integers, a time that is not a finite number, a value beyond a double)"
            )
