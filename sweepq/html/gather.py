"""What the HTML report shows, read once: the queue through a read-only store, each attempt's history file.

Read like every read command: committed rows, and each metrics.jsonl up to its last
whole line. The histories are read one cell at a time, each curve cut to READ_POINTS
as its file is read (history/stream.py) and reduced again at once (charts.py), so a
sweep of 10,000 cells, or a cell of a million points, costs the memory of its
charts, not of its history.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sweepq.history.read import streams
from sweepq.history.records import CellHistory
from sweepq.html.charts import LINE_POINTS, MANY, Charts, collect
from sweepq.queue.records import AttemptRecord, CellRecord
from sweepq.queue.store import Store
from sweepq.results.report import by_reason
from sweepq.spec.sweep import Settings
from sweepq.version import __version__

READ_POINTS = 2 * LINE_POINTS[1]  # a curve's points kept while read: more than a chart's line draws


@dataclass(frozen=True)
class Report:
    """Everything the page's sections read (each section is a function of this)."""

    settings: Settings
    root: Path
    written: datetime
    cells: list[CellRecord]  # in the sweep's order; a cell's place is its colour
    attempts: list[AttemptRecord]
    reasons: list[dict[str, Any]]  # report.by_reason: attempts and hours per termination reason
    charts: Charts
    damaged: dict[tuple[str, int], int] = field(default_factory=dict)  # (cell, attempt) -> unreadable lines
    out_of_range: dict[tuple[str, int], int] = field(default_factory=dict)  # -> lines with numbers out of range
    version: str = __version__

    @property
    def metric_name(self) -> str | None:
        return self.settings.metric.name if self.settings.metric else None


def gather(store: Store, many: int = MANY, now: datetime | None = None) -> Report:
    """The report of the sweep in `store` (`many`: above this many cells, charts show the best and a band)."""
    cells = store.cells()
    attempts = store.attempts()
    settings = store.settings()
    damaged: dict[tuple[str, int], int] = {}
    out_of_range: dict[tuple[str, int], int] = {}

    def histories() -> Iterator[CellHistory]:
        for stream in streams(store, [c.id for c in cells]):
            damaged.update(((stream.cell, a), n) for a, n in stream.damaged.items())
            out_of_range.update(((stream.cell, a), n) for a, n in stream.out_of_range.items())
            yield stream.reduced(READ_POINTS)  # cut as it is read: a history need not fit in memory

    charts = collect(histories(), cells, settings.metric, many)
    return Report(
        settings=settings,
        root=store.root,
        written=now or datetime.now(UTC),
        cells=cells,
        attempts=attempts,
        reasons=by_reason(attempts, store.checkpoint_times()),
        charts=charts,
        damaged=damaged,
        out_of_range=out_of_range,
    )
