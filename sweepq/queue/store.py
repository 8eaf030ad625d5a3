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
Each verb of the Store is the bound method of the object that answers it (`Store.__init__` lists them).

Every write is one short write transaction (`BEGIN IMMEDIATE` on SQLite). State changes are
guarded in SQL (`UPDATE ... WHERE state IN (...)`) and a row count of zero is a
lost race or an illegal transition, never a silent overwrite. Only workers,
orphaned training processes closing their own attempt, and user commands write.
"""

from __future__ import annotations

from pathlib import Path
from typing import Self

from sweepq.queue import opening
from sweepq.queue.attempts import Attempts
from sweepq.queue.claim import Claims
from sweepq.queue.database import Database
from sweepq.queue.definition import Definition
from sweepq.queue.moves import Moves
from sweepq.queue.reads import Reads
from sweepq.queue.reconcile import Existing
from sweepq.queue.states import CheckpointState
from sweepq.queue.transactions import Clock, Transactions, utcnow

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
        self.batch = self.tx.batch  # the write verbs called inside as one transaction
        self.add_event = self.tx.add_event
        # Each verb is the method of the object that answers it:
        # the questions (reads.py)
        self.settings = self.reads.settings
        self.census = self.reads.census
        self.unsettled = self.reads.unsettled
        self.cells = self.reads.cells
        self.cells_in = self.reads.cells_in
        self.best_done = self.reads.best_done
        self.cell_listing = self.reads.cell_listing
        self.last_attempts = self.reads.last_attempts
        self.usages = self.reads.usages
        self.usage_texts = self.reads.usage_texts
        self.fault_notes = self.reads.fault_notes
        self.inexact_resumes = self.reads.inexact_resumes
        self.running = self.reads.running
        self.etas = self.reads.etas
        self.stalls = self.reads.stalls
        self.cell = self.reads.cell
        self.attempts = self.reads.attempts
        self.attempt = self.reads.attempt
        self.checkpoints = self.reads.checkpoints
        self.checkpoints_in = self.reads.checkpoints_in
        self.checkpoint_times = self.reads.checkpoint_times
        self.events = self.reads.events
        self.forecast = self.reads.forecast
        self.forecast_cells = self.reads.forecast_cells
        # a worker's claims (claim.py)
        self.claim_next = self._claims.next
        self.claim = self._claims.named
        self.claimable = self._claims.claimable
        self.cancel_requested = self._claims.cancel_requested
        # a worker's verbs on its attempt, and the repairs from disk (attempts.py)
        self.attempt_started = self._attempts.attempt_started
        self.attempt_usage = self._attempts.attempt_usage
        self.is_current = self._attempts.is_current
        self.seen = self._attempts.seen
        self.progress = self._attempts.progress
        self.record_checkpoint = self._attempts.record_checkpoint
        self.set_checkpoint_state = self._attempts.set_checkpoint_state
        self.finish = self._attempts.finish
        self.repair_done = self._attempts.repair_done
        self.requeue_missing_marker = self._attempts.requeue_missing_marker
        self.keep_spans = self._attempts.keep_spans
        # the user's verbs (moves.py)
        self.retry = self._moves.retry
        self.reset = self._moves.reset
        self.cancel = self._moves.cancel
        # the sweep's definition (definition.py)
        self.save_sweep = self._definition.save_sweep
        self.existing_cfgs = self._definition.existing_cfgs
        self.existing_hashes = self._definition.existing_hashes
        self.read_reconcile = self._definition.read_reconcile
        self.apply_reconcile = self._definition.apply_reconcile
        self.done_cells = self._definition.done_cells
        self.unfinished_cells = self._definition.unfinished_cells
        self.steps_digest = self._definition.steps_digest
        self.cells_by_id = self._definition.cells_by_id
        self.cell_steps = self._definition.cell_steps
        self.cells_not_in = self._definition.cells_not_in

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
