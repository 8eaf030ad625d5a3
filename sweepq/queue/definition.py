"""What the queue holds: the sweep's settings row and its cells, written from a reconcile plan.

A sweep may hold 100,000 cells, so cells are compared by id and cfg hash in one
query (a cfg is read only for a cell whose hash changed) and written as bulk
inserts and updates, batch by batch, inside the reconcile's one write transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from functools import lru_cache
from itertools import islice
from operator import itemgetter
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import (
    BindParameter,
    ClauseElement,
    Dialect,
    String,
    Table,
    bindparam,
    func,
    insert,
    null,
    select,
    type_coerce,
    update,
)
from sqlalchemy.orm import Session
from sqlalchemy.sql.compiler import SQLCompiler

from sweepq.queue.prepared import Prepared, schema_of
from sweepq.queue.reconcile import Cfg, Existing, ReconcilePlan
from sweepq.queue.records import CellRecord, cell_record, json_safe
from sweepq.queue.schema import CellRow, EventRow, SweepRow, cell_order
from sweepq.queue.states import CellState
from sweepq.queue.transactions import Transactions
from sweepq.spec.types import CellSpec, Settings

if TYPE_CHECKING:
    from sweepq.queue.reconcile import ReconcilePlan as Plan

__all__ = ["Definition", "Existing"]

BATCH = 2000  # rows a bulk statement carries: memory stays flat however many cells a sweep has
_CELLS = cast(Table, CellRow.__table__)
_EVENTS = cast(Table, EventRow.__table__)
_ID: BindParameter[str] = bindparam("cell_id")
_STEPS = select(CellRow.id, CellRow.state, CellRow.attempts)
_HASHES = select(CellRow.id, CellRow.cfg_hash, CellRow.removed)
_EPOCH = datetime(1970, 1, 1)  # naive, as SQLite keeps UTC times
# finished_at as stored (ISO text on SQLite): parsed by _seconds, ten times faster than the column's type.
_DONE = select(CellRow.id, type_coerce(CellRow.finished_at, String)).where(CellRow.state == CellState.DONE)
_UNFINISHED = select(CellRow.id, CellRow.cfg_hash).where(
    CellRow.state != CellState.DONE, CellRow.state != CellState.RUNNING
)


@lru_cache(maxsize=8)
def _prepared(stmt: ClauseElement, dialect: Dialect, schema: str | None = None) -> Prepared:
    return Prepared(stmt, dialect, schema=schema)


class Definition:
    """The sweep's row and its cells, written from a reconcile plan, and what a reconcile reads."""

    def __init__(self, tx: Transactions) -> None:
        self.tx = tx

    def save_sweep(self, settings: Settings, spec_path: str | None, s: Session, digest: str | None = None) -> None:
        now = self.tx.clock()
        row = s.get(SweepRow, 1)
        if row is None:
            s.add(
                SweepRow(
                    id=1,
                    name=settings.name,
                    spec_path=spec_path,
                    settings=settings.to_json(),
                    plan_digest=digest,
                    created_at=now,
                    updated_at=now,
                )
            )
        else:
            row.name, row.spec_path, row.plan_digest = settings.name, spec_path, digest
            row.settings, row.updated_at = settings.to_json(), now

    def existing_cfgs(self, session: Session | None = None) -> Existing:
        """cell id -> (cfg_hash, cfg, removed) for every stored cell, cfgs included."""
        if session is None:
            with self.tx.read() as s:
                return self.existing_cfgs(s)
        rows = session.execute(select(CellRow.id, CellRow.cfg_hash, CellRow.cfg, CellRow.removed))
        return Existing((r.id, (r.cfg_hash, r.cfg, r.removed)) for r in rows)

    def existing_hashes(self, session: Session) -> Existing:
        """cell id -> (cfg_hash, None, removed): the cfgs are read on demand, in `session`, by `read_cfgs`."""
        rows = session.connection().execute(_HASHES).fetchall()  # plain rows, at once: a row at a time costs more
        return Existing(
            ((cell, (digest, None, removed)) for cell, digest, removed in rows), lambda ids: _cfgs(session, ids)
        )

    def read_reconcile(self, planner: Callable[[Existing], Plan], digest: str | None = None) -> Plan:
        """Plan against the stored cells in one read transaction, writing nothing (a launch's first check).

        `digest` (reconcile.plan_digest) equal to the one stored by the last reconcile
        means the same file again: nothing to compare, and the plan is empty.
        """
        with self.tx.read() as s:
            if digest is not None and _stored_digest(s) == digest:
                return ReconcilePlan(same_file=True)
            return planner(self.existing_hashes(s))

    def apply_reconcile(
        self,
        settings: Settings,
        spec_path: str | None,
        planner: Callable[[Existing], Plan],
        digest: str | None = None,
        rerun: bool = False,
    ) -> Plan:
        """Plan against the stored cells and write the plan, in one write transaction.

        The plan is made inside the transaction (not from an earlier read) so that
        two launches starting at once on a new root agree: the second one sees the
        first one's cells. A planner that raises leaves nothing written. `digest`
        is recorded with the plan: the next launch of the same file skips the plan.
        `rerun` (--rerun-changed) queues again every done cell whose result came from
        an older cfg, those an earlier `--accept-changed` kept included.
        """
        with self.tx.write() as s:
            if digest is not None and _stored_digest(s) == digest:
                plan = ReconcilePlan(same_file=True)
            else:
                plan = planner(self.existing_hashes(s))
                self._apply(s, plan)
            if rerun:  # the same file again too: cells kept under their old cfg by an earlier launch
                plan.rerun = True
                plan.requeued = self._rerun_kept(s)
            self.save_sweep(settings, spec_path, s, digest)
        return plan

    def done_cells(self) -> list[tuple[str, float | None]]:
        """(id, finished_at in seconds since the epoch) of every done cell: what checking its DONE.json needs.

        Read on the driver's cursor (prepared.py): 100,000 rows through SQLAlchemy's
        result cost three times the query.
        """
        with self.tx.read() as s:
            conn = s.connection()
            return [(cell, _seconds(at)) for cell, at in _prepared(_DONE, conn.dialect, schema_of(conn)).rows(conn)]

    def unfinished_cells(self) -> list[tuple[str, str]]:
        """(id, cfg_hash) of every cell neither done nor running: those a DONE.json could finish."""
        with self.tx.read() as s:
            conn = s.connection()
            return [
                (cell, cfg_hash) for cell, cfg_hash in _prepared(_UNFINISHED, conn.dialect, schema_of(conn)).rows(conn)
            ]

    def steps_digest(self) -> tuple[tuple[str, int, int], ...]:
        """Per state, its cells and their attempts summed: it moves whenever a cell's state or attempt does."""
        q = select(CellRow.state, func.count(), func.sum(CellRow.attempts)).group_by(CellRow.state)
        with self.tx.read() as s:
            return tuple((state, count, int(attempts or 0)) for state, count, attempts in s.execute(q))

    def cells_by_id(self, ids: list[str]) -> list[CellRecord]:
        """The records of these cells, in cell order."""
        found: list[CellRecord] = []
        with self.tx.read() as s:
            for batch in _batches(iter(ids)):
                found.extend(cell_record(r) for r in s.scalars(select(CellRow).where(CellRow.id.in_(batch))))
        return sorted(found, key=lambda c: (c.group, c.index))

    def cell_steps(self) -> dict[str, tuple[str, int]]:
        """cell id -> (state, attempts) of every cell: where each stands, without loading its record."""
        with self.tx.read() as s:
            conn = s.connection()
            return {
                cell: (state, attempts)
                for cell, state, attempts in _prepared(_STEPS, conn.dialect, schema_of(conn)).rows(conn)
            }

    def cells_not_in(self, state: CellState, limit: int) -> tuple[list[CellRecord], int]:
        """The first `limit` cells in any state but `state`, in cell order, and how many there are in all."""
        other = CellRow.state != state
        with self.tx.read() as s:
            count = s.scalar(select(func.count()).select_from(CellRow).where(other)) or 0
            q = select(CellRow).where(other).order_by(*cell_order()).limit(limit)
            return [cell_record(r) for r in s.scalars(q)], count

    def _apply(self, s: Session, plan: Plan) -> None:
        now = self.tx.clock()
        _insert_cells(s, plan.new, now)
        ran = _done_results(s, [c.id for c, _ in plan.changed])
        changed = [{"cell_id": c.id, "new_cfg": c.cfg, "new_hash": c.cfg_hash} for c, _ in plan.changed]
        self._update(s, changed, now, cfg=bindparam("new_cfg"), cfg_hash=bindparam("new_hash"))
        # A done cell's result stays beside the cfg that produced it (the earliest, through several changes);
        # changed back to that cfg, it is the cell's own again.
        done = [c for c, _ in plan.changed if c.id in ran]
        held: list[dict[str, Any]] = [{"cell_id": c.id, "ran": ran[c.id]} for c in done if ran[c.id] != c.cfg]
        self._update(s, held, now, ran_cfg=bindparam("ran", type_=_CELLS.c.ran_cfg.type))
        _nulls(s, [c.id for c in done if ran[c.id] == c.cfg])
        plan.kept_done = [c.id for c in done if ran[c.id] != c.cfg]
        self._events(
            s,
            (
                (c.id, "cfg_changed", {"changes": diff, "accepted": True} | _kept(ran.get(c.id), c.cfg))
                for c, diff in plan.changed
            ),
        )
        self._update(s, [{"cell_id": cid} for cid in plan.removed], now, removed=True)
        self._events(s, ((cid, "removed_from_spec", {}) for cid in plan.removed))
        self._update(s, [{"cell_id": cid} for cid in plan.returned], now, removed=False)
        self._events(s, ((cid, "returned_to_spec", {}) for cid in plan.returned))

    def _rerun_kept(self, s: Session) -> list[str]:
        """Queue again the done cells whose result came from an older cfg, with a fresh budget: they resume
        from their newest checkpoint under the new cfg (reset starts from scratch). The result they leave is
        kept in their history (a `rerun_changed` event), its metrics and best cleared from the cell."""
        rows = s.execute(
            select(_CELLS.c.id, _CELLS.c.ran_cfg, _CELLS.c.step, _CELLS.c.epoch, _CELLS.c.metrics, _CELLS.c.best)
            .add_columns(_CELLS.c.best_step)
            .where(_CELLS.c.state == CellState.DONE, _HAS_RAN)
            .order_by(*cell_order())
        ).all()
        now = self.tx.clock()
        self._update(
            s,
            [{"cell_id": r.id} for r in rows],
            now,
            state=CellState.QUEUED,
            finished_at=None,
            retry_after=None,
            budget_base=_CELLS.c.attempts,
            ran_cfg=null(),
            metrics=null(),
            best=None,
            best_step=None,
        )
        result = ("step", "epoch", "metrics", "best", "best_step")
        self._events(
            s,
            (
                (r.id, "rerun_changed", {"ran_with": r.ran_cfg, "result": {k: getattr(r, k) for k in result}})
                for r in rows
            ),
        )
        return [r.id for r in rows]

    @staticmethod
    def _update(s: Session, params: list[dict[str, Any]], now: Any, **values: Any) -> None:
        statement = update(_CELLS).where(_CELLS.c.id == _ID).values(updated_at=now, **values)
        for rows in _batches(params):
            s.execute(statement, rows)

    def _events(self, s: Session, events: Iterable[tuple[str, str, dict[str, Any]]]) -> None:
        at = self.tx.clock()
        rows = ({"cell_id": cell, "at": at, "kind": kind, "detail": json_safe(detail)} for cell, kind, detail in events)
        for batch in _batches(rows):
            s.execute(insert(_EVENTS), batch)


# ran_cfg holds a cfg: SQL NULL when none (written as null(): a bare None would be JSON's "null").
_HAS_RAN = _CELLS.c.ran_cfg.is_not(None) & (type_coerce(_CELLS.c.ran_cfg, String) != "null")


def _done_results(s: Session, ids: list[str]) -> dict[str, Cfg]:
    """Of these cells, the done ones: the cfg their result came from (kept from an earlier change, else their cfg)."""
    found: dict[str, Cfg] = {}
    for batch in _batches(iter(ids)):
        q = select(_CELLS.c.id, _CELLS.c.cfg, _CELLS.c.ran_cfg).where(
            _CELLS.c.id.in_(batch), _CELLS.c.state == CellState.DONE
        )
        found.update((r.id, r.cfg if r.ran_cfg is None else r.ran_cfg) for r in s.execute(q))
    return found


def _nulls(s: Session, ids: list[str]) -> None:
    for batch in _batches(iter(ids)):
        s.execute(update(_CELLS).where(_CELLS.c.id.in_(batch)).values(ran_cfg=null()))


def _kept(ran: Cfg | None, cfg: Cfg) -> dict[str, Any]:
    """What the cfg_changed event says of a done cell: its result kept under the cfg it ran with."""
    if ran is None or ran == cfg:
        return {}
    return {"done": "kept under the cfg it ran with", "ran_with": ran}


def _stored_digest(s: Session) -> str | None:
    return s.scalar(select(SweepRow.plan_digest).where(SweepRow.id == 1))


def _insert_cells(s: Session, cells: list[CellSpec], now: datetime) -> None:
    """New cells, queued, inserted batch by batch through the driver's executemany.

    Each column's value is put in the database's terms by its type (as SQLAlchemy
    would), once for the values every new cell shares: per cell, only its cfg is
    encoded, and on SQLite not even that (the expansion laid out its text). Through
    the ORM or a Core insert, turning 100,000 rows' parameters into the driver's
    took ten times longer than the driver took to insert them.
    """
    connection = s.connection()
    dialect = connection.dialect
    shared = {
        "state": CellState.QUEUED.value,
        "attempts": 0,
        "budget_base": 0,
        "cancel_requested": False,
        "removed": False,
        "created_at": now,
        "updated_at": now,
    }
    shared = {key: _bound(key, value, dialect) for key, value in shared.items()}
    encode = _CELLS.c.cfg.type.dialect_impl(dialect).bind_processor(dialect) or (lambda cfg: cfg)
    # SQLite stores JSON as json.dumps's text, which the expansion wrote already (CellSpec.cfg_json).
    ready = dialect.name == "sqlite" and getattr(dialect, "_json_serializer", None) is None

    def as_text(c: CellSpec) -> Any:
        return c.cfg_json if ready and c.cfg_json else encode(c.cfg)

    keys = ["id", "group_number", "index", "group_name", "cfg", "cfg_hash", *shared]
    schema = schema_of(connection)
    translate: dict[str, Any] = (
        {"schema_translate_map": {None: schema}, "render_schema_translate": True} if schema else {}
    )
    compiled = insert(_CELLS).compile(dialect=dialect, column_keys=keys, **translate)
    same = tuple(shared.values())
    for batch in _batches(iter(cells)):
        rows = [(c.id, c.group, c.index, c.group_name, as_text(c), c.cfg_hash, *same) for c in batch]
        connection.exec_driver_sql(compiled.string, _in_order(compiled, keys, rows))


def _in_order(compiled: SQLCompiler, keys: list[str], rows: list[tuple[Any, ...]]) -> Any:
    """Rows of values in `keys`' order as the driver takes them for `compiled`: tuples in its order, or mappings."""
    if not compiled.positional:
        return [dict(zip(keys, row, strict=True)) for row in rows]
    order = [keys.index(name) for name in compiled.positiontup or ()]
    if order == list(range(len(keys))):
        return rows
    pick = itemgetter(*order)
    return [pick(row) for row in rows]


def _bound(key: str, value: Any, dialect: Dialect) -> Any:
    process = _CELLS.c[key].type.dialect_impl(dialect).bind_processor(dialect)  # as the dialect's own type does
    return value if process is None else process(value)


def _seconds(stored: str | datetime | None) -> float | None:
    """A stored UTC time in seconds since the epoch: SQLite keeps it as ISO text (naive, UTC); a driver
    with a time type of its own hands over a datetime."""
    if stored is None:
        return None
    if isinstance(stored, datetime):
        return stored.timestamp()
    return (datetime.fromisoformat(stored) - _EPOCH).total_seconds()


def _cfgs(s: Session, ids: list[str]) -> Mapping[str, Cfg]:
    found: dict[str, Cfg] = {}
    for batch in _batches(iter(ids)):
        found.update((r.id, r.cfg) for r in s.execute(select(CellRow.id, CellRow.cfg).where(CellRow.id.in_(batch))))
    return found


def _batches(items: Iterator[Any] | list[Any]) -> Iterator[list[Any]]:
    it = iter(items)
    while batch := list(islice(it, BATCH)):
        yield batch
