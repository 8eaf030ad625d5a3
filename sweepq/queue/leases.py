"""Liveness by leases in a server database: a row per running cell, renewed by its holder, in the server's clock.

The `leases` table (migration 0008) is liveness.py's `LeaseRegistry` made durable and shared by
machines: `take` is one INSERT ... ON CONFLICT that only takes an absent or expired row, `renew`
and `release` an UPDATE or DELETE guarded by the holder's token, and every expiry is compared with
the server's `now()`, never with a machine's clock. Each is one short statement in its own
transaction on the engine's small pool: nothing is kept in the session (PgBouncer in transaction
mode is fine).

Two rules keep a database outage from turning into false reclaims or two writers:

- A process that just connected, or reconnected after a failed statement, cannot tell an expired
  lease of a dead holder from one whose holder could not renew during the outage. For one full term
  of its own (`settle_seconds`, by default `expire_seconds`, in the server's clock from its first
  statement that succeeded) it takes an expired row for a live owner: `take` refuses it and
  `owner_alive` says alive. An absent row (a released lease, a cell never run) is free at once.
  Half a term without a statement counts as a reconnection too: an outage may have come and gone
  unseen between two statements (the pool reconnects silently).
- A holder knows when its lease ends without asking: each statement that read its row notes the
  expiry, measured from before the statement was sent on this process's monotonic clock. When the
  server cannot be reached, `lost()` and `renew()` answer from that: alive until then, lost after,
  so a holder that cannot renew before its expiry stops writing, and says why.
"""

from __future__ import annotations

import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import ColumnClause, Connection, Engine, Table, delete, extract, func, literal_column, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import DBAPIError

from sweepq.queue.handoff import Handoff, LeaseToken, inherit_lease
from sweepq.queue.schema import LeaseRow

_LEASES = cast(Table, LeaseRow.__table__)
_SECOND: ColumnClause[Any] = literal_column("interval '1 second'")
LEASES, SECOND = _LEASES, _SECOND  # for the claim, which takes a lease in its own statement (claim.py)


class DatabaseUnreachable(RuntimeError):
    """A lease statement could not reach the database (the server is down, the network is gone)."""


class TableLiveness:
    """Ownership is a row of the sweep's `leases` table: `expire_seconds` from its last renewal.

    `engine` reaches the sweep's tables (on PostgreSQL: with the sweep's schema in its execution
    options, pg_schema.execution_options). `monotonic` is this process's clock for the holder's
    own deadline; every expiry is otherwise the server's.
    """

    def __init__(
        self,
        engine: Engine,
        expire_seconds: float,
        *,
        settle_seconds: float | None = None,
        renew_seconds: float | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine = engine
        self.expire_seconds = float(expire_seconds)
        self.settle_seconds = self.expire_seconds if settle_seconds is None else float(settle_seconds)
        self.monotonic = monotonic
        self.host = socket.gethostname()
        #: When this process's current run of successful statements began, in the server's clock; None
        #: after a failure (the next success starts a new run, and a new term to wait).
        self.connected_at: datetime | None = None
        self.last_ok: float | None = None  # this process's monotonic clock at its last successful statement
        self._inherited: dict[tuple[str, str], _TableOwnership] = {}
        #: With `renew_seconds`, the leases this process took are renewed from a thread of its own (the
        #: worker's, which training cannot starve), every `renew_seconds`, until released or lost.
        self.renew_seconds = renew_seconds
        self._renewing: dict[int, _TableOwnership] = {}
        self._renewer: threading.Thread | None = None
        self._guard = threading.Lock()

    # -- one statement each -------------------------------------------------------------------

    @contextmanager
    def _statement(self) -> Iterator[Connection]:
        try:
            with self.engine.begin() as conn:
                yield conn
        except DBAPIError as e:
            if not _unreachable(e):
                raise
            self.connected_at = None
            raise DatabaseUnreachable(f"the database is unreachable: {e.orig or e}") from e

    def _note(self, now: datetime) -> bool:
        """Note a successful statement at the server's `now`; True once this process has settled."""
        mono = self.monotonic()
        if self.last_ok is not None and mono - self.last_ok > self.settle_seconds / 2:
            # Quiet for half a term: an outage may have come and gone between two statements
            # (the pool reconnects unseen), long enough for live holders' leases to lapse.
            self.connected_at = None
        self.last_ok = mono
        if self.connected_at is None:
            self.connected_at = now
        return now - self.connected_at >= timedelta(seconds=self.settle_seconds)

    def _term(self) -> Any:
        return func.now() + _SECOND * self.expire_seconds

    def _acquire(self, cell: str, token: str) -> datetime | None:
        """Take the lease on `cell` when absent (or expired, once settled); its expiry, else None."""
        with self._statement() as conn:
            now = conn.execute(select(func.now())).scalar_one()
            settled = self._note(now)
            row = {"cell_id": cell, "token": token, "expires_at": self._term(), "renewed_at": func.now()}
            stmt = insert(_LEASES).values(**row, host=self.host)
            taken = stmt.on_conflict_do_update(
                index_elements=[_LEASES.c.cell_id],
                set_={k: stmt.excluded[k] for k in ("token", "expires_at", "renewed_at", "host")},
                # Before it settled, this process takes no expired lease: its holder may only have
                # been unable to renew while the database was away.
                where=_LEASES.c.expires_at <= func.now() if settled else literal_column("false"),
            )
            return conn.execute(taken.returning(_LEASES.c.expires_at)).scalar_one_or_none()

    def _renew(self, cell: str, token: str) -> tuple[datetime, datetime] | None:
        with self._statement() as conn:
            row = conn.execute(
                update(_LEASES)
                .where(_LEASES.c.cell_id == cell, _LEASES.c.token == token, _LEASES.c.expires_at > func.now())
                .values(expires_at=self._term(), renewed_at=func.now())
                .returning(_LEASES.c.expires_at, func.now())
            ).one_or_none()
            if row is None:
                self._note(conn.execute(select(func.now())).scalar_one())
                return None
            self._note(row[1])
            return row[0], row[1]

    def _look(self, cell: str) -> tuple[str | None, datetime | None, datetime, bool]:
        """`cell`'s row as (token, expires_at, the server's now, settled); token None without a row."""
        with self._statement() as conn:
            now = conn.execute(select(func.now())).scalar_one()
            row = conn.execute(select(_LEASES.c.token, _LEASES.c.expires_at).where(_LEASES.c.cell_id == cell)).first()
        settled = self._note(now)
        return (row[0], row[1], now, settled) if row is not None else (None, None, now, settled)

    def _drop(self, cell: str, token: str) -> None:
        with self._statement() as conn:
            conn.execute(delete(_LEASES).where(_LEASES.c.cell_id == cell, _LEASES.c.token == token))

    # -- the Liveness interface -----------------------------------------------------------------

    def take(self, cell: str) -> _TableOwnership | None:
        token = secrets.token_hex(16)
        sent = self.monotonic()
        expires = self._acquire(cell, token)
        if expires is None:
            return None
        owned = _TableOwnership(self, cell, token, taker=True)
        owned.valid_until = sent + self.expire_seconds
        if self.renew_seconds is not None:
            self._renew_from_thread(owned)
        return owned

    # -- a lease taken inside the claim's statement (claim.py `_server_claim`) ---------------------

    def claim_terms(self) -> dict[str, Any]:
        """The parameters of a lease taken by a claim's own statement, as `_acquire` would take it: a new
        token, this host, the term, and when this process's run of successful statements began (None:
        not settled, no expired lease is taken), reset after half a term of quiet as `_note` does."""
        mono = self.monotonic()
        quiet = self.last_ok is not None and mono - self.last_ok > self.settle_seconds / 2
        return {
            "token": secrets.token_hex(16),
            "host": self.host,
            "expire": self.expire_seconds,
            "settle": self.settle_seconds,
            "connected_at": None if quiet else self.connected_at,
            "sent": mono,
        }

    def claimed(self, cell: str, terms: Mapping[str, Any], now: datetime) -> _TableOwnership:
        """The ownership of the lease a claim's statement took with `terms`, at the server's `now`."""
        self._note(now)
        owned = _TableOwnership(self, cell, terms["token"], taker=True)
        owned.valid_until = terms["sent"] + self.expire_seconds
        if self.renew_seconds is not None:
            self._renew_from_thread(owned)
        return owned

    def answered(self, now: datetime) -> None:
        """A claim's statement succeeded at the server's `now` without taking a lease (nothing to claim)."""
        self._note(now)

    def drop(self, cell: str, token: str) -> None:
        """Give back a lease a claim's statement took for a cell it did not claim."""
        try:
            self._drop(cell, token)
        except DatabaseUnreachable:
            pass  # it ends at its expiry instead: nobody renews it

    def unreachable(self) -> None:
        """A claim's statement could not reach the server: the next success starts a new term to wait."""
        self.connected_at = None

    def _renew_from_thread(self, owned: _TableOwnership) -> None:
        with self._guard:
            self._renewing[id(owned)] = owned
            if self._renewer is None or not self._renewer.is_alive():
                self._renewer = threading.Thread(target=self._renew_loop, name="sweepq-lease-renewer", daemon=True)
                self._renewer.start()

    def _renew_loop(self) -> None:
        assert self.renew_seconds is not None
        while True:
            time.sleep(self.renew_seconds)
            with self._guard:
                held = list(self._renewing.values())
            for owned in held:
                if not owned.held:
                    self._stop_renewing(owned)
                elif not owned.renew():
                    self._stop_renewing(owned)
                    why = owned.lost() or "its lease could not be renewed"
                    print(f"sweepq: cell {owned.cell} is no longer this worker's: {why}", file=sys.stderr)

    def _stop_renewing(self, owned: _TableOwnership) -> None:
        with self._guard:
            self._renewing.pop(id(owned), None)

    def inherit(self, cell: str, environ: Mapping[str, str] | None = None) -> _TableOwnership | None:
        return inherit_lease(cell, environ, self._inherited, lambda token: _TableOwnership(self, cell, token, False))

    def owner_alive(self, cell: str) -> bool:
        token, expires, now, settled = self._look(cell)
        if token is None or expires is None:
            return False
        return expires > now or not settled  # an expired row counts as live until this process settled

    def holders(self) -> dict[str, Holder]:
        """For status, every lease in one statement: cell -> its holder's host, the seconds since its last
        renewal, and whether its owner counts as alive (`owner_alive`'s rule: unexpired, or this process
        has not settled yet). A cell without a row has no live owner."""
        with self._statement() as conn:
            now = conn.execute(select(func.now())).scalar_one()
            rows = conn.execute(
                select(
                    _LEASES.c.cell_id,
                    _LEASES.c.host,
                    extract("epoch", func.now() - _LEASES.c.renewed_at),
                    _LEASES.c.expires_at > func.now(),
                )
            ).all()
        settled = self._note(now)
        return {cell: Holder(host, max(0.0, float(age)), bool(live) or not settled) for cell, host, age, live in rows}


@dataclass(frozen=True)
class Holder:
    """A lease as `status` shows it."""

    host: str | None
    age_seconds: float  # since its holder last renewed it, in the server's clock
    alive: bool


class _TableOwnership:
    def __init__(self, liveness: TableLiveness, cell: str, token: str, taker: bool) -> None:
        self.cell = cell
        self._liveness = liveness
        self.lease = LeaseToken(cell, token, taker)
        #: Until when (this process's monotonic clock) the lease is known to hold without asking.
        self.valid_until = float("-inf")

    @property
    def held(self) -> bool:
        return self.lease.held

    def handoff(self) -> Handoff:
        return self.lease.handoff()

    def _unreachable_answer(self) -> str | None:
        left = self.valid_until - self._liveness.monotonic()
        if left > 0:
            return None  # the lease still runs, whatever the database's answer would be
        return (
            "the database could not be reached to renew its lease before it expired "
            f"({-left:.1f} s ago): another machine may own the cell now"
        )

    def renew(self) -> bool:
        token = self.lease.value
        if token is None:
            return False
        sent = self._liveness.monotonic()
        try:
            renewed = self._liveness._renew(self.cell, token)
        except DatabaseUnreachable:
            return self._unreachable_answer() is None
        if renewed is None:
            self.valid_until = float("-inf")
            return False
        expires, now = renewed
        self.valid_until = sent + (expires - now).total_seconds()
        return True

    def release(self) -> None:
        token = self.lease.give_up()
        self._liveness._stop_renewing(self)
        if token is not None:
            try:
                self._liveness._drop(self.cell, token)
            except DatabaseUnreachable:
                pass  # the lease ends at its expiry instead: nobody renews it any more

    def lost(self) -> str | None:
        token = self.lease.value
        if token is None:
            return LeaseToken.RELEASED
        sent = self._liveness.monotonic()
        try:
            holder, expires, now, _ = self._liveness._look(self.cell)
        except DatabaseUnreachable:
            return self._unreachable_answer()
        if holder != token or expires is None or expires <= now:
            self.valid_until = float("-inf")
            return LeaseToken.EXPIRED
        self.valid_until = sent + (expires - now).total_seconds()
        return None


def _unreachable(e: DBAPIError) -> bool:
    """A failure to reach the server (as opposed to a statement the server refused)."""
    return bool(e.connection_invalidated) or type(e).__name__ in ("OperationalError", "InterfaceError")
