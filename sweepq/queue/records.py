"""Frozen records that the store hands out; callers never hold a session or a row.

`to_json()` gives the stable machine format of `status --json`, `show --json`
and `attempts --json` (field names are part of the contract).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from sweepq.queue.states import CellState


def iso(t: datetime | None) -> str | None:
    """ISO-8601 UTC with a Z, second precision is not enough for receipts: keep microseconds."""
    return None if t is None else t.isoformat().replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)  # slots: `status --all` holds one per cell of the sweep
class CellRecord:
    id: str
    group: int
    index: int
    group_name: str
    cfg: dict[str, Any]
    cfg_hash: str
    state: CellState
    attempts: int
    last_reason: str | None
    retry_after: datetime | None
    step: int | None
    total_steps: int | None
    epoch: float | None
    total_epochs: float | None
    metrics: dict[str, Any]
    best: float | None
    best_step: int | None
    removed: bool
    cancel_requested: bool
    updated_at: datetime
    finished_at: datetime | None
    # The cfg a done cell's result came from, when `launch --accept-changed` gave the cell the sweep
    # file's new cfg and kept the result (None: `cfg` is the one its result came from).
    ran_cfg: dict[str, Any] | None = None

    @property
    def result_cfg(self) -> dict[str, Any]:
        """The cfg that the cell's result (metrics, best, DONE.json) came from: what is shown beside it."""
        return self.cfg if self.ran_cfg is None else self.ran_cfg

    @property
    def new_cfg(self) -> dict[str, Any] | None:
        """The sweep file's cfg for this cell when its result came from an older one (`reset` runs it); else None."""
        return None if self.ran_cfg is None else self.cfg

    @property
    def progress(self) -> float | None:
        if self.state is CellState.DONE:
            return 1.0
        if not self.total_steps or self.step is None:
            return None
        return max(0.0, min(1.0, self.step / self.total_steps))

    def to_json(self) -> dict[str, Any]:
        return {
            "cell": self.id,
            "group": self.group_name,
            "state": str(self.state),
            "step": self.step,
            "total_steps": self.total_steps,
            "epoch": self.epoch,
            "total_epochs": self.total_epochs,
            "progress": self.progress,
            "attempts": self.attempts,
            "last_reason": self.last_reason,
            "metrics": self.metrics,
            "best": self.best,
            "best_step": self.best_step,
            "retry_after": iso(self.retry_after),
            "removed": self.removed,
            "updated_at": iso(self.updated_at),
            "finished_at": iso(self.finished_at),
        }


@dataclass(frozen=True)
class AttemptRecord:
    cell: str
    number: int
    worker: str
    host: str
    pid: int | None
    worker_pid: int | None
    gpus: list[Any]
    started_at: datetime
    ended_at: datetime | None
    start_step: int
    start_checkpoint_sha: str | None
    nan_step: int | None
    end_step: int | None
    reason: str | None
    exit_code: int | None
    exit_signal: int | None
    error_tail: str | None
    wall_seconds: float | None
    gpu_seconds: float | None
    peak_memory_bytes: int | None
    peak_gpu_memory_bytes: int | None
    environment: dict[str, Any]
    code_fingerprint: dict[str, Any]
    data_fingerprint: dict[str, Any]
    note: str | None
    usage: dict[str, Any] = field(default_factory=dict)  # worker/usage.py's summary; {}: nothing sampled
    # Its last sign of life, and when the queue closed it: `ended_at` is the former for an attempt found
    # dead by a later process (closed_at - ended_at is downtime); None on attempts of older roots.
    seen_at: datetime | None = None
    closed_at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for name in ("started_at", "ended_at", "seen_at", "closed_at"):
            d[name] = iso(getattr(self, name))
        return d


@dataclass(frozen=True)
class CheckpointRecord:
    cell: str
    step: int
    epoch: float | None
    state: str
    metrics: dict[str, Any]
    path: str  # relative to the root
    manifest_sha256: str | None
    attempt: int | None
    size_bytes: int | None
    created_at: datetime
    note: str | None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["created_at"] = iso(self.created_at)
        return d


@dataclass(frozen=True)
class EventRecord:
    cell: str | None
    at: datetime
    kind: str
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"cell": self.cell, "at": iso(self.at), "kind": self.kind, "detail": self.detail}


@dataclass(frozen=True)
class WorkerInfo:
    """Who claims: written into every attempt's receipt."""

    worker: str  # "<host>:<pid>" unless named
    host: str
    pid: int


@dataclass(frozen=True)
class Claim:
    """What a worker won: the attempt it must run now."""

    cell: str
    number: int
    cfg: dict[str, Any]
    nan_step: int | None  # after a `nan`: the bad step; resume from before the checkpoint preceding it
    previous_reason: str | None


@dataclass
class Outcome:
    """How an attempt ended, as known by whoever closes it (worker, orphan, reaper)."""

    reason: str
    end_step: int | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    error_tail: str | None = None
    wall_seconds: float | None = None
    gpu_seconds: float | None = None
    peak_memory_bytes: int | None = None
    peak_gpu_memory_bytes: int | None = None
    note: str | None = None
    metrics: dict[str, Any] | None = None  # final metrics (completed)
    nan_step: int | None = None  # step at which a non-finite loss was seen
    pid: int | None = None
    gpus: list[Any] | None = None
    environment: dict[str, Any] | None = None
    code_fingerprint: dict[str, Any] | None = None
    data_fingerprint: dict[str, Any] | None = None
    start_step: int | None = None
    start_checkpoint_sha: str | None = None
    usage: dict[str, Any] | None = None  # what the worker sampled (worker/usage.py)
    started_by: str | None = None  # "interpreter" or "template" (a fork of the worker's, worker/template.py)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Outcome:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in known})
