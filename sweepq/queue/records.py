"""Frozen records that the store hands out; callers never hold a session or a row.

`to_json()` gives the stable machine format of `status --json`, `show --json`
and `attempts --json` (field names are part of the contract).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from enum import Enum
from sys import intern
from types import NoneType, UnionType
from typing import TYPE_CHECKING, Any, TypeVar, get_args, get_origin, get_type_hints

from sweepq.queue.states import CellState

if TYPE_CHECKING:
    from sweepq.queue.schema import CellRow


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
    #: A cell of several processes (`processes: N`): each rank's pid, how it ended and when (program/ranks.py).
    ranks: list[dict[str, Any]] | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Outcome:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in known})


_R = TypeVar("_R", CellRecord, AttemptRecord, CheckpointRecord, EventRecord)
_RENAMED = {"group": "group_number", "cell": "cell_id"}  # a record's field -> its table's column
Convert = Callable[[Any], Any] | None


def _converter(hint: Any) -> Convert:
    """What a stored value needs to become the field: a NULL JSON column an empty dict or list, an enum rebuilt."""
    origin = get_origin(hint)
    if origin in (dict, list):
        return lambda v: origin() if v is None else v
    if isinstance(hint, type) and issubclass(hint, Enum):
        return hint
    return None


# Resolved once, not per row (status reads every cell): each field's name and converter, in order.
_HINTS: dict[type, dict[str, Any]] = {
    cls: get_type_hints(cls) for cls in (CellRecord, AttemptRecord, CheckpointRecord, EventRecord)
}
_FIELDS: dict[type, list[tuple[str, Convert]]] = {
    cls: [(f.name, _converter(hints[f.name])) for f in fields(cls)] for cls, hints in _HINTS.items()
}


def utc(v: Any) -> datetime:
    """A stored time (naive UTC text, as SQLAlchemy writes it to SQLite) as an aware datetime."""
    return datetime.fromisoformat(v).replace(tzinfo=UTC) if type(v) is str else v.replace(tzinfo=UTC)


def _keys_shared(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    return {intern(k): v for k, v in pairs}


# A JSON object's keys as one string each, however many rows repeat them: the cfgs, metrics and usages of
# 100,000 cells parsed by `status --all` held 38 MB of copies of a few keys (the parse takes 10% longer).
_DECODE = json.JSONDecoder(object_pairs_hook=_keys_shared).decode


def loads(v: Any) -> Any:
    """A JSON column's text as its value (JSON `null` and SQL NULL: None); a server's driver (psycopg) gives
    the value already decoded."""
    return None if v is None else _DECODE(v) if isinstance(v, str) else v


def _raw_converter(hint: Any) -> Convert:
    """What a driver's value needs to become the field, as SQLAlchemy's column type and `_converter` read it."""
    if isinstance(hint, UnionType):  # X | None: the value is None (NULL) or an X
        (hint,) = (h for h in get_args(hint) if h is not NoneType)
        inner = _raw_converter(hint)
        return None if inner is None else (lambda v: None if v is None else inner(v))
    origin = get_origin(hint)
    if origin in (dict, list):
        return lambda v: origin() if v is None or (v := loads(v)) is None else v
    if hint is datetime:
        return utc
    if hint is bool:
        return bool
    return _converter(hint)


def _raw_fields(cls: type) -> tuple[tuple[str, ...], list[tuple[int, Convert]]]:
    hints = _HINTS[cls]
    names = tuple(_RENAMED.get(f.name, f.name) for f in fields(cls))
    return names, [(i, _raw_converter(hints[f.name])) for i, f in enumerate(fields(cls))]


#: The columns of the cells table that make a CellRecord, in the order `cell_records` reads them.
CELL_NAMES, _CELL_AT = _raw_fields(CellRecord)
#: The columns of the attempts table that make an AttemptRecord, in the order `attempt_records` reads them.
ATTEMPT_NAMES, _ATTEMPT_AT = _raw_fields(AttemptRecord)
#: The same for the checkpoints and events tables.
CHECKPOINT_NAMES, _CHECKPOINT_AT = _raw_fields(CheckpointRecord)
EVENT_NAMES, _EVENT_AT = _raw_fields(EventRecord)


def _built(cls: type[_R], at: list[tuple[int, Convert]], rows: Iterable[Sequence[Any]]) -> list[_R]:
    """Driver tuples as records of `cls`, each field from its position: a row object's attribute costs more
    than the rest of a record (`status --all` reads every cell)."""
    return [cls(*[r[i] if f is None else f(r[i]) for i, f in at]) for r in rows]


def cell_records(rows: Iterable[Sequence[Any]]) -> list[CellRecord]:
    """Driver tuples of CELL_NAMES as records."""
    return _built(CellRecord, _CELL_AT, rows)


def attempt_records(rows: Iterable[Sequence[Any]]) -> list[AttemptRecord]:
    """Driver tuples of ATTEMPT_NAMES as records."""
    return _built(AttemptRecord, _ATTEMPT_AT, rows)


def checkpoint_records(rows: Iterable[Sequence[Any]]) -> list[CheckpointRecord]:
    """Driver tuples of CHECKPOINT_NAMES as records."""
    return _built(CheckpointRecord, _CHECKPOINT_AT, rows)


def event_records(rows: Iterable[Sequence[Any]]) -> list[EventRecord]:
    """Driver tuples of EVENT_NAMES as records."""
    return _built(EventRecord, _EVENT_AT, rows)


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
    return orm_record(CellRecord, r)


def orm_record(cls: type[_R], row: Any, renamed: Mapping[str, str] = _RENAMED) -> _R:
    """Each field of the record from the row's column of the same name (or the one `renamed` gives).

    A NULL JSON column becomes an empty dict or list; an enum field is rebuilt from its stored value.
    """
    values = {}
    for name, convert in _FIELDS[cls]:
        value = getattr(row, renamed.get(name, name))
        values[name] = convert(value) if convert is not None else value
    return cls(**values)


_DONE = str(CellState.DONE)


_ENCODE = json.JSONEncoder(default=str, allow_nan=False).encode
_STRING = json.encoder.encode_basestring_ascii  # json.dumps's spelling of a str (ensure_ascii)


def _j(v: Any) -> str:
    """A scalar as `json.dumps(v, allow_nan=False)` spells it (a dict of 23 keys costs the encoder more)."""
    t = type(v)
    if t is str:
        return _STRING(v)
    if v is None:
        return "null"
    if t is bool:
        return "true" if v else "false"
    if t is int:
        return int.__repr__(v)
    if t is float and math.isfinite(v):
        return float.__repr__(v)
    return _ENCODE(v)  # anything else (a non-finite float: the same error), as the encoder does it


_STATE_TEXT = {str(s): _STRING(str(s)) for s in CellState}


def cell_line(r: Any, more: tuple[Any, ...], usage: str | None) -> str:
    """A `Reads.cell_listing` row's `status --json` object as JSON text: the cell's
    `CellRecord.to_json()`, its cfg (the one its result came from) and new_cfg, then `more` (what
    `status` adds: alive, eta_seconds, rate_steps_per_second, no_progress_seconds) and `usage` (JSON
    text), byte for byte as `json.dumps` writes them, the JSON texts put in as read (no parse).

    A line costs about 2 us: the values of the types their columns hold (an int, a str, None) are
    spelt in place, anything else by `_j` (100,000 calls of a function per field cost 0.2 s)."""
    j, s, n = _j, _STRING, "null"
    step, total, attempts, best_step = r.step, r.total_steps, r.attempts, r.best_step
    if r.state == _DONE:
        progress: float | None = 1.0
    else:
        progress = None if not total or step is None else max(0.0, min(1.0, step / total))
    metrics = "{}" if r.metrics is None or r.metrics == "null" else r.metrics
    cfg = "{}" if r.cfg is None or r.cfg == "null" else r.cfg
    # A done cell kept under the cfg it ran with (`launch --accept-changed`): "cfg" is the one its result
    # came from, "new_cfg" the sweep file's (CellRecord.result_cfg, new_cfg).
    new_cfg = n
    if r.ran_cfg is not None and r.ran_cfg != "null":
        cfg, new_cfg = r.ran_cfg, cfg
    state = _STATE_TEXT.get(r.state) or j(str(CellState(r.state)))  # an unknown state raises as before
    reason, retry, updated, finished = r.last_reason, r.retry_after, r.updated_at, r.finished_at
    alive, eta, rate, silent = more
    return (
        f'{{"cell": {s(r.id) if type(r.id) is str else j(r.id)}, '
        f'"group": {s(r.group_name) if type(r.group_name) is str else j(r.group_name)}, "state": {state}, '
        f'"step": {n if step is None else step if type(step) is int else j(step)}, '
        f'"total_steps": {n if total is None else total if type(total) is int else j(total)}, '
        f'"epoch": {j(r.epoch)}, "total_epochs": {j(r.total_epochs)}, "progress": {j(progress)}, '
        f'"attempts": {attempts if type(attempts) is int else j(attempts)}, '
        f'"last_reason": {n if reason is None else s(reason) if type(reason) is str else j(reason)}, '
        f'"metrics": {metrics}, "best": {j(r.best)}, '
        f'"best_step": {n if best_step is None else best_step if type(best_step) is int else j(best_step)}, '
        f'"retry_after": {n if retry is None else s(retry) if type(retry) is str else j(retry)}, '
        f'"removed": {"false" if r.removed is False else j(r.removed)}, '
        f'"updated_at": {n if updated is None else s(updated) if type(updated) is str else j(updated)}, '
        f'"finished_at": {n if finished is None else s(finished) if type(finished) is str else j(finished)}, '
        f'"cfg": {cfg}, "new_cfg": {new_cfg}, "alive": {n if alive is None else j(alive)}, '
        f'"eta_seconds": {n if eta is None else j(eta)}, '
        f'"rate_steps_per_second": {n if rate is None else j(rate)}, '
        f'"no_progress_seconds": {n if silent is None else j(silent)}, "usage": {usage or n}}}'
    )
