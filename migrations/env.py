"""Alembic environment: driven from sweepq.queue.database.Database.upgrade() with a connection in attributes."""

from alembic import context

from sweepq.queue.schema import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        raise RuntimeError("sweepq migrations run from sweepq.queue.database.Database.upgrade(), not the alembic CLI")
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things, so batch mode copies tables there; a server alters in place.
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise RuntimeError("offline (SQL script) migrations are not supported")
run_migrations_online()
