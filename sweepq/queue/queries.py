"""The queue's SQL text, each query named and whole: what the read commands, the forecast and the spans read.

Read commands run these on a bare `sqlite3` connection (opening.py's `Reader`) and the `Store` on its
session's (reads.py's `Reads`): one text for both, with the standard library alone. The queue's words
are written once here, at the top: a live cell (`live`), cell order (`cell_order`, from states.py's
CELL_ORDER, which Core's schema.cell_order and the claim index use too), settled and the unsettled
states (states.UNSETTLED). Parameters are `?` (or `:name` where SQLAlchemy runs the text). The
spellings only SQLite reads are named where they are defined (`live`'s `IS 0`, `_us`, `INDEXED BY`,
`MATERIALIZED`): what a second dialect replaces (server_text.py does, for PostgreSQL).

The spans: attempts' spans worked out by the database (forecast/spans.py's `span`, in SQL), and kept.
The forecast needs the span of every attempt of every settled cell: on a sweep of 100,000 cells
that is tens of thousands of attempts, and working each one out again from its times (text that
SQLite parses) was most of what `status` cost. An attempt's span stops changing when it ends, so
it is worked out then, once, and kept on its row (`span_steps`, `span_micros`, `span_startup`;
`span_steps` 0 when it showed no step past its start). A NULL `span_steps` means "not kept": the
reads work such an attempt's span out as before, so a path that ends an attempt without keeping
its span costs time, never a wrong figure.

What would make a kept span stale is a change to what it was worked out from: the attempt's own
times and steps, or its checkpoints' rows (a checkpoint marked corrupt later, a row added by a
repair). Triggers (migration 0005) forget the kept span on any such write, whoever makes it;
`KEEP_CELL` keeps a cell's again when its attempt ends (`Store.finish`), `KEEP_ALL` every one
not kept (`Store.keep_spans`, at each launch).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from typing import Any, Protocol

from sweepq.queue.records import ATTEMPT_NAMES, CELL_NAMES, CHECKPOINT_NAMES, EVENT_NAMES
from sweepq.queue.states import CELL_ORDER, MACHINE_FAULTS, REMOVED, UNSETTLED, CellState, CheckpointState, Reason

IN_BATCH = 500  # ids in one IN (...): well under SQLite's limit on bound parameters


class Driver(Protocol):
    """The driver's connection, as `sqlite3.Connection` is: `execute` gives a cursor of tuples."""

    def execute(self, sql: str, parameters: Sequence[Any] = ..., /) -> Any: ...


def marks(n: int) -> str:
    return ", ".join("?" * n)


def in_lists(ids: Sequence[str]) -> Iterator[tuple[str, Sequence[str]]]:
    """`ids` in lists of IN_BATCH (a list of IN (...) not json_each: SQLite's JSON functions are optional
    before 3.38): each list's `?, ?, ...` and its ids."""
    for i in range(0, len(ids), IN_BATCH):
        some = ids[i : i + IN_BATCH]
        yield marks(len(some)), some


# -- the vocabulary: each word said once ------------------------------------------------------------
# SQLite-only spellings are named here and nowhere else: `live` (a 0/1 column) and, in the spans below,
# `_us` (time text to microseconds), `INDEXED BY` and `MATERIALIZED`. A second dialect replaces these.


def live(t: str = "") -> str:
    """A live cell, in SQL text; `t` the table's prefix (`cells.`, `c.`). Spelled as SQLAlchemy spells
    Core's (schema.live) on SQLite, `removed IS 0`, so that ix_cells_claim is read the same way."""
    return f"{t}{REMOVED} IS 0"


def cell_order(t: str = "") -> str:
    """Cell order, in SQL text (an ORDER BY's terms); Core's is schema.cell_order."""
    return ", ".join(f'{t}"{n}"' for n in CELL_ORDER)


#: The states of a cell that still takes a worker (states.UNSETTLED), as an SQL list.
UNSETTLED_LIST = ", ".join(sorted(f"'{s}'" for s in UNSETTLED))
#: A cell `c` that takes no worker: settled, and still in the sweep.


def settled(t: str = "") -> str:
    """A cell that takes no worker: settled (done, failed, cancelled) and still in the sweep."""
    return f"{t}state NOT IN ({UNSETTLED_LIST}) AND {live(t)}"


SETTLED = settled("c.")


def quoted(names: Collection[str], table: str = "") -> str:
    """Column names as a SELECT lists them (`table` their prefix)."""
    return ", ".join(f'{table}"{n}"' for n in names)


def _texts(values: Collection[Any]) -> str:
    return ", ".join(sorted(f"'{v}'" for v in values))  # our own states and reasons: no quote in them


def limited(q: str) -> str:
    """`q`, its first `?` rows (the last parameter)."""
    return f"{q} LIMIT ?"


# -- what status and the other read commands read (reads.py) ------------------------------------------

#: The columns of a cell's `status --json` object.
LISTED = (
    *("id", "group_name", "state", "step", "total_steps", "epoch", "total_epochs", "attempts", "last_reason"),
    *("metrics", "best", "best_step", "retry_after", "removed", "updated_at", "finished_at", "cfg", "ran_cfg"),
)

SETTINGS = "SELECT settings FROM sweep WHERE id = 1"
CENSUS = "SELECT state, removed, count(*) FROM cells GROUP BY state, removed"
FIRST_IN_STATE = f"SELECT id FROM cells WHERE {live()} AND state = ? ORDER BY {cell_order()} LIMIT ?"
UNSETTLED_COUNT = f"SELECT count(*) FROM cells WHERE state IN ({UNSETTLED_LIST}) AND {live()}"

_CELL_ROWS = f"SELECT {quoted(CELL_NAMES)} FROM cells"
EVERY_CELL = f"{_CELL_ROWS} ORDER BY {cell_order()}"
LIVE_CELLS = f"{_CELL_ROWS} WHERE {live()} ORDER BY {cell_order()}"
ONE_CELL = f"{_CELL_ROWS} WHERE id = ?"
LISTING = f"SELECT {quoted(LISTED)} FROM cells ORDER BY {cell_order()}"
RUNNING = f"SELECT id, attempts FROM cells WHERE state = '{CellState.RUNNING}'"


def cells_in(n_states: int, backing_off: bool) -> str:
    """The live cells in `n_states` states (the parameters), in cell order; with `backing_off`, the queued
    cells waiting out a retry back-off too."""
    wanted = f"state IN ({marks(n_states)})"
    if backing_off:
        wanted = f"({wanted} OR (state = '{CellState.QUEUED}' AND retry_after IS NOT NULL))"
    return f"{_CELL_ROWS} WHERE {wanted} AND {live()} ORDER BY {cell_order()}"


def best_done(goal: str | None) -> str:
    """The live done cells, best first by `goal` ("max", "min"); with none, the most recently finished."""
    done = f"{_CELL_ROWS} WHERE state = '{CellState.DONE}' AND {live()}"
    if goal is None:
        return f"{done} ORDER BY finished_at DESC, {cell_order()}"
    return f"{done} AND best IS NOT NULL ORDER BY best {'DESC' if goal == 'max' else 'ASC'}, {cell_order()}"


_NEWEST = "JOIN cells c ON a.cell_id = c.id AND a.number = c.attempts"  # a cell's newest attempt


def newest_attempts(held: str) -> str:
    """The newest attempt of each of the cells `held` (`?, ?, ...`)."""
    return f"SELECT {quoted(ATTEMPT_NAMES, 'a.')} FROM attempts a {_NEWEST} WHERE c.id IN ({held})"


CURRENT_ATTEMPTS = (
    "SELECT c.id, c.step, c.total_steps, c.progress_at, a.started_at, a.start_step "
    f"FROM attempts a {_NEWEST} WHERE c.state = '{CellState.RUNNING}'"
)
FAULT_NOTES = (
    f"SELECT c.id, a.note FROM attempts a {_NEWEST} WHERE c.last_reason IN ({_texts(MACHINE_FAULTS)}) "
    "AND a.reason = c.last_reason AND a.note IS NOT NULL"
)
USAGES = "SELECT cell_id, number, usage FROM attempts WHERE usage IS NOT NULL"


def usages_of(held: str) -> str:
    return f"{USAGES} AND cell_id IN ({held})"


# Each cell's newest attempt among those whose usage is not empty (the first of its cell, newest first:
# a window, which SQLite and PostgreSQL both read). Stored by json.dumps: an empty one is `{}` or `null`
# (compared as text: a server's JSON type has no equality).
NEWEST_USAGES = (
    "SELECT cell_id, usage, number FROM (SELECT cell_id, usage, number, "
    "row_number() OVER (PARTITION BY cell_id ORDER BY number DESC) AS newest FROM attempts "
    "WHERE usage IS NOT NULL AND CAST(usage AS TEXT) NOT IN ('null', '{}')) AS u WHERE newest = 1"
)

_ATTEMPT_ROWS = f"SELECT {quoted(ATTEMPT_NAMES)} FROM attempts"
ONE_ATTEMPT = f"{_ATTEMPT_ROWS} WHERE cell_id = ? AND number = ?"


def attempts(cell: str | None, reason: str | None, newest_first: bool) -> tuple[str, list[str]]:
    """The attempts (of `cell`, ended with `reason`) in the order they started, and the parameters."""
    where = [(f, v) for f, v in (("cell_id = ?", cell), ("reason = ?", reason)) if v is not None]
    order = " DESC" if newest_first else ""
    q = f"{_ATTEMPT_ROWS}{' WHERE ' if where else ''}{' AND '.join(f for f, _ in where)} "
    return f"{q}ORDER BY started_at{order}, id{order}", [v for _, v in where]


CHECKPOINTS = f"SELECT {quoted(CHECKPOINT_NAMES)} FROM checkpoints WHERE cell_id = ? ORDER BY step"
CHECKPOINTS_IN = f"SELECT {quoted(CHECKPOINT_NAMES)} FROM checkpoints WHERE state = ? ORDER BY cell_id, step, id"
CHECKPOINT_TIMES = (
    "SELECT cell_id, attempt, step, min(created_at) FROM checkpoints "
    f"WHERE state != '{CheckpointState.CORRUPT}' GROUP BY cell_id, attempt, step"
)
EVENTS = f"SELECT {quoted(EVENT_NAMES)} FROM events ORDER BY at, id"
CELL_EVENTS = f"SELECT {quoted(EVENT_NAMES)} FROM events WHERE cell_id = ? ORDER BY at, id"
# Resumes a program declared inexact (Run.resume_inexact, whose event kind this is): status and best flag them,
# since the cell's last reset (which starts it over: its result no longer comes from that resume).
INEXACT_RESUMES = (
    "SELECT e.cell_id, e.detail FROM events e WHERE e.kind = 'resume_inexact' AND NOT EXISTS "
    "(SELECT 1 FROM events r WHERE r.cell_id = e.cell_id AND r.kind = 'reset' AND r.id > e.id) ORDER BY e.at, e.id"
)


# -- the forecast's spans (forecast/reads.py; kept by attempts.py) --------------------------------------


def _us(t: str) -> str:
    """A stored time (SQLite text, naive UTC with microseconds) as whole microseconds since the epoch:
    exact, where julianday() would round."""
    return f"(CAST(strftime('%s', substr({t}, 1, 19)) AS INTEGER) * 1000000 + CAST(substr({t}, 21, 6) AS INTEGER))"


def spans(where: str, marks: str) -> str:
    """Each attempt `a` of a cell `c` that `where` keeps, as forecast.span makes it from forecast/reads.py's
    points, in the same floating-point operations: its first point its first checkpoint, its last its
    end as its receipt measured it (a lost one's: its newest checkpoint), a steady span from the first
    to the last point. Columns: id, g, cell, steps, micros, startup, ended; only attempts with a step
    past their start. `marks`: which cells' checkpoints to read (a condition on `cell_id`)."""
    return f"""
WITH marks AS (
    SELECT cell_id, attempt, min(step) AS fs, min(created_at) AS fa, max(step) AS ls, max(created_at) AS la
    FROM checkpoints WHERE state != '{CheckpointState.CORRUPT}' AND {marks} GROUP BY cell_id, attempt
), lasts AS MATERIALIZED (
    SELECT id, g, cell, s0, k0, ended, fs, f_us,
        CASE WHEN receipt THEN end_step ELSE ls END AS l_step,
        CASE WHEN receipt THEN s0 + CAST(wall * 1000000.0 + 0.5 AS INTEGER) ELSE {_us("la")} END AS l_us
    FROM (
        SELECT a.id AS id, c.group_number AS g, a.cell_id AS cell, {_us("a.started_at")} AS s0,
            coalesce(a.start_step, 0) AS k0, CAST(a.ended_at IS NOT NULL AS INTEGER) AS ended, m.fs AS fs,
            {_us("m.fa")} AS f_us,
            a.reason IS NOT NULL AND a.reason != '{Reason.LOST}' AND a.end_step IS NOT NULL
                AND a.wall_seconds IS NOT NULL AS receipt,
            a.end_step AS end_step, a.wall_seconds AS wall, m.ls AS ls, m.la AS la
        FROM attempts a INDEXED BY ix_attempts_span JOIN cells c ON c.id = a.cell_id
        LEFT JOIN marks m ON m.cell_id = a.cell_id AND m.attempt = a.number
        WHERE {where}
    ) AS t
), steady AS (
    SELECT *, fs IS NOT NULL AND l_step > fs AND l_us > f_us AS steady, (f_us - s0) / 1000000.0 AS before
    FROM lasts WHERE l_step > k0
)
SELECT id, g, cell,
    CASE WHEN steady THEN l_step - fs ELSE l_step - k0 END AS steps,
    CASE WHEN steady THEN l_us - f_us ELSE l_us - s0 END AS micros,
    CASE WHEN steady THEN min(max(0.0, before - (fs - k0) * ((l_us - f_us) / 1000000.0) / (l_step - fs)),
                              max(0.0, before)) END AS startup,
    ended
FROM steady
"""


_UNKNOWN = "a.ended_at IS NOT NULL AND a.span_steps IS NULL"
# The cells with an attempt whose span is not kept (running ones, those a write made stale): few.
_NOT_KEPT = "cell_id IN (SELECT cell_id FROM attempts INDEXED BY ix_attempts_span WHERE span_steps IS NULL)"

#: The settled cells' spans: those kept, read as they are from their index (only an ended attempt's
#: span is kept), and the others worked out. Columns: g, cell, steps, micros, startup, ended.
SETTLED_SPANS = f"""
SELECT c.group_number, a.cell_id, a.span_steps, a.span_micros, a.span_startup, 1
FROM attempts a INDEXED BY ix_attempts_span JOIN cells c ON c.id = a.cell_id
WHERE {SETTLED} AND a.span_steps > 0
UNION ALL
SELECT g, cell, steps, micros, startup, ended FROM ({spans(f"{SETTLED} AND a.span_steps IS NULL", _NOT_KEPT)}) AS s
"""


def keep(cell: bool) -> list[str]:
    """The statements that keep the span of every ended attempt that has none kept (of the cell `:cell`
    when `cell`): worked out, then 0 for those that showed no step past their start."""
    only = " AND a.cell_id = :cell" if cell else ""
    marks = "cell_id = :cell" if cell else _NOT_KEPT
    return [
        f"UPDATE attempts SET span_steps = s.steps, span_micros = s.micros, span_startup = s.startup "
        f"FROM ({spans(_UNKNOWN + only, marks)}) AS s WHERE attempts.id = s.id",
        "UPDATE attempts INDEXED BY ix_attempts_span SET span_steps = 0 "
        "WHERE ended_at IS NOT NULL AND span_steps IS NULL" + (" AND cell_id = :cell" if cell else ""),
    ]


KEEP_CELL = keep(cell=True)
KEEP_ALL = keep(cell=False)


# -- the forecast's reads (forecast/reads.py) --------------------------------------------------

# Times only where they tell something (a time costs more to read than any other value): the progress
# of a running cell, the back-off of a waiting one.
_COLUMNS = (
    'SELECT cells.id, cells.group_number, cells."index", cells.state, cells.attempts, cells.step, cells.total_steps, '
    f"CASE WHEN (cells.state = '{CellState.RUNNING}') THEN cells.progress_at END AS progress_at, cells.retry_after, "
    "CASE WHEN (cells.retry_after IS NOT NULL) THEN cells.updated_at END AS updated_at"
)
FORECAST_CELLS = f"{_COLUMNS} FROM cells WHERE {live('cells.')} ORDER BY {cell_order('cells.')}"

# A fresh cell: queued, never tried (no attempt, no checkpoint kept), no back-off. Its forecast is its
# group's speed and length from the start: `_cell` would make of it a CellSeen with defaults only.
_FRESH = (
    f"cells.state = '{CellState.QUEUED}' AND cells.retry_after IS NULL "
    "AND NOT (EXISTS (SELECT * FROM attempts WHERE attempts.cell_id = cells.id)) "
    "AND NOT (EXISTS (SELECT * FROM checkpoints WHERE checkpoints.cell_id = cells.id "
    f"AND checkpoints.state != '{CheckpointState.CORRUPT}'))"
)
# The cells that take a worker, each with whether it is fresh (a seek of ix_cells_claim per state).
UNSETTLED_CELLS = (
    f"{_COLUMNS}, {_FRESH} AS fresh FROM cells WHERE cells.state IN ({UNSETTLED_LIST}) AND {live('cells.')}"
)

FORECAST_ATTEMPTS = (
    "SELECT attempts.cell_id, attempts.number, attempts.started_at, attempts.ended_at, attempts.start_step, "
    "attempts.end_step, attempts.wall_seconds, attempts.reason, "
    "attempts.number > (SELECT cells.budget_base FROM cells WHERE cells.id = attempts.cell_id) AS current "
    "FROM attempts WHERE{only} 1 = 1 ORDER BY attempts.cell_id, attempts.number"
)

# Per attempt, its first and last checkpoint (steps grow with time within an attempt), and the
# newest committed step (what the cell resumes from).
FORECAST_MARKS = (
    "SELECT checkpoints.cell_id, checkpoints.attempt, min(checkpoints.step) AS first_step, "
    "min(checkpoints.created_at) AS first_at, max(checkpoints.step) AS last_step, "
    "max(checkpoints.created_at) AS last_at, "
    f"max(CASE WHEN (checkpoints.state = '{CheckpointState.COMMITTED}') THEN checkpoints.step END) AS committed "
    f"FROM checkpoints WHERE{{only}} checkpoints.state != '{CheckpointState.CORRUPT}' "
    "GROUP BY checkpoints.cell_id, checkpoints.attempt"
)

_SETTLED_CELLS = settled("cells.")
SETTLED_LENGTHS = (
    "SELECT cells.group_number, sum(cells.total_steps), count(*) FROM cells "
    f"WHERE {_SETTLED_CELLS} AND cells.total_steps IS NOT NULL AND cells.total_steps != 0 GROUP BY cells.group_number"
)
# The sweep's time: attempts made since their cell was last run afresh (reset, retry: its budget_base).
SETTLED_TIMES = (
    "SELECT min(attempts.started_at), max(attempts.ended_at) "
    f"FROM attempts JOIN cells ON cells.id = attempts.cell_id WHERE {_SETTLED_CELLS} "
    "AND attempts.number > cells.budget_base"
)
