"""The pytest fixtures of the real servers (registered by tests/conftest.py).

`postgres_server`: one throwaway PostgreSQL per test process, started the first time a test asks
(tests/services/postgres.py says why one per xdist worker). `postgres_url`: a fresh, empty database
on it for one test. In CI (CI=true) a server that cannot start fails the run; elsewhere its tests
are skipped, with the reason.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from services.postgres import PostgresServer, PostgresUnavailable
from services.s3 import S3Server, S3Unavailable
from services.slurm import SlurmCluster, SlurmUnavailable


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        server.start()
    except (PostgresUnavailable, ImportError) as e:  # ImportError: psycopg (the `postgres` extra) missing
        if in_ci():
            pytest.fail(f"CI needs a PostgreSQL server for these tests and none started: {e}", pytrace=False)
        pytest.skip(f"no PostgreSQL server: {e}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """A new database of its own on the session's server (a SQLAlchemy URL)."""
    return postgres_server.create_database()


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """One throwaway single-node Slurm per test process (tests/services/slurm.py); SLURM_CONF names it."""
    cluster = SlurmCluster()
    try:
        cluster.start()
    except SlurmUnavailable as e:
        if in_ci():
            pytest.fail(f"CI needs a Slurm cluster for these tests and none started: {e}", pytrace=False)
        pytest.skip(f"no Slurm cluster: {e}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """One throwaway S3 server (moto, in this process, on the loopback) per test process (tests/services/s3.py)."""
    server = S3Server()
    try:
        server.start()
    except S3Unavailable as e:
        if in_ci():
            pytest.fail(f"CI needs an S3 server for these tests and none started: {e}", pytrace=False)
        pytest.skip(f"no S3 server: {e}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> Iterator[str]:
    """A new, empty bucket of its own on the session's server; emptied and removed after the test."""
    bucket = s3_server.create_bucket()
    try:
        yield bucket
    finally:
        s3_server.empty(bucket)
