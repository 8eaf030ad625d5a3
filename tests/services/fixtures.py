"""The pytest fixtures of the real servers (registered by tests/conftest.py).

`postgres_server`: one throwaway PostgreSQL per test process, started the first time a test asks
(tests/services/postgres.py says why one per xdist worker). `postgres_url`: a fresh, empty database
on it for one test. In CI (CI=true) a server that cannot start fails the run; elsewhere its tests
are skipped, with the reason.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol, TypeVar

import pytest

from services.postgres import PostgresServer, PostgresUnavailable
from services.s3 import S3Server, S3Unavailable
from services.slurm import SlurmCluster, SlurmUnavailable


class _Service(Protocol):
    def start(self) -> object: ...

    def stop(self) -> object: ...


S = TypeVar("S", bound=_Service)


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


@contextmanager
def running(service: S, unavailable: tuple[type[Exception], ...], noun: str) -> Iterator[S]:
    """`service` started and, at the end, stopped; one that cannot start fails the run in CI, else skips."""
    try:
        service.start()
    except unavailable as e:
        if in_ci():
            pytest.fail(f"CI needs a {noun} for these tests and none started: {e}", pytrace=False)
        pytest.skip(f"no {noun}: {e}")
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    # ImportError: psycopg (the `postgres` extra) missing
    with running(PostgresServer(), (PostgresUnavailable, ImportError), "PostgreSQL server") as server:
        yield server


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """A new database of its own on the session's server (a SQLAlchemy URL)."""
    return postgres_server.create_database()


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """One throwaway single-node Slurm per test process (tests/services/slurm.py); SLURM_CONF names it."""
    with running(SlurmCluster(), (SlurmUnavailable,), "Slurm cluster") as cluster:
        yield cluster


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """One throwaway S3 server (moto, in this process, on the loopback) per test process (tests/services/s3.py)."""
    with running(S3Server(), (S3Unavailable,), "S3 server") as server:
        yield server


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> Iterator[str]:
    """A new, empty bucket of its own on the session's server; emptied and removed after the test."""
    bucket = s3_server.create_bucket()
    try:
        yield bucket
    finally:
        s3_server.empty(bucket)
