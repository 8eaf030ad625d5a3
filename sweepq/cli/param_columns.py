"""The cfg as a terminal table's columns, and the line of keys the same in every cell.

Tables show only the keys whose values differ between the cells shown
(`sweepq.results.params.split_keys`); `--all-params` shows every key (those that
vary are kept first). Values keep their full form when there is room, and a short
one when there is not: floats to 4 significant digits, a string's last path
component cut with "…", lists cut between elements, never inside a number.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult

from sweepq.analysis.grid import flatten
from sweepq.cli.fit import Column, Justify, one_line, short_header, shorten
from sweepq.results.params import full, headers, split_keys

SHORT_VALUE = 14  # the most cells a value's short form takes (a number's may take more: never cut)
SAME_VALUE = 24  # a value in the line of keys that are the same in every cell


def short(v: Any, by_name: bool = True) -> str:
    """A cfg value in about SHORT_VALUE cells, never cut inside a number. A string keeps what follows
    its last "/" (a model's or a file's name) and its start (`by_name`), else its two ends."""
    if isinstance(v, str):
        if not by_name:
            return shorten(v, SHORT_VALUE)
        name = v.rstrip("/").rsplit("/", 1)[-1] or v
        return name if cell_len(name) <= SHORT_VALUE else name[: SHORT_VALUE - 1] + "…"
    if isinstance(v, float) and v == v and abs(v) != float("inf"):
        return min(repr(v), f"{v:.4g}", key=len)
    if isinstance(v, list | tuple):
        return _short_list([full(x) for x in v])
    return full(v)


def _short_list(parts: list[str]) -> str:
    kept = "["
    for i, p in enumerate(parts):
        more = kept + ("," if i else "") + p
        closing = 1 if i == len(parts) - 1 else 3  # "]", or ",…]" when more elements follow
        if i and cell_len(more) + closing > SHORT_VALUE:
            return kept + ",…]"
        kept = more
    return kept + "]"


def columns(cfgs: Sequence[Mapping[str, Any]], every: bool, rank: int, same_rank: int) -> list[Column]:
    """A column per key that varies (at `rank`), and with `every` per key the same in every cell too (at
    `same_rank`), in the sweep's order; each in its full and its short form."""
    varying = split_keys(cfgs)[0]
    shown = [k for k in dict.fromkeys(k for c in cfgs for k in flatten(c)) if every or k in varying]
    flat = [flatten(c) for c in cfgs]
    named = headers(shown)
    made = []
    for k in shown:
        values, shorts = _spelt(full, flat, k), _spelt(short, flat, k)
        if len(set(shorts)) < len(set(values)):  # names alike after their last "/": keep both ends instead
            shorts = _spelt(lambda v: short(v, by_name=False), flat, k)
        justify: Justify = "right" if all(_numeric(f[k]) for f in flat if k in f) else "left"
        at = rank if k in varying else same_rank
        head = short_header(named[k], shorts)
        made.append(Column(k, values, at, justify, head, shorts, family="cfg", called=named[k]))
    return made


def _spelt(spell: Callable[[Any], str], flat: Sequence[Mapping[str, Any]], key: str) -> list[str]:
    """`spell` of each cell's value of `key` ("" where it has none), one string per distinct value: a column
    of 100,000 cells holds a few values, and a string spelt for each cell took `status --all` 30 MB."""
    memo: dict[tuple[type, Any], str] = {}
    out = []
    for f in flat:
        if key not in f:
            out.append("")
            continue
        v = f[key]
        kind = type(v)
        if kind not in _SCALARS or (kind is float and v == 0.0):  # 0.0 and -0.0 are equal but spelt apart
            out.append(spell(v))
        elif (text := memo.get((kind, v))) is not None:
            out.append(text)
        else:
            out.append(memo.setdefault((kind, v), spell(v)))
    return out


_SCALARS = {str, int, float, bool, type(None)}  # hashable, and equal values of one type spelt alike


def _numeric(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


@dataclass(frozen=True)
class Constants:
    """One line under a table: the keys left out because every cell has the same value, with that value."""

    cfgs: Sequence[Mapping[str, Any]]
    every: bool  # --all-params: they are columns already

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.every or not self.cfgs:
            return
        same = split_keys(self.cfgs)[1]
        values = flatten(self.cfgs[0])
        items = [f"{k}={shorten(full(values[k]), SAME_VALUE)}" for k in same]
        if items:
            tail = " (--all-params shows them)"
            yield one_line("same in every cell: ", items, tail, options.max_width)
