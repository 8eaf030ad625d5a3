"""In-process fixtures for the fast unit layer: a real SQLite root, a settable clock, no sleeping."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from sweepq.layout import RootPaths
from sweepq.queue.store import Store
from sweepq.spec.sweep import Sweep
from unit.support import SWEEP_YAML, FakeClock, Launch, launch_store, sweep_from


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sweep(tmp_path: Path) -> Sweep:
    return sweep_from(SWEEP_YAML, tmp_path)


@pytest.fixture(scope="session")
def template_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database migrated once per session; each new root starts from a copy (migrating costs ~30 ms)."""
    root = tmp_path_factory.mktemp("template")
    Store.open(root, create=True).close()
    return RootPaths(root).db


@pytest.fixture
def launch(template_db: Path, clock: FakeClock) -> Iterator[Launch]:
    opened: list[Store] = []

    def launch(root: Path, sweep: Sweep, accept_changed: bool = False) -> Store:
        db = RootPaths(root).db
        if not db.exists():
            root.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(template_db, db)
        store = launch_store(root, sweep, clock, accept_changed)
        opened.append(store)
        return store

    yield launch
    for store in opened:
        store.close()


@pytest.fixture
def store(tmp_path: Path, sweep: Sweep, launch: Launch) -> Store:
    return launch(tmp_path / "root", sweep)
