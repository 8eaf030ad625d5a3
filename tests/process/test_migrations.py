"""The schema comes from alembic migrations, equals the models, and ships inside the wheel."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from conftest import HERE
from sqlalchemy import inspect

from sweepq.errors import UsageError
from sweepq.queue import database as db
from sweepq.queue.database import Database
from sweepq.queue.schema import Base
from sweepq.queue.store import Store

REPO = HERE.resolve().parent


def test_migrated_schema_equals_the_models(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "root", create=True)
    try:
        with store.engine.connect() as conn:
            diffs = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
            assert diffs == []
            assert db.current_revision(store.engine) == db.head_revision()
            tables = set(inspect(conn).get_table_names())
        assert tables == set(Base.metadata.tables) | {"alembic_version"}
        # The triggers that forget a kept span (migration 0005): a batch migration would drop them.
        triggers = store.engine.connect().exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        assert {t for (t,) in triggers} == {
            "tr_span_checkpoint_insert",
            "tr_span_checkpoint_update",
            "tr_span_checkpoint_delete",
            "tr_span_attempt_update",
        }
        mode = store.engine.connect().exec_driver_sql("PRAGMA journal_mode").scalar()
        assert mode == "wal"
    finally:
        store.close()


def test_read_commands_refuse_an_unmigrated_database(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    database = Database.for_root(root)
    with database.engine.begin() as conn:
        conn.exec_driver_sql("create table t (x int)")
    database.dispose()
    r = subprocess.run(
        [sys.executable, "-m", "sweepq.cli", "status", "--root", str(root)], capture_output=True, text=True
    )
    assert r.returncode == 2 and "schema revision None" in r.stderr
    assert db.current_revision(Database.for_root(root).engine) is None  # status did not migrate


def test_installed_wheel_creates_a_root_without_the_source_tree(tmp_path: Path) -> None:
    """migrations/ is a top-level folder: the wheel must carry it as sweepq.migrations."""
    dist, source = tmp_path / "dist", tmp_path / "source"
    # From a clean copy: setuptools reuses a source tree's build/ folder, which may hold packages
    # that pyproject.toml no longer (or not yet) names.
    junk = shutil.ignore_patterns("build", "dist", ".venv*", ".git", "runs", "*.egg-info", "__pycache__")
    shutil.copytree(REPO, source, ignore=junk)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(source)],
        check=True,
        capture_output=True,
    )
    (wheel,) = dist.glob("sweepq-*.whl")
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    assert (target / "sweepq" / "migrations" / "versions" / "0001_initial.py").exists()
    packages = [p.parent.relative_to(REPO) for p in (REPO / "sweepq").rglob("__init__.py")]
    missing = [str(p) for p in packages if not (target / p / "__init__.py").exists()]
    assert not missing, f"packages left out of the wheel (pyproject.toml's packages list): {missing}"
    code = (
        "import sweepq, sweepq.queue.database as d; from pathlib import Path; from sweepq.queue.store import Store;"
        "s = Store.open(Path('root'), create=True);"
        "print(sweepq.__file__); print(d.migrations_dir()); print(d.current_revision(s.engine))"
    )
    env = dict(os.environ, PYTHONPATH=str(target))
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    module, migrations, revision = r.stdout.split()
    assert module.startswith(str(target)) and migrations.startswith(str(target))
    assert revision == db.head_revision()


def test_the_database_is_where_its_url_says(tmp_path: Path) -> None:
    """Callers ask the Database, never the file: a URL elsewhere leaves no sweepq.db in the root."""
    root = tmp_path / "root"
    default = Database.for_root(root)
    assert default.url.render_as_string() == f"sqlite:///{root}/sweepq.db"
    assert not default.exists() and not root.exists()  # asking creates nothing
    default.check_writable()  # nothing there yet: nothing to refuse

    elsewhere = Database(f"sqlite:///{tmp_path / 'queues' / 'q.db'}", migrate_lock=tmp_path / "migrate.lock")
    (tmp_path / "queues").mkdir()
    store = Store.open(root, create=True, database=elsewhere)
    store.close()
    assert elsewhere.exists() and not default.exists()
    reader = Store.open_readonly(root, database=Database(elsewhere.url))
    try:
        assert reader.cells() == [] and reader.database.schema_current()
    finally:
        reader.close()

    server = Database("postgresql+psycopg://sweep:secret@db.example/sweeps", sweep="s")
    assert server.path is None and "secret" not in server.describe()
    with pytest.raises(UsageError, match=r"needs its name \(--sweep NAME\)"):  # its schema is named by the sweep
        Database("postgresql+psycopg://sweep:secret@db.example/sweeps")
