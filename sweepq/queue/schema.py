"""The database schema as typed SQLAlchemy models.

Only store.py reads and writes these rows; everyone else gets frozen records.
The schema is created by the alembic migrations in migrations/ (a test checks
that migrating an empty database yields exactly these tables).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    ColumnElement,
    DateTime,
    ForeignKey,
    FromClause,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from sweepq.queue.states import CELL_ORDER, REMOVED


class UTCDateTime(TypeDecorator[datetime]):
    """Timestamps stored as naive UTC and returned timezone-aware.

    SQLite has no time zones; normalising on the way in and out keeps every
    comparison in UTC whatever the database (PostgreSQL included).
    """

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the database; use UTC-aware datetimes")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dict[str, Any]: JSON,
        list[Any]: JSON,
        datetime: UTCDateTime,
    }


class SweepRow(Base):
    """One row: the sweep's identity and the settings workers need (no YAML required)."""

    __tablename__ = "sweep"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    spec_path: Mapped[str | None] = mapped_column(Text)
    settings: Mapped[dict[str, Any]]
    #: The sweep file the cells were last reconciled with (reconcile.plan_digest); None: compare them all.
    plan_digest: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class CellRow(Base):
    __tablename__ = "cells"
    __table_args__ = (
        Index("ix_cells_order", *CELL_ORDER),
        # The claim's pick (claim.claim_pick) is a seek on (state, removed) walked in claim
        # order, not a scan and a sort; queries of one state use its prefix.
        Index("ix_cells_claim", "state", REMOVED, *CELL_ORDER),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)  # "G.I"
    group_number: Mapped[int]
    index: Mapped[int]
    group_name: Mapped[str] = mapped_column(String(200))
    cfg: Mapped[dict[str, Any]]
    cfg_hash: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(default=0)
    last_reason: Mapped[str | None] = mapped_column(String(16))
    retry_after: Mapped[datetime | None]
    # Attempts numbered above this count against the retry budgets
    # (`sweepq retry` gives a fresh budget by raising it).
    budget_base: Mapped[int] = mapped_column(default=0)
    # Where the last attempt saw a non-finite loss: the next attempt rolls back
    # to the checkpoint before the one preceding it (cleared when claimed).
    nan_step: Mapped[int | None]
    cancel_requested: Mapped[bool] = mapped_column(default=False)
    removed: Mapped[bool] = mapped_column(default=False)  # gone from the sweep file
    step: Mapped[int | None]
    total_steps: Mapped[int | None]
    epoch: Mapped[float | None]
    total_epochs: Mapped[float | None]
    metrics: Mapped[dict[str, Any] | None]
    best: Mapped[float | None]
    best_step: Mapped[int | None]
    progress_at: Mapped[datetime | None]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]
    # The cfg a done cell's result came from when `launch --accept-changed` gave the cell a new one
    # and kept its result (migration 0006); NULL: `cfg` is the one its result came from.
    ran_cfg: Mapped[dict[str, Any] | None]


#: The cells' table, for the statements built in Core (claim.py, definition.py).
CELLS = cast(Table, CellRow.__table__)


def live(cells: FromClause = CELLS) -> ColumnElement[bool]:
    """A live cell (still in the sweep), in Core: queries.py's word, compiled by each dialect."""
    return cells.c[REMOVED].is_(False)


def cell_order(cells: FromClause = CELLS) -> list[ColumnElement[Any]]:
    """Cell order, in Core (an ORDER BY's terms): queries.py's CELL_ORDER."""
    return [cells.c[n] for n in CELL_ORDER]


class AttemptRow(Base):
    """The receipt of one process's try at a cell."""

    __tablename__ = "attempts"
    __table_args__ = (
        UniqueConstraint("cell_id", "number", name="uq_attempts_cell_number"),
        # What the forecast reads of every settled attempt (its kept span, when it ran), and which spans
        # are not kept, read without the rest of the row, which is wide (usage, environment, a traceback).
        Index("ix_attempts_span", "cell_id", "span_steps", "span_micros", "span_startup", "started_at", "ended_at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    cell_id: Mapped[str] = mapped_column(String(32), ForeignKey("cells.id"))
    number: Mapped[int]
    worker: Mapped[str] = mapped_column(String(200))
    host: Mapped[str] = mapped_column(String(200))
    pid: Mapped[int | None]  # the training process
    worker_pid: Mapped[int | None]
    gpus: Mapped[list[Any] | None]
    started_at: Mapped[datetime]
    ended_at: Mapped[datetime | None]
    start_step: Mapped[int] = mapped_column(default=0)
    start_checkpoint_sha: Mapped[str | None] = mapped_column(String(64))
    nan_step: Mapped[int | None]  # the previous attempt's bad step this one rolled back from
    end_step: Mapped[int | None]
    reason: Mapped[str | None] = mapped_column(String(16))
    exit_code: Mapped[int | None]
    exit_signal: Mapped[int | None]
    error_tail: Mapped[str | None] = mapped_column(Text)
    wall_seconds: Mapped[float | None]
    gpu_seconds: Mapped[float | None]
    peak_memory_bytes: Mapped[int | None]
    peak_gpu_memory_bytes: Mapped[int | None]
    environment: Mapped[dict[str, Any] | None]
    code_fingerprint: Mapped[dict[str, Any] | None]
    data_fingerprint: Mapped[dict[str, Any] | None]
    note: Mapped[str | None] = mapped_column(Text)
    # What the worker sampled of the training process (worker/usage.py): the latest sample
    # while it runs, mean/p95 utilisation and peak memory once it ended.
    usage: Mapped[dict[str, Any] | None]
    # Its span as the forecast measures it, kept once it ended (queue/queries.py; NULL: not kept).
    span_steps: Mapped[int | None]
    span_micros: Mapped[int | None] = mapped_column(Integer().with_variant(BigInteger(), "postgresql"))  # 0009
    span_startup: Mapped[float | None]
    # Its last sign of life (the worker's flush, once a second; the reaper's look at its files) and when
    # the queue closed it (migration 0007e): a reaped attempt ends at the former, the gap is downtime.
    seen_at: Mapped[datetime | None]
    closed_at: Mapped[datetime | None]


class CheckpointRow(Base):
    """A committed checkpoint as the database knows it (the manifest on disk is the truth)."""

    __tablename__ = "checkpoints"
    # Not unique: a corrupt checkpoint keeps its row (moved aside) when a later
    # attempt commits the same step again.
    __table_args__ = (Index("ix_checkpoints_cell_step", "cell_id", "step"),)

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    cell_id: Mapped[str] = mapped_column(String(32), ForeignKey("cells.id"))
    step: Mapped[int]
    epoch: Mapped[float | None]
    state: Mapped[str] = mapped_column(String(16))
    metrics: Mapped[dict[str, Any] | None]
    path: Mapped[str] = mapped_column(Text)  # relative to the root
    manifest_sha256: Mapped[str | None] = mapped_column(String(64))
    attempt: Mapped[int | None]
    size_bytes: Mapped[int | None]
    created_at: Mapped[datetime]
    note: Mapped[str | None] = mapped_column(Text)


class EventRow(Base):
    """A cell's history beyond its attempts: drift accepted, repairs, user commands."""

    __tablename__ = "events"
    __table_args__ = (Index("ix_events_cell", "cell_id"),)

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    cell_id: Mapped[str | None] = mapped_column(String(32))
    at: Mapped[datetime]
    kind: Mapped[str] = mapped_column(String(32))
    detail: Mapped[dict[str, Any] | None]


class LeaseRow(Base):
    """A running cell's lease on a server database (queue/leases.py): held by `token` until `expires_at`.

    Expiry in the database's clock (timestamptz, compared with the server's now()); `host` and
    `renewed_at` say where the holder runs and when it last proved life (for status).
    """

    __tablename__ = "leases"

    cell_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    token: Mapped[str] = mapped_column(String(64))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    renewed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    host: Mapped[str | None] = mapped_column(Text)
