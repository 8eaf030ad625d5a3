"""The curves as data: per metric, one line per cell, or with many cells the best few and a median and band.

One pass over the cells' stitched histories (a sweep's history need not fit in
memory): each curve is cut to its share of the chart's points at once. Up to MANY
cells, every cell that logged a metric gets a line (solid where kept, its lost
tails beside it, its checkpoints and, on the sweep's metric, its best point by the
sweep's goal: another metric has no direction, so no best); beyond, a line each for the
TOP cells only, and over all of them the median and the 10-90 % band, from each
curve cut to SUMMARY_POINTS points. Charts go to the sweep's metric, then to the
metrics most cells logged, MAX_CHARTS at most.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from sweepq.history.records import CellHistory
from sweepq.html.reduce import Floats, finite, reduce
from sweepq.queue.records import CellRecord
from sweepq.spec.sweep import Metric

MAX_CHARTS = 8
MANY = 200  # more cells than this: TOP lines and a band (a chart of thousands of lines shows nothing)
TOP = 10
CHART_POINTS = 16_000  # the points of one chart's lines together: 100 cells x 5 metrics stay under 1 MB
LINE_POINTS = (40, 600)  # the fewest and the most points of one line
CHART_MARKS = 3_000  # checkpoint dots of one chart's lines together
SUMMARY_POINTS = 32  # a curve's points kept for the band
BAND_STEPS = 120  # where the band is read


@dataclass(frozen=True)
class Tail:
    """A lost tail, joined to the curve where it left it: what `attempt` logged after the step resumed from."""

    attempt: int
    reason: str | None
    steps: Floats
    values: Floats


@dataclass(frozen=True)
class Line:
    cell: str
    colour: int  # the cell's place in the sweep (its colour in every chart and in the table); with a band, its rank
    steps: Floats
    values: Floats
    tails: tuple[Tail, ...]
    checkpoints: tuple[tuple[float, float], ...]  # (step, value on the curve)
    best: tuple[float, float] | None


@dataclass(frozen=True)
class Band:
    steps: Floats
    low: Floats  # 10th percentile over the cells logging at that step
    median: Floats
    high: Floats  # 90th


@dataclass(frozen=True)
class Chart:
    metric: str
    goal: str | None  # "min" or "max" when it is the sweep's metric; None: no direction, no best point marked
    cells: int  # how many cells logged it
    lines: tuple[Line, ...]
    band: Band | None = None  # with more than MANY cells
    ranked_by: str = ""  # with a band: how the lines drawn were chosen, in words


@dataclass(frozen=True)
class Charts:
    charts: tuple[Chart, ...]
    more: tuple[str, ...]  # metrics logged but not drawn, most logged first
    every_cell: bool = True  # each cell that logged is drawn, in its own colour; False: the TOP, by rank


def collect(
    histories: Iterable[CellHistory], cells: Sequence[CellRecord], metric: Metric | None, many: int = MANY
) -> Charts:
    """The charts of these histories (`cells`: every cell of the sweep, in order; `metric`: the sweep's)."""
    c = _Collector(cells, metric, many)
    for h in histories:
        c.add(h)
    return c.charts()


class _Collector:
    def __init__(self, cells: Sequence[CellRecord], metric: Metric | None, many: int) -> None:
        self.colour = {c.id: i for i, c in enumerate(cells)}
        self.best = {c.id: c.best for c in cells}
        self.metric = metric
        self.summary = len(cells) > many
        shown = TOP if self.summary else max(1, len(cells))
        self.limit = max(LINE_POINTS[0], min(LINE_POINTS[1], CHART_POINTS // shown))
        self.marks = max(2, CHART_MARKS // shown)
        self.counts: dict[str, int] = {}
        self.lines: dict[str, list[Line]] = {}
        self.small: dict[str, list[tuple[Floats, Floats]]] = {}
        self.top: dict[str, list[tuple[float, int, Line]]] = {}  # a min-heap of the TOP best: (key, -order, line)

    def goal(self, name: str) -> str | None:
        return self.metric.goal if self.metric is not None and self.metric.name == name else None

    def add(self, h: CellHistory) -> None:
        for name, series in h.series.items():
            steps, values = finite(series.points)
            if not len(steps):
                continue
            self.counts[name] = self.counts.get(name, 0) + 1
            if not self.summary:
                self.lines.setdefault(name, []).append(self.line(h, name, steps, values))
                continue
            small = self.small.setdefault(name, [])
            small.append(reduce(steps, values, SUMMARY_POINTS))
            key = self.key(h.cell, name, values)
            heap = self.top.setdefault(name, [])
            if key is not None and (len(heap) < TOP or key > heap[0][0]):
                entry = (key, -len(small), self.line(h, name, steps, values))  # ties: the earlier cell first
                (heapq.heappush if len(heap) < TOP else heapq.heapreplace)(heap, entry)

    def key(self, cell: str, name: str, values: Floats) -> float | None:
        """How good a cell is for the chart of `name` (higher is better); None: not ranked."""
        if self.metric is None:
            return float(values[-1])  # no goal known: the highest final value, as named on the page
        if self.metric.name == name:
            best = values.min() if self.metric.goal == "min" else values.max()
        else:
            recorded = self.best.get(cell)
            if recorded is None or recorded != recorded:
                return None
            best = recorded
        return float(-best if self.metric.goal == "min" else best)

    def ranked_by(self, name: str) -> str:
        if self.metric is None:
            return f"the {TOP} cells with the highest final {name} (the sweep names no metric to rank by)"
        word = "lowest" if self.metric.goal == "min" else "highest"
        return f"the {TOP} cells with the {word} best {self.metric.name}"

    def line(self, h: CellHistory, name: str, steps: Floats, values: Floats) -> Line:
        tails = []
        for t in h.lost_of(name):
            t_steps, t_values = finite(t.points)
            if not len(t_steps):
                continue
            before = np.flatnonzero(steps < t_steps[0])
            if len(before):  # joined to the point of the curve it left from
                t_steps = np.concatenate((steps[before[-1:]], t_steps))
                t_values = np.concatenate((values[before[-1:]], t_values))
            tails.append(Tail(t.attempt, t.reason, *reduce(t_steps, t_values, self.limit)))
        marked = np.unique([m.step for m in h.checkpoints if steps[0] <= m.step <= steps[-1]])
        if len(marked) > self.marks:  # evenly spread, the newest kept
            marked = marked[np.unique(np.linspace(0, len(marked) - 1, self.marks).round().astype(int))]
        on_curve = np.interp(marked, steps, values) if len(marked) else marked
        goal = self.goal(name)  # only the sweep's metric has a direction: no other gets a best point
        pick = values.argmin() if goal == "min" else values.argmax() if goal == "max" else None
        return Line(
            h.cell,
            self.colour.get(h.cell, 0),
            *reduce(steps, values, self.limit),
            tuple(tails),
            tuple(zip(marked.tolist(), on_curve.tolist(), strict=True)),
            None if pick is None else (float(steps[pick]), float(values[pick])),
        )

    def charts(self) -> Charts:
        # the sweep's metric first (what the sweep is judged by), then by how many cells logged each (stable:
        # of as many cells, first logged first)
        first = self.metric.name if self.metric is not None else None
        ordered = sorted(self.counts, key=lambda n: (n != first, -self.counts[n]))
        made = []
        for name in ordered[:MAX_CHARTS]:
            if not self.summary:
                made.append(Chart(name, self.goal(name), self.counts[name], tuple(self.lines[name])))
                continue
            ranked = sorted(self.top.get(name, []), reverse=True)
            lines = tuple(replace(line, colour=i) for i, (_, _, line) in enumerate(ranked))  # TOP colours apart
            band = _band(self.small[name])
            made.append(Chart(name, self.goal(name), self.counts[name], lines, band, self.ranked_by(name)))
        return Charts(tuple(made), tuple(ordered[MAX_CHARTS:]), every_cell=not self.summary)


def _band(curves: list[tuple[Floats, Floats]]) -> Band:
    """The median and 10-90 % band of the curves at BAND_STEPS steps (a curve counts where it has points)."""
    lo = min(float(s[0]) for s, _ in curves)
    hi = max(float(s[-1]) for s, _ in curves)
    grid = np.unique(np.linspace(lo, hi, BAND_STEPS).round())
    stack = np.vstack([np.interp(grid, s, v, left=np.nan, right=np.nan) for s, v in curves])
    seen = ~np.isnan(stack).all(axis=0)
    low, median, high = np.nanpercentile(stack[:, seen], [10, 50, 90], axis=0)
    return Band(grid[seen], low, median, high)
