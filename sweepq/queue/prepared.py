"""Core statements compiled once for a dialect and run on the driver's cursor (the claim's hot path).

A claim is the database's cheapest kind of write, one short transaction, and
SQLAlchemy's execution of a statement (parameters processed through the
compiled statement, results wrapped, events) costs several times SQLite's own
work there. A `Prepared` keeps what SQLAlchemy decided once: the SQL for this
dialect, the order of its parameters, how each parameter and returned column
converts. It runs on the DBAPI cursor of a Connection whose transaction
SQLAlchemy began (`BEGIN IMMEDIATE` on SQLite) and ends, and raises a driver's
error as SQLAlchemy's (`OperationalError` for a full disk), as
`Connection.execute` would.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from sqlalchemy import ClauseElement, ColumnElement, Connection
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.compiler import SQLCompiler


def schema_of(conn: Connection) -> str | None:
    """The sweep schema `conn`'s statements are mapped to (pg_schema.execution_options); None on SQLite."""
    return cast(str | None, (conn.get_execution_options().get("schema_translate_map") or {}).get(None))


Convert = Callable[[Any], Any] | None


class Prepared:
    """`stmt` for `dialect`; `returns`: the columns its RETURNING gives, for their conversion."""

    def __init__(
        self,
        stmt: ClauseElement,
        dialect: Dialect,
        returns: Sequence[ColumnElement[Any]] = (),
        schema: str | None = None,
        inline: bool = False,
    ) -> None:
        # On a server the sweep's tables are in its schema (pg_schema.py), written into the SQL here:
        # the driver's cursor knows nothing of SQLAlchemy's schema_translate_map.
        translate: dict[str, Any] = (
            {"schema_translate_map": {None: schema}, "render_schema_translate": True} if schema else {}
        )
        compiled = cast(SQLCompiler, stmt.compile(dialect=dialect, **translate))
        self.sql = compiled.string
        self.binders: dict[str, Convert] = {}
        fixed: dict[str, Any] = {}
        for bind, key in compiled.bind_names.items():  # each parameter and the name the SQL gives it
            convert = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if bind.required:
                self.binders[key] = convert
            else:  # a literal of the statement, converted once
                fixed[key] = bind.effective_value if convert is None else convert(bind.effective_value)
        if inline and not compiled.positional:
            # The statement's own constants (states, LIMIT 1, attempts + 1) written into its text, as a
            # hand-written statement has them: a server plans a prepared statement once for all its runs
            # (a generic plan), and with `state = $1` it cannot tell which index seeks a state (measured
            # on PostgreSQL 15: the claim's generic plan 5x slower than one planned with its constants).
            sql = self.sql
            for bind, key in compiled.bind_names.items():
                if key in fixed:
                    sql = sql.replace(f"%({key})s", _literal(bind, dialect))
                    del fixed[key]
            self.sql = sql
        self.fixed = fixed
        self.order = list(compiled.positiontup or []) if compiled.positional else None
        # Where each parameter goes in a positional list: a statement may use one several times (`now`).
        self.places = {k: [i for i, o in enumerate(self.order) if o == k] for k in self.binders} if self.order else {}
        self.readers: list[Convert] = [c.type.dialect_impl(dialect).result_processor(dialect, None) for c in returns]

    def args(self, values: Mapping[str, Any]) -> Any:
        """The driver's parameters for `values` (a list for a positional paramstyle, else a dict)."""
        bound = dict(self.fixed)
        for key, convert in self.binders.items():
            bound[key] = values[key] if convert is None else convert(values[key])
        return bound if self.order is None else [bound[k] for k in self.order]

    def rows(self, conn: Connection, values: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        """Run a read in `conn`'s transaction: every row as the driver gives it (no column is converted)."""
        args = self.args(values or {})
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            cursor.execute(self.sql, args)
            return cast(list[tuple[Any, ...]], cursor.fetchall())
        except conn.dialect.loaded_dbapi.Error as e:
            raise DBAPIError.instance(self.sql, args, e, conn.dialect.loaded_dbapi.Error) from e
        finally:
            cursor.close()

    def put(self, args: Any, key: str, value: Any) -> None:
        """Set one parameter of `args` (made by `args`) to `value`, converted as `args` converts it, in every
        place the statement uses it."""
        convert = self.binders[key]
        value = value if convert is None else convert(value)
        if self.order is None:
            args[key] = value
            return
        for at in self.places[key]:
            args[at] = value

    def run(self, conn: Connection, values: Mapping[str, Any]) -> tuple[Any, ...] | None:
        """Run in `conn`'s transaction: the first row it returns, converted (None when none or no RETURNING)."""
        row = self.execute(conn, self.args(values))
        return None if row is None else self.convert(row)

    def execute(self, conn: Connection, args: Any) -> tuple[Any, ...] | None:
        """Run with the driver's parameters `args` (see `args`): the first row it returns as the driver gives
        it (None when none or no RETURNING). The claim makes its parameters before its turn (claim.py)."""
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            cursor.execute(self.sql, args)
            return cast(tuple[Any, ...] | None, cursor.fetchone() if self.readers else None)
        except conn.dialect.loaded_dbapi.Error as e:  # looked up only when something was raised
            raise DBAPIError.instance(self.sql, args, e, conn.dialect.loaded_dbapi.Error) from e
        finally:
            cursor.close()

    def convert(self, row: Sequence[Any]) -> tuple[Any, ...]:
        """A returned row with each column converted as SQLAlchemy would."""
        return tuple(v if f is None else f(v) for f, v in zip(self.readers, row, strict=True))


def _literal(bind: Any, dialect: Dialect) -> str:
    """A constant of a statement as SQL text (NULL, a number, a quoted string), as `literal_binds` renders it."""
    value = bind.effective_value
    if value is None:
        return "NULL"
    render = bind.type.dialect_impl(dialect).literal_processor(dialect)
    return str(render(value) if render is not None else value)
