"""`Reads`: the queue's questions, in SQL text (queries.py) on the driver's connection: no SQLAlchemy.

What `status`, `show`, `attempts`, `logs`, `best` and `report` read, and the forecast. A sweep may hold
100,000 cells; `status` shows the cells that need attention and a few others (cli/read_commands.py says
which), so each part is one query that reads only its rows. The full listing (`status --json`) reads
every cell once as plain tuples (no record, no row object per cell).

One `Reads` over a source of connections serves both openers of a root: the `Store` holds one over its
SQLAlchemy session's connection, read commands one over a bare `sqlite3` connection (`Reader`,
queue/opening.py), since importing SQLAlchemy costs several times what `status` does on a small sweep.
"""

from __future__ import annotations

import json
import os
from collections import namedtuple
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sweepq.errors import UsageError
from sweepq.queue import queries
from sweepq.queue.forecast import reads as forecast_reads
from sweepq.queue.forecast.model import CellSeen, Forecast, forecast
from sweepq.queue.queries import LISTED, Driver, in_lists
from sweepq.queue.records import (
    AttemptRecord,
    CellRecord,
    CheckpointRecord,
    EventRecord,
    attempt_records,
    cell_records,
    checkpoint_records,
    event_records,
    iso,
    loads,
    utc,
)
from sweepq.queue.states import CellState
from sweepq.spec.types import Settings

#: A running cell is said to make no progress once silent for the longer of this and three of its steps.
STALL_SECONDS = 120.0
ENV_STALL_SECONDS = "SWEEPQ_STALL_SECONDS"  # overrides STALL_SECONDS (for the reader: `status`)


def stall_floor() -> float:
    try:
        return max(0.0, float(os.environ.get(ENV_STALL_SECONDS, STALL_SECONDS)))
    except ValueError:
        return STALL_SECONDS


@dataclass(frozen=True)
class Census:
    """How many cells are in each state, and which come first (cells gone from the sweep file counted apart)."""

    counts: dict[CellState, int]
    first: dict[CellState, list[str]]  # the first ids of each state, in cell order
    removed: int

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def read_settings(c: Driver, root: Path) -> Settings:
    """The sweep's settings, from its one row (the Store reads them inside its write transactions too)."""
    row = c.execute(queries.SETTINGS).fetchone()
    if row is None:
        raise UsageError(f"{root} has a database but no sweep in it yet")
    try:
        return Settings.from_json(loads(row[0]))
    except (TypeError, ValueError, AttributeError) as e:  # a row another program wrote, or one damaged
        raise UsageError(
            f"the sweep's settings in the database of {root} cannot be read ({e}): launch the sweep "
            "file again to write them, or rebuild the queue with `sweepq repair`"
        ) from None


_Current = namedtuple("_Current", "id step total_steps progress_at started_at start_step")

_Listed = namedtuple("_Listed", LISTED)  # type: ignore[misc]
_STRICT = json.JSONEncoder(allow_nan=False).encode  # as `status --json` refuses a non-finite float


def _as_stored(text: Any) -> bool:
    """Whether a JSON column's value is JSON text as this code stores it: json.dumps's, on one line, with
    no non-finite float (stored as strings, rows.json_safe: a NaN token is a foreign writer's)."""
    return type(text) is str and "NaN" not in text and "Infinity" not in text and "\n" not in text


def _time(v: Any) -> str | None:
    """A stored time as its JSON text: spelt from SQLite's text when it is in the form stored here."""
    if type(v) is str and len(v) == 26 and v[10] == " " and v[19] == ".":  # "2026-01-31 12:00:00.000000"
        return f"{v[:10]}T{v[11:19]}{'' if v[20:] == '000000' else v[19:]}Z"  # datetime.isoformat's
    return iso(utc(v))


def _json_text(v: Any) -> str | None:
    """A JSON column's text: as stored when it is this code's (SQLAlchemy's serializer, or the expansion's
    identical cfg text), else parsed and spelt as `status --json` spells it."""
    if _as_stored(v):
        return v
    value = loads(v)
    return None if value is None else _STRICT(value)


_SPELL: dict[str, Callable[[Any], Any]] = {
    **dict.fromkeys(("retry_after", "updated_at", "finished_at"), _time),
    **dict.fromkeys(("metrics", "cfg", "ran_cfg"), _json_text),
    "removed": bool,
}


class Reads:
    """The queue's questions, over a source of connections: `connect()` gives the driver's connection inside
    one read transaction (the `Store`'s session's, or a `Reader`'s own `sqlite3` one), `clock()` the time."""

    def __init__(
        self, root: Path, connect: Callable[[], AbstractContextManager[Driver]], clock: Callable[[], datetime]
    ) -> None:
        self.root, self._connect, self.clock = root, connect, clock

    # -- the sweep -------------------------------------------------------------------

    def settings(self) -> Settings:
        with self._connect() as c:
            return read_settings(c, self.root)

    def census(self, listed: int = 0) -> Census:
        """The cells counted by state (those gone from the file apart), and the first `listed` ids of each state."""
        counts: dict[CellState, int] = {}
        removed = 0
        with self._connect() as c:
            for state, gone, count in c.execute(queries.CENSUS):
                if gone:
                    removed += count
                else:
                    counts[CellState(state)] = count
            first: dict[CellState, list[str]] = {}
            if listed > 0:
                first = {
                    state: [i for (i,) in c.execute(queries.FIRST_IN_STATE, (str(state), listed))] for state in counts
                }
        return Census(counts, first, removed)

    def unsettled(self) -> int:
        """Cells that are neither done, failed nor cancelled (and still in the sweep)."""
        with self._connect() as c:
            return int(c.execute(queries.UNSETTLED_COUNT).fetchone()[0] or 0)

    # -- cells -------------------------------------------------------------------------

    def cells(self, include_removed: bool = True) -> list[CellRecord]:
        """Every cell in cell order, as records built from the driver's tuples (records.cell_records): reading
        a sweep of 100,000 took 5.4 s through the ORM, 2.0 s as converted tuples."""
        q = queries.EVERY_CELL if include_removed else queries.LIVE_CELLS
        with self._connect() as c:
            return cell_records(c.execute(q))

    def cells_in(
        self, states: Collection[CellState], limit: int | None = None, backing_off: bool = False
    ) -> list[CellRecord]:
        """The cells in `states` (and with `backing_off`, the queued cells waiting out a retry back-off),
        still in the sweep, in cell order; the first `limit` of them."""
        return self._records(queries.cells_in(len(states), backing_off), [str(s) for s in states], limit)

    def best_done(self, goal: str | None, limit: int) -> list[CellRecord]:
        """The `limit` done cells with the best `best` by `goal` ("max" or "min"); with no goal (no metric
        in the sweep), the most recently finished."""
        return self._records(queries.best_done(goal), [], limit)

    def _records(self, q: str, args: list[Any], limit: int | None) -> list[CellRecord]:
        if limit is not None:
            q, args = queries.limited(q), [*args, limit]
        with self._connect() as c:
            return cell_records(c.execute(q, args))

    def cell_listing(self, batch: int = 5000) -> Iterator[Any]:
        """Every cell (those gone from the sweep file included) in cell order: the columns of its
        `status --json` object (`LISTED`, by name), a time as its JSON text (`records.iso`) and a JSON
        column as its JSON text (None: NULL), so that 100,000 cells make no datetime and parse no JSON
        (records.cell_line writes one)."""
        spell = [(i, _SPELL[name]) for i, name in enumerate(LISTED) if name in _SPELL]
        make = _Listed._make
        with self._connect() as c:
            cursor = c.execute(queries.LISTING)
            while rows := cursor.fetchmany(batch):
                for row in rows:
                    values = list(row)
                    for i, f in spell:
                        if values[i] is not None:  # NULL is None in every spelling
                            values[i] = f(values[i])
                    yield make(values)

    # -- attempts --------------------------------------------------------------------

    def last_attempts(self, cells: Sequence[str]) -> list[AttemptRecord]:
        """Each of `cells`' newest attempt (the one its `attempts` counter names)."""
        out: list[AttemptRecord] = []
        with self._connect() as c:
            for marks, ids in in_lists(cells):
                out += attempt_records(c.execute(queries.newest_attempts(marks), ids))
        return out

    def usages(self, cells: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
        """Each cell's usage from its newest attempt that has one (of `cells`, else of every cell): the
        cell, the number and the usage of the attempts that sampled something, nothing else."""
        newest: dict[str, tuple[int, dict[str, Any]]] = {}
        with self._connect() as c:
            for marks, ids in [("", ())] if cells is None else in_lists(cells):
                found = c.execute(queries.usages_of(marks), ids) if marks else c.execute(queries.USAGES)
                for cell, number, text in found:
                    usage = loads(text)
                    if usage and (cell not in newest or number > newest[cell][0]):
                        newest[cell] = (number, usage)
        return {cell: u for cell, (_, u) in newest.items()}

    def usage_texts(self) -> dict[str, str]:
        """`usages()` of every cell, each as its JSON text (what `status --json` puts in, unparsed)."""
        with self._connect() as c:
            newest = c.execute(queries.NEWEST_USAGES).fetchall()
        return {cell: text if _as_stored(text) else _STRICT(json.loads(text)) for cell, text, _ in newest}

    def fault_notes(self) -> dict[str, str]:
        """What the last attempt said of cells whose last reason is the machine's fault (a full disk)."""
        with self._connect() as c:
            return dict(c.execute(queries.FAULT_NOTES))

    # -- running cells -------------------------------------------------------------------

    def running(self) -> list[tuple[str, int]]:
        """(cell, attempt number) of every cell the database believes is running."""
        with self._connect() as c:
            return [(cell, n) for cell, n in c.execute(queries.RUNNING)]

    def etas(self) -> dict[str, float]:
        """Seconds left for running cells, from their attempt's rate since it started."""
        out = {}
        for r in self._current_attempts():
            if not r.total_steps or r.step is None or r.progress_at is None:
                continue
            done, spent = r.step - (r.start_step or 0), (r.progress_at - r.started_at).total_seconds()
            if done > 0 and spent > 0:
                out[r.id] = max(0.0, (r.total_steps - r.step) * spent / done)
        return out

    def stalls(self) -> dict[str, float]:
        """Running cells silent for too long: seconds since their last progress (or their attempt's start).

        Too long is relative to the cell's own cadence: three of its steps, at the
        rate of its current attempt, and at least `stall_floor()` (2 minutes unless
        SWEEPQ_STALL_SECONDS says otherwise). A live training reports within a second
        of each logged step (run.log, flushed each second), so such silence means a
        stopped (SIGSTOP), hung or swapping process, or one that logs more rarely than that.
        """
        now, floor = self.clock(), stall_floor()
        out = {}
        for r in self._current_attempts():
            since = r.progress_at or r.started_at
            silent = (now - since).total_seconds()  # negative when the clock went back: not silent
            steps = (r.step or 0) - (r.start_step or 0)
            per_step = (since - r.started_at).total_seconds() / steps if steps > 0 else 0.0
            if silent > max(floor, 3 * per_step):
                out[r.id] = silent
        return out

    def _current_attempts(self) -> list[_Current]:
        with self._connect() as c:
            rows = c.execute(queries.CURRENT_ATTEMPTS).fetchall()
        return [_Current(i, s, t, None if p is None else utc(p), utc(a), k) for i, s, t, p, a, k in rows]

    # -- one cell, attempts, checkpoints, events ----------------------------------------

    def cell(self, cell_id: str) -> CellRecord:
        with self._connect() as c:
            found = cell_records(c.execute(queries.ONE_CELL, (cell_id,)))
        if not found:
            raise UsageError(f"no cell {cell_id!r} in the sweep at {self.root}")
        return found[0]

    def attempts(
        self, cell: str | None = None, reason: str | None = None, newest_first: bool = False
    ) -> list[AttemptRecord]:
        """The attempts (of `cell`, ended with `reason`), in the order they started."""
        with self._connect() as c:
            return attempt_records(c.execute(*queries.attempts(cell, reason, newest_first)))

    def attempt(self, cell: str, number: int) -> AttemptRecord | None:
        with self._connect() as c:
            found = attempt_records(c.execute(queries.ONE_ATTEMPT, (cell, number)))
        return found[0] if found else None

    def checkpoints(self, cell: str) -> list[CheckpointRecord]:
        """The cell's checkpoints by step, whatever their state."""
        with self._connect() as c:
            return checkpoint_records(c.execute(queries.CHECKPOINTS, (cell,)))

    def checkpoints_in(self, state: str) -> dict[str, list[CheckpointRecord]]:
        """Every cell's checkpoints in `state`, by step: one query, not one a cell (`best` reads them all)."""
        out: dict[str, list[CheckpointRecord]] = {}
        with self._connect() as c:
            for k in checkpoint_records(c.execute(queries.CHECKPOINTS_IN, (state,))):
                out.setdefault(k.cell, []).append(k)
        return out

    def checkpoint_times(self) -> dict[tuple[str, int, int], datetime]:
        """(cell, attempt, step) -> when the queue first knew that checkpoint (its row's time), for every
        checkpoint not corrupt: when the training a later attempt resumed from was made (report's training
        lost)."""
        with self._connect() as c:
            return {
                (cell, a, step): utc(t) for cell, a, step, t in c.execute(queries.CHECKPOINT_TIMES) if a is not None
            }

    def events(self, cell: str | None = None) -> list[EventRecord]:
        """The history (of `cell`), oldest first."""
        with self._connect() as c:
            return event_records(
                c.execute(queries.EVENTS if cell is None else queries.CELL_EVENTS, () if cell is None else (cell,))
            )

    def inexact_resumes(self) -> dict[str, list[int]]:
        """Per cell, the steps its attempts resumed from inexactly (Run.resume_inexact: the data order restarted)."""
        found: dict[str, list[int]] = {}
        with self._connect() as c:
            for cell, detail in c.execute(queries.INEXACT_RESUMES):
                step = (json.loads(detail) if isinstance(detail, str) else detail or {}).get("step")
                found.setdefault(cell, []).append(int(step) if isinstance(step, int) else -1)
        return found

    # -- the forecast ------------------------------------------------------------------

    def forecast(self, workers: int) -> Forecast:
        """The sweep's ETA and each cell's, with `workers` workers, as of the clock; a running cell late by
        more than the silence `status` calls "no progress" (`stall_floor`) is stalled."""
        with self._connect() as c:
            cells, settled = forecast_reads.unsettled(c), forecast_reads.settled(c)
        return forecast(cells, workers, self.clock(), late_s=stall_floor(), settled=settled)

    def forecast_cells(self) -> list[CellSeen]:
        """Every cell still in the sweep, settled ones too, with what its attempts showed of their speed
        (what `forecast` sums in SQL, read one by one)."""
        with self._connect() as c:
            return forecast_reads.every_cell(c)
