"""The queue: a narrow set of verbs over the database, returning frozen records.

One class for callers, built from one module per concept:
    transactions.py   opening a root's database, read and write transactions, batch()
    status_reads.py   what status reads (cells, counts, the running ones), in SQL text: no SQLAlchemy
    forecast_reads.py what the forecast reads, likewise (read commands open a root with reader.py)
    reads.py          the other questions (one cell, attempts, checkpoints, what is claimable)
    definition.py     the sweep row and its cells, written from a reconcile plan
    claims.py         a worker's verbs (claim, progress, finish) and the repairs from disk
    moves.py          the user's verbs (retry, reset, cancel)
    rows.py           rows into frozen records
Where the database is, and its dialect, is database.py's business alone.

Every write is one short write transaction (`BEGIN IMMEDIATE` on SQLite). State changes are
guarded in SQL (`UPDATE ... WHERE state IN (...)`) and a row count of zero is a
lost race or an illegal transition, never a silent overwrite. Only workers,
orphaned training processes closing their own attempt, and user commands write.
"""

from __future__ import annotations

from sweepq.queue.attempts import StoreClaims
from sweepq.queue.claim import StoreReads
from sweepq.queue.definition import Existing, StoreDefinition
from sweepq.queue.forecast.reads import ForecastReads
from sweepq.queue.moves import StoreMoves
from sweepq.queue.reads import CellReads
from sweepq.queue.states import CheckpointState
from sweepq.queue.transactions import Clock, utcnow

__all__ = ["CheckpointState", "Clock", "Existing", "Store", "utcnow"]


class Store(StoreReads, StoreDefinition, StoreClaims, StoreMoves, ForecastReads, CellReads):
    """A root's queue (open it with Store.open or Store.open_readonly; close it when done)."""
