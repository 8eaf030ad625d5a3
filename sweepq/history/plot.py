"""Curves as pictures: stitched histories drawn with matplotlib (Agg, no display), saved atomically.

One curve per cell (`draw_cells`): the stitched series solid, each lost tail dashed in
a lighter shade of the cell's colour, the cell's checkpoints as small markers on the
curve, its best point starred and labelled when the metric has a goal (the sweep's
metric; any other has no direction, so no best). Or one curve per value of a cfg key
(`draw_groups`): the mean over that value's cells and a min-max band. No drawn line
holds more than MAX_POINTS points (`downsample` keeps each bucket's min and max, so a
spike survives). Only `sweepq plot` imports this module: matplotlib is an optional extra.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import numpy as np
from numpy.typing import NDArray

matplotlib.use("Agg")  # before anything draws: never look for a display

from matplotlib.axes import Axes
from matplotlib.colors import to_hex, to_rgb
from matplotlib.figure import Figure

from sweepq.atomic import fsync_dir, tmp_name
from sweepq.history.records import CellHistory, Point

MAX_POINTS = 1500
FORMATS = ("png", "svg")
# Fixed, so that the same cell gets the same colour in every picture of a sweep (tab10, then tab20's light ones).
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
    "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5",
)  # fmt: skip
LEGEND_MAX = 20  # more entries than this hide the curves: no legend then
LABEL_MAX = 5  # more best values written beside their stars overlap: the legend says them


def downsample(steps: Sequence[int], values: Sequence[float], limit: int = MAX_POINTS) -> tuple[list[int], list[float]]:
    """At most `limit` points: the steps cut into limit/2 buckets, each keeping its min and max (in step order)."""
    n = len(steps)
    if n <= limit:
        return list(steps), list(values)
    buckets = max(1, limit // 2)
    keep: list[int] = []
    for b in range(buckets):
        lo, hi = b * n // buckets, (b + 1) * n // buckets
        if lo == hi:
            continue
        idx = range(lo, hi)
        low = min(idx, key=lambda i: _order(values[i]))
        high = max(idx, key=lambda i: _order(values[i]))
        keep += sorted({low, high})
    return [steps[i] for i in keep], [values[i] for i in keep]


def _order(v: float) -> float:
    return -math.inf if math.isnan(v) else v


def lighter(colour: str, amount: float = 0.55) -> str:
    """`colour` mixed with white (`amount` of white): a lost tail's shade of its cell's colour."""
    r, g, b = (c + (1 - c) * amount for c in to_rgb(colour))
    return to_hex((r, g, b))


def colour_of(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


@dataclass(frozen=True)
class Picture:
    """What was drawn: curves (one a cell or group) and the points on them."""

    curves: int
    points: int


def draw_cells(histories: Sequence[CellHistory], metric: str, goal: str | None, path: Path, title: str = "") -> Picture:
    """One stitched curve per cell of `histories` that logged `metric`, saved to `path` (.png or .svg)."""
    fig, ax = _figure(title, metric)
    drawn = points = 0
    for i, h in enumerate(histories):
        series = h.series.get(metric)
        if series is None or not series.points:
            continue
        points += _draw_cell(ax, h, metric, series.points, colour_of(i), goal, few=len(histories) <= LABEL_MAX)
        drawn += 1
    _legend(ax, drawn)
    _save(fig, path)
    return Picture(drawn, points)


def _draw_cell(
    ax: Axes, h: CellHistory, metric: str, curve: tuple[Point, ...], colour: str, goal: str | None, few: bool
) -> int:
    steps, values = downsample([p.step for p in curve], [p.value for p in curve])
    (line,) = ax.plot(steps, values, color=colour, linewidth=1.4)
    line.set_gid(f"cell-{h.cell}")  # an SVG group per cell, named
    drawn = len(steps)
    for tail in h.lost_of(metric):
        before = [p for p in curve if p.step < tail.points[0].step][-1:]  # joins the tail to where it left the curve
        t_steps, t_values = downsample(
            [p.step for p in before + list(tail.points)], [p.value for p in (*before, *tail.points)]
        )
        (dash,) = ax.plot(t_steps, t_values, color=lighter(colour), linewidth=1.4, linestyle=(0, (4, 2)))
        dash.set_gid(f"lost-{h.cell}-{tail.attempt}")
        drawn += len(t_steps)
    marks = sorted({m.step for m in h.checkpoints if curve[0].step <= m.step <= curve[-1].step})
    if marks:
        at = {p.step: p.value for p in curve}
        ys = [at.get(s, _between(curve, s)) for s in marks]
        ax.plot(marks, ys, linestyle="none", marker="o", markersize=3.2, color=colour, gid=f"checkpoints-{h.cell}")
    best = _best(ax, curve, colour, goal, label=few)
    line.set_label(h.cell if best is None else f"{h.cell}  best {best.value:.4g} at step {best.step}")
    return drawn


def _between(curve: tuple[Point, ...], step: int) -> float:
    """The curve's value at `step`, read off the straight line between its neighbours."""
    after = next(i for i, p in enumerate(curve) if p.step >= step)
    a, b = curve[after - 1], curve[after]
    return a.value + (b.value - a.value) * (step - a.step) / (b.step - a.step)


def _best(ax: Axes, curve: tuple[Point, ...], colour: str, goal: str | None, label: bool) -> Point | None:
    """Star the curve's best point by the metric's goal; `label`: write its value. No goal, no star: a metric
    that is not the sweep's has no direction (the highest loss is its worst point)."""
    finite = [p for p in curve if math.isfinite(p.value)]
    if goal not in ("min", "max") or not finite:
        return None
    best = min(finite, key=lambda p: p.value) if goal == "min" else max(finite, key=lambda p: p.value)
    ax.plot([best.step], [best.value], marker="*", markersize=11, color=colour, markeredgecolor="black", zorder=5)
    if label:
        ax.annotate(f"{best.value:.4g}", (best.step, best.value), xytext=(4, 5), textcoords="offset points", fontsize=8)
    return best


def draw_groups(
    groups: Mapping[str, Sequence[CellHistory]], metric: str, key: str, path: Path, title: str = ""
) -> Picture:
    """One curve per value of cfg `key`: the mean of its cells' curves and their min-max band."""
    fig, ax = _figure(title, metric)
    drawn = points = 0
    for i, (label, cells) in enumerate(groups.items()):
        curves = [h.series[metric].points for h in cells if metric in h.series and h.series[metric].points]
        if not curves:
            continue
        lo, hi = min(c[0].step for c in curves), max(c[-1].step for c in curves)
        grid = np.unique(np.linspace(lo, hi, min(MAX_POINTS, hi - lo + 1)).round())
        stack = np.vstack([_on(grid, c) for c in curves])
        with np.errstate(all="ignore"):
            mean, low, high = np.nanmean(stack, 0), np.nanmin(stack, 0), np.nanmax(stack, 0)
        colour = colour_of(i)
        ax.fill_between(grid, low, high, color=colour, alpha=0.2, linewidth=0)
        (line,) = ax.plot(grid, mean, color=colour, linewidth=1.6, label=f"{key}={label} ({len(curves)})")
        line.set_gid(f"group-{label}")
        drawn, points = drawn + 1, points + len(grid)
    _legend(ax, drawn)
    _save(fig, path)
    return Picture(drawn, points)


def _on(grid: NDArray[np.float64], curve: tuple[Point, ...]) -> NDArray[np.float64]:
    """The curve read at the grid's steps (nan outside its steps: a shorter cell does not pull the mean)."""
    xs, ys = np.array([p.step for p in curve], float), np.array([p.value for p in curve], float)
    return np.interp(grid, xs, ys, left=np.nan, right=np.nan)


def _figure(title: str, metric: str) -> tuple[Figure, Axes]:
    fig = Figure(figsize=(9, 5.2), dpi=110, layout="constrained")
    ax = fig.add_subplot()
    ax.set_xlabel("step")
    ax.set_ylabel(metric)
    ax.grid(True, color="#e6e6e6", linewidth=0.8)
    if title:
        ax.set_title(title, fontsize=11)
    return fig, ax


def _legend(ax: Axes, drawn: int) -> None:
    if 0 < drawn <= LEGEND_MAX:
        ax.legend(fontsize=8, ncols=2 if drawn > 10 else 1, frameon=False)


def _save(fig: Figure, path: Path) -> None:
    """Written beside `path`, then renamed over it: a reader never sees half a picture."""
    fmt = path.suffix.lower().lstrip(".")
    tmp = tmp_name(path)
    try:
        fig.savefig(tmp, format=fmt, metadata={"Software": "sweepq"} if fmt == "png" else {"Creator": "sweepq"})
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)
