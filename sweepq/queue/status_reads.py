"""What `status` reads of a large sweep: only the rows it shows, one query per part of its table.

A sweep may hold 100,000 cells; `status` shows the cells that need attention and a few others
(cli/read_commands.py says which), so each part is one query that reads only its rows. The full
listing (`status --json`) reads every cell once as plain rows (no record object per cell).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, or_, select

from sweepq.queue.models import AttemptRow, CellRow
from sweepq.queue.records import AttemptRecord, CellRecord
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

    def cell_rows(self, batch: int = 5000) -> Iterator[Any]:
        """Every cell (those gone from the sweep file included) in cell order, as plain rows of the
        cells table's columns (rows.cell_json turns one into its JSON), read in batches."""
        with self._read() as s:
            result = s.connection().execution_options(yield_per=batch).execute(select(*_COLUMNS).order_by(*_ORDER))
            yield from result

    def _records(self, q: Select[Any], limit: int | None) -> list[CellRecord]:
        with self._read() as s:
            return [cell_record(r) for r in s.scalars(q if limit is None else q.limit(limit))]


_COLUMNS = [c for c in CellRow.__table__.columns]
