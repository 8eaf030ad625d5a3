"""Every implementation of each seam, as the contract suites (tests/contract/) build them: add a backend here.

A seam's contract is one suite, written once, run over every entry of its
table (optuna's storage tests are the model). A new implementation joins by
adding one entry; nothing in the suites names an implementation.

- STORE_BACKENDS: name -> a factory `(request, root) -> Database` for the queue of the sweep root
  `root`. The Store runs over it unchanged (`Store.open(root, database=...)`). A server's factory
  asks for its fixture through `request.getfixturevalue` (e.g. `postgres_url`,
  tests/services/fixtures.py), so only the tests that run over it start the server, and each
  test gets a fresh, empty database.
- CHECKPOINT_BACKENDS: name -> a `CheckpointBackend`: a storage, and the few acts a test must do
  behind the interface's back (damage a committed file, link in another sweep's step).
- LIVENESS_BACKENDS: name -> a `LivenessBackend`: a liveness, what a child process receives from a
  handoff, and how an owner loses its cell without hearing of it.
- LEASE_BACKENDS: name -> a `LeaseBackend`: the livenesses that prove life by leases (renewal and
  expiry in one clock), for the lease rules only they have.
- CELL_FILES_BACKENDS: name -> a factory `(request, tmp_path, cell) -> CellFiles`: a cell's durable
  files (durable/files.py); two calls with one tmp_path are two processes' views of one storage.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol, cast

import pytest
from sqlalchemy import ColumnElement, Engine, Table, create_engine, func, update
from sqlalchemy.pool import NullPool

from sweepq import layout
from sweepq.checkpoint import storage
from sweepq.checkpoint.memory import Bucket, InMemory
from sweepq.checkpoint.storage import CheckpointStorage, LocalFolder
from sweepq.durable import files, opening
from sweepq.durable.files import CellFiles
from sweepq.layout import CellPaths
from sweepq.queue import liveness
from sweepq.queue.database import Database, upgrade
from sweepq.queue.leases import TableLiveness
from sweepq.queue.liveness import ENV_LOCK_FD, Handoff, Liveness, RegistryLiveness
from sweepq.queue.pg_schema import execution_options
from sweepq.queue.schema import LeaseRow

# -- the queue ------------------------------------------------------------------------

StoreFactory = Callable[[pytest.FixtureRequest, Path], Database]


def sqlite_file(request: pytest.FixtureRequest, root: Path) -> Database:
    """The default: sweepq.db in the root, exactly as `Database.for_root` names it."""
    return Database.for_root(root)


def postgresql(request: pytest.FixtureRequest, root: Path) -> Database:
    """A fresh database on the throwaway server, the sweep's tables in its schema (pg_schema.py)."""
    return Database(request.getfixturevalue("postgres_url"), sweep="contract")


STORE_BACKENDS: dict[str, StoreFactory] = {"sqlite": sqlite_file, "postgresql": postgresql}


def reopen(database: Database) -> Database:
    """A new handle on the same database, as another process opens it (no engine yet: it pickles).
    A backend whose `Database` carries more than its URL (a sweep's schema) keeps it here."""
    return Database(database.url, migrate_lock=database.migrate_lock, sweep=database.sweep)


# -- checkpoint storage ---------------------------------------------------------------


class CheckpointBackend(Protocol):
    def make(self, tmp_path: Path, name: str = "a") -> CheckpointStorage:
        """The empty storage of cell `name` of the root tmp_path/root; other `name`s are other cells beside it."""
        ...

    def replace(self, storage: CheckpointStorage, step: int, name: str, data: bytes) -> None:
        """Overwrite a committed step's file `name` (or its manifest.json) behind the storage's back."""
        ...

    def link(self, storage: CheckpointStorage, step: int, source: CheckpointStorage, source_step: int) -> None:
        """Make `step` a linked step pointing at `source`'s committed `source_step` (a warm start)."""
        ...


class LocalBackend:
    def make(self, tmp_path: Path, name: str = "a") -> CheckpointStorage:
        return storage.for_cell(CellPaths(tmp_path / "root", name), None)

    def replace(self, storage: CheckpointStorage, step: int, name: str, data: bytes) -> None:
        (storage.location(step) / name).write_bytes(data)

    def link(self, storage: CheckpointStorage, step: int, source: CheckpointStorage, source_step: int) -> None:
        assert isinstance(storage, LocalFolder)
        storage.folder.mkdir(parents=True, exist_ok=True)
        os.symlink(source.location(source_step), storage.folder / layout.step_name(step))


class MemoryBackend:
    def __init__(self) -> None:
        self.buckets: dict[Path, Bucket] = {}

    def make(self, tmp_path: Path, name: str = "a") -> CheckpointStorage:
        bucket = self.buckets.setdefault(tmp_path, Bucket())  # the cells of one test share a bucket
        root = tmp_path / "root"
        return InMemory(CellPaths(root, name).checkpoints, root, bucket)

    def replace(self, storage: CheckpointStorage, step: int, name: str, data: bytes) -> None:
        assert isinstance(storage, InMemory)
        key = storage._manifest_key(step)
        record = storage.bucket.get(key)
        assert record is not None
        if name == layout.MANIFEST_NAME:
            storage.bucket.put(key, data, record.meta)
        else:
            storage.bucket.put(f"{record.meta['data']}/{name}", data)

    def link(self, storage: CheckpointStorage, step: int, source: CheckpointStorage, source_step: int) -> None:
        assert isinstance(storage, InMemory) and isinstance(source, InMemory)
        storage.link(step, source, source_step)


class S3Backend:
    """A bucket of its own on the throwaway S3 server (moto on the loopback, tests/services/s3.py), per test."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self.request = request
        self.buckets: dict[Path, str] = {}

    def make(self, tmp_path: Path, name: str = "a") -> CheckpointStorage:
        from sweepq.checkpoint.s3 import S3Checkpoints, S3Url

        server = self.request.getfixturevalue("s3_server")
        if tmp_path not in self.buckets:  # the cells of one test share a bucket
            self.buckets[tmp_path] = self.request.getfixturevalue("s3_bucket")
        root = tmp_path / "root"
        where = S3Url(self.buckets[tmp_path], "sweeps/contract")
        # S3's smallest part: the contract's small files go up in one put each; multipart uploads and
        # ranged reads of large files are tests/checkpoint/test_s3_storage.py's.
        return S3Checkpoints(CellPaths(root, name).checkpoints, root, where, server.client(), part_size=S3_PART)

    def replace(self, storage: CheckpointStorage, step: int, name: str, data: bytes) -> None:
        from sweepq.checkpoint.s3 import META_DATA, S3Checkpoints

        assert isinstance(storage, S3Checkpoints)
        key = storage.manifest_key(step)
        head = storage.s3.head_object(Bucket=storage.bucket, Key=key)
        if name == layout.MANIFEST_NAME:
            storage.s3.put_object(Bucket=storage.bucket, Key=key, Body=data, Metadata=head["Metadata"])
        else:
            storage.s3.put_object(Bucket=storage.bucket, Key=f"{head['Metadata'][META_DATA]}/{name}", Body=data)

    def link(self, storage: CheckpointStorage, step: int, source: CheckpointStorage, source_step: int) -> None:
        from sweepq.checkpoint.s3 import S3Checkpoints

        assert isinstance(storage, S3Checkpoints) and isinstance(source, S3Checkpoints)
        storage.link(step, source, source_step)


S3_PART = 5 << 20  # S3's smallest part


CHECKPOINT_BACKENDS: dict[str, Callable[[pytest.FixtureRequest], CheckpointBackend]] = {
    "local": lambda request: LocalBackend(),
    "memory": lambda request: MemoryBackend(),
    "s3": S3Backend,
}


# -- a cell's durable files -------------------------------------------------------------

CellFilesFactory = Callable[[pytest.FixtureRequest, Path, str], CellFiles]


def root_files(request: pytest.FixtureRequest, tmp_path: Path, cell: str) -> CellFiles:
    """The default: the root folder itself (`storage:` unset), today's layout."""
    return opening.for_cell(CellPaths(tmp_path / "root", cell), None)


def mounted_files(request: pytest.FixtureRequest, tmp_path: Path, cell: str) -> CellFiles:
    """A folder every machine mounts, named as a user writes it (file://), beside the root."""
    return opening.for_cell(CellPaths(tmp_path / "root", cell), (tmp_path / "mounted").as_uri())


_memory_stores: dict[Path, dict[str, bytes]] = {}


def memory_files(request: pytest.FixtureRequest, tmp_path: Path, cell: str) -> CellFiles:
    request.addfinalizer(lambda: _memory_stores.pop(tmp_path, None))
    return files.MemoryFiles(cell, _memory_stores.setdefault(tmp_path, {}))


def s3_files(request: pytest.FixtureRequest, tmp_path: Path, cell: str) -> CellFiles:
    """A bucket of its own on the throwaway S3 server (moto on the loopback), per test."""
    from sweepq.checkpoint.s3 import S3Url
    from sweepq.durable.s3 import S3Files

    server = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("s3_bucket")  # one per test: the cells of one test share it
    return S3Files(S3Url(bucket, "sweeps/contract"), cell, server.client())


CELL_FILES_BACKENDS: dict[str, CellFilesFactory] = {
    "root": root_files,
    "mounted": mounted_files,
    "memory": memory_files,
    "s3": s3_files,
}


# -- liveness ---------------------------------------------------------------------------


class LivenessBackend(Protocol):
    def make(self, tmp_path: Path) -> Liveness:
        """A liveness; two calls with one tmp_path are two processes' views of one sweep."""
        ...

    def child_environ(self, handoff: Handoff) -> dict[str, str]:
        """What a child started with `handoff` finds in its environment (descriptors passed as a child gets them)."""
        ...

    def take_away(self, live: Liveness, cell: str) -> None:
        """Make the owner of `cell` lose it without hearing of it; another owner may take it afterwards."""
        ...


class FileLockBackend:
    def make(self, tmp_path: Path) -> Liveness:
        return liveness.FileLockLiveness(tmp_path / "root")

    def child_environ(self, handoff: Handoff) -> dict[str, str]:
        # A child gets its own descriptor of the same open file description (pass_fds): a dup.
        env = dict(handoff.env)
        env[ENV_LOCK_FD] = str(os.dup(int(handoff.env[ENV_LOCK_FD])))
        return env

    def take_away(self, live: Liveness, cell: str) -> None:
        # The cell folder moved aside under its owner (a user tidying up): the path names a new folder.
        assert isinstance(live, liveness.FileLockLiveness)
        folder = live.paths.cell(cell).lock
        folder.rename(folder.with_name(folder.name + ".moved"))


class RegistryBackend:
    """Leases in an in-process registry, on a clock the test moves (RegistryLiveness)."""

    def __init__(self) -> None:
        self.registries: dict[Path, liveness.LeaseRegistry] = {}
        self.clocks: dict[int, list[float]] = {}  # id(registry) -> [now]

    def make(self, tmp_path: Path) -> Liveness:
        if tmp_path not in self.registries:
            now = [0.0]
            self.registries[tmp_path] = registry = liveness.LeaseRegistry(lambda: now[0])
            self.clocks[id(registry)] = now
        return RegistryLiveness(self.registries[tmp_path], expire_seconds=30.0)

    def child_environ(self, handoff: Handoff) -> dict[str, str]:
        return dict(handoff.env)

    def take_away(self, live: Liveness, cell: str) -> None:
        # Its holder stopped renewing (a frozen machine) while every other holder renewed: that lease
        # alone reached its expiry (a lease table's backend: UPDATE ... SET expires_at = now()).
        assert isinstance(live, RegistryLiveness)
        token, _ = live.registry._leases[cell]
        live.registry._leases[cell] = (token, live.registry.clock())


class LeaseBackend(Protocol):
    """A liveness by leases, and the clock its expiries are in (the database's, for a lease table)."""

    def make(self, tmp_path: Path) -> Liveness:
        """Leases of `expire_seconds` = 30; two calls with one tmp_path share one registry and clock."""
        ...

    def advance(self, live: Liveness, seconds: float) -> None:
        """Move the leases' clock on (a table's backend may move every expiry back instead)."""
        ...


class RegistryLeases(RegistryBackend):
    def advance(self, live: Liveness, seconds: float) -> None:
        assert isinstance(live, RegistryLiveness)
        self.clocks[id(live.registry)][0] += seconds


class TableLeases:
    """Leases in a sweep's `leases` table on the throwaway PostgreSQL server (queue/leases.py).

    One fresh database per test, one sweep schema in it; every `make` of one tmp_path is another
    process's view (an engine of its own). The server's clock cannot be moved: `advance` moves every
    expiry back instead, and each view's start with it, so a view counts as settled after the
    seconds the test says passed (the rule on reconnection has its own tests, which wait).
    """

    SWEEP = "contract"

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self.request = request
        self.url: str | None = None
        self.views: list[TableLiveness] = []
        request.addfinalizer(self.close)

    def _engine(self) -> Engine:
        if self.url is None:
            self.url = self.request.getfixturevalue("postgres_url")
            engine = create_engine(self.url, poolclass=NullPool).execution_options(**execution_options(self.SWEEP))
            upgrade(engine, "the contract's database")
            engine.dispose()
        return create_engine(self.url, pool_size=1).execution_options(**execution_options(self.SWEEP))

    def make(self, tmp_path: Path) -> Liveness:
        live = TableLiveness(self._engine(), expire_seconds=30.0, settle_seconds=30.0)
        live.owner_alive("-")  # the view's first statement: its run of statements (and its term) starts
        live.connected_at = (live.connected_at or datetime.now(UTC)) - timedelta(seconds=30)  # settled
        self.views.append(live)
        return live

    def child_environ(self, handoff: Handoff) -> dict[str, str]:
        return dict(handoff.env)

    def _shift(self, seconds: float, where: ColumnElement[bool] | None = None) -> None:
        table = cast(Table, LeaseRow.__table__)
        with self.views[0].engine.begin() as conn:
            stmt = update(table).values(
                expires_at=table.c.expires_at - timedelta(seconds=seconds),
                renewed_at=table.c.renewed_at - timedelta(seconds=seconds),
            )
            conn.execute(stmt if where is None else stmt.where(where))
        for view in self.views:
            view.monotonic = _ahead(view.monotonic, seconds)  # the holders' own deadlines pass too
            if view.last_ok is not None:
                view.last_ok += seconds  # and each view was in touch with the server meanwhile

    def advance(self, live: Liveness, seconds: float) -> None:
        self._shift(seconds)

    def take_away(self, live: Liveness, cell: str) -> None:
        # Its holder stopped renewing (a frozen machine) while every other holder renewed: that lease
        # alone reached its expiry.
        table = cast(Table, LeaseRow.__table__)
        with self.views[0].engine.begin() as conn:
            conn.execute(update(table).where(table.c.cell_id == cell).values(expires_at=func.now()))

    def close(self) -> None:
        for view in self.views:
            view.engine.dispose()


def _ahead(clock: Callable[[], float], seconds: float) -> Callable[[], float]:
    return lambda: clock() + seconds


LEASE_BACKENDS: dict[str, Callable[[pytest.FixtureRequest], LeaseBackend]] = {
    "registry": lambda request: RegistryLeases(),
    "postgresql": TableLeases,
}


LIVENESS_BACKENDS: dict[str, Callable[[pytest.FixtureRequest], LivenessBackend]] = {
    "flock": lambda request: FileLockBackend(),
    "registry": lambda request: RegistryBackend(),
    "postgresql": TableLeases,
}
