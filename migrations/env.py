"""Alembic environment: driven from sweepq.queue.database.Database.upgrade() with a connection in attributes.

On PostgreSQL a sweep's tables live in a schema of its own (sweepq/queue/pg_schema.py): the caller's
connection carries it as `schema_translate_map` {None: schema}. The schema is then created when
missing, alembic's version table goes inside it, and `SET LOCAL search_path` points the statements
that alembic writes as text without a schema (ALTER TABLE ... ADD COLUMN, op.execute) at it, for
this transaction only. A transaction-scoped advisory lock serializes two migrations of one sweep
(its name hashed): released at commit, it keeps nothing in the session, so PgBouncer's transaction
mode is fine. A connection without the option migrates the default schema, as on SQLite.
"""

import hashlib

from alembic import context
from sqlalchemy import text

from sweepq.queue.pg_schema import quoted
from sweepq.queue.schema import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        raise RuntimeError("sweepq migrations run from sweepq.queue.database.Database.upgrade(), not the alembic CLI")
    schema = (connection.get_execution_options().get("schema_translate_map") or {}).get(None)
    if schema is not None:
        if connection.dialect.name != "postgresql":
            raise RuntimeError(f"a sweep schema ({schema}) is for PostgreSQL, not {connection.dialect.name}")
        name = quoted(schema)
        key = int.from_bytes(hashlib.sha256(f"sweepq migrate {schema}".encode()).digest()[:8], "big", signed=True)
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})
        connection.execute(text(f"CREATE SCHEMA IF NOT EXISTS {name}"))
        connection.execute(text(f"SET LOCAL search_path TO {name}"))
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things, so batch mode copies tables there; a server alters in place.
        render_as_batch=connection.dialect.name == "sqlite",
        version_table_schema=schema,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise RuntimeError("offline (SQL script) migrations are not supported")
run_migrations_online()
