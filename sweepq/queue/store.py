"""The queue: a narrow set of verbs over the database, returning frozen records.

The `Store` is composed, as procrastinate's `JobManager` holds its connector: it holds the root's
`Database` (database.py: where the queue is and its dialect), the `Transactions` every verb runs in
(transactions.py), and one object per group of verbs, each over those transactions:
    reads.py        `Reads`: the questions (status, show, attempts, best, the forecast), in SQL text
                    (queries.py) on the driver's connection; read commands hold the same `Reads` over a
                    read-only file without SQLAlchemy (opening.py's `Reader`)
    claim.py        `Claims`: a worker's claim (`claim_next`), one statement, ownership before the commit
    attempts.py     `Attempts`: a worker's verbs on its attempt (progress, checkpoints, finish) and the
                    repairs from disk
    moves.py        `Moves`: the user's verbs (retry, reset, cancel)
    definition.py   `Definition`: the sweep row and its cells, written from a reconcile plan
Each public verb below is one line that names the object and the verb that answers it.

Every write is one short write transaction (`BEGIN IMMEDIATE` on SQLite). State changes are
guarded in SQL (`UPDATE ... WHERE state IN (...)`) and a row count of zero is a
lost race or an illegal transition, never a silent overwrite. Only workers,
orphaned training processes closing their own attempt, and user commands write.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from sqlalchemy.orm import Session

from sweepq.queue import opening
from sweepq.queue.attempts import Attempts
from sweepq.queue.claim import Claims
from sweepq.queue.database import Database
from sweepq.queue.definition import Definition
from sweepq.queue.forecast.model import CellSeen, Forecast
from sweepq.queue.liveness import Ownership
from sweepq.queue.moves import Moves
from sweepq.queue.reads import Census, Reads
from sweepq.queue.reconcile import Existing
from sweepq.queue.records import AttemptRecord, CellRecord, CheckpointRecord, Claim, EventRecord, Outcome, WorkerInfo
from sweepq.queue.states import CellState, CheckpointState
from sweepq.queue.transactions import Clock, Transactions, utcnow
from sweepq.spec.types import Settings

if TYPE_CHECKING:
    from sweepq.queue.reconcile import ReconcilePlan as Plan

__all__ = ["CheckpointState", "Clock", "Existing", "Store", "utcnow"]


class Store:
    """A root's queue (open it with Store.open or Store.open_readonly; close it when done)."""

    def __init__(self, root: Path, database: Database, clock: Clock = utcnow) -> None:
        self.root, self.database, self.clock = root, database, clock
        self.tx = Transactions(root, database, clock)
        self.paths, self.engine = self.tx.paths, self.tx.engine
        self.reads = Reads(root, self.tx.raw, clock)
        self._claims = Claims(self.tx)
        self._attempts = Attempts(self.tx)
        self._moves = Moves(self.tx)
        self._definition = Definition(self.tx)

    # -- opening ----------------------------------------------------------

    @classmethod
    def open(cls, root: Path, *, create: bool = False, clock: Clock = utcnow, database: Database | None = None) -> Self:
        """Open a root's database, migrating it to this sweepq's schema.

        `create=False` refuses a folder that is not a sweep root (no database).
        `database` replaces the root's own (Database.for_root). A root whose
        cells are on disk but whose queue is gone or damaged is refused: a new
        queue would number attempts again from 1 (`sweepq repair` rebuilds it).
        """
        database = database or Database.for_root(root)
        if not database.exists():
            opening.check_not_lost(root, database.path)
            if not create:
                raise opening.not_a_root(root, database.describe())
            root.mkdir(parents=True, exist_ok=True)
        else:
            opening.check_holds_queue(root, database.path, database.revision)
        database.upgrade()
        return cls(root, database, clock)

    @classmethod
    def open_readonly(cls, root: Path, clock: Clock = utcnow, database: Database | None = None) -> Self:
        """For read commands: never creates, migrates or writes anything (Database's read-only recipe)."""
        database = (database or Database.for_root(root)).read_only()
        if not database.exists():
            opening.check_not_lost(root, database.path)
            raise opening.not_a_root(root, database.describe())
        opening.check_holds_queue(root, database.path, database.revision)
        database.check_current()
        return cls(root, database, clock)

    def close(self) -> None:
        self._claims.close()
        self.database.dispose()

    # -- transactions (transactions.py) --

    def batch(self) -> AbstractContextManager[None]:
        """Run the write verbs called inside as one transaction (one fsync, one short lock)."""
        return self.tx.batch()

    def add_event(self, cell: str | None, kind: str, detail: dict[str, Any] | None = None) -> None:
        self.tx.add_event(cell, kind, detail)

    # -- reads (reads.py) --

    def settings(self) -> Settings:
        return self.reads.settings()

    def census(self, listed: int = 0) -> Census:
        return self.reads.census(listed)

    def unsettled(self) -> int:
        return self.reads.unsettled()

    def cells(self, include_removed: bool = True) -> list[CellRecord]:
        return self.reads.cells(include_removed)

    def cells_in(
        self, states: Collection[CellState], limit: int | None = None, backing_off: bool = False
    ) -> list[CellRecord]:
        return self.reads.cells_in(states, limit, backing_off)

    def best_done(self, goal: str | None, limit: int) -> list[CellRecord]:
        return self.reads.best_done(goal, limit)

    def cell_listing(self, batch: int = 5000) -> Iterator[Any]:
        return self.reads.cell_listing(batch)

    def last_attempts(self, cells: Sequence[str]) -> list[AttemptRecord]:
        return self.reads.last_attempts(cells)

    def usages(self, cells: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
        return self.reads.usages(cells)

    def usage_texts(self) -> dict[str, str]:
        return self.reads.usage_texts()

    def fault_notes(self) -> dict[str, str]:
        return self.reads.fault_notes()

    def running(self) -> list[tuple[str, int]]:
        return self.reads.running()

    def etas(self) -> dict[str, float]:
        return self.reads.etas()

    def stalls(self) -> dict[str, float]:
        return self.reads.stalls()

    def cell(self, cell_id: str) -> CellRecord:
        return self.reads.cell(cell_id)

    def attempts(
        self, cell: str | None = None, reason: str | None = None, newest_first: bool = False
    ) -> list[AttemptRecord]:
        return self.reads.attempts(cell, reason, newest_first)

    def attempt(self, cell: str, number: int) -> AttemptRecord | None:
        return self.reads.attempt(cell, number)

    def checkpoints(self, cell: str) -> list[CheckpointRecord]:
        return self.reads.checkpoints(cell)

    def checkpoints_in(self, state: str) -> dict[str, list[CheckpointRecord]]:
        return self.reads.checkpoints_in(state)

    def checkpoint_times(self) -> dict[tuple[str, int, int], datetime]:
        return self.reads.checkpoint_times()

    def events(self, cell: str | None = None) -> list[EventRecord]:
        return self.reads.events(cell)

    def forecast(self, workers: int) -> Forecast:
        return self.reads.forecast(workers)

    def forecast_cells(self) -> list[CellSeen]:
        return self.reads.forecast_cells()

    # -- claims (claim.py) --

    def claim_next(self, worker: WorkerInfo, take: Callable[[str], Ownership | None]) -> tuple[Claim, Ownership] | None:
        return self._claims.next(worker, take)

    def claim(self, cell_id: str, worker: WorkerInfo) -> Claim | None:
        return self._claims.named(cell_id, worker)

    def claimable(self, limit: int | None = None) -> list[str]:
        return self._claims.claimable(limit)

    def cancel_requested(self, cell: str) -> bool:
        return self._claims.cancel_requested(cell)

    # -- a worker's verbs on its attempts (attempts.py) --

    def attempt_started(self, cell: str, number: int, **fields: Any) -> None:
        return self._attempts.attempt_started(cell, number, **fields)

    def attempt_usage(self, cell: str, number: int, usage: dict[str, Any]) -> None:
        return self._attempts.attempt_usage(cell, number, usage)

    def is_current(self, cell: str, number: int) -> bool:
        return self._attempts.is_current(cell, number)

    def seen(self, cell: str, number: int) -> None:
        return self._attempts.seen(cell, number)

    def progress(self, cell: str, number: int, **fields: Any) -> None:
        return self._attempts.progress(cell, number, **fields)

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
        return self._attempts.record_checkpoint(
            cell,
            step,
            path=path,
            epoch=epoch,
            metrics=metrics,
            manifest_sha256=manifest_sha256,
            attempt=attempt,
            size_bytes=size_bytes,
            created_at=created_at,
            state=state,
            note=note,
        )

    def set_checkpoint_state(self, cell: str, steps: Iterable[int], state: str, note: str | None = None) -> None:
        return self._attempts.set_checkpoint_state(cell, steps, state, note)

    def finish(
        self, cell: str, number: int, outcome: Outcome, found_dead: bool = False, last_seen: datetime | None = None
    ) -> CellState | None:
        return self._attempts.finish(cell, number, outcome, found_dead, last_seen)

    def repair_done(self, cell: str, marker: dict[str, Any]) -> bool:
        return self._attempts.repair_done(cell, marker)

    def requeue_missing_marker(self, cell: str, why: str) -> bool:
        return self._attempts.requeue_missing_marker(cell, why)

    def keep_spans(self) -> int:
        return self._attempts.keep_spans()

    # -- the user's verbs (moves.py) --

    def retry(self, cells: list[str]) -> list[str]:
        return self._moves.retry(cells)

    def reset(self, cells: list[str]) -> list[str]:
        return self._moves.reset(cells)

    def cancel(self, cells: list[str]) -> tuple[list[str], list[str]]:
        return self._moves.cancel(cells)

    # -- the sweep's definition (definition.py) --

    def save_sweep(self, settings: Settings, spec_path: str | None, s: Session, digest: str | None = None) -> None:
        return self._definition.save_sweep(settings, spec_path, s, digest)

    def existing_cfgs(self, session: Session | None = None) -> Existing:
        return self._definition.existing_cfgs(session)

    def existing_hashes(self, session: Session) -> Existing:
        return self._definition.existing_hashes(session)

    def read_reconcile(self, planner: Callable[[Existing], Plan], digest: str | None = None) -> Plan:
        return self._definition.read_reconcile(planner, digest)

    def apply_reconcile(
        self,
        settings: Settings,
        spec_path: str | None,
        planner: Callable[[Existing], Plan],
        digest: str | None = None,
        rerun: bool = False,
    ) -> Plan:
        return self._definition.apply_reconcile(settings, spec_path, planner, digest, rerun)

    def done_cells(self) -> list[tuple[str, float | None]]:
        return self._definition.done_cells()

    def unfinished_cells(self) -> list[tuple[str, str]]:
        return self._definition.unfinished_cells()

    def steps_digest(self) -> tuple[tuple[str, int, int], ...]:
        return self._definition.steps_digest()

    def cells_by_id(self, ids: list[str]) -> list[CellRecord]:
        return self._definition.cells_by_id(ids)

    def cell_steps(self) -> dict[str, tuple[str, int]]:
        return self._definition.cell_steps()

    def cells_not_in(self, state: CellState, limit: int) -> tuple[list[CellRecord], int]:
        return self._definition.cells_not_in(state, limit)
