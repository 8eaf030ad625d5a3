"""A chart as inline SVG: axes with round ticks, one path per line, lost tails dashed, checkpoints, best points.

Coordinates are whole units of a 640 x 300 view box (finer than a screen's pixels at
the size it is shown), each path written as moves relative to its last point: the
bytes of 100 cells x 5 metrics stay a few hundred kB. Colours are classes (`p3`: the
fourth colour, `q3`: its lighter shade for lost tails) that the page's style defines
once. Every text that comes from the sweep (a cell id, a metric name, a reason) is escaped.
"""

from __future__ import annotations

import math
from html import escape

import numpy as np

from sweepq.html.charts import Band, Chart, Line
from sweepq.html.reduce import Floats

WIDTH, HEIGHT = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 62, 12, 10, 30
# The colours of `sweepq plot` (tab10, then tab20's light ones), so that a cell looks the same in both.
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
    "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5",
)  # fmt: skip


def lighter(colour: str, amount: float = 0.55) -> str:
    """`colour` mixed with white (`amount` of white): a lost tail's shade of its cell's colour."""
    rgb = [int(colour[i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * amount):02x}" for c in rgb)


def colour_class(i: int) -> int:
    return i % len(PALETTE)


class _Scale:
    """Steps and values to view-box units (y grows downwards)."""

    def __init__(self, x: tuple[float, float], y: tuple[float, float]) -> None:
        self.x0, self.x1 = x if x[1] > x[0] else (x[0] - 1, x[0] + 1)
        pad = (y[1] - y[0]) * 0.04 or abs(y[0]) * 0.1 or 1.0
        self.y0, self.y1 = y[0] - pad, y[1] + pad

    def xs(self, steps: Floats) -> np.ndarray:
        return np.rint(LEFT + (steps - self.x0) / (self.x1 - self.x0) * (WIDTH - LEFT - RIGHT)).astype(int)

    def ys(self, values: Floats) -> np.ndarray:
        return np.rint(HEIGHT - BOTTOM - (values - self.y0) / (self.y1 - self.y0) * (HEIGHT - TOP - BOTTOM)).astype(int)


def chart_svg(chart: Chart) -> str:
    """The chart's SVG element (empty axes when nothing finite was logged)."""
    scale = _Scale(*_extent(chart))
    parts = [
        f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(chart.metric)} by step">',
        _axes(scale),
    ]
    if chart.band is not None:
        parts.append(_band(chart.band, scale))
    for line in chart.lines:
        parts.append(_line(line, scale, chart.goal))
    parts.append("</svg>")
    return "".join(parts)


def _extent(chart: Chart) -> tuple[tuple[float, float], tuple[float, float]]:
    steps: list[Floats] = []
    values: list[Floats] = []
    for line in chart.lines:
        steps += [line.steps, *(t.steps for t in line.tails)]
        values += [line.values, *(t.values for t in line.tails)]
    if chart.band is not None:
        steps.append(chart.band.steps)
        values += [chart.band.low, chart.band.high]
    xs, ys = np.concatenate(steps or [np.zeros(1)]), np.concatenate(values or [np.zeros(1)])
    return (float(xs.min()), float(xs.max())), (float(ys.min()), float(ys.max()))


def ticks(lo: float, hi: float, count: int = 5) -> list[tuple[float, str]]:
    """Round values between lo and hi, about `count` of them (1, 2, 2.5 or 5 times a power of ten apart),
    each with its label: as many decimals as the spacing needs, the same for all."""
    raw = (hi - lo) / count
    if not raw > 0 or not math.isfinite(raw):
        return [(lo, label(lo))]
    mag = 10 ** math.floor(math.log10(raw))
    mantissa = next(m for m in (1, 2, 2.5, 5, 10) if raw <= m * mag)
    step = mantissa * mag
    values = [i * step for i in range(math.ceil(lo / step), math.floor(hi / step) + 1)]
    decimals = max(0, -math.floor(math.log10(step))) + (1 if mantissa == 2.5 and step < 10 else 0)
    largest = max(abs(v) for v in values) if values else 0.0
    if decimals <= 6 and largest < 1e7:
        return [(v, f"{v:.{decimals}f}") for v in values]
    extra = 1 if mantissa == 2.5 else 0
    digits = max(1, min(15, math.floor(math.log10(largest or 1.0)) - math.floor(math.log10(step)) + 1 + extra))
    return [(v, f"{v:.{digits}g}") for v in values]


def label(v: float) -> str:
    """A value in a tooltip: an integer as one, else 4 significant digits."""
    if v == int(v) and abs(v) < 1e7:
        return str(int(v))
    return f"{v:.4g}"


def _axes(scale: _Scale) -> str:
    bottom, right = HEIGHT - BOTTOM, WIDTH - RIGHT
    out = [f'<g class="ax"><path d="M{LEFT} {TOP}V{bottom}H{right}"/>']
    xs = ticks(scale.x0, scale.x1)
    for (_, text), px in zip(xs, scale.xs(np.array([x for x, _ in xs])).tolist(), strict=True):
        out.append(f'<path class="g" d="M{px} {TOP}V{bottom}"/><text x="{px}" y="{bottom + 16}">{text}</text>')
    ys = ticks(scale.y0, scale.y1)
    for (_, text), py in zip(ys, scale.ys(np.array([y for y, _ in ys])).tolist(), strict=True):
        out.append(f'<path class="g" d="M{LEFT} {py}H{right}"/><text class="y" x="{LEFT - 5}" y="{py + 4}">')
        out.append(f"{text}</text>")
    out.append(f'<text x="{LEFT - 5}" y="{bottom + 16}" class="r">step</text></g>')  # under the values' labels
    return "".join(out)


def path_data(xs: np.ndarray, ys: np.ndarray) -> str:
    """`M x y l dx dy ...`: the first point, then relative moves (repeated points left out)."""
    if not len(xs):
        return ""
    dx, dy = np.diff(xs), np.diff(ys)
    moved = (dx != 0) | (dy != 0)
    head = f"M{xs[0]} {ys[0]}"
    if not moved.any():
        return head + "h0"  # one point: a dot with the round line cap
    pairs = np.column_stack((dx[moved], dy[moved])).ravel().tolist()
    return (head + "l" + " ".join(map(str, pairs))).replace(" -", "-")


def _line(line: Line, scale: _Scale, goal: str | None) -> str:
    k = colour_class(line.colour)
    cell = escape(line.cell)
    out = []
    for t in line.tails:
        why = f" ({escape(t.reason)})" if t.reason else " (running)"
        out.append(
            f'<path class="t q{k}" d="{path_data(scale.xs(t.steps), scale.ys(t.values))}"><title>{cell}: what '
            f"attempt {t.attempt} logged after the checkpoint the next attempt resumed from{why}</title></path>"
        )
    d = path_data(scale.xs(line.steps), scale.ys(line.values))
    out.append(f'<path class="c p{k}" data-cell="{cell}" d="{d}"><title>{cell}</title></path>')
    if line.checkpoints:
        steps, values = (np.array(v, float) for v in zip(*line.checkpoints, strict=True))
        dots = "".join(f"M{x} {y}h0" for x, y in zip(scale.xs(steps).tolist(), scale.ys(values).tolist(), strict=True))
        out.append(f'<path class="k p{k}" d="{dots}"><title>{cell}: checkpoints</title></path>')
    if line.best is not None:
        (x,), (y,) = scale.xs(np.array([line.best[0]])), scale.ys(np.array([line.best[1]]))
        word = {"min": "best (lowest)", "max": "best (highest)"}.get(goal or "", "best")  # charts.py: goal or none
        out.append(
            f'<circle class="b p{k}" cx="{x}" cy="{y}" r="4"><title>{cell}: {word} {label(line.best[1])} '
            f"at step {label(line.best[0])}</title></circle>"
        )
    return "".join(out)


def _band(band: Band, scale: _Scale) -> str:
    xs = scale.xs(band.steps)
    outline = path_data(np.concatenate((xs, xs[::-1])), np.concatenate((scale.ys(band.high), scale.ys(band.low)[::-1])))
    return (
        f'<path class="band" d="{outline}Z"><title>10-90 % of the cells</title></path>'
        f'<path class="median" d="{path_data(xs, scale.ys(band.median))}"><title>median of the cells</title></path>'
    )
