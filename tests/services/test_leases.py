"""Leases on a real PostgreSQL server: what only a server has (queue/leases.py).

The lease rules every liveness shares are the contract suite's (tests/contract/test_liveness.py);
here are the two rules of a database outage: a process that just (re)connected waits one full term
before it takes an expired lease for a dead holder's, and a holder that cannot reach the database
to renew stops writing at its expiry and says why. Every bound is the configured term, measured in
the server's clock (or a clock the test moves), never a guess at the machine's speed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import cast

import pytest
from sqlalchemy import Engine, Table, create_engine, func, select, text, update
from sqlalchemy.pool import NullPool
from unit.support import SWEEP_YAML, WORKER, sweep_from

from sweepq.queue import reconcile
from sweepq.queue.database import Database, upgrade
from sweepq.queue.leases import DatabaseUnreachable, TableLiveness
from sweepq.queue.pg_schema import execution_options
from sweepq.queue.records import Outcome
from sweepq.queue.schema import LeaseRow
from sweepq.queue.states import CellState, Reason
from sweepq.queue.store import Store

SWEEP = "leases"
TERM = 1.0  # seconds: a test waits at most a few terms


@pytest.fixture
def engines(postgres_url: str) -> Iterator[Callable[..., Engine]]:
    made: list[Engine] = []
    migrate = create_engine(postgres_url, poolclass=NullPool).execution_options(**execution_options(SWEEP))
    upgrade(migrate, "the test's database")
    made.append(migrate)

    def engine(**kw: object) -> Engine:
        made.append(create_engine(postgres_url, **kw).execution_options(**execution_options(SWEEP)))
        return made[-1]

    yield engine
    for e in made:
        e.dispose()


def expire_now(engine: Engine, cell: str) -> None:
    """The holder stopped renewing (it could not reach the database): its lease reached its expiry."""
    table = cast(Table, LeaseRow.__table__)
    with engine.begin() as conn:
        conn.execute(update(table).where(table.c.cell_id == cell).values(expires_at=func.now()))


def server_now(engine: Engine) -> datetime:
    with engine.connect() as conn:
        return conn.execute(select(func.now())).scalar_one()


def test_a_process_that_just_connected_waits_a_full_term_before_an_expired_lease_is_free(
    engines: Callable[..., Engine],
) -> None:
    holder = TableLiveness(engines(), TERM)
    held = holder.take("1.1")
    assert held is not None
    expire_now(engines(), "1.1")  # as after an outage that kept its holder from renewing
    reaper = TableLiveness(engines(), TERM)
    assert reaper.owner_alive("1.1")  # cannot tell yet: a live holder may be about to renew
    assert reaper.take("1.1") is None
    assert reaper.take("1.2") is not None  # an absent row is free at once
    assert reaper.connected_at is not None
    until = reaper.connected_at + timedelta(seconds=TERM)
    deadline = time.monotonic() + 60 * TERM  # only a stuck server runs this out
    while reaper.owner_alive("1.1"):
        assert time.monotonic() < deadline
        time.sleep(TERM / 10)
    assert server_now(engines()) >= until  # never a moment before its term ended, in the server's clock
    taken = reaper.take("1.1")
    assert taken is not None and taken.lost() is None
    assert held.lost() is not None and not held.renew()  # the old holder stops writing


def test_a_reconnected_process_starts_a_new_term(engines: Callable[..., Engine]) -> None:
    holder = TableLiveness(engines(), TERM)
    assert holder.take("1.1") is not None
    reaper_engine = engines(pool_size=1, connect_args={"application_name": "reaper"})
    reaper = TableLiveness(reaper_engine, TERM, settle_seconds=0.0)
    assert reaper.owner_alive("1.1")
    expire_now(engines(), "1.1")
    assert not reaper.owner_alive("1.1")  # settled: an expired lease is its dead holder's
    with engines().begin() as conn:  # the server drops the reaper's connection (a restart, a network cut)
        conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'reaper'"))
    with pytest.raises(DatabaseUnreachable):
        reaper.owner_alive("1.1")
    assert reaper.connected_at is None
    reaper.settle_seconds = TERM
    assert reaper.owner_alive("1.1") and reaper.take("1.1") is None  # a new term of its own


def test_a_holder_that_cannot_renew_stops_writing_at_its_expiry_and_says_why(
    engines: Callable[..., Engine], postgres_url: str
) -> None:
    now = [0.0]
    engine = engines(pool_size=1)
    holder = TableLiveness(engine, TERM * 30, monotonic=lambda: now[0])
    held = holder.take("1.1")
    assert held is not None and held.renew() and held.lost() is None
    database = postgres_url.rsplit("/", 1)[1]
    admin = create_engine(postgres_url.rsplit("/", 1)[0] + "/postgres", isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:  # the database goes away: no new connection, the old ones cut
            conn.execute(text(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false'))
            conn.execute(
                text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :d"), {"d": database}
            )
        now[0] += TERM * 29  # a second before its lease ends: it still owns the cell, as far as anyone knows
        assert held.lost() is None and held.renew()
        now[0] += TERM * 2
        why = held.lost()
        assert why is not None and "could not be reached to renew its lease before it expired" in why
        assert not held.renew()
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true'))
        admin.dispose()


def test_a_taker_renews_its_leases_from_a_thread_until_it_releases_them(
    engines: Callable[..., Engine], capfd: pytest.CaptureFixture[str]
) -> None:
    worker = TableLiveness(engines(), TERM, renew_seconds=TERM / 5)
    kept, taken_away = worker.take("1.1"), worker.take("1.2")
    assert kept is not None and taken_away is not None
    reaper = TableLiveness(engines(), TERM, settle_seconds=0.0)
    expire_now(engines(), "1.2")  # its holder froze: the thread's next renewal finds it gone
    started = server_now(engines())
    while server_now(engines()) < started + timedelta(seconds=3 * TERM):  # three terms: renewed all along
        assert kept.lost() is None and reaper.owner_alive("1.1")
        time.sleep(TERM / 10)
    assert taken_away.lost() is not None and not reaper.owner_alive("1.2")
    assert "cell 1.2 is no longer this worker's" in capfd.readouterr().err
    kept.release()
    assert not reaper.owner_alive("1.1") and reaper.take("1.1") is not None


def test_a_claim_takes_its_cells_lease_in_its_own_statement_by_the_same_rules(
    engines: Callable[..., Engine], postgres_url: str, tmp_path: Path
) -> None:
    """The claim on a server takes the lease inside its one statement (queue/claim.py `_server_claim`):
    committed with the claim, in the server's clock, and never an expired lease before a full term."""
    store = Store.open(tmp_path / "root", create=True, database=Database(postgres_url, sweep=SWEEP))
    try:
        sweep = sweep_from(SWEEP_YAML, tmp_path)
        store.apply_reconcile(sweep.settings, str(sweep.path), lambda existing: reconcile.plan(sweep, existing, False))
        holder = TableLiveness(engines(), TERM)
        got = store.claim_next(WORKER, holder.take)
        assert got is not None and got[0].cell == "1.1" and got[1].lost() is None
        with engines().connect() as conn:
            table = cast(Table, LeaseRow.__table__)
            host, expires, now = conn.execute(select(table.c.host, table.c.expires_at, func.now())).one()
        assert host == holder.host and timedelta(0) < expires - now <= timedelta(seconds=TERM)
        # Its attempt ends while its lease lives on (the holder is about to release it): the cell is
        # claimable first (interrupted), and passed over while its lease is live.
        assert store.finish("1.1", 1, Outcome(reason=str(Reason.PREEMPTED))) is CellState.INTERRUPTED
        other = TableLiveness(engines(), TERM)
        second = store.claim_next(WORKER, other.take)
        assert second is not None and second[0].cell == "1.2"
        expire_now(engines(), "1.1")  # its holder could not renew (an outage)
        late = TableLiveness(engines(), TERM)  # just connected: cannot tell a dead holder from a cut-off one
        third = store.claim_next(WORKER, late.take)
        assert third is not None and third[0].cell == "1.3"
        assert store.cell("1.1").state is CellState.INTERRUPTED
        assert late.connected_at is not None
        until = late.connected_at + timedelta(seconds=TERM)
        deadline = time.monotonic() + 60 * TERM  # only a stuck server runs this out
        while late.owner_alive("1.1"):
            assert time.monotonic() < deadline
            time.sleep(TERM / 10)
        assert server_now(engines()) >= until
        fourth = store.claim_next(WORKER, late.take)  # settled: the expired lease is a dead holder's
        assert fourth is not None and (fourth[0].cell, fourth[0].number) == ("1.1", 2)
        assert got[1].lost() is not None and fourth[1].lost() is None
        for c in (got, second, third, fourth):
            c[1].release()
    finally:
        store.close()
