"""queries.py's SQL text on a PostgreSQL server: its SQLite-only spellings, each replaced once, here.

The reads are written once, in queries.py, in the SQL that the standard library's sqlite3 runs
without SQLAlchemy (read commands must answer at once). On a server the same text runs through
`ServerText`, which gives it psycopg's placeholders and PostgreSQL's spelling of the few words
queries.py names as SQLite's own (`live`'s `IS 0`, `INDEXED BY`, `_us`, the two-argument
min/max), and points its unqualified table names at the sweep's schema with `SET LOCAL
search_path`, which ends with the transaction (nothing kept in the session: PgBouncer's
transaction mode is fine).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from psycopg.types.string import TextLoader

from sweepq.queue import pg_schema

# (SQLite's spelling, PostgreSQL's), applied in order to every text.
_SPELLINGS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"%"), "%%"),  # psycopg's placeholders start with %: a literal one is doubled
    (re.compile(r"\?"), "%s"),
    (re.compile(r"\bIS 0\b"), "IS false"),  # queries.live: removed is a boolean column there
    (re.compile(r"\s+INDEXED BY \w+"), ""),  # a hint only SQLite takes; the planner picks on a server
    # queries._us: a stored time as whole microseconds since the epoch.
    (
        re.compile(
            r"\(CAST\(strftime\('%%s', substr\(([\w.]+), 1, 19\)\) AS INTEGER\) \* 1000000 "
            r"\+ CAST\(substr\(\1, 21, 6\) AS INTEGER\)\)"
        ),
        r"CAST(extract(epoch FROM \1) * 1000000 AS BIGINT)",
    ),
    # SQLite truncates a real cast to an integer, PostgreSQL rounds: floor keeps SQLite's figure.
    (re.compile(r"CAST\((\w+) \* 1000000\.0 \+ 0\.5 AS INTEGER\)"), r"CAST(floor(\1 * 1000000.0 + 0.5) AS BIGINT)"),
    (re.compile(r"\bmin\(max\(0\.0, "), "least(greatest(0.0, "),
    (re.compile(r",\s+max\(0\.0, before\)\)"), ", greatest(0.0, before))"),
)


@lru_cache(maxsize=256)
def spelled(sql: str) -> str:
    """`sql` (queries.py's text) as PostgreSQL reads it."""
    for pattern, replacement in _SPELLINGS:
        sql = pattern.sub(replacement, sql)
    return sql


class ServerText:
    """A psycopg connection in a read transaction, answering queries.py's text as sqlite3 would."""

    def __init__(self, conn: Any, schema: str) -> None:
        self.conn = conn
        # And no JIT compilation: PostgreSQL compiles a query whose estimated cost passes jit_above_cost,
        # which these reads of a large sweep do (their subplans are costed per row), and the compiling
        # costs more than running them (measured on 100,000 cells: 1.1 s of the unsettled cells' 1.6 s).
        # Both in one round trip (no parameters: the simple protocol takes several statements).
        conn.execute(f"SET LOCAL search_path TO {pg_schema.quoted(schema)}; SET LOCAL jit = off")

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Any:
        cursor = self.conn.cursor()
        # JSON columns as their text, as SQLite gives them: the reads parse (or pass on) the text themselves.
        for name in ("json", "jsonb"):
            cursor.adapters.register_loader(name, TextLoader)
        return cursor.execute(spelled(sql), tuple(parameters))
