"""Database rows into the frozen records the store hands out (callers never hold a row or a session)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import fields
from enum import Enum
from typing import Any, TypeVar, get_origin, get_type_hints

from sweepq.queue.models import AttemptRow, CellRow, CheckpointRow, EventRow
from sweepq.queue.records import AttemptRecord, CellRecord, CheckpointRecord, EventRecord, iso
from sweepq.queue.states import CellState

_R = TypeVar("_R", CellRecord, AttemptRecord, CheckpointRecord, EventRecord)


def _converter(hint: Any) -> Callable[[Any], Any] | None:
    """What a stored value needs to become the field: a NULL JSON column an empty dict or list, an enum rebuilt."""
    origin = get_origin(hint)
    if origin in (dict, list):
        return lambda v: origin() if v is None else v
    if isinstance(hint, type) and issubclass(hint, Enum):
        return hint
    return None


# Resolved once, not per row (status reads every cell): each field's name and converter, in order.
_FIELDS: dict[type, list[tuple[str, Callable[[Any], Any] | None]]] = {
    cls: [(f.name, _converter(get_type_hints(cls)[f.name])) for f in fields(cls)]
    for cls in (CellRecord, AttemptRecord, CheckpointRecord, EventRecord)
}


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
    return _record(CellRecord, r, {"group": "group_number"})


def attempt_record(r: AttemptRow) -> AttemptRecord:
    return _record(AttemptRecord, r, {"cell": "cell_id"})


def checkpoint_record(r: CheckpointRow) -> CheckpointRecord:
    return _record(CheckpointRecord, r, {"cell": "cell_id"})


def event_record(r: EventRow) -> EventRecord:
    return _record(EventRecord, r, {"cell": "cell_id"})


def _record(cls: type[_R], row: Any, renamed: Mapping[str, str]) -> _R:
    """Each field of the record from the row's column of the same name (or the one `renamed` gives).

    A NULL JSON column becomes an empty dict or list; an enum field is rebuilt from its stored value.
    """
    values = {}
    for name, convert in _FIELDS[cls]:
        value = getattr(row, renamed.get(name, name))
        values[name] = convert(value) if convert is not None else value
    return cls(**values)


_DONE = str(CellState.DONE)


def cell_json(r: Any) -> dict[str, Any]:
    """A cells-table row's JSON, exactly as `cell_record(r).to_json()` gives it, without the record:
    `status --json` lists every cell of sweeps of any size."""
    step, total = r.step, r.total_steps
    if r.state == _DONE:
        progress: float | None = 1.0
    else:
        progress = None if not total or step is None else max(0.0, min(1.0, step / total))
    return {
        "cell": r.id,
        "group": r.group_name,
        "state": str(CellState(r.state)),
        "step": step,
        "total_steps": total,
        "epoch": r.epoch,
        "total_epochs": r.total_epochs,
        "progress": progress,
        "attempts": r.attempts,
        "last_reason": r.last_reason,
        "metrics": {} if r.metrics is None else r.metrics,
        "best": r.best,
        "best_step": r.best_step,
        "retry_after": iso(r.retry_after),
        "removed": r.removed,
        "updated_at": iso(r.updated_at),
        "finished_at": iso(r.finished_at),
    }
