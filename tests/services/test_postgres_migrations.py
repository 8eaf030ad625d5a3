"""The same alembic migrations create and upgrade a sweep's schema on a real PostgreSQL server.

Each sweep's tables live in a schema of its own (sweepq/queue/pg_schema.py); the migrations are
run the way the queue runs them on SQLite (`command.upgrade` with the connection in attributes),
on a connection that maps the empty schema to the sweep's.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, create_engine, func, insert, inspect, select, text

from sweepq.queue import database as db
from sweepq.queue.pg_schema import execution_options, sweep_schema
from sweepq.queue.schema import Base


def alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(db.migrations_dir()))
    return cfg


def revisions() -> list[str]:
    """Every revision, oldest first."""
    return [s.revision for s in reversed(list(ScriptDirectory.from_config(alembic_config()).walk_revisions()))]


@pytest.fixture
def engine(postgres_url: str) -> Iterator[Engine]:
    engine = create_engine(postgres_url)
    try:
        yield engine
    finally:
        engine.dispose()


def migrate(engine: Engine, sweep: str, revision: str = "head") -> None:
    with engine.connect() as conn, conn.begin():
        conn.execution_options(**execution_options(sweep))
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def sweep_conn(conn: Connection, sweep: str) -> Connection:
    return conn.execution_options(**execution_options(sweep))


def version(conn: Connection, sweep: str) -> list[str]:
    return list(conn.execute(text(f'SELECT version_num FROM "{sweep_schema(sweep)}".alembic_version')).scalars())


def schema_diffs(engine: Engine, sweep: str) -> list[object]:
    """alembic's comparison of the sweep's schema with the models (reflection reads the search path)."""
    with engine.connect() as conn, conn.begin():
        conn.execute(text(f'SET LOCAL search_path TO "{sweep_schema(sweep)}"'))
        return list(compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata))


def test_every_past_revision_upgrades_to_the_models(engine: Engine) -> None:
    """A sweep created by any earlier sweepq is upgraded in place, its rows kept, to the models' schema."""
    chain = revisions()
    assert chain[-1] == db.head_revision() and len(chain) >= 7
    sweep_table = Base.metadata.tables["sweep"]
    for rev in chain:
        sweep = f"from_{rev}"
        migrate(engine, sweep, rev)
        with engine.begin() as conn:
            assert version(conn, sweep) == [rev]
            # The columns of `sweep` that every revision has, written as that revision's sweepq would.
            conn.execute(
                text(f'INSERT INTO "{sweep_schema(sweep)}".sweep (id, name, settings, created_at, updated_at) '
                     "VALUES (1, :name, CAST(:settings AS json), :at, :at)"),
                {"name": sweep, "settings": f'{{"rev": "{rev}"}}', "at": datetime(2026, 1, 1)},
            )  # fmt: skip
        migrate(engine, sweep)
        with engine.connect() as conn:
            assert version(conn, sweep) == [db.head_revision()], rev
            assert schema_diffs(engine, sweep) == [], rev
            kept = sweep_conn(conn, sweep).execute(select(sweep_table.c.name, sweep_table.c.settings)).one()
            assert tuple(kept) == (sweep, {"rev": rev}), rev
    with engine.connect() as conn:
        # Nothing outside the sweeps' schemas: not a table in `public`.
        assert inspect(conn).get_table_names(schema="public") == []


def test_two_sweeps_share_a_database_without_seeing_each_other(engine: Engine) -> None:
    migrate(engine, "alpha")
    migrate(engine, "Beta-2")
    sweeps = Base.metadata.tables["sweep"]
    now = datetime(2026, 1, 1, tzinfo=UTC)
    with engine.connect() as conn:
        with conn.begin():
            sweep_conn(conn, "alpha").execute(
                insert(sweeps), [{"id": 1, "name": "alpha", "settings": {}, "created_at": now, "updated_at": now}]
            )
        for sweep, expected in (("alpha", ["alpha"]), ("Beta-2", [])):
            assert list(sweep_conn(conn, sweep).execute(select(sweeps.c.name)).scalars()) == expected
        # Each sweep has its own tables and its own version table, both at head.
        schemas = set(inspect(conn).get_schema_names())
        assert {sweep_schema("alpha"), sweep_schema("Beta-2")} <= schemas
        for sweep in ("alpha", "Beta-2"):
            assert set(inspect(conn).get_table_names(schema=sweep_schema(sweep))) == {
                *Base.metadata.tables,
                "alembic_version",
            }
            assert version(conn, sweep) == [db.head_revision()]


def test_a_migration_leaves_nothing_in_the_session(engine: Engine) -> None:
    """PgBouncer in transaction mode hands a connection to the next client: no search path may stay set."""
    with engine.connect() as conn:
        before = conn.execute(text("SHOW search_path")).scalar()
        conn.rollback()
        conn.execution_options(**execution_options("gamma"))
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        with conn.begin():
            command.upgrade(cfg, "head")
        assert conn.execute(text("SHOW search_path")).scalar() == before
        assert conn.execute(text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")).scalar() == 0
        conn.rollback()
        # Upgrading a current schema again is a no-op, under the same transaction-scoped lock.
        with conn.begin():
            command.upgrade(cfg, "head")
        assert version(conn, "gamma") == [db.head_revision()]
        assert conn.execute(select(func.count()).select_from(Base.metadata.tables["cells"])).scalar() == 0


def test_downgrades_run_on_postgresql_too(engine: Engine) -> None:
    """No revision's downgrade is SQLite's SQL only (0005 drops its triggers only where it made them)."""
    migrate(engine, "delta")
    with engine.connect() as conn, conn.begin():
        conn.execution_options(**execution_options("delta"))
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "base")
    with engine.connect() as conn:
        assert inspect(conn).get_table_names(schema=sweep_schema("delta")) == ["alembic_version"]
        assert version(conn, "delta") == []
    migrate(engine, "delta")
    assert schema_diffs(engine, "delta") == []


@pytest.mark.process  # two real processes
def test_two_launches_of_a_new_sweep_both_succeed(postgres_url: str, engine: Engine, tmp_path: Path) -> None:
    """Two launches of a new sweep migrate at once: the second waits for the first (a lock that ends with
    the transaction), then finds the schema current, instead of failing on a schema or table that exists.
    Processes, as launches are (alembic's `context` is one per process)."""
    code = f"""
import sys, time
from pathlib import Path
from sqlalchemy import create_engine
sys.path.insert(0, {str(Path(__file__).parent.parent)!r})
from services.test_postgres_migrations import migrate
engine = create_engine(sys.argv[1])
engine.connect().close()
Path(sys.argv[2]).touch()
while not Path(sys.argv[3]).exists():
    time.sleep(0.01)
migrate(engine, "epsilon")
"""
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, postgres_url, str(tmp_path / f"ready{i}"), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready{i}").exists() for i in range(2)) and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    with engine.connect() as conn:
        assert version(conn, "epsilon") == [db.head_revision()]
    assert schema_diffs(engine, "epsilon") == []
