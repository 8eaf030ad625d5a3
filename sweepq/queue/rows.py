"""Database rows into the frozen records the store hands out (callers never hold a row or a session)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import fields
from enum import Enum
from typing import Any, TypeVar, get_origin, get_type_hints

from sweepq.queue.models import AttemptRow, CellRow, CheckpointRow, EventRow
from sweepq.queue.records import AttemptRecord, CellRecord, CheckpointRecord, EventRecord

_R = TypeVar("_R", CellRecord, AttemptRecord, CheckpointRecord, EventRecord)

# Resolved once: (name, declared type) of each field of each record, in order.
_FIELDS: dict[type, list[tuple[str, Any]]] = {
    cls: [(f.name, get_type_hints(cls)[f.name]) for f in fields(cls)]
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
    for name, hint in _FIELDS[cls]:
        value = getattr(row, renamed.get(name, name))
        origin = get_origin(hint)
        if value is None and origin in (dict, list):
            value = origin()
        elif isinstance(hint, type) and issubclass(hint, Enum):
            value = hint(value)
        values[name] = value
    return cls(**values)
