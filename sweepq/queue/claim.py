"""The claim: one statement picks and takes the next cell, the cell's ownership is taken before the commit.

A claim (`claim_next`) is one write transaction (`BEGIN IMMEDIATE` on SQLite):
1. one statement picks and takes the next claimable cell,
   `UPDATE cells SET state='running', attempts=attempts+1 ... WHERE id =
   COALESCE((SELECT id ... interrupted ... LIMIT 1), (SELECT id ... queued ...
   LIMIT 1)) RETURNING ...`, each pick a seek of ix_cells_claim (`claim_pick`);
2. the worker takes the cell's ownership (its folder's lock, liveness.py);
3. the attempt row is inserted, and the commit makes both visible at once.

The ownership is taken before the claim is committed, so no reader, and so no
reaper, ever sees a running cell without a live owner: what matters is that the
lock is held before the claim can be seen, not before the UPDATE runs. A cell
whose ownership another live process holds (one about to close its own
attempt) rolls the transaction back, and the claim is made again passing it
over. Writers take turns on the write lock, so a pick is never stale and a
claim never loses a race: no list of claimable ids is read, no cell is tried
after another.

Claimers of one SQLite file first queue for their turn on a file lock
(`.sweepq/claim.lock`): SQLite's busy handler polls, sleeping 1, 2, 5, 10...
ms, and with eight claimers a waiter misses turns for hundreds of
milliseconds, where the kernel wakes the next one at once. The statements are
compiled once and run on the driver's cursor (prepared.py), on a connection
the store keeps for its claims; on SQLite the transaction is begun and ended
there too (`_transaction`).

On PostgreSQL there is no turn: the pick is `SELECT ... FOR UPDATE SKIP LOCKED LIMIT 1`, and the
whole claim is ONE statement of data-modifying CTEs (`_server_claim`: pick, UPDATE of the cell,
INSERT of the attempt), since on a server each statement, BEGIN and COMMIT is a round trip. When
the ownership is a lease in the same database (leases.py's `TableLiveness`, a worker's), the
lease's INSERT ... ON CONFLICT is a CTE of that statement too, and the claim runs in autocommit:
one round trip, the ownership committed with the claim. Any other ownership (`take`) is taken as
above, between the statement and the COMMIT.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Connection,
    Engine,
    FromClause,
    Select,
    Table,
    bindparam,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError

from sweepq.queue import states
from sweepq.queue.liveness import Ownership
from sweepq.queue.prepared import Prepared, schema_of
from sweepq.queue.records import Claim, WorkerInfo
from sweepq.queue.schema import CELLS, AttemptRow, CellRow, UTCDateTime, cell_order, live
from sweepq.queue.states import CellState
from sweepq.queue.transactions import Transactions

if TYPE_CHECKING:
    from sweepq.queue.leases import TableLiveness

# The claim's statements are Core, built once and run with parameters: building an ORM
# statement costs more than SQLite's whole claim.


def now_param() -> BindParameter[datetime]:
    """The claim statements' `:now`, given when they run."""
    return bindparam("now", type_=UTCDateTime())


def retry_due(now: datetime | BindParameter[datetime], cells: FromClause = CELLS) -> ColumnElement[bool]:
    """A cell's back-off is over: it has none, its time came, or the clock went back since it began.

    `finish` writes `updated_at` with `retry_after`; a later write of the row only
    moves it later. A clock now earlier than `updated_at` was set back (or another
    machine's runs behind): the wait is over at once. So no cell ever waits longer
    than the back-off it was given, whatever happens to the wall clock meanwhile.
    """
    c = cells.c
    return or_(c.retry_after.is_(None), c.retry_after <= now, c.updated_at > now)


def claim_order(state: str, cells: FromClause = CELLS, skip: tuple[str, ...] = ()) -> Select[Any]:
    """The ids of the cells in `state` that may be claimed at `:now`, in cell order (group, then index).

    Passed over: cells removed from the sweep, in their retry back-off, or in
    `skip`. With ix_cells_claim this is a seek on (state, removed)
    walked in order: a LIMIT reads only the rows in front of it, whatever the
    sweep's size (tests/unit/test_claims.py reads the query plan).
    """
    c = cells.c
    return (
        select(c.id)
        .where(
            c.state == state,
            live(cells),
            retry_due(now_param(), cells),
            *(c.id != cell for cell in skip),
        )
        .order_by(*cell_order(cells))
    )


def claim_pick(skip: tuple[str, ...] = ()) -> ColumnElement[Any]:
    """The id of the next cell to claim at `:now`, as one SQL expression (NULL when there is none).

    Claim order is interrupted cells first, then queued ones, each in cell order:
    one LIMIT 1 seek per claimable state, the first that finds a cell wins
    (COALESCE evaluates its arguments in order). Over an alias of the table, so
    that it can sit inside an UPDATE of `cells` (the claim statement below).
    """
    pick = CELLS.alias("pick")
    # On a server, a row another claimer has locked is passed over, not waited for (FOR UPDATE SKIP
    # LOCKED inside the pick); SQLite, whose writers take turns, compiles no such clause.
    firsts = [
        claim_order(str(st), pick, skip).limit(1).with_for_update(skip_locked=True).scalar_subquery()
        for st in states.CLAIMABLE
    ]
    return func.coalesce(*firsts)


ATTEMPTS = cast(Table, AttemptRow.__table__)
_OPENED = ("cell_id", "number", "worker", "host", "worker_pid", "started_at", "start_step", "nan_step", "gpus")


@lru_cache(maxsize=32)
def _claim_statement(dialect: Dialect, named: bool, skip: tuple[str, ...] = (), schema: str | None = None) -> Prepared:
    """The claim's one statement: move the cell to running and return what its attempt needs.

    `named`: the cell `:cell`; else the next in claim order (`claim_pick`)
    but for `skip`. Guarded by the states a cell is claimed from: no row is a lost race.
    """
    c = CELLS.c
    which = c.id == (bindparam("cell") if named else claim_pick(skip))
    sources = or_(*(c.state == str(x) for x in sorted(states.sources_of(CellState.RUNNING))))
    returns = (c.id, c.attempts, c.cfg, c.nan_step, c.last_reason)
    stmt = (
        update(CELLS)
        .where(which, sources, live(), retry_due(now_param()))
        .values(state=str(CellState.RUNNING), attempts=c.attempts + 1, retry_after=None, updated_at=now_param())
        .returning(*returns)
    )
    return Prepared(stmt, dialect, returns, schema)


@lru_cache(maxsize=32)
def _server_claim(
    dialect: Dialect, named: bool, skip: tuple[str, ...] = (), schema: str | None = None, leased: bool = False
) -> Prepared:
    """The claim on a server as ONE statement: pick, (lease,) cell, attempt, each a CTE of the next.

        WITH picked AS (SELECT <claim_pick> AS id),                 -- FOR UPDATE SKIP LOCKED inside
             lease AS (INSERT INTO leases ... SELECT FROM picked    -- `leased` only: the ownership
                       ON CONFLICT DO UPDATE WHERE expired, settled RETURNING ...),
             claimed AS (UPDATE cells ... WHERE id = <lease's or picked's id> RETURNING ...),
             attempt AS (INSERT INTO attempts ... SELECT FROM claimed RETURNING number)
        SELECT picked.id, lease.cell_id, lease.expires_at, now(), claimed.*, attempt.number ...

    The pick, the guard, the order and the fence are `_claim_statement`'s (the same Core pieces);
    each round trip saved is most of a claim's cost on a server (BEGIN, UPDATE, INSERT, COMMIT each
    wait for the network and the server's turn). With `leased` the lease row (leases.py's `take`,
    in the server's clock) is taken in the same statement, so the claim runs in autocommit: the
    ownership is committed with the claim, never after it. A lease held by a live owner (or an
    expired one before this process settled) is not taken, and then nothing else is changed: the
    cell is updated only where the lease CTE returned it. SQLite has no data-modifying CTEs (no
    UPDATE or INSERT in WITH): its claim stays `_claim_statement` and `_attempt_insert` inside
    BEGIN IMMEDIATE, where each statement is a call into the same process, not a round trip.
    """
    from sqlalchemy import DateTime, Float, String, and_, literal_column, true
    from sqlalchemy.dialects.postgresql import insert as pg_insert

    from sweepq.queue.leases import LEASES, SECOND

    c = CELLS.c
    picked = select((bindparam("cell", type_=String()) if named else claim_pick(skip)).label("id")).cte("picked")
    lease = None
    target: Any = select(picked.c.id).scalar_subquery()
    if leased:
        rows = select(
            picked.c.id,
            bindparam("token", type_=String()),
            func.now() + SECOND * bindparam("expire", type_=Float()),
            func.now(),
            bindparam("host", type_=String()),
        ).where(picked.c.id.is_not(None))
        ins = pg_insert(LEASES).from_select(["cell_id", "token", "expires_at", "renewed_at", "host"], rows)
        # leases.py's `_acquire`: an expired lease is taken only once this process settled (its first
        # successful statement a full term ago, in the server's clock; NULL before: not taken).
        settled = func.now() - bindparam("connected_at", type_=DateTime(timezone=True)) >= SECOND * bindparam(
            "settle", type_=Float()
        )
        lease = (
            ins.on_conflict_do_update(
                index_elements=[LEASES.c.cell_id],
                set_={k: ins.excluded[k] for k in ("token", "expires_at", "renewed_at", "host")},
                where=and_(LEASES.c.expires_at <= func.now(), settled),
            )
            .returning(LEASES.c.cell_id, LEASES.c.expires_at)
            .cte("lease")
        )
        target = select(lease.c.cell_id).scalar_subquery()
    # The cell's nan_step goes to the attempt and is cleared on the cell (a rollback is this attempt's
    # alone, as `_nan_cleared` does on SQLite): RETURNING gives new values, so the old one is read from
    # `was`, the same row. The pick locked it, and no write moves a claimable cell's nan_step.
    was = CELLS.alias("was")
    sources = or_(*(c.state == str(x) for x in sorted(states.sources_of(CellState.RUNNING))))
    claimed = (
        update(CELLS)
        .where(c.id == target, was.c.id == c.id, sources, live(), retry_due(now_param()))
        .values(
            state=str(CellState.RUNNING),
            attempts=c.attempts + 1,
            retry_after=None,
            updated_at=now_param(),
            nan_step=None,
        )
        .returning(c.id, c.attempts, c.cfg, was.c.nan_step, c.last_reason)
        .cte("claimed")
    )
    a = claimed.c
    opened: dict[str, ColumnElement[Any]] = {k: bindparam(f"a_{k}", type_=ATTEMPTS.c[k].type) for k in _OPENED}
    opened.update(cell_id=a.id, number=a.attempts, started_at=now_param(), nan_step=a.nan_step)
    attempt = (
        insert(ATTEMPTS)
        .from_select(list(_OPENED), select(*(opened[k] for k in _OPENED)).select_from(claimed))
        .returning(ATTEMPTS.c.number)
        .cte("attempt")
    )
    returns = (a.id, a.attempts, a.cfg, a.nan_step, a.last_reason)
    joined = picked.outerjoin(claimed, true()).outerjoin(attempt, true())
    held: tuple[Any, ...] = (picked.c.id, literal_column("NULL"), literal_column("NULL"))
    if lease is not None:
        joined = joined.outerjoin(lease, true())
        held = (picked.c.id, lease.c.cell_id, lease.c.expires_at)
    stmt = select(*returns, attempt.c.number, *held, func.now()).select_from(joined)
    return Prepared(stmt, dialect, returns, schema, inline=True)


@lru_cache(maxsize=32)
def _attempt_insert(dialect: Dialect, schema: str | None = None) -> Prepared:
    """The claimed attempt's row (its parameters are the column names, prefixed `a_`)."""
    values = {k: bindparam(f"a_{k}", type_=ATTEMPTS.c[k].type) for k in _OPENED}
    return Prepared(insert(ATTEMPTS).values(values), dialect, schema=schema)


@lru_cache(maxsize=8)
def _nan_cleared(dialect: Dialect, schema: str | None = None) -> Prepared:
    return Prepared(update(CELLS).where(CELLS.c.id == bindparam("cell")).values(nan_step=None), dialect, schema=schema)


@contextmanager
def _transaction(conn: Connection) -> Iterator[None]:
    """The claim's write transaction. On SQLite, `BEGIN IMMEDIATE` and its end run on the driver's
    connection, as the statements do (prepared.py): SQLAlchemy's begin (an event, an execution context)
    cost a tenth of a claim. A driver's error is raised as SQLAlchemy's, as `Connection.execute` raises it."""
    if conn.dialect.name != "sqlite":
        with conn.begin():
            yield
        return
    raw = conn.connection.dbapi_connection
    assert raw is not None
    error = conn.dialect.loaded_dbapi.Error
    try:
        raw.execute("BEGIN IMMEDIATE")
    except error as e:
        raise DBAPIError.instance("BEGIN IMMEDIATE", (), e, error) from e
    try:
        yield
    except BaseException:
        if raw.in_transaction:
            raw.execute("ROLLBACK")
        raise
    try:
        raw.execute("COMMIT")
    except error as e:
        if raw.in_transaction:
            raw.execute("ROLLBACK")  # a COMMIT that failed (a full disk) leaves the transaction open
        raise DBAPIError.instance("COMMIT", (), e, error) from e


class _Made:
    """A claim's statements with their parameters, made before its turn: inside the turn only the
    database works (and the claim's time is stamped again). A turn passes from process to process,
    and each runs its part on caches the others have filled (measured with 8 claimers on 2 cores: the
    holder's CPU time 1.6x one claimer's), so what can be done before or after the turn is done there.

    On a server the claim is one statement (`_server_claim`); with `lease`, a `TableLiveness` of the
    same database, it takes the cell's lease too. After `take`: `picked`, the cell the pick chose
    (None: nothing claimable), and `now`, the server's time of the statement."""

    def __init__(
        self,
        conn: Connection,
        named: bool,
        values: dict[str, Any],
        worker: WorkerInfo,
        skip: tuple[str, ...] = (),
        lease: TableLiveness | None = None,
    ) -> None:
        self.values, self.worker, self.skip, self.lease = values, worker, skip, lease
        self.named = named
        self.schema = schema_of(conn)
        self.server = conn.dialect.name != "sqlite"
        opened: tuple[Any, ...] = (None, None, worker.worker, worker.host, worker.pid, values["now"], 0, None, [])
        attempt = {f"a_{k}": v for k, v in zip(_OPENED, opened, strict=True)}
        self.terms: dict[str, Any] = {} if lease is None else lease.claim_terms()
        self.picked: str | None = None
        self.now: datetime | None = None
        self.leased = False  # the statement took the picked cell's lease
        if self.server:
            self.claim = _server_claim(conn.dialect, named, skip, self.schema, lease is not None)
            self.claim_args = self.claim.args({"cell": None, **values, **attempt, **self.terms})
            return
        self.claim = _claim_statement(conn.dialect, named, skip, self.schema)
        self.claim_args = self.claim.args(values)
        self.insert = _attempt_insert(conn.dialect, self.schema)
        self.insert_args = self.insert.args(attempt)

    def stamp(self, now: Any) -> None:
        """The claim's time, read again inside its transaction (`_claim_first` says why)."""
        self.claim.put(self.claim_args, "now", now)
        if not self.server:
            self.insert.put(self.insert_args, "a_started_at", now)

    def passing_over(self, conn: Connection, cell: str) -> _Made:
        """The same claim made again, `cell` passed over."""
        return _Made(conn, False, self.values, self.worker, (*self.skip, cell), self.lease)

    def take(self, conn: Connection) -> tuple[Any, ...] | None:
        """The claim's statements in `conn`'s transaction (on a server with `lease`: the one statement,
        in autocommit). The cell's row as the driver gives it (None: not claimed); `claim_of` converts it."""
        if self.server:
            row = self.claim.execute(conn, self.claim_args)
            assert row is not None  # the pick's row is always there, its id NULL when nothing is claimable
            self.picked, self.now, self.leased = row[6], row[9], row[7] is not None
            if self.lease is not None and row[7] is None:
                return None  # its lease is held: nothing was changed (`Claims._leased` passes it over)
            return None if row[0] is None else row[:5]
        row = self.claim.execute(conn, self.claim_args)
        if row is None:
            return None
        cell, number, _, nan_step, _ = row  # a text and integers: the driver's values are the columns'
        if nan_step is not None:  # the rollback is this attempt's alone
            _nan_cleared(conn.dialect, self.schema).run(conn, {"cell": cell})
        for key, value in (("a_cell_id", cell), ("a_number", number), ("a_nan_step", nan_step)):
            self.insert.put(self.insert_args, key, value)
        self.insert.execute(conn, self.insert_args)
        return row

    def claim_of(self, row: tuple[Any, ...]) -> Claim:
        return Claim(*self.claim.convert(row))


class _Held(Exception):
    """The picked cell's ownership is held by another live process (rolls the claim back)."""

    def __init__(self, cell: str) -> None:
        super().__init__(cell)
        self.cell = cell


def schema_of_engine(engine: Engine) -> str | None:
    """The sweep schema `engine`'s statements are mapped to (pg_schema.execution_options); None on SQLite."""
    return cast(str | None, (engine.get_execution_options().get("schema_translate_map") or {}).get(None))


def _wait_turn(path: str | None) -> int | None:
    """Queue for this process's turn among the claimers of a SQLite file (the module's docstring says why).

    Returns the locked descriptor (closing it ends the turn, however this
    process ends); None for a server database, which queues its writers itself.
    """
    if path is None:
        return None
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except FileNotFoundError:  # a root made by hand, without .sweepq/ yet
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    return fd


class Claims:
    """A worker's claims (`next`, `named`) and what is claimable, over the store's transactions.

    Keeps what claims share between them: a connection of the writer's (a checkout from the pool
    costs more), the turn's file, and a lock that makes the threads sharing a store claim one at a time."""

    def __init__(self, tx: Transactions) -> None:
        self.tx = tx
        self._mutex = threading.Lock()
        self._kept: dict[bool, tuple[Connection, str | None, int] | None] = {False: None, True: None}

    def next(self, worker: WorkerInfo, take: Callable[[str], Ownership | None]) -> tuple[Claim, Ownership] | None:
        """Claim the next cell in claim order and own it: (its claim, its ownership); None when none is left.

        `take` is the worker's `Liveness.take`; it is called inside the claim's
        write transaction, before the commit (see the module's docstring).
        """
        assert self.tx.batch_session is None, "a claim is its own transaction"
        lease = self._lease_of(take)
        if lease is not None:
            return self._leased(worker, lease)
        # One claim at a time per store: threads that share a store share its claim connection.
        with self._mutex:
            conn, turn = self._claimer()
            made = _Made(conn, False, {"now": self.tx.clock()}, worker)  # its time is stamped again in its turn
            fd = _wait_turn(turn)
            try:
                won = self._claim_first(conn, made, take)
            finally:
                if fd is not None:
                    os.close(fd)
        if won is None:
            return None
        made, row, owner = won
        try:
            return made.claim_of(row), owner
        except BaseException:
            owner.release()  # committed and unowned: the reaper ends the attempt
            raise

    def _lease_of(self, take: Callable[[str], Ownership | None]) -> TableLiveness | None:
        """The lease table `take` takes from, when it is this store's server database: its lease is then
        taken by the claim's own statement (`_server_claim`). None for any other ownership (file locks,
        a registry, another database), which `take` itself takes inside the claim's transaction."""
        if not self.tx.database.is_server:
            return None
        from sweepq.queue.leases import TableLiveness

        owner = getattr(take, "__self__", None)
        if not isinstance(owner, TableLiveness) or getattr(take, "__func__", None) is not TableLiveness.take:
            return None
        mine = (self.tx.writer.url, schema_of_engine(self.tx.writer))
        return owner if (owner.engine.url, schema_of_engine(owner.engine)) == mine else None

    def _leased(self, worker: WorkerInfo, lease: TableLiveness) -> tuple[Claim, Ownership] | None:
        """A claim on a server whose lease the same statement takes: one round trip, in autocommit. A cell
        whose lease a live process holds (one about to close its own attempt) is passed over."""
        with self._mutex:
            conn = self._claimer(autocommit=True)[0]
            made = _Made(conn, False, {"now": self.tx.clock()}, worker, lease=lease)
            while True:
                made.stamp(self.tx.clock())
                try:
                    row = made.take(conn)
                except DBAPIError as e:
                    if e.connection_invalidated or type(e).__name__ in ("OperationalError", "InterfaceError"):
                        lease.unreachable()
                    raise
                assert made.now is not None
                if made.picked is None:
                    lease.answered(made.now)
                    return None
                if row is not None:
                    owner = lease.claimed(made.picked, made.terms, made.now)
                    try:
                        return made.claim_of(row), owner
                    except BaseException:
                        owner.release()  # committed and unowned: the reaper ends the attempt
                        raise
                lease.answered(made.now)
                if made.leased:  # the lease taken, the cell not (its guard said no): give the lease back
                    lease.drop(made.picked, made.terms["token"])
                made = made.passing_over(conn, made.picked)

    def _claim_first(
        self, conn: Connection, made: _Made, take: Callable[[str], Ownership | None]
    ) -> tuple[_Made, tuple[Any, ...], Ownership] | None:
        """The first cell in claim order whose ownership `take` gets, claimed and owned (its row unconverted)."""
        while True:
            owner: Ownership | None = None
            try:
                with _transaction(conn):
                    # The attempt starts after every write committed before this transaction began: an
                    # attempt closed while this claim waited for its turn ended before this one starts.
                    made.stamp(self.tx.clock())
                    row = made.take(conn)
                    if row is None:
                        return None
                    owner = take(row[0])
                    if owner is None:
                        raise _Held(row[0])
            except _Held as held:
                made = made.passing_over(conn, held.cell)  # the claim was rolled back: pass the cell over this time
                continue
            except BaseException:
                if owner is not None:  # the commit failed: the cell stays as it was, unowned
                    owner.release()
                raise
            return made, row, owner

    def named(self, cell_id: str, worker: WorkerInfo) -> Claim | None:
        """Move the named cell to running and open its next attempt; None if it is not claimable now.

        The caller already holds the cell's ownership; the guarded UPDATE's row
        count is the proof that no other worker claimed it first. (Workers
        claim with `claim_next`.)
        """
        with self.tx.write() as s:
            conn = s.connection()
            made = _Made(conn, True, {"now": self.tx.clock(), "cell": cell_id}, worker)
            row = made.take(conn)
            return None if row is None else made.claim_of(row)

    def _claimer(self, autocommit: bool = False) -> tuple[Connection, str | None]:
        """What claims keep between them: a connection (a checkout from the pool costs more), the turn's file.
        `autocommit`: a server's connection whose every statement is its own transaction (`_leased`)."""
        kept = self._kept[autocommit]
        # A forked child never uses its parent's connection (SQLite's file locks are per process).
        if kept is None or kept[0].closed or kept[2] != os.getpid():
            turn = None if self.tx.database.path is None else str(self.tx.paths.claim_lock)
            conn = self.tx.writer.connect()
            if autocommit:
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            kept = self._kept[autocommit] = (conn, turn, os.getpid())
        return kept[0], kept[1]

    def close(self) -> None:
        for autocommit in (False, True):
            kept, self._kept[autocommit] = self._kept[autocommit], None
            if kept is not None and kept[2] == os.getpid():
                kept[0].close()

    def claimable(self, limit: int | None = None) -> list[str]:
        """Cell ids a worker may claim now, in claim order: interrupted first, then queued (the first `limit`).

        The order claims take (`Claims.next` takes the first of it); workers
        never read this list, which is for people and tests.
        """
        params = {"now": self.tx.clock()}
        out: list[str] = []
        with self.tx.read() as s:
            for state in states.CLAIMABLE:
                left = None if limit is None else limit - len(out)
                if left is not None and left <= 0:
                    break
                out += s.scalars(claim_order(str(state)).limit(left), params)
        return out

    def cancel_requested(self, cell: str) -> bool:
        with self.tx.read() as s:
            return bool(s.scalar(select(CellRow.cancel_requested).where(CellRow.id == cell)))
