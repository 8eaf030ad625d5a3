"""The contract suites' fixtures: each seam's implementation, parametrized over every backend (backends.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from contract.backends import (
    CELL_FILES_BACKENDS,
    CHECKPOINT_BACKENDS,
    LEASE_BACKENDS,
    LIVENESS_BACKENDS,
    STORE_BACKENDS,
    CellFilesFactory,
    CheckpointBackend,
    LeaseBackend,
    LivenessBackend,
    reopen,
)
from sweepq.queue.database import Database


@pytest.fixture(params=sorted(CHECKPOINT_BACKENDS))
def checkpoints(request: pytest.FixtureRequest) -> CheckpointBackend:
    return CHECKPOINT_BACKENDS[request.param](request)


@pytest.fixture(params=sorted(CELL_FILES_BACKENDS))
def cell_files(request: pytest.FixtureRequest) -> CellFilesFactory:
    return CELL_FILES_BACKENDS[request.param]


@pytest.fixture(params=sorted(LIVENESS_BACKENDS))
def owners(request: pytest.FixtureRequest, tmp_path: Path) -> LivenessBackend:
    return LIVENESS_BACKENDS[request.param](request)


@pytest.fixture(params=sorted(LEASE_BACKENDS))
def leases(request: pytest.FixtureRequest) -> LeaseBackend:
    return LEASE_BACKENDS[request.param](request)


@pytest.fixture(params=sorted(STORE_BACKENDS))
def store_database(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Database]:
    """The queue of the sweep root tmp_path/root on one backend: `store_database()` is a new handle on it
    (another process's, when two stores race). The first call makes the database."""
    root = tmp_path / "root"
    made: list[Database] = []

    def handle() -> Database:
        if not made:
            made.append(STORE_BACKENDS[request.param](request, root))
            return made[0]
        return reopen(made[0])

    return handle
