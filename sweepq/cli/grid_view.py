"""`sweepq report`'s "What matters" section: the grid analysis as text that fits the terminal.

Per analysis (a group of the sweep), a heading, then one block of rows per cfg
key, ranked: the key, its share of the metric's variance and its spread on its
first row, then one row per value with the metric's mean ± std over the cells
that have it, their count, and a mark on the best value. When the console is
narrow, columns are dropped in this order: spread, n, best, share (value, mean
and key stay). A key with more than MAX_LEVELS values shows the best and the
worst of them; `--grid --json` has them all.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.text import Text

from sweepq.analysis.grid import GridAnalysis, KeyEffect, Level, analyse, best_level, logged_names, nothing_to_analyse
from sweepq.cli.fit import Column, FittedTable
from sweepq.cli.param_columns import short
from sweepq.errors import UsageError
from sweepq.queue.records import CellRecord
from sweepq.results.params import full, headers
from sweepq.spec.types import Metric

MAX_LEVELS = 12
MAX_DECIMALS = 8  # metrics as small as 1e-5 apart still differ; smaller differences read as equal
BEST = "◀"
# Ranks (lower is kept first); the first KEPT are never dropped.
RANKS = {"key": 0, "value": 1, "mean ± std": 2, "share": 3, "best": 4, "n": 5, "spread": 6}
KEPT = 3


def analysed(cells: Sequence[CellRecord], metric: Metric | None, name: str | None) -> list[GridAnalysis]:
    """`analyse`, after refusing a --metric NAME that no cell logged while others were logged (a typo)."""
    logged = logged_names(cells)
    if name and logged and name not in logged and (metric is None or name != metric.name):
        default = f"the sweep's metric, {metric.name}" if metric else "the sweep's metric"
        raise UsageError(
            f"--metric {name}: no cell has logged a metric of that name (logged: {', '.join(logged)}). "
            f"Name one of those, or leave --metric out for {default}."
        )
    return analyse(cells, metric, name)


@dataclass(frozen=True)
class WhatMatters:
    """The section: one part per analysis, or one line saying why there is none."""

    analyses: Sequence[GridAnalysis]
    why_none: str  # nothing_to_analyse's line, shown when there are no analyses

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if not self.analyses:
            yield Text(f"What matters: {self.why_none}")
            return
        for i, a in enumerate(self.analyses):
            if i:
                yield Text("")
            yield part(a)


def section(
    cells: Sequence[CellRecord], metric: Metric | None, name: str | None
) -> tuple[list[GridAnalysis], WhatMatters]:
    """The analyses of `cells` and the section that shows them."""
    found = analysed(cells, metric, name)
    return found, WhatMatters(found, nothing_to_analyse(cells, metric, name))


def part(a: GridAnalysis) -> RenderableType:
    better = "higher" if a.goal == "max" else "lower"
    where = f" in group {a.group}" if a.group else ""
    extent = "a full grid" if a.full else "a partial grid"
    heading = Text(f"What matters for {a.metric} ({better} is better){where}: {a.cells} cells, {extent}", style="bold")
    shown = [(k, shown_levels(k, a.goal)) for k in a.keys]
    parts: list[RenderableType] = [heading, FittedTable(columns(a, shown), kept=KEPT)]
    for k, levels in shown:
        if len(levels) < len(k.levels):
            more = len(k.levels) - len(levels)
            parts.append(
                Text(f"{k.key}: {more} more values between the best and the worst (--json lists them)", style="dim")
            )
    if a.note:
        parts.append(Text(a.note, style="dim"))
    return Group(*parts)


def shown_levels(k: KeyEffect, goal: str) -> list[Level]:
    """Every level, or the best and the worst MAX_LEVELS/2 by mean, in their order."""
    if len(k.levels) <= MAX_LEVELS:
        return list(k.levels)
    by_mean = sorted(k.levels, key=lambda v: v.mean, reverse=goal == "max")
    keep = {id(v) for v in by_mean[: MAX_LEVELS // 2] + by_mean[-(MAX_LEVELS // 2) :]}
    return [v for v in k.levels if id(v) in keep]


def decimals(a: GridAnalysis) -> int:
    """Decimals that tell the values apart (three significant digits of their range), so a column aligns."""
    values = [r.value for r in a.rows]
    scale = (max(values) - min(values)) or max(abs(v) for v in values)
    return 0 if scale == 0 else min(MAX_DECIMALS, max(0, 3 - math.floor(math.log10(scale))))


def columns(a: GridAnalysis, shown: Sequence[tuple[KeyEffect, Sequence[Level]]]) -> list[Column]:
    named = headers([k.key for k in a.keys])
    d = decimals(a)
    rows: dict[str, list[str]] = {name: [] for name in (*RANKS, "short key", "short value")}
    for k, levels in shown:
        best = best_level(k, a.goal)
        by_name = len({short(v.value) for v in levels}) == len(levels)  # else names alike: keep both ends
        for i, v in enumerate(levels):
            first = i == 0
            rows["key"].append(k.key if first else "")
            rows["short key"].append(named[k.key] if first else "")
            rows["share"].append(f"{100 * k.share:.1f}%" if first else "")
            rows["spread"].append(f"{k.spread:.{d}f}" if first else "")
            rows["value"].append(full(v.value))
            rows["short value"].append(short(v.value, by_name))
            rows["mean ± std"].append(f"{v.mean:.{d}f} ± {v.std:.{d}f}")
            rows["n"].append(str(v.n))
            rows["best"].append(BEST if v is best else "")

    def right(name: str) -> Column:
        return Column(name, rows[name], RANKS[name], "right")

    return [
        Column("key", rows["key"], RANKS["key"], short_name="key", short_values=rows["short key"]),
        right("share"),
        right("spread"),
        Column("value", rows["value"], RANKS["value"], short_values=rows["short value"]),
        right("mean ± std"),
        right("n"),
        Column("best", rows["best"], RANKS["best"]),
    ]
