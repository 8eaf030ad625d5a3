"""Database rows into the frozen records the store hands out (callers never hold a row or a session)."""

from __future__ import annotations

import math
from typing import Any

from sweepq.queue.models import AttemptRow, CellRow, CheckpointRow, EventRow
from sweepq.queue.records import AttemptRecord, CellRecord, CheckpointRecord, EventRecord
from sweepq.queue.states import CellState


def json_safe(obj: Any) -> Any:
    """JSON columns reject NaN/inf in strict readers: store them as strings."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def cell_record(r: CellRow) -> CellRecord:
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


def attempt_record(r: AttemptRow) -> AttemptRecord:
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


def checkpoint_record(r: CheckpointRow) -> CheckpointRecord:
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


def event_record(r: EventRow) -> EventRecord:
    return EventRecord(r.cell_id, r.at, r.kind, r.detail or {})
