"""Database rows into the frozen records the store hands out (callers never hold a row or a session)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import fields
from enum import Enum
from typing import Any, TypeVar, get_origin, get_type_hints

from sweepq.queue.models import AttemptRow, CellRow, CheckpointRow, EventRow
from sweepq.queue.records import AttemptRecord, CellRecord, CheckpointRecord, EventRecord
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


#: The cells table's columns, in the order `cell_records` reads them.
CELL_COLUMNS = list(CellRow.__table__.c)
_CELL_AT = [
    ([c.name for c in CELL_COLUMNS].index({"group": "group_number"}.get(name, name)), convert)
    for name, convert in _FIELDS[CellRecord]
]


def cell_records(rows: Iterable[Sequence[Any]]) -> list[CellRecord]:
    """Rows of CELL_COLUMNS, each value converted as its column's type reads it, as records: by position,
    since a row object's attribute costs more than the rest of a record (`status --all` reads every cell)."""
    at = _CELL_AT
    return [CellRecord(*[r[i] if f is None else f(r[i]) for i, f in at]) for r in rows]


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


def cell_line(r: Any, more: tuple[Any, ...], usage: str | None) -> str:
    """A `status_reads.cell_listing` row's `status --json` object as JSON text: the cell's
    `CellRecord.to_json()`, its cfg, then `more` (what `status` adds: alive, eta_seconds,
    rate_steps_per_second, no_progress_seconds) and `usage` (JSON text), byte for byte as `json.dumps`
    writes them, the JSON texts put in as read (no parse)."""
    step, total = r.step, r.total_steps
    if r.state == _DONE:
        progress: float | None = 1.0
    else:
        progress = None if not total or step is None else max(0.0, min(1.0, step / total))
    metrics = "{}" if r.metrics is None or r.metrics == "null" else r.metrics
    cfg = "{}" if r.cfg is None or r.cfg == "null" else r.cfg
    alive, eta, rate, silent = more
    return (
        f'{{"cell": {_j(r.id)}, "group": {_j(r.group_name)}, "state": {_j(str(CellState(r.state)))}, '
        f'"step": {_j(step)}, "total_steps": {_j(total)}, "epoch": {_j(r.epoch)}, '
        f'"total_epochs": {_j(r.total_epochs)}, "progress": {_j(progress)}, "attempts": {_j(r.attempts)}, '
        f'"last_reason": {_j(r.last_reason)}, "metrics": {metrics}, "best": {_j(r.best)}, '
        f'"best_step": {_j(r.best_step)}, "retry_after": {_j(r.retry_after)}, "removed": {_j(r.removed)}, '
        f'"updated_at": {_j(r.updated_at)}, "finished_at": {_j(r.finished_at)}, "cfg": {cfg}, '
        f'"alive": {_j(alive)}, "eta_seconds": {_j(eta)}, "rate_steps_per_second": {_j(rate)}, '
        f'"no_progress_seconds": {_j(silent)}, "usage": {usage or "null"}}}'
    )
