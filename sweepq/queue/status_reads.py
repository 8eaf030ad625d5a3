"""What `status` reads of a large sweep: only the rows it shows, one query per part of its table.

A sweep may hold 100,000 cells; `status` shows the cells that need attention and a few others
(cli/read_commands.py says which), so each part is one query that reads only its rows. The full
listing (`status --json`) reads every cell once as plain tuples from the driver (no record, no row
object per cell).
"""

from __future__ import annotations

import json
from collections import namedtuple
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any

from sqlalchemy import JSON, ColumnElement, Select, and_, or_, select

from sweepq.queue.models import AttemptRow, CellRow, UTCDateTime
from sweepq.queue.prepared import Prepared
from sweepq.queue.records import AttemptRecord, CellRecord, iso
from sweepq.queue.rows import attempt_record, cell_record
from sweepq.queue.states import CellState
from sweepq.queue.transactions import StoreBase

_ORDER = (CellRow.group_number, CellRow.index)
_IN_BATCH = 500  # ids in one IN (...): well under SQLite's limit on bound parameters


class StoreStatusReads(StoreBase):
    def cells_in(
        self, states: Collection[CellState], limit: int | None = None, backing_off: bool = False
    ) -> list[CellRecord]:
        """The cells in `states` (and with `backing_off`, the queued cells waiting out a retry back-off),
        still in the sweep, in cell order; the first `limit` of them."""
        wanted: ColumnElement[bool] = CellRow.state.in_([str(s) for s in states])
        if backing_off:
            wanted = or_(wanted, and_(CellRow.state == str(CellState.QUEUED), CellRow.retry_after.is_not(None)))
        return self._records(select(CellRow).where(wanted, CellRow.removed.is_(False)).order_by(*_ORDER), limit)

    def best_done(self, goal: str | None, limit: int) -> list[CellRecord]:
        """The `limit` done cells with the best `best` by `goal` ("max" or "min"); with no goal (no metric
        in the sweep), the most recently finished."""
        q = select(CellRow).where(CellRow.state == str(CellState.DONE), CellRow.removed.is_(False))
        if goal is None:
            q = q.order_by(CellRow.finished_at.desc(), *_ORDER)
        else:
            key = CellRow.best.desc() if goal == "max" else CellRow.best.asc()
            q = q.where(CellRow.best.is_not(None)).order_by(key, *_ORDER)
        return self._records(q, limit)

    def last_attempts(self, cells: Sequence[str]) -> list[AttemptRecord]:
        """Each of `cells`' newest attempt (the one its `attempts` counter names)."""
        out: list[AttemptRecord] = []
        with self._read() as s:
            for i in range(0, len(cells), _IN_BATCH):
                q = (
                    select(AttemptRow)
                    .join(CellRow, (AttemptRow.cell_id == CellRow.id) & (AttemptRow.number == CellRow.attempts))
                    .where(CellRow.id.in_(cells[i : i + _IN_BATCH]))
                )
                out += [attempt_record(r) for r in s.scalars(q)]
        return out

    def usages(self, cells: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
        """Each cell's usage from its newest attempt that has one (of `cells`, else of every cell): the
        cell, the number and the usage of the attempts that sampled something, nothing else."""
        newest: dict[str, tuple[int, dict[str, Any]]] = {}
        q = select(AttemptRow.cell_id, AttemptRow.number, AttemptRow.usage).where(AttemptRow.usage.is_not(None))
        batches = [None] if cells is None else [cells[i : i + _IN_BATCH] for i in range(0, len(cells), _IN_BATCH)]
        with self._read() as s:
            conn = s.connection()
            for ids in batches:
                for cell, number, usage in conn.execute(q if ids is None else q.where(AttemptRow.cell_id.in_(ids))):
                    if usage and (cell not in newest or number > newest[cell][0]):
                        newest[cell] = (number, usage)
        return {cell: u for cell, (_, u) in newest.items()}

    def usage_texts(self) -> dict[str, str]:
        """`usages()` of every cell, each as its JSON text (what `status --json` puts in, unparsed)."""
        if self.engine.dialect.name != "sqlite":
            return {cell: _STRICT(u) for cell, u in self.usages().items()}
        with self._read() as s:
            newest = s.connection().exec_driver_sql(_NEWEST_USAGES).all()
        return {cell: text if _as_stored(text) else _STRICT(json.loads(text)) for cell, text, _ in newest}

    def cell_listing(self, batch: int = 5000) -> Iterator[Any]:
        """Every cell (those gone from the sweep file included) in cell order: the columns of its
        `status --json` object (`LISTED`, by name), read in batches from the driver's cursor as the ORM
        reads them, but a time as its JSON text (`records.iso`) and a JSON column as its JSON text (None:
        NULL), so that 100,000 cells make no datetime and parse no JSON (rows.cell_line writes one)."""
        every = Prepared(select(*_LISTED).order_by(*_ORDER), self.engine.dialect, returns=_LISTED)
        every.readers = [_spelt(c, read) for c, read in zip(_LISTED, every.readers, strict=True)]
        with self._read() as s:
            yield from map(_Listed._make, every.each(s.connection(), batch))

    def _records(self, q: Select[Any], limit: int | None) -> list[CellRecord]:
        with self._read() as s:
            return [cell_record(r) for r in s.scalars(q if limit is None else q.limit(limit))]


#: The columns of a cell's `status --json` object.
LISTED = (
    *("id", "group_name", "state", "step", "total_steps", "epoch", "total_epochs", "attempts", "last_reason"),
    *("metrics", "best", "best_step", "retry_after", "removed", "updated_at", "finished_at", "cfg"),
)
_LISTED = [CellRow.__table__.c[name] for name in LISTED]
_Listed = namedtuple("_Listed", LISTED)  # type: ignore[misc]
_STRICT = json.JSONEncoder(allow_nan=False).encode  # as `status --json` refuses a non-finite float


# Each cell's newest attempt among those whose usage is not empty (SQLite gives a bare column the values
# of the row that max() picks). Stored by json.dumps: an empty one is `{}` or `null`.
_NEWEST_USAGES = (
    "SELECT cell_id, usage, max(number) FROM attempts WHERE usage IS NOT NULL AND usage NOT IN ('null', '{}') "
    "GROUP BY cell_id"
)


def _as_stored(text: Any) -> bool:
    """Whether a JSON column's value is JSON text as this code stores it: json.dumps's, on one line, with
    no non-finite float (stored as strings, rows.json_safe: a NaN token is a foreign writer's)."""
    return type(text) is str and "NaN" not in text and "Infinity" not in text and "\n" not in text


def _spelt(column: Any, read: Callable[[Any], Any] | None) -> Callable[[Any], Any] | None:
    """How `cell_listing` reads `column`: a time or a JSON column as JSON text, taken as stored when it
    is in the form this code stores (SQLite's text), else read as the ORM reads it and spelt."""
    if isinstance(column.type, UTCDateTime):

        def time(v: Any) -> str | None:
            if type(v) is str and len(v) == 26 and v[10] == " " and v[19] == ".":  # "2026-01-31 12:00:00.000000"
                return f"{v[:10]}T{v[11:19]}{'' if v[20:] == '000000' else v[19:]}Z"  # datetime.isoformat's
            return iso(v if read is None else read(v))

        return time
    if isinstance(column.type, JSON):

        def text(v: Any) -> str | None:
            if _as_stored(v):  # SQLAlchemy's serializer, or the expansion's identical cfg text
                return v
            value = v if read is None else read(v)
            return None if value is None else _STRICT(value)

        return text
    return read
