"""Claims on a real SQLite file: one statement picks and takes, ownership before the commit, turns, the index."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import event, inspect
from sqlalchemy.exc import OperationalError

from sweepq.errors import UsageError
from sweepq.host import diskfull
from sweepq.layout import CellPaths, RootPaths
from sweepq.queue import database as db
from sweepq.queue import liveness, lock, queries, schema
from sweepq.queue.claim import _claim_statement
from sweepq.queue.prepared import Prepared
from sweepq.queue.records import Claim, Outcome, WorkerInfo
from sweepq.queue.states import CLAIMABLE, CellState, Reason, claim_rank
from sweepq.queue.store import Store
from unit.smallfs import small_disk
from unit.support import T0, WORKER, FakeClock, Launch

# Holds an exclusive flock on argv[1] (a folder, or a file it creates) until its stdin closes.
HOLD = (
    "import fcntl, os, sys; p = sys.argv[1];"
    "fd = os.open(p, os.O_RDONLY | os.O_DIRECTORY) if os.path.isdir(p) else os.open(p, os.O_RDWR | os.O_CREAT);"
    "fcntl.flock(fd, fcntl.LOCK_EX); print('locked', flush=True); sys.stdin.read()"
)
WAIT_S = 60.0  # a guard against a hang, never a bound on how fast anything is
HELD: list[liveness.Ownership] = []  # what the test's claims own, released after each test


def hold(path: Path) -> subprocess.Popen[str]:
    """Another process holding the lock on `path` (release: close its stdin and wait)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
    return holder


def release(holder: subprocess.Popen[str]) -> None:
    assert holder.stdin is not None
    holder.stdin.close()
    assert holder.wait(timeout=WAIT_S) == 0


def claim_next(store: Store, info: WorkerInfo = WORKER) -> Claim | None:
    """A worker's claim; the ownership stays held until the test ends (as while its attempt runs)."""
    got = store.claim_next(info, liveness.for_root(store.root).take)
    if got is None:
        return None
    HELD.append(got[1])
    return got[0]


@pytest.fixture(autouse=True)
def _release_held() -> Iterator[None]:
    yield
    while HELD:
        HELD.pop().release()


def preempt(store: Store, cell: str) -> None:
    """One attempt of `cell` ends preempted: the cell is interrupted, claimed before queued ones."""
    won = store.claim(cell, WORKER)
    assert won is not None
    store.finish(cell, won.number, Outcome(reason=str(Reason.PREEMPTED)))


# -- the pick: a seek of ix_cells_claim ------------------------------------------------------


def query_plan(path: Path, sql: str, args: Any) -> list[str]:
    con = sqlite3.connect(path)
    try:
        return [row[3] for row in con.execute("EXPLAIN QUERY PLAN " + sql, args)]
    finally:
        con.close()


def claim_sql(store: Store) -> Prepared:
    return _claim_statement(store.engine.dialect, False)


def test_the_claim_picks_with_two_seeks_of_the_claim_index(store: Store) -> None:
    prepared = claim_sql(store)
    assert store.database.path is not None
    steps = query_plan(store.database.path, prepared.sql, prepared.args({"now": T0}))
    # One seek per claimable state (interrupted, then queued), walked in cell order: no scan, no sort.
    assert [s for s in steps if "pick" in s] == ["SEARCH pick USING INDEX ix_cells_claim (state=? AND removed=?)"] * 2
    assert not [s for s in steps if "SCAN" in s or "TEMP B-TREE" in s], steps


def test_claimable_reads_the_same_index(store: Store) -> None:
    seen: list[tuple[str, Any]] = []
    event.listen(store.engine, "before_cursor_execute", lambda c, cur, sql, args, ctx, many: seen.append((sql, args)))
    assert store.claimable(limit=3) == ["1.1", "1.2", "1.3"]
    assert store.database.path is not None
    selects = [query_plan(store.database.path, sql, args) for sql, args in seen if sql.startswith("SELECT cells.id")]
    assert selects == [["SEARCH cells USING INDEX ix_cells_claim (state=? AND removed=?)"]] * 2


def test_the_queues_words_say_the_same_in_sql_text_core_and_python(store: Store) -> None:
    """ "Live" and "cell order" are written once (states.py's columns) and said three ways: the read commands'
    SQL text (queries.py), Core's (schema.py: the claim), and the forecast's claim order in Python
    (states.claim_rank). The text must read the claim index as Core does, and the three orders agree."""
    dialect = store.engine.dialect
    assert str(schema.live().compile(dialect=dialect)) == queries.live("cells.")
    core_order = ", ".join(str(c.compile(dialect=dialect)) for c in schema.cell_order())
    assert core_order.replace('"', "") == queries.cell_order("cells.").replace('"', "")  # Core quotes "index" only
    for cell in ("2.2", "1.10", "1.4"):
        preempt(store, cell)  # interrupted: claimed first, in cell order (1.4 before 1.10: by index, not text)
    seen = [c for c in store.forecast_cells() if c.state in CLAIMABLE]
    ranked = [c.id for c in sorted(seen, key=lambda c: claim_rank(c.state, c.group, c.idx))]
    assert ranked == store.claimable()
    assert ranked[:3] == ["1.4", "1.10", "2.2"]


def fill(path: Path, cells: int, queued: int) -> None:
    """`cells` cells in one group, all done but the last `queued` (written as a long sweep leaves them)."""
    now = "2025-03-01 12:00:00.000000"
    rows = [
        (f"1.{i}", 1, i, "g", "{}", "h", "done" if i <= cells - queued else "queued", 1, 0, 0, 0, now, now)
        for i in range(1, cells + 1)
    ]
    con = sqlite3.connect(path)
    with con:
        con.execute("DELETE FROM cells")
        con.executemany(
            'INSERT INTO cells (id, group_number, "index", group_name, cfg, cfg_hash, state, attempts, budget_base, '
            "cancel_requested, removed, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            rows,
        )
    con.close()


def pick_steps(path: Path, prepared: Prepared) -> tuple[int, str]:
    """SQLite's virtual-machine steps to run the claim (rolled back), and the cell it took."""
    con = sqlite3.connect(path, isolation_level=None)
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    try:
        con.execute("BEGIN IMMEDIATE")
        con.set_progress_handler(count, 1)
        row = con.execute(prepared.sql, prepared.args({"now": T0})).fetchone()
        con.set_progress_handler(None, 1)
        con.execute("ROLLBACK")
    finally:
        con.close()
    return steps, row[0]


def test_the_pick_costs_the_same_at_100_and_at_20000_cells(store: Store, tmp_path: Path) -> None:
    """Counted in SQLite's own steps, not in time: a seek does the same work whatever the size."""
    assert store.database.path is not None
    prepared = claim_sql(store)
    small, large, unindexed = (tmp_path / f"{name}.db" for name in ("small", "large", "unindexed"))
    for path, cells in ((small, 100), (large, 20_000)):
        shutil.copyfile(store.database.path, path)
        fill(path, cells, queued=10)
    shutil.copyfile(large, unindexed)
    with sqlite3.connect(unindexed) as con:
        con.execute("DROP INDEX ix_cells_claim")
    con.close()
    (few, first_small), (many, first_large) = pick_steps(small, prepared), pick_steps(large, prepared)
    assert (first_small, first_large) == ("1.91", "1.19991")  # the first queued cell, past every done one
    assert many <= few + 20  # (a B-tree seek is one step of the machine however deep the tree)
    scanned, _ = pick_steps(unindexed, prepared)
    assert scanned > max(20_000, 100 * many)  # the same pick without the index: a step or more for every row


# -- concurrency ---------------------------------------------------------------------------------


def test_threads_claiming_one_queue_never_double_claim_and_take_cells_in_claim_order(
    store: Store, clock: FakeClock
) -> None:
    for cell in ("2.2", "1.10", "1.4"):
        preempt(store, cell)  # interrupted: claimed first
    order = store.claimable()
    assert order[:3] == ["1.4", "1.10", "2.2"]
    stores = [Store.open(store.root, clock=clock) for _ in range(4)]  # four workers, each with its own connection
    won: list[list[Claim]] = [[] for _ in stores]
    errors: list[BaseException] = []
    start = threading.Barrier(len(stores))

    def worker(i: int) -> None:
        try:
            start.wait()
            while (got := claim_next(stores[i], WorkerInfo(f"w{i}", "h", i))) is not None:
                won[i].append(got)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=WAIT_S)
    for s in stores:
        s.close()
    assert errors == []
    claimed = sorted((c.cell, c.number) for mine in won for c in mine)
    assert claimed == sorted((c, 2 if c in ("2.2", "1.10", "1.4") else 1) for c in order)  # each once, none missed
    assert all(c.state is CellState.RUNNING for c in store.cells())
    # The attempt rows, in the order their claims committed, are the claim order; so is each worker's share.
    opened = [a.cell for a in store.attempts() if a.worker.startswith("w")]
    assert opened == order
    for mine in won:
        assert [c.cell for c in mine] == [c for c in order if c in {m.cell for m in mine}]


def test_a_cell_another_process_owns_is_passed_over_then_claimed(store: Store) -> None:
    folder = CellPaths(store.root, "1.1").lock
    folder.mkdir(parents=True)
    holder = hold(folder)
    try:
        assert (first := claim_next(store)) is not None and first.cell == "1.2"
        assert (second := claim_next(store)) is not None and second.cell == "1.3"
        passed = store.cell("1.1")  # the claims that picked it were rolled back: no trace
        assert (passed.state, passed.attempts, store.attempts("1.1"), store.events("1.1")) == (
            CellState.QUEUED,
            0,
            [],
            [],
        )
        assert store.claimable()[0] == "1.1"
    finally:
        release(holder)
    assert (third := claim_next(store)) is not None and (third.cell, third.number) == ("1.1", 1)  # not stuck


def test_the_ownership_is_taken_before_anyone_can_see_the_claim(store: Store) -> None:
    reader = Store.open_readonly(store.root)  # as a reaper or `status` reads, from another connection
    owners = liveness.for_root(store.root)
    seen: list[CellState] = []

    def take(cell: str) -> liveness.Ownership | None:
        seen.append(reader.cell(cell).state)
        return owners.take(cell)

    try:
        got = store.claim_next(WORKER, take)
        assert got is not None
        HELD.append(got[1])
        assert seen == [CellState.QUEUED]  # taken inside the claim's transaction, before its commit
        assert reader.cell("1.1").state is CellState.RUNNING and lock.is_held(CellPaths(store.root, "1.1").lock)
    finally:
        reader.close()


def test_a_claim_whose_ownership_fails_is_rolled_back(store: Store) -> None:
    def take(cell: str) -> liveness.Ownership | None:
        raise PermissionError(f"cannot lock {cell}")

    with pytest.raises(PermissionError):
        store.claim_next(WORKER, take)
    cell = store.cell("1.1")
    assert (cell.state, cell.attempts, store.attempts()) == (CellState.QUEUED, 0, [])


def blocked_on(path: Path) -> bool:
    """Does some process wait for a flock on `path` (a `->` line of /proc/locks names its inode)?"""
    inode = path.stat().st_ino
    return any("->" in line and f":{inode} " in line for line in Path("/proc/locks").read_text().splitlines())


def test_claimers_queue_for_their_turn_on_the_claim_lock(store: Store) -> None:
    turn = RootPaths(store.root).claim_lock
    turn.parent.mkdir(exist_ok=True)
    holder = hold(turn)  # another claimer's turn
    got: list[Claim | None] = []
    claimer = threading.Thread(target=lambda: got.append(claim_next(store)))
    try:
        claimer.start()
        deadline = time.monotonic() + WAIT_S
        while not blocked_on(turn):
            assert time.monotonic() < deadline, "the claim never queued for its turn"
            time.sleep(0.01)
        assert claimer.is_alive() and store.cell("1.1").attempts == 0  # waiting, nothing claimed
    finally:
        release(holder)
        claimer.join(timeout=WAIT_S)
    assert [c.cell if c else None for c in got] == ["1.1"]


def test_an_attempt_starts_after_the_one_that_ended_while_its_claim_waited(store: Store, clock: FakeClock) -> None:
    """A claim that waits for its turn while the cell's previous attempt is closed: the new attempt's
    start is read inside its transaction, so the cell's receipts never overlap."""
    won = store.claim("1.1", WORKER)
    assert won is not None
    turn = RootPaths(store.root).claim_lock
    turn.parent.mkdir(exist_ok=True)
    holder = hold(turn)
    got: list[Claim | None] = []
    claimer = threading.Thread(target=lambda: got.append(claim_next(store)))
    try:
        claimer.start()
        deadline = time.monotonic() + WAIT_S
        while not blocked_on(turn):  # it read the clock, and waits
            assert time.monotonic() < deadline, "the claim never queued for its turn"
            time.sleep(0.01)
        clock.advance(60)
        store.finish("1.1", won.number, Outcome(reason=str(Reason.PREEMPTED)))  # interrupted: claimed first
    finally:
        release(holder)
        claimer.join(timeout=WAIT_S)
    assert [(c.cell, c.number) if c else None for c in got] == [("1.1", 2)]
    first, second = store.attempts("1.1")
    assert first.ended_at is not None and first.ended_at <= second.started_at


# -- a claim that fails, an older root ------------------------------------------------------------


def test_a_claim_the_full_disk_refuses_leaves_the_cell_queued_and_unowned(
    tmp_path: Path, sweep: Any, launch: Launch
) -> None:
    with small_disk(tmp_path / "fs", "1m") as disk:
        store = launch(disk.path / "root", sweep)
        assert (first := claim_next(store)) is not None and first.cell == "1.1"
        CellPaths(store.root, "1.2").lock.mkdir()
        disk.fill()
        with pytest.raises(OperationalError) as info:
            claim_next(store)
        assert diskfull.database_full(info.value, store.database.path) is not None  # as the worker words it
        assert not lock.is_held(CellPaths(store.root, "1.2").lock)  # the ownership went with the claim
        disk.free()
        cell = store.cell("1.2")
        assert (cell.state, cell.attempts, store.attempts("1.2")) == (CellState.QUEUED, 0, [])
        assert (again := claim_next(store)) is not None and (again.cell, again.number) == ("1.2", 1)
        store.close()


def test_an_older_root_gets_the_claim_index_from_the_next_launch(store: Store) -> None:
    preempt(store, "1.3")
    cfg = db._alembic_config()
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0002")
    root = store.root
    store.close()

    def indexes(s: Store) -> set[str]:
        return {i["name"] for i in inspect(s.engine).get_indexes("cells") if i["name"]}

    assert "ix_cells_claim" not in indexes(store) and "ix_cells_state" in indexes(store)
    with pytest.raises(UsageError, match=f"schema revision 0002, this sweepq expects {db.SCHEMA_HEAD}"):
        Store.open_readonly(root)  # read commands never migrate
    reopened = Store.open(root)  # what a launch or a worker does
    try:
        assert db.current_revision(reopened.engine) == db.SCHEMA_HEAD
        assert indexes(reopened) == {"ix_cells_order", "ix_cells_claim"}
        assert [(c.id, c.state) for c in reopened.cells()][:3] == [
            ("1.1", CellState.QUEUED),
            ("1.2", CellState.QUEUED),
            ("1.3", CellState.INTERRUPTED),
        ]
        assert (won := claim_next(reopened)) is not None and (won.cell, won.number) == ("1.3", 2)
    finally:
        reopened.close()
