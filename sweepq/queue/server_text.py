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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from psycopg.types.string import TextLoader

from sweepq.errors import UsageError
from sweepq.queue import pg_schema
from sweepq.queue.opening import VERSION_TABLE, check_current
from sweepq.queue.reads import Reads


def _utcnow() -> datetime:
    return datetime.now(UTC)


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


class ServerReader(Reads):
    """The queue's `Reads` on a server, over psycopg alone: what read commands read a server sweep with,
    without SQLAlchemy (its import is most of what a read command costs; opening.py's `Reader` is the
    same for a SQLite file). One connection for the command, each read in its own read-only transaction
    on the sweep's schema (`ServerText`); `holders` is status's look at the leases (leases.py)."""

    def __init__(
        self, root: Path, conninfo: str, schema: str, clock: Callable[[], datetime] = _utcnow, shown: str = ""
    ) -> None:
        super().__init__(root, self._raw, clock)
        self.conninfo, self.schema, self.shown = conninfo, schema, shown
        self._conn: Any = None

    @classmethod
    def open(
        cls, root: Path, url: str, sweep: str, where: str, clock: Callable[[], datetime] = _utcnow
    ) -> ServerReader:
        """`url` (a SQLAlchemy URL, placeholders filled in) and the sweep's name; refused as `Store.open_readonly`
        refuses a database: no sweep of that name, a schema other than this sweepq's. `where`: the URL shown."""
        reader = cls(root, conninfo(url), pg_schema.sweep_schema(sweep), clock, shown=where)
        check_current(reader.revision(), where)
        return reader

    def revision(self) -> str | None:
        with self._raw() as c:
            table = f"{pg_schema.quoted(self.schema)}.{VERSION_TABLE}"
            found = c.execute("SELECT to_regclass(?) IS NOT NULL", (table,)).fetchone()  # queries.py's placeholder
            if not found or not found[0]:
                return None
            rows = [r for (r,) in c.execute(f"SELECT version_num FROM {VERSION_TABLE}")]
        return rows[0] if len(rows) == 1 else None

    @contextmanager
    def _raw(self) -> Iterator[Any]:
        import psycopg

        if self._conn is None:
            try:
                self._conn = psycopg.connect(self.conninfo)
            except psycopg.OperationalError as e:  # the server is down, unreachable, or refuses this user
                raise UsageError(f"the database {self.shown} cannot be reached: {str(e).strip()}") from None
            self._conn.read_only = True  # every transaction BEGIN ... READ ONLY: a reader never writes
        with self._conn.transaction():
            yield ServerText(self._conn, self.schema)

    def holders(self) -> dict[str, tuple[str | None, float, bool]]:
        """Every lease as (host, seconds since its last renewal, alive): `TableLiveness.holders` as a process
        that just connected answers it (every lease alive, even one past its expiry: its holder may only
        have been cut off from the server, leases.py)."""
        with self._raw() as c:
            rows = c.execute("SELECT cell_id, host, extract(epoch FROM now() - renewed_at) FROM leases").fetchall()
        return {cell: (host, max(0.0, float(age)), True) for cell, host, age in rows}

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def conninfo(url: str) -> str:
    """A SQLAlchemy URL of psycopg's dialect as libpq reads it: `postgresql+psycopg://` -> `postgresql://`."""
    scheme, sep, rest = url.partition("://")
    return f"{scheme.split('+', 1)[0]}{sep}{rest}"
