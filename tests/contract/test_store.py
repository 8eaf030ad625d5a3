"""The Store's contract (queue/store.py), one suite over every queue database (contract/backends.py).

Each test is written once and runs over every entry of STORE_BACKENDS (a SQLite
file today; PostgreSQL joins by adding its factory there): defining and
reconciling a sweep, the claim order (interrupted first, then queued by cell
order, back-offs respected), two stores racing for claims, fencing with the
attempt number as the token, how finishing moves a cell, and migrations from
every past revision to head. Only the Store's public verbs are used.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from unit.support import SWEEP_YAML, T0, WORKER, FakeClock, sweep_from

from contract.backends import LivenessBackend, reopen
from contract.racing import race
from sweepq.queue import reconcile
from sweepq.queue.database import SCHEMA_HEAD, Database, migrations_dir
from sweepq.queue.fence import Fence, Fenced
from sweepq.queue.liveness import FileLockLiveness, Ownership
from sweepq.queue.reaper import reap
from sweepq.queue.records import Outcome, WorkerInfo
from sweepq.queue.states import CellState, Reason
from sweepq.queue.store import Store
from sweepq.spec.sweep import Sweep

ALL = [f"1.{i}" for i in range(1, 12)] + ["2.1", "2.2"]  # cell order: 1.10 after 1.9

NewDatabase = Callable[[], Database]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def define(store: Store, sweep: Sweep, accept_changed: bool = False) -> None:
    """What launch does with a sweep file: reconcile the queue with it."""
    store.apply_reconcile(
        sweep.settings, str(sweep.path), lambda existing: reconcile.plan(sweep, existing, accept_changed)
    )


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "root"


@pytest.fixture
def opened(root: Path, store_database: NewDatabase, clock: FakeClock) -> Iterator[Callable[[], Store]]:
    """`opened()`: a store on the backend's database (another process's, from the second call on)."""
    stores: list[Store] = []

    def open_store() -> Store:
        stores.append(Store.open(root, create=True, clock=clock, database=store_database()))
        return stores[-1]

    yield open_store
    for s in stores:
        s.close()


@pytest.fixture
def store(opened: Callable[[], Store], tmp_path: Path) -> Store:
    s = opened()
    define(s, sweep_from(SWEEP_YAML, tmp_path))
    return s


def claim(store: Store, cell: str, worker: WorkerInfo = WORKER) -> int:
    won = store.claim(cell, worker)
    assert won is not None, f"could not claim {cell}"
    return won.number


def end(store: Store, cell: str, reason: Reason, **fields: Any) -> CellState | None:
    return store.finish(cell, store.cell(cell).attempts, Outcome(reason=str(reason), **fields))


def run_once(store: Store, cell: str, reason: Reason, **fields: Any) -> CellState | None:
    claim(store, cell)
    return end(store, cell, reason, **fields)


# -- defining the sweep -----------------------------------------------------------------


def test_a_defined_sweep_queues_every_cell_in_cell_order(store: Store) -> None:
    cells = store.cells()
    assert [c.id for c in cells] == ALL
    assert {c.state for c in cells} == {CellState.QUEUED}
    assert [c.attempts for c in cells] == [0] * len(ALL)
    assert store.cell("1.10").cfg == {"epochs": 3, "lr": 10}
    assert store.unsettled() == len(ALL)
    assert store.settings().name == "unit"


def test_reconciling_again_keeps_what_ran_adds_new_cells_and_removes_dropped_ones(store: Store, tmp_path: Path) -> None:
    run_once(store, "1.1", Reason.COMPLETED)
    define(store, sweep_from(SWEEP_YAML, tmp_path))  # the same file again: nothing moves
    assert [(c.id, c.state) for c in store.cells()][:2] == [("1.1", CellState.DONE), ("1.2", CellState.QUEUED)]
    changed = SWEEP_YAML.replace("10, 11]", "10, 11, 12]").replace("[0.5, 0.25]", "[0.5]")
    define(store, sweep_from(changed, tmp_path))
    assert store.cell("1.1").state is CellState.DONE
    assert store.cell("1.12").state is CellState.QUEUED
    assert store.cell("2.2").removed
    assert [c.id for c in store.cells(include_removed=False)] == [*ALL[:11], "1.12", "2.1"]
    assert "2.2" not in store.claimable() and store.claim("2.2", WORKER) is None


# -- the claim order -----------------------------------------------------------------------


def test_interrupted_cells_come_first_then_queued_ones_by_cell_order(store: Store) -> None:
    assert store.claimable() == ALL
    run_once(store, "2.2", Reason.PREEMPTED)
    run_once(store, "1.10", Reason.LOST)
    run_once(store, "1.9", Reason.PREEMPTED)
    claim(store, "1.1")  # running: not claimable
    queued = [c for c in ALL if c not in ("1.1", "1.9", "1.10", "2.2")]
    assert store.claimable() == ["1.9", "1.10", "2.2", *queued]


def test_claim_next_takes_the_claim_order_and_skips_cells_with_a_live_owner(
    store: Store, owners: LivenessBackend, tmp_path: Path
) -> None:
    """Over every liveness: on PostgreSQL with its lease table, the claim's own statement takes the lease."""
    run_once(store, "1.3", Reason.PREEMPTED)
    mine, elsewhere = owners.make(tmp_path), owners.make(tmp_path)
    busy = elsewhere.take("1.1")  # a live process owns 1.1 (its attempt not yet in the queue)
    assert busy is not None
    taken: list[Ownership] = []
    order = []
    for _ in range(3):
        got = store.claim_next(WORKER, mine.take)
        assert got is not None
        won, owner = got
        assert owner.cell == won.cell and owner.lost() is None
        assert store.cell(won.cell).state is CellState.RUNNING
        order.append((won.cell, won.number))
        taken.append(owner)
    assert order == [("1.3", 2), ("1.2", 1), ("1.4", 1)]
    assert store.cell("1.1").state is CellState.QUEUED and busy.lost() is None
    assert [a.number for a in store.attempts("1.3")] == [1, 2] and store.attempts("1.1") == []
    for o in taken:  # each ownership is its cell's alone: the others' owners see a live owner
        assert owners.make(tmp_path).take(o.cell) is None
    for o in [*taken, busy]:
        o.release()


def test_a_back_off_is_waited_out_before_the_cell_is_claimed_again(store: Store, clock: FakeClock) -> None:
    assert run_once(store, "1.1", Reason.OOM) is CellState.QUEUED
    cell = store.cell("1.1")
    assert cell.retry_after == T0 + timedelta(seconds=30)  # the sweep's backoff_seconds
    assert "1.1" not in store.claimable()
    assert store.claim("1.1", WORKER) is None
    clock.advance(29)
    assert "1.1" not in store.claimable()
    clock.advance(1)
    assert store.claimable()[0] == "1.1"  # back in cell order
    assert claim(store, "1.1") == 2


def test_terminal_and_running_cells_are_never_claimed(store: Store) -> None:
    run_once(store, "1.1", Reason.COMPLETED)
    run_once(store, "1.2", Reason.ERROR)
    store.cancel(["1.3"])
    claim(store, "1.4")
    assert [store.claim(c, WORKER) for c in ("1.1", "1.2", "1.3", "1.4")] == [None] * 4
    assert store.claimable()[:2] == ["1.5", "1.6"]


# -- two stores ------------------------------------------------------------------------------


def test_a_claim_is_won_once_across_stores(store: Store, opened: Callable[[], Store]) -> None:
    other = opened()
    assert claim(store, "1.2") == 1
    assert other.claim("1.2", WorkerInfo("host-b:7", "host-b", 7)) is None
    assert other.cell("1.2").state is CellState.RUNNING
    assert [a.worker for a in other.attempts("1.2")] == ["host-a:100"]


def test_two_stores_racing_claim_every_cell_exactly_once(
    store: Store, opened: Callable[[], Store], owners: LivenessBackend, tmp_path: Path
) -> None:
    stores = [store, opened()]
    won: list[list[str]] = [[], []]
    views = [owners.make(tmp_path) for _ in stores]

    def worker(i: int) -> None:
        info = WorkerInfo(f"w{i}", "h", i)
        while (got := stores[i].claim_next(info, views[i].take)) is not None:
            won[i].append(got[0].cell)
            got[1].release()  # the cell stays running: only its ownership ends

    assert race(worker, len(stores)) == []
    assert sorted(won[0] + won[1]) == sorted(ALL)  # none twice, none missed
    assert [c.attempts for c in store.cells()] == [1] * len(ALL)
    assert len(store.attempts()) == len(ALL)


def test_claims_from_stale_listings_lose_the_race_instead_of_claiming_twice(
    store: Store, opened: Callable[[], Store]
) -> None:
    """Each store claims from a listing read before the other's claims: the claim's guard decides."""
    stores = [store, opened()]
    listings = [s.claimable() for s in stores]  # both read every cell as claimable
    won: list[list[str]] = [[], []]

    def worker(i: int) -> None:
        for cell in listings[i]:
            if stores[i].claim(cell, WorkerInfo(f"w{i}", "h", i)) is not None:
                won[i].append(cell)

    assert race(worker, len(stores)) == []
    assert sorted(won[0] + won[1]) == sorted(ALL)
    assert [c.attempts for c in store.cells()] == [1] * len(ALL)


def claim_all(root: Path, database: Database, worker: int, start: Any, out: Any) -> None:
    """A worker process: its own store on the database, claiming until nothing is left (spawned)."""
    owners, info = FileLockLiveness(root), WorkerInfo(f"p{worker}", "h", worker)
    store = Store.open(root, database=database)
    try:
        start.wait()
        while (got := store.claim_next(info, owners.take)) is not None:
            out.put(got[0].cell)
            got[1].release()
    finally:
        store.close()
        out.put(None)


@pytest.mark.process
def test_worker_processes_racing_claim_every_cell_exactly_once(store: Store, root: Path) -> None:
    """As workers race: processes of their own, each with its own connections (and, for SQLite, file locks)."""
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter, as a worker is
    start, out = ctx.Barrier(3), ctx.Queue()
    procs = [ctx.Process(target=claim_all, args=(root, reopen(store.database), i, start, out)) for i in range(3)]
    for p in procs:
        p.start()
    won, ended = [], 0
    while ended < len(procs):
        cell = out.get(timeout=120)
        if cell is None:
            ended += 1
        else:
            won.append(cell)
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0] * len(procs)
    assert sorted(won) == sorted(ALL)  # none twice, none missed
    assert [c.attempts for c in store.cells()] == [1] * len(ALL)


# -- fencing -----------------------------------------------------------------------------------


def test_the_attempt_number_fences_every_write_of_a_superseded_attempt(
    store: Store, root: Path, store_database: NewDatabase
) -> None:
    first = claim(store, "1.1")
    end(store, "1.1", Reason.LOST)  # its machine was declared dead...
    second = claim(store, "1.1")  # ...and the cell moved on
    assert (first, second) == (1, 2)
    assert not store.is_current("1.1", first) and store.is_current("1.1", second)

    store.progress("1.1", first, step=99)  # the old attempt's writes change nothing
    assert store.cell("1.1").step is None
    assert store.finish("1.1", first, Outcome(reason=str(Reason.COMPLETED))) is None
    cell = store.cell("1.1")
    assert (cell.state, cell.attempts) == (CellState.RUNNING, second)

    owner = FileLockLiveness(root).take("1.1")
    assert owner is not None
    Fence(root, "1.1", second, owner, database=store_database()).check("a checkpoint")
    with pytest.raises(Fenced, match=r"attempt 1 no longer owns the cell \(the cell is on attempt 2 now\)"):
        Fence(root, "1.1", first, owner, database=store_database()).check("a checkpoint")
    store.progress("1.1", second, step=5)
    assert store.cell("1.1").step == 5
    assert store.finish("1.1", second, Outcome(reason=str(Reason.COMPLETED))) is CellState.DONE
    with pytest.raises(Fenced, match="the queue closed this attempt"):
        Fence(root, "1.1", second, owner, database=store_database()).check("DONE.json")
    owner.release()


# -- finishing an attempt -----------------------------------------------------------------------

# The sweep's retries: {lost: 2, oom: 1, nan: 1, error: 0, data_error: 0, timeout: 1}, back-off 30 s.
ENDINGS = [
    (Reason.COMPLETED, CellState.DONE, None),
    (Reason.PREEMPTED, CellState.INTERRUPTED, None),
    (Reason.LOST, CellState.INTERRUPTED, None),
    (Reason.OOM, CellState.QUEUED, 30),
    (Reason.TIMEOUT, CellState.QUEUED, 30),
    (Reason.ERROR, CellState.FAILED, None),
    (Reason.CANCELLED, CellState.CANCELLED, None),
]


@pytest.mark.parametrize(("reason", "state", "backoff"), ENDINGS)
def test_finishing_moves_the_cell_by_its_reason(
    store: Store, reason: Reason, state: CellState, backoff: int | None
) -> None:
    assert run_once(store, "1.1", reason, end_step=7) is state
    cell = store.cell("1.1")
    assert (cell.state, cell.last_reason, cell.step) == (state, str(reason), 7)
    assert cell.retry_after == (None if backoff is None else T0 + timedelta(seconds=backoff))
    assert [a.reason for a in store.attempts("1.1")] == [str(reason)]
    assert store.finish("1.1", 1, Outcome(reason=str(Reason.COMPLETED))) is None  # closed once


def test_a_spent_retry_budget_fails_the_cell(store: Store, clock: FakeClock) -> None:
    for _ in range(2):  # lost: 2 -> the third loss fails the cell
        assert run_once(store, "1.1", Reason.LOST) is CellState.INTERRUPTED
    assert run_once(store, "1.1", Reason.LOST) is CellState.FAILED
    assert run_once(store, "1.2", Reason.OOM) is CellState.QUEUED  # oom: 1
    clock.advance(30)
    assert run_once(store, "1.2", Reason.OOM) is CellState.FAILED
    assert [c.state for c in store.cells_in([CellState.FAILED])] == [CellState.FAILED] * 2
    assert store.retry(["1.1"]) == ["1.1"]
    assert store.cell("1.1").state is CellState.QUEUED


def test_the_users_moves_cancel_retry_and_reset(store: Store) -> None:
    claim(store, "1.2")
    assert store.cancel(["1.1", "1.2"]) == (["1.1"], ["1.2"])  # queued: now; running: asked
    assert store.cell("1.1").state is CellState.CANCELLED
    assert store.cancel_requested("1.2") and store.cell("1.2").state is CellState.RUNNING
    assert end(store, "1.2", Reason.CANCELLED) is CellState.CANCELLED
    assert store.retry(["1.1", "1.3"]) == ["1.1"]  # a queued cell has nothing to retry
    assert store.cell("1.1").state is CellState.QUEUED
    run_once(store, "1.4", Reason.COMPLETED, end_step=9)
    assert store.reset(["1.4"]) == ["1.4"]
    cell = store.cell("1.4")
    assert (cell.state, cell.step) == (CellState.QUEUED, None)
    assert claim(store, "1.4") == 2  # attempts are numbered on: a reset never reuses a fencing token


# -- the schema ------------------------------------------------------------------------------------


def past_revisions() -> list[str]:
    script = ScriptDirectory(str(migrations_dir()))
    return [r.revision for r in reversed(list(script.walk_revisions())) if r.revision != SCHEMA_HEAD]


def test_a_new_database_is_migrated_to_head(store: Store, opened: Callable[[], Store]) -> None:
    assert store.database.revision() == SCHEMA_HEAD
    again = opened()  # opening a current database again migrates nothing and keeps everything
    assert again.database.revision() == SCHEMA_HEAD and [c.id for c in again.cells()] == ALL


@pytest.mark.parametrize("revision", past_revisions())
def test_a_database_of_every_past_revision_is_migrated_to_head_and_works(
    revision: str, root: Path, store_database: NewDatabase, clock: FakeClock, tmp_path: Path
) -> None:
    old = store_database()
    root.mkdir(parents=True, exist_ok=True)
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    with old.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
    assert old.revision() == revision
    old.dispose()
    store = Store.open(root, clock=clock, database=store_database())
    try:
        assert store.database.revision() == SCHEMA_HEAD
        define(store, sweep_from(SWEEP_YAML, tmp_path))
        assert run_once(store, "1.1", Reason.COMPLETED) is CellState.DONE
        assert store.claimable() == ALL[1:]
    finally:
        store.close()


# -- the reaper: the Store over every Liveness -------------------------------------------------------


def test_the_reaper_closes_cells_whose_owner_is_gone_and_leaves_live_ones(
    store: Store, owners: LivenessBackend, tmp_path: Path
) -> None:
    """Over every liveness (contract/backends.py): an owner gone unseen is `lost`, and its cell claimable at once."""
    worker = owners.make(tmp_path)
    claimed = [store.claim_next(WORKER, worker.take) for _ in range(2)]
    assert [c[0].cell for c in claimed if c is not None] == ["1.1", "1.2"]
    assert reap(store, owners=owners.make(tmp_path)) == []  # both owners live
    owners.take_away(worker, "1.1")  # its machine froze, its folder went: the worker never hears
    assert reap(store, owners=owners.make(tmp_path)) == [("1.1", str(Reason.LOST))]
    assert store.cell("1.1").state is CellState.INTERRUPTED and store.claimable()[0] == "1.1"
    assert store.cell("1.2").state is CellState.RUNNING
    assert reap(store, owners=owners.make(tmp_path)) == []  # closed once
    for c in claimed:
        assert c is not None
        c[1].release()


# -- fencing of DONE.json ------------------------------------------------------------------


def test_a_superseded_attempts_done_marker_is_never_trusted(store: Store) -> None:
    # Attempt 1 lost its cell (reaped as lost), attempt 2 runs: attempt 1's DONE.json, put late by a
    # frozen process, must neither close attempt 2 nor make the cell done.
    run_once(store, "1.1", Reason.LOST)
    second = claim(store, "1.1")
    late = {"cell": "1.1", "attempt": 1, "step": 5, "metrics": {"score": 1.0}}
    assert not store.repair_done("1.1", late)
    rec = store.cell("1.1")
    assert (rec.state, rec.attempts) == (CellState.RUNNING, second)
    running = store.attempt("1.1", second)
    assert running is not None and running.reason is None
    # The current attempt's own marker is trusted (its process ended before the database was told).
    assert store.repair_done("1.1", {**late, "attempt": second})
    assert store.cell("1.1").state is CellState.DONE
    done = store.attempt("1.1", second)
    assert done is not None and done.reason == Reason.COMPLETED
