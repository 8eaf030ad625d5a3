"""The grid as parallel coordinates: a self-contained SVG (no script, no link, no font fetched).

One vertical axis per varying cfg key, in rank order (the key that matters most
first), then the metric's axis. A key's values are ticks spaced by their order,
not by their size (a learning rate's 1e-4, 3e-4, 1e-3 are three even steps; a
string has no size), the first at the bottom. The metric's axis is linear in the
value, higher at the top. Each cell is one polyline, coloured by how good its
value is on viridis (perceptually uniform, computed here): the best dark, the
worst pale, drawn worst first so the best lie on top. Coordinates are integers
and lines thin and more transparent the more cells there are, so that 10,000
cells stay a small file and a readable picture.
"""

from __future__ import annotations

import json
import math
from typing import Any
from xml.sax.saxutils import escape

from sweepq.analysis.grid import GridAnalysis, KeyEffect, identity

# matplotlib's viridis at 0, 1/8, ..., 1 (sRGB); between them, linear interpolation.
VIRIDIS = (
    (68, 1, 84),
    (71, 45, 123),
    (59, 82, 139),
    (44, 114, 142),
    (33, 145, 140),
    (40, 174, 128),
    (94, 201, 98),
    (173, 220, 48),
    (253, 231, 37),
)
PALEST = 0.9  # the worst cell's place on the scale: viridis' last yellow is unreadable on white
BINS = 32  # colours used: lines of one colour share one <g>, which keeps 10,000 lines small
TITLES_MAX = 1000  # a tooltip per line (cell and value) up to this many cells
SWATCH = 4  # pixels a colour of the legend's scale takes
TICK_GAP = 13  # the least room between two tick labels, in pixels
TOP, BOTTOM, LEFT, RIGHT = 40, 52, 96, 72
FONT = 'font-family="sans-serif" font-size="11"'
HALO = 'stroke="#fff" stroke-width="3" paint-order="stroke"'  # labels stay legible over many lines


def colour(t: float) -> str:
    """Viridis at `t` in [0, 1], as #rrggbb."""
    t = min(1.0, max(0.0, t)) * (len(VIRIDIS) - 1)
    i = min(int(t), len(VIRIDIS) - 2)
    f = t - i
    a, b = VIRIDIS[i], VIRIDIS[i + 1]
    return "#" + "".join(f"{round(x + (y - x) * f):02x}" for x, y in zip(a, b, strict=True))


def label(v: Any, room: int = 14) -> str:
    """A cfg value or a number in at most `room` characters (never cut inside a number)."""
    if isinstance(v, bool) or v is None:
        text = json.dumps(v)
    elif isinstance(v, float):
        text = min(repr(v), f"{v:.4g}", key=len)
    elif isinstance(v, str):
        text = v
    else:
        text = json.dumps(v, separators=(",", ":"), sort_keys=True, default=str)
    return text if len(text) <= room or isinstance(v, int | float) else text[: room - 1] + "…"


def parallel_svg(a: GridAnalysis, width: int = 900, height: int = 360) -> str:
    """The analysis' cells as parallel coordinates, `width` x `height` pixels."""
    frame = _Frame(a, width, height)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img">',
        f"<title>{escape(_title(a))}</title>",
        '<rect width="100%" height="100%" fill="#fff"/>',
        *frame.lines(),
        *frame.axes(),
        *frame.legend(),
        "</svg>",
    ]
    return "\n".join(parts) + "\n"


def _title(a: GridAnalysis) -> str:
    where = f" ({a.group})" if a.group else ""
    return f"{a.metric}{where} by {', '.join(k.key for k in a.keys)}: {a.cells} cells"


class _Frame:
    """Where everything goes: one x per axis, one y per value."""

    def __init__(self, a: GridAnalysis, width: int, height: int) -> None:
        self.a, self.width, self.height = a, width, height
        values = [r.value for r in a.rows]
        self.lo, self.hi = min(values), max(values)
        n = len(a.keys)
        step = (width - LEFT - RIGHT) / n
        self.xs = [round(LEFT + i * step) for i in range(n + 1)]
        self.step = step
        self.top, self.bottom = TOP, height - BOTTOM

    def y_of_level(self, index: int, count: int) -> int:
        if count == 1:
            return (self.top + self.bottom) // 2
        return round(self.bottom - (self.bottom - self.top) * index / (count - 1))

    def y_of_value(self, v: float) -> int:
        if self.hi == self.lo:
            return (self.top + self.bottom) // 2
        return round(self.bottom - (self.bottom - self.top) * (v - self.lo) / (self.hi - self.lo))

    def goodness(self, v: float) -> float:
        """0 for the worst value, 1 for the best."""
        if self.hi == self.lo:
            return 1.0
        t = (v - self.lo) / (self.hi - self.lo)
        return t if self.a.goal == "max" else 1.0 - t

    def lines(self) -> list[str]:
        n = len(self.a.rows)
        places = [{identity(v.value): i for i, v in enumerate(k.levels)} for k in self.a.keys]
        bins: dict[int, list[tuple[float, str]]] = {}
        for r in self.a.rows:
            points = [
                f"{x},{self.y_of_level(place[identity(r.cfg[k.key])], len(k.levels))}"
                for x, k, place in zip(self.xs[:-1], self.a.keys, places, strict=True)
            ]
            points.append(f"{self.xs[-1]},{self.y_of_value(r.value)}")
            g = self.goodness(r.value)
            tip = f"<title>{escape(r.cell)}: {label(r.value)}</title>" if n <= TITLES_MAX else ""
            line = f'<polyline points="{" ".join(points)}"' + (f">{tip}</polyline>" if tip else "/>")
            bins.setdefault(min(BINS - 1, int(g * BINS)), []).append((g, line))
        opacity = min(0.85, max(0.06, 12 / math.sqrt(n)))
        stroke = 1.5 if n <= 200 else 1
        out = [f'<g fill="none" stroke-width="{stroke}" stroke-opacity="{opacity:.2f}" stroke-linejoin="round">']
        for b in sorted(bins):  # worst first: the best are drawn last, on top
            out.append(f'<g stroke="{colour(PALEST * (1 - (b + 0.5) / BINS))}">')
            out.extend(line for _, line in sorted(bins[b], key=lambda x: x[0]))
            out.append("</g>")
        out.append("</g>")
        return out

    def axes(self) -> list[str]:
        out = [f'<g {FONT} fill="#222">']
        room = max(4, int(self.step / 6.5))  # characters an axis' name may take
        for x, k in zip(self.xs[:-1], self.a.keys, strict=True):
            out.extend(self._axis(x, label(k.key, room), f"{100 * k.share:.0f}% of variance"))
            out.extend(self._level_ticks(x, k))
        better = "higher" if self.a.goal == "max" else "lower"
        out.extend(self._axis(self.xs[-1], label(self.a.metric, room), f"{better} is better"))
        out.extend(self._value_ticks(self.xs[-1]))
        out.append("</g>")
        return out

    def _axis(self, x: int, name: str, under: str) -> list[str]:
        return [
            f'<line x1="{x}" y1="{self.top}" x2="{x}" y2="{self.bottom}" stroke="#444"/>',
            f'<text x="{x}" y="{self.top - 22}" text-anchor="middle" font-weight="bold">{escape(name)}</text>',
            f'<text x="{x}" y="{self.top - 9}" text-anchor="middle" fill="#666">{escape(under)}</text>',
        ]

    def _level_ticks(self, x: int, k: KeyEffect) -> list[str]:
        count = len(k.levels)
        room = (self.bottom - self.top) / max(1, count - 1)
        every = max(1, math.ceil(TICK_GAP / room))  # thin out crowded labels, keep the first and last
        shown = [i for i in range(count) if i % every == 0 or i == count - 1]
        if len(shown) > 1 and shown[-1] - shown[-2] < every:
            shown.pop(-2)
        return [self._tick(x, self.y_of_level(i, count), label(k.levels[i].value)) for i in shown]

    def _value_ticks(self, x: int) -> list[str]:
        if self.hi == self.lo:
            return [self._tick(x, self.y_of_value(self.lo), label(self.lo), right=True)]
        ticks = [self.lo + (self.hi - self.lo) * i / 4 for i in range(5)]
        return [self._tick(x, self.y_of_value(v), label(v), right=True) for v in ticks]

    def _tick(self, x: int, y: int, text: str, right: bool = False) -> str:
        """A tick and its label: left of a key's axis, right of the metric's (no line crosses there)."""
        at = f'x="{x + 6}"' if right else f'x="{x - 6}" text-anchor="end"'
        return (
            f'<line x1="{x - 3}" y1="{y}" x2="{x + 3}" y2="{y}" stroke="#444"/>'
            f'<text {at} y="{y + 4}" {HALO}>{escape(text)}</text>'
        )

    def legend(self) -> list[str]:
        """colour: NAME  WORST worst [the scale] best BEST, laid out by an estimate of the text's width."""
        y = self.height - 22
        worst, best = (self.lo, self.hi) if self.a.goal == "max" else (self.hi, self.lo)
        name = f"colour: {label(self.a.metric, 20)}"
        low = f"{label(worst)} worst"
        bar_x = LEFT + _text_width(name) + 16 + _text_width(low)
        out = [
            f'<g {FONT} fill="#222">',
            f'<text x="{LEFT}" y="{y + 10}">{escape(name)}</text>',
            f'<text x="{bar_x - 6}" y="{y + 10}" text-anchor="end">{escape(low)}</text>',
        ]
        for i in range(BINS):
            fill = colour(PALEST * (1 - (i + 0.5) / BINS))
            out.append(f'<rect x="{bar_x + i * SWATCH}" y="{y}" width="{SWATCH}" height="12" fill="{fill}"/>')
        out.append(f'<text x="{bar_x + BINS * SWATCH + 6}" y="{y + 10}">best {escape(label(best))}</text>')
        out.append("</g>")
        return out


def _text_width(text: str) -> int:
    """About how wide `text` is in an 11-pixel sans-serif font (no font is measured: none is loaded)."""
    return math.ceil(len(text) * 6.5)
