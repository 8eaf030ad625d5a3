"""Attempts' spans worked out by the database (queue/forecast/spans.py's `span`, in SQL), and kept.

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

from sweepq.queue.forecast.model import UNSETTLED
from sweepq.queue.states import CheckpointState, Reason

_UNSETTLED = ", ".join(sorted(f"'{s}'" for s in UNSETTLED))
SETTLED = f"c.state NOT IN ({_UNSETTLED}) AND NOT c.removed"  # a cell `c` that takes no worker


def _us(t: str) -> str:
    """A stored time (SQLite text, naive UTC with microseconds) as whole microseconds since the epoch:
    exact, where julianday() would round."""
    return f"(CAST(strftime('%s', substr({t}, 1, 19)) AS INTEGER) * 1000000 + CAST(substr({t}, 21, 6) AS INTEGER))"


def spans(where: str, marks: str) -> str:
    """Each attempt `a` of a cell `c` that `where` keeps, as forecast.span makes it from forecast_reads'
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
            coalesce(a.start_step, 0) AS k0, a.ended_at IS NOT NULL AS ended, m.fs AS fs, {_us("m.fa")} AS f_us,
            a.reason IS NOT NULL AND a.reason != '{Reason.LOST}' AND a.end_step IS NOT NULL
                AND a.wall_seconds IS NOT NULL AS receipt,
            a.end_step AS end_step, a.wall_seconds AS wall, m.ls AS ls, m.la AS la
        FROM attempts a INDEXED BY ix_attempts_span JOIN cells c ON c.id = a.cell_id
        LEFT JOIN marks m ON m.cell_id = a.cell_id AND m.attempt = a.number
        WHERE {where}
    )
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
SELECT g, cell, steps, micros, startup, ended FROM ({spans(f"{SETTLED} AND a.span_steps IS NULL", _NOT_KEPT)})
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
