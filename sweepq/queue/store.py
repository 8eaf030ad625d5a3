"""The queue: a narrow set of verbs over the database, returning frozen records.

Every write is one short `BEGIN IMMEDIATE` transaction. State changes are
guarded in SQL (`UPDATE ... WHERE state IN (...)`) and a row count of zero is a
lost race or an illegal transition, never a silent overwrite. Only workers,
orphaned training processes closing their own attempt, and user commands write.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, func, or_, select, update
from sqlalchemy.orm import Session

from sweepq.errors import IllegalTransition, UsageError
from sweepq.layout import RootPaths
from sweepq.queue import db, states
from sweepq.queue.models import AttemptRow, CellRow, CheckpointRow, EventRow, SweepRow
from sweepq.queue.records import (
    AttemptRecord,
    CellRecord,
    CheckpointRecord,
    Claim,
    EventRecord,
    Outcome,
    WorkerInfo,
)
from sweepq.queue.states import CellState, CheckpointState, Reason
from sweepq.spec.sweep import Settings

if TYPE_CHECKING:
    from sweepq.queue.reconcile import ReconcilePlan as Plan

Clock = Callable[[], datetime]
Existing = dict[str, tuple[str, dict[str, Any], bool]]  # cell id -> (cfg_hash, cfg, removed)


def utcnow() -> datetime:
    return datetime.now(UTC)


class Store:
    def __init__(self, root: Path, engine: Engine, clock: Clock = utcnow) -> None:
        self.root = root
        self.paths = RootPaths(root)
        self.engine = engine
        self._writer = engine.execution_options(**{db.IMMEDIATE: True})
        self.clock = clock
        self._batch: Session | None = None

    # -- opening ----------------------------------------------------------

    @classmethod
    def open(cls, root: Path, *, create: bool = False, clock: Clock = utcnow) -> Store:
        """Open a root's database, migrating it to this sweepq's schema.

        `create=False` refuses a folder that is not a sweep root (no database).
        """
        paths = RootPaths(root)
        if not paths.db.exists():
            if not create:
                raise UsageError(
                    f"{root} is not a sweep root (no {paths.db.name} in it). Give the root with "
                    "--root DIR or the sweep file, or launch the sweep first."
                )
            root.mkdir(parents=True, exist_ok=True)
        engine = db.make_engine(paths.db)
        db.upgrade(engine, paths.migrate_lock)
        return cls(root, engine, clock)

    @classmethod
    def open_readonly(cls, root: Path, clock: Clock = utcnow) -> Store:
        """For read commands: never creates or migrates anything."""
        paths = RootPaths(root)
        if not paths.db.exists():
            raise UsageError(
                f"{root} is not a sweep root (no {paths.db.name} in it). Give the root with "
                "--root DIR or the sweep file, or launch the sweep first."
            )
        engine = db.make_engine(paths.db)
        db.check_current(engine)
        return cls(root, engine, clock)

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def _write(self) -> Iterator[Session]:
        if self._batch is not None:  # inside batch(): join its transaction
            yield self._batch
            return
        with Session(self._writer, expire_on_commit=False) as s, s.begin():
            yield s

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Run the write verbs called inside as one transaction (one fsync, one short lock)."""
        if self._batch is not None:
            yield
            return
        with Session(self._writer, expire_on_commit=False) as s, s.begin():
            self._batch = s
            try:
                yield
            finally:
                self._batch = None

    @contextmanager
    def _read(self) -> Iterator[Session]:
        with Session(self.engine, expire_on_commit=False) as s, s.begin():
            yield s

    # -- the sweep ----------------------------------------------------------

    def settings(self) -> Settings:
        with self._read() as s:
            row = s.get(SweepRow, 1)
            if row is None:
                raise UsageError(f"{self.root} has a database but no sweep in it yet")
            return Settings.from_json(row.settings)

    def sweep_info(self) -> dict[str, Any]:
        with self._read() as s:
            row = s.get(SweepRow, 1)
            if row is None:
                return {}
            return {"name": row.name, "spec_path": row.spec_path, "created_at": row.created_at}

    def save_sweep(self, settings: Settings, spec_path: str | None, s: Session) -> None:
        now = self.clock()
        row = s.get(SweepRow, 1)
        if row is None:
            s.add(
                SweepRow(
                    id=1,
                    name=settings.name,
                    spec_path=spec_path,
                    settings=settings.to_json(),
                    created_at=now,
                    updated_at=now,
                )
            )
        else:
            row.name, row.spec_path = settings.name, spec_path
            row.settings, row.updated_at = settings.to_json(), now

    def existing_cfgs(self, session: Session | None = None) -> Existing:
        """cell id -> (cfg_hash, cfg, removed) for every stored cell."""
        if session is None:
            with self._read() as s:
                return self.existing_cfgs(s)
        rows = session.execute(select(CellRow.id, CellRow.cfg_hash, CellRow.cfg, CellRow.removed))
        return {r.id: (r.cfg_hash, r.cfg, r.removed) for r in rows}

    def apply_reconcile(self, settings: Settings, spec_path: str | None, planner: Callable[[Existing], Plan]) -> Plan:
        """Plan against the stored cells and write the plan, in one write transaction.

        The plan is made inside the transaction (not from an earlier read) so that
        two launches starting at once on a new root agree: the second one sees the
        first one's cells. A planner that raises leaves nothing written.
        """
        with self._write() as s:
            plan = planner(self.existing_cfgs(s))
            self.save_sweep(settings, spec_path, s)
            self._apply(s, plan)
        return plan

    def _apply(self, s: Session, plan: Plan) -> None:
        now = self.clock()
        for c in plan.new:
            s.add(
                CellRow(
                    id=c.id,
                    group_number=c.group,
                    index=c.index,
                    group_name=c.group_name,
                    cfg=c.cfg,
                    cfg_hash=c.cfg_hash,
                    state=CellState.QUEUED,
                    attempts=0,
                    budget_base=0,
                    cancel_requested=False,
                    removed=False,
                    created_at=now,
                    updated_at=now,
                )
            )
        for c, diff in plan.changed:
            row = s.get(CellRow, c.id)
            assert row is not None
            row.cfg, row.cfg_hash, row.updated_at = c.cfg, c.cfg_hash, now
            self._event(s, c.id, "cfg_changed", {"changes": diff, "accepted": True})
        for cid in plan.removed:
            s.execute(update(CellRow).where(CellRow.id == cid).values(removed=True, updated_at=now))
            self._event(s, cid, "removed_from_spec", {})
        for cid in plan.returned:
            s.execute(update(CellRow).where(CellRow.id == cid).values(removed=False, updated_at=now))
            self._event(s, cid, "returned_to_spec", {})

    # -- reading ------------------------------------------------------------

    def cells(self, include_removed: bool = True) -> list[CellRecord]:
        with self._read() as s:
            q = select(CellRow).order_by(CellRow.group_number, CellRow.index)
            if not include_removed:
                q = q.where(CellRow.removed.is_(False))
            return [_cell(r) for r in s.scalars(q)]

    def cell(self, cell_id: str) -> CellRecord:
        with self._read() as s:
            row = s.get(CellRow, cell_id)
            if row is None:
                raise UsageError(f"no cell {cell_id!r} in the sweep at {self.root}")
            return _cell(row)

    def attempts(
        self, cell: str | None = None, reason: str | None = None, newest_first: bool = False
    ) -> list[AttemptRecord]:
        with self._read() as s:
            q = select(AttemptRow)
            if cell is not None:
                q = q.where(AttemptRow.cell_id == cell)
            if reason is not None:
                q = q.where(AttemptRow.reason == reason)
            order = (AttemptRow.started_at, AttemptRow.id)
            q = q.order_by(*(o.desc() for o in order)) if newest_first else q.order_by(*order)
            return [_attempt(r) for r in s.scalars(q)]

    def attempt(self, cell: str, number: int) -> AttemptRecord | None:
        with self._read() as s:
            row = self._attempt_row(s, cell, number)
            return None if row is None else _attempt(row)

    def checkpoints(self, cell: str) -> list[CheckpointRecord]:
        with self._read() as s:
            q = select(CheckpointRow).where(CheckpointRow.cell_id == cell).order_by(CheckpointRow.step)
            return [_checkpoint(r) for r in s.scalars(q)]

    def events(self, cell: str | None = None) -> list[EventRecord]:
        with self._read() as s:
            q = select(EventRow).order_by(EventRow.at, EventRow.id)
            if cell is not None:
                q = q.where(EventRow.cell_id == cell)
            return [EventRecord(r.cell_id, r.at, r.kind, r.detail or {}) for r in s.scalars(q)]

    def claimable(self) -> list[str]:
        """Cell ids a worker may claim now, in claim order: interrupted first, then queued."""
        now = self.clock()
        with self._read() as s:
            q = (
                select(CellRow.id, CellRow.state)
                .where(
                    CellRow.state.in_([str(x) for x in states.CLAIMABLE]),
                    CellRow.removed.is_(False),
                    or_(CellRow.retry_after.is_(None), CellRow.retry_after <= now),
                )
                .order_by(CellRow.group_number, CellRow.index)
            )
            rows = list(s.execute(q))
        rank = {str(x): i for i, x in enumerate(states.CLAIMABLE)}
        return [r.id for r in sorted(rows, key=lambda r: rank[r.state])]

    def etas(self) -> dict[str, float]:
        """Seconds left for running cells, from their attempt's rate since it started."""
        with self._read() as s:
            q = (
                select(
                    CellRow.id,
                    CellRow.step,
                    CellRow.total_steps,
                    CellRow.progress_at,
                    AttemptRow.started_at,
                    AttemptRow.start_step,
                )
                .join(AttemptRow, (AttemptRow.cell_id == CellRow.id) & (AttemptRow.number == CellRow.attempts))
                .where(CellRow.state == CellState.RUNNING)
            )
            rows = list(s.execute(q))
        out = {}
        for r in rows:
            if not r.total_steps or r.step is None or r.progress_at is None:
                continue
            done, spent = r.step - (r.start_step or 0), (r.progress_at - r.started_at).total_seconds()
            if done > 0 and spent > 0:
                out[r.id] = max(0.0, (r.total_steps - r.step) * spent / done)
        return out

    def running(self) -> list[tuple[str, int]]:
        """(cell, attempt number) of every cell the database believes is running."""
        with self._read() as s:
            q = select(CellRow.id, CellRow.attempts).where(CellRow.state == CellState.RUNNING)
            return [(r.id, r.attempts) for r in s.execute(q)]

    def unsettled(self) -> int:
        """Cells that are neither done, failed nor cancelled (and still in the sweep)."""
        with self._read() as s:
            q = select(func.count()).where(
                CellRow.state.not_in([str(x) for x in states.TERMINAL]), CellRow.removed.is_(False)
            )
            return int(s.scalar(q.select_from(CellRow)) or 0)

    def next_retry_at(self) -> datetime | None:
        with self._read() as s:
            q = select(func.min(CellRow.retry_after)).where(
                CellRow.state == CellState.QUEUED, CellRow.removed.is_(False)
            )
            return s.scalar(q)

    # -- a worker's verbs -----------------------------------------------------

    def claim(self, cell_id: str, worker: WorkerInfo) -> Claim | None:
        """Move a claimable cell to running and open its next attempt; None if we lost.

        The caller already holds the cell's file lock; the guarded UPDATE's row
        count is the proof that no other worker claimed it first.
        """
        now = self.clock()
        with self._write() as s:
            res = s.execute(
                update(CellRow)
                .where(
                    CellRow.id == cell_id,
                    CellRow.state.in_([str(x) for x in states.sources_of(CellState.RUNNING)]),
                    CellRow.removed.is_(False),
                    or_(CellRow.retry_after.is_(None), CellRow.retry_after <= now),
                )
                .values(
                    state=CellState.RUNNING,
                    attempts=CellRow.attempts + 1,
                    retry_after=None,
                    updated_at=now,
                )
            )
            if res.rowcount != 1:
                return None
            row = s.get(CellRow, cell_id)
            assert row is not None
            s.refresh(row)
            nan_step, row.nan_step = row.nan_step, None  # the rollback is this attempt's alone
            s.add(
                AttemptRow(
                    cell_id=cell_id,
                    number=row.attempts,
                    worker=worker.worker,
                    host=worker.host,
                    worker_pid=worker.pid,
                    started_at=now,
                    start_step=0,
                    nan_step=nan_step,
                    gpus=[],
                )
            )
            return Claim(cell_id, row.attempts, row.cfg, nan_step, row.last_reason)

    def attempt_started(self, cell: str, number: int, **fields: Any) -> None:
        """Fill in what the training process learned at start (pid, resume step, env)."""
        allowed = {
            "pid",
            "gpus",
            "start_step",
            "start_checkpoint_sha",
            "environment",
            "code_fingerprint",
            "data_fingerprint",
        }
        values = {k: v for k, v in fields.items() if k in allowed and v is not None}
        if not values:
            return
        with self._write() as s:
            s.execute(
                update(AttemptRow).where(AttemptRow.cell_id == cell, AttemptRow.number == number).values(**values)
            )

    def progress(self, cell: str, number: int, **fields: Any) -> None:
        """The training stream, at most about once a second per running cell."""
        now = self.clock()
        allowed = {"step", "total_steps", "epoch", "total_epochs", "metrics", "best", "best_step"}
        values = {k: v for k, v in fields.items() if k in allowed}
        with self._write() as s:
            s.execute(
                update(CellRow)
                .where(
                    CellRow.id == cell,
                    CellRow.state == CellState.RUNNING,
                    CellRow.attempts == number,
                )
                .values(progress_at=now, updated_at=now, **values)
            )

    def cancel_requested(self, cell: str) -> bool:
        with self._read() as s:
            return bool(s.scalar(select(CellRow.cancel_requested).where(CellRow.id == cell)))

    def record_checkpoint(
        self,
        cell: str,
        step: int,
        *,
        path: str,
        epoch: float | None = None,
        metrics: dict[str, Any] | None = None,
        manifest_sha256: str | None = None,
        attempt: int | None = None,
        size_bytes: int | None = None,
        created_at: datetime | None = None,
        state: str = CheckpointState.COMMITTED,
        note: str | None = None,
    ) -> None:
        """Insert or update the row of a checkpoint (the manifest on disk is the source)."""
        now = self.clock()
        with self._write() as s:
            row = s.scalar(
                select(CheckpointRow).where(
                    CheckpointRow.cell_id == cell,
                    CheckpointRow.step == step,
                    CheckpointRow.state != CheckpointState.CORRUPT,
                )
            )
            if row is None:
                row = CheckpointRow(cell_id=cell, step=step, created_at=created_at or now, path=path)
                s.add(row)
            row.path, row.state = path, state
            for k, v in dict(
                epoch=epoch,
                metrics=metrics,
                manifest_sha256=manifest_sha256,
                attempt=attempt,
                size_bytes=size_bytes,
                note=note,
            ).items():
                if v is not None:
                    setattr(row, k, v)

    def set_checkpoint_state(self, cell: str, steps: Iterable[int], state: str, note: str | None = None) -> None:
        steps = list(steps)
        if not steps:
            return
        with self._write() as s:
            values: dict[str, Any] = {"state": state}
            if note is not None:
                values["note"] = note
            s.execute(
                update(CheckpointRow)
                .where(
                    CheckpointRow.cell_id == cell,
                    CheckpointRow.step.in_(steps),
                    CheckpointRow.state != CheckpointState.CORRUPT,
                )
                .values(**values)
            )

    def finish(self, cell: str, number: int, outcome: Outcome) -> CellState | None:
        """Close an attempt and move its cell by the retry policy; None if already closed.

        One transaction: the attempt's guarded update (reason IS NULL) decides who
        closes it when a worker, an orphaned training process and a reaper race.
        """
        now = self.clock()
        reason = Reason(outcome.reason)
        policy = self.settings().retries
        with self._write() as s:
            att = self._attempt_row(s, cell, number)
            if att is None or att.reason is not None:
                return None
            self._fill_attempt(att, outcome, now)
            row = s.get(CellRow, cell)
            assert row is not None
            if row.state != CellState.RUNNING or row.attempts != number:
                # The cell moved on (a user command); the receipt is still recorded.
                return CellState(row.state)
            spent = self._spent(s, cell, row.budget_base, reason)
            budget_left = reason not in states.BUDGETED or spent <= policy.budgets.get(reason, 0)
            target = states.state_after(reason, budget_left)
            values: dict[str, Any] = {
                "state": target,
                "last_reason": reason,
                "updated_at": now,
                "cancel_requested": False,
            }
            if outcome.end_step is not None:
                values["step"] = outcome.end_step
            if target is CellState.QUEUED:
                delay = min(policy.backoff_max_seconds, policy.backoff_seconds * 2 ** max(0, spent - 1))
                values["retry_after"] = now + timedelta(seconds=delay)
            if target is CellState.DONE:
                values["finished_at"] = now
                values["nan_step"] = None
                if isinstance(outcome.metrics, dict):
                    values["metrics"] = _json_safe({**(row.metrics or {}), **outcome.metrics})
            if target is CellState.FAILED:
                values["finished_at"] = now
            if reason is Reason.NAN:
                values["nan_step"] = outcome.nan_step
            self._guarded_cell_update(s, cell, CellState.RUNNING, target, values)
            return target

    def repair_done(self, cell: str, marker: dict[str, Any]) -> bool:
        """A verified DONE.json wins over the database: make the cell done."""
        now = self.clock()
        with self._write() as s:
            row = s.get(CellRow, cell)
            if row is None or row.state == CellState.DONE:
                return False
            if row.state == CellState.RUNNING:
                att = self._attempt_row(s, cell, row.attempts)
                if att is not None and att.reason is None:
                    self._fill_attempt(
                        att,
                        Outcome(
                            reason=Reason.COMPLETED,
                            end_step=marker.get("step"),
                            note="closed from DONE.json (its process ended before the database was told)",
                        ),
                        now,
                    )
                sources = {CellState.RUNNING}
            else:
                sources = states.sources_of(CellState.DONE, states.REPAIR_TRANSITIONS)
            values = {
                "state": CellState.DONE,
                "last_reason": Reason.COMPLETED,
                "finished_at": now,
                "updated_at": now,
                "retry_after": None,
                "cancel_requested": False,
                "metrics": _json_safe({**(row.metrics or {}), **(marker.get("metrics") or {})}),
            }
            if marker.get("step") is not None:
                values["step"] = marker["step"]
            res = s.execute(
                update(CellRow).where(CellRow.id == cell, CellRow.state.in_([str(x) for x in sources])).values(**values)
            )
            if res.rowcount == 1:
                self._event(s, cell, "repaired_from_marker", {"from": row.state, "attempt": marker.get("attempt")})
            return res.rowcount == 1

    def requeue_missing_marker(self, cell: str, why: str) -> bool:
        now = self.clock()
        with self._write() as s:
            res = s.execute(
                update(CellRow)
                .where(CellRow.id == cell, CellRow.state == CellState.DONE)
                .values(state=CellState.QUEUED, finished_at=None, updated_at=now)
            )
            if res.rowcount == 1:
                self._event(s, cell, "marker_invalid", {"why": why})
            return res.rowcount == 1

    # -- user verbs -----------------------------------------------------------

    def retry(self, cells: list[str]) -> list[str]:
        """failed/cancelled -> queued with a fresh budget; returns the cells moved."""
        return self._user_move(cells, "retry", fresh_budget=True)

    def reset(self, cells: list[str]) -> list[str]:
        """-> queued from scratch (the caller moved checkpoints and DONE.json aside first)."""
        return self._user_move(cells, "reset", fresh_budget=True, clear_progress=True)

    def cancel(self, cells: list[str]) -> tuple[list[str], list[str]]:
        """Cancel queued/interrupted cells now; ask workers to stop running ones.

        Returns (cancelled now, cancellation requested for running cells).
        """
        moved = self._user_move(cells, "cancel")
        now = self.clock()
        requested = []
        with self._write() as s:
            for cid in cells:
                res = s.execute(
                    update(CellRow)
                    .where(CellRow.id == cid, CellRow.state == CellState.RUNNING)
                    .values(cancel_requested=True, updated_at=now)
                )
                if res.rowcount == 1:
                    requested.append(cid)
                    self._event(s, cid, "cancel_requested", {})
        return moved, requested

    def _user_move(
        self, cells: list[str], verb: str, *, fresh_budget: bool = False, clear_progress: bool = False
    ) -> list[str]:
        ((target, sources),) = states.USER_TRANSITIONS[verb].items()
        now = self.clock()
        moved = []
        with self._write() as s:
            for cid in cells:
                values: dict[str, Any] = {
                    "state": target,
                    "updated_at": now,
                    "retry_after": None,
                    "cancel_requested": False,
                }
                if target is CellState.CANCELLED:
                    values["finished_at"] = now
                    values["last_reason"] = Reason.CANCELLED
                else:
                    values["finished_at"] = None
                if fresh_budget:
                    values["budget_base"] = CellRow.attempts
                if clear_progress:
                    values.update(
                        step=None,
                        epoch=None,
                        metrics=None,
                        best=None,
                        best_step=None,
                        nan_step=None,
                        last_reason=None,
                    )
                res = s.execute(
                    update(CellRow)
                    .where(CellRow.id == cid, CellRow.state.in_([str(x) for x in sources]))
                    .values(**values)
                )
                if res.rowcount == 1:
                    moved.append(cid)
                    self._event(s, cid, verb, {})
                    if clear_progress:
                        s.execute(
                            update(CheckpointRow)
                            .where(CheckpointRow.cell_id == cid, CheckpointRow.state == CheckpointState.COMMITTED)
                            .values(state=CheckpointState.SUPERSEDED, note=f"moved aside by {verb}")
                        )
        return moved

    def add_event(self, cell: str | None, kind: str, detail: dict[str, Any] | None = None) -> None:
        with self._write() as s:
            self._event(s, cell, kind, detail or {})

    # -- helpers --------------------------------------------------------------

    def _event(self, s: Session, cell: str | None, kind: str, detail: dict[str, Any]) -> None:
        s.add(EventRow(cell_id=cell, at=self.clock(), kind=kind, detail=_json_safe(detail)))

    @staticmethod
    def _attempt_row(s: Session, cell: str, number: int) -> AttemptRow | None:
        return s.scalar(select(AttemptRow).where(AttemptRow.cell_id == cell, AttemptRow.number == number))

    @staticmethod
    def _spent(s: Session, cell: str, base: int, reason: Reason) -> int:
        """Attempts that ended with `reason` since the last fresh budget (this one included)."""
        q = (
            select(func.count())
            .select_from(AttemptRow)
            .where(AttemptRow.cell_id == cell, AttemptRow.number > base, AttemptRow.reason == str(reason))
        )
        return int(s.scalar(q) or 0)

    @staticmethod
    def _fill_attempt(att: AttemptRow, o: Outcome, now: datetime) -> None:
        att.reason = str(Reason(o.reason))
        att.ended_at = now
        for name in (
            "end_step",
            "exit_code",
            "exit_signal",
            "error_tail",
            "peak_memory_bytes",
            "peak_gpu_memory_bytes",
            "note",
            "pid",
            "gpus",
            "environment",
            "code_fingerprint",
            "data_fingerprint",
            "start_step",
            "start_checkpoint_sha",
        ):
            v = getattr(o, name)
            if v is not None:
                setattr(att, name, v)
        wall = o.wall_seconds
        if wall is None:
            wall = (now - att.started_at).total_seconds()
        att.wall_seconds = wall
        att.gpu_seconds = o.gpu_seconds if o.gpu_seconds is not None else wall * len(att.gpus or [])

    def _guarded_cell_update(
        self, s: Session, cell: str, source: CellState, target: CellState, values: dict[str, Any]
    ) -> None:
        states.check(source, target)
        res = s.execute(update(CellRow).where(CellRow.id == cell, CellRow.state == source).values(**values))
        if res.rowcount != 1:
            raise IllegalTransition(f"cell {cell} was not {source} when it should become {target}")


def _json_safe(obj: Any) -> Any:
    """JSON columns reject NaN/inf in strict readers: store them as strings."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def _cell(r: CellRow) -> CellRecord:
    return CellRecord(
        id=r.id,
        group=r.group_number,
        index=r.index,
        group_name=r.group_name,
        cfg=r.cfg,
        cfg_hash=r.cfg_hash,
        state=CellState(r.state),
        attempts=r.attempts,
        last_reason=r.last_reason,
        retry_after=r.retry_after,
        step=r.step,
        total_steps=r.total_steps,
        epoch=r.epoch,
        total_epochs=r.total_epochs,
        metrics=r.metrics or {},
        best=r.best,
        best_step=r.best_step,
        removed=r.removed,
        cancel_requested=r.cancel_requested,
        updated_at=r.updated_at,
        finished_at=r.finished_at,
    )


def _attempt(r: AttemptRow) -> AttemptRecord:
    return AttemptRecord(
        cell=r.cell_id,
        number=r.number,
        worker=r.worker,
        host=r.host,
        pid=r.pid,
        worker_pid=r.worker_pid,
        gpus=r.gpus or [],
        started_at=r.started_at,
        ended_at=r.ended_at,
        start_step=r.start_step,
        start_checkpoint_sha=r.start_checkpoint_sha,
        nan_step=r.nan_step,
        end_step=r.end_step,
        reason=r.reason,
        exit_code=r.exit_code,
        exit_signal=r.exit_signal,
        error_tail=r.error_tail,
        wall_seconds=r.wall_seconds,
        gpu_seconds=r.gpu_seconds,
        peak_memory_bytes=r.peak_memory_bytes,
        peak_gpu_memory_bytes=r.peak_gpu_memory_bytes,
        environment=r.environment or {},
        code_fingerprint=r.code_fingerprint or {},
        data_fingerprint=r.data_fingerprint or {},
        note=r.note,
    )


def _checkpoint(r: CheckpointRow) -> CheckpointRecord:
    return CheckpointRecord(
        cell=r.cell_id,
        step=r.step,
        epoch=r.epoch,
        state=r.state,
        metrics=r.metrics or {},
        path=r.path,
        manifest_sha256=r.manifest_sha256,
        attempt=r.attempt,
        size_bytes=r.size_bytes,
        created_at=r.created_at,
        note=r.note,
    )
