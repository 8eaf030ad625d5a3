"""What matters in a grid, exactly: the metric's mean per value of each cfg key, and each key's share.

No model is fitted. For each group of cells (a grouped sweep's groups are separate
grids; a W&B grid is one), the keys whose values differ between the group's cells
(nested keys flattened as `optim.lr`; a key absent from some cells has the value
None there) are its factors. Per factor and value ("level"): the mean, the
population standard deviation (the cells are the whole grid, not a sample of one)
and the count of the cells' values; per factor the spread (the largest level mean
minus the smallest) and its share of the metric's variance, the between-level sum
of squares over the total sum of squares. In a balanced full factorial that share
is exactly the variance the key's main effect explains, the shares add up to at
most 1, and the rest is interactions. Factors are ranked by share (ties: in the
sweep's order).

The value of a cell is its best value of the sweep's metric (what `sweepq best`
ranks), or with `name` the last value it logged of that metric (a metric other
than the sweep's has no declared goal: "min" when its name holds a word of
LOWER_IS_BETTER, such as loss or error, else "max"). A failed or cancelled cell's
value is not a result and is left out, as are cells with no value yet (queued, or
running before they logged it) and non-finite values (nan, inf: stored as text by
the queue); the note says how many. A running cell's value so far counts. An
analysis names its group, or None when the sweep is one group.

A partial grid (some combinations of the factors' values without a value, or
cells that never formed a full product) is still analysed over the values there
are, marked not `full`: each share is then the key's one-way share (eta squared),
which may overlap with another key's, and the note says so. A level whose cells
all lack a value is not listed. Values are told apart by their JSON text, so a
list or a mapping is a level like any other (kept as written), and `1` and `1.0`
are two levels, as they are two cfgs. Levels of numbers are listed by value,
others in the order the cells first name them.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from sys import intern
from typing import Any

from sweepq.queue.records import CellRecord
from sweepq.queue.states import CellState
from sweepq.spec.types import Metric

# A metric other than the sweep's has no declared goal: these words in its name mean lower is better.
LOWER_IS_BETTER = frozenset(
    {"loss", "losses", "err", "error", "errors", "perplexity", "ppl", "mse", "mae", "rmse", "nll", "wer", "cer"}
)
NOT_RESULTS = (CellState.FAILED, CellState.CANCELLED)


@dataclass(frozen=True)
class Level:
    value: Any
    mean: float
    std: float  # population standard deviation of the level's values
    n: int


@dataclass(frozen=True)
class KeyEffect:
    key: str
    levels: tuple[Level, ...]
    spread: float  # largest level mean - smallest
    share: float  # between-level sum of squares / total sum of squares, in [0, 1]


@dataclass(frozen=True)
class GridRow:
    cell: str
    cfg: dict[str, Any]  # varying keys only, flattened
    value: float


@dataclass(frozen=True)
class GridAnalysis:
    group: str | None  # None when the sweep is one group
    metric: str
    goal: str  # "max" or "min"
    cells: int  # cells with a value
    expected: int  # combinations of the varying keys' values
    full: bool  # every combination has a value
    keys: tuple[KeyEffect, ...]  # ranked, largest share first
    rows: tuple[GridRow, ...]
    note: str | None  # what was left out, and what a partial grid's shares mean

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "metric": self.metric,
            "goal": self.goal,
            "cells": self.cells,
            "expected": self.expected,
            "full": self.full,
            "note": self.note,
            "keys": [_effect_json(k, self.goal) for k in self.keys],
            "rows": [{"cell": r.cell, "cfg": r.cfg, "value": r.value} for r in self.rows],
        }


def _effect_json(k: KeyEffect, goal: str) -> dict[str, Any]:
    levels = [{"value": v.value, "mean": v.mean, "std": v.std, "n": v.n} for v in k.levels]
    best = best_level(k, goal).value if k.levels else None
    return {"key": k.key, "share": k.share, "spread": k.spread, "best": best, "levels": levels}


def best_level(k: KeyEffect, goal: str) -> Level:
    """The level with the best mean (the first of equals)."""
    return (min if goal == "min" else max)(k.levels, key=lambda v: v.mean)


def goal_of(name: str, metric: Metric | None) -> str:
    """The sweep's goal for its metric; for another, "min" when its name says loss or error, else "max"."""
    if metric is not None and metric.name == name:
        return metric.goal
    words = set(re.split(r"[^a-z0-9]+", name.lower()))
    return "min" if words & LOWER_IS_BETTER else "max"


def analyse(cells: Sequence[CellRecord], metric: Metric | None, name: str | None = None) -> list[GridAnalysis]:
    """One analysis per group whose cells vary in at least one key and have at least one value."""
    chosen = name or (metric.name if metric is not None else None)
    if chosen is None:
        return []
    groups = _groups(cells)
    found = []
    for members in groups.values():
        label = members[0].group_name if len(groups) > 1 else None
        a = _analyse_group(members, chosen, goal_of(chosen, metric), name is None, label)
        if a is not None:
            found.append(a)
    return found


def nothing_to_analyse(cells: Sequence[CellRecord], metric: Metric | None, name: str | None = None) -> str:
    """Why `analyse` found nothing, in one line."""
    chosen = name or (metric.name if metric is not None else None)
    if chosen is None:
        logged = logged_names(cells)
        also = f" (logged: {', '.join(logged)})" if logged else ""
        return f"nothing to analyse: the sweep names no metric; pass --metric NAME{also}"
    if not any(varying(g) for g in _groups(cells).values()):
        return "nothing to analyse: no cfg key varies between the cells of a group"
    return f"nothing to analyse yet: no cell has a value of {chosen}"


def logged_names(cells: Sequence[CellRecord]) -> list[str]:
    """Every metric any cell logged, in the order first seen."""
    return list(dict.fromkeys(k for c in cells for k in c.metrics))


def flatten(cfg: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"optim": {"lr": 0.1}} -> {"optim.lr": 0.1}; lists and empty mappings are values (as tables show)."""
    flat: dict[str, Any] = {}
    for k, v in cfg.items():
        if isinstance(v, Mapping) and v:
            flat.update(flatten(v, f"{prefix}{k}."))
        else:
            flat[intern(f"{prefix}{k}")] = v  # one string per key, however many cells (status --all: 100,000)
    return flat


def identity(v: Any) -> Hashable:
    """What tells two cfg values apart: their JSON text (lists and mappings included), so that `1`, `1.0`
    and `true` differ. Strings, integers and floats skip the encoder (a 10,000-cell grid asks often)."""
    kind = type(v)
    if kind is str or kind is int:
        return (kind.__name__, v)
    if kind is float:
        return ("float", repr(v))
    return json.dumps(v, sort_keys=True, default=str)


def varying(cells: Sequence[CellRecord]) -> list[str]:
    """The flattened keys whose values differ between `cells`, in the order the cells first name them."""
    flat = [flatten(c.result_cfg) for c in cells]  # the cfg each result came from
    keys = list(dict.fromkeys(k for f in flat for k in f))
    return [k for k in keys if len({identity(f.get(k)) for f in flat}) > 1]


def _groups(cells: Sequence[CellRecord]) -> dict[int, list[CellRecord]]:
    groups: dict[int, list[CellRecord]] = {}
    for c in cells:
        groups.setdefault(c.group, []).append(c)
    return groups


def value_of(c: CellRecord, name: str, best: bool) -> float | None:
    """The cell's value (nan or inf when non-finite), None when it has none or it is not a result."""
    if c.state in NOT_RESULTS:
        return None
    v = c.best if best else c.metrics.get(name)
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str):  # the queue stores non-finite values as text ("nan", "inf")
        try:
            return float(v)
        except ValueError:
            return None
    return None


def _analyse_group(
    members: list[CellRecord], name: str, goal: str, best: bool, label: str | None
) -> GridAnalysis | None:
    keys = varying(members)
    values = [value_of(c, name, best) for c in members]
    kept = [(c, v) for c, v in zip(members, values, strict=True) if v is not None and math.isfinite(v)]
    if not keys or not kept:
        return None
    design = {c.id: flatten(c.result_cfg) for c in members}
    rows = tuple(GridRow(c.id, {k: design[c.id].get(k) for k in keys}, v) for c, v in kept)
    ids = {c.id: tuple(identity(design[c.id].get(k)) for k in keys) for c in members}
    expected = math.prod(len({i[n] for i in ids.values()}) for n in range(len(keys)))
    combos = [ids[r.cell] for r in rows]
    full = len(set(combos)) == expected
    balanced = full and len(set(Counter(combos).values())) == 1
    effects = [_effect(k, rows, [c[n] for c in combos]) for n, k in enumerate(keys)]
    effects.sort(key=lambda e: -e.share)  # stable: ties stay in the sweep's order
    counts = _left_out(members, values)
    note = _note(len(members), len(rows), counts, full, balanced, len(set(combos)), expected)
    return GridAnalysis(label, name, goal, len(rows), expected, full, tuple(effects), rows, note)


def _effect(key: str, rows: Sequence[GridRow], ids: Sequence[Hashable]) -> KeyEffect:
    """`ids`: each row's identity of its value of `key`."""
    by_level: dict[Hashable, tuple[Any, list[float]]] = {}
    for r, i in zip(rows, ids, strict=True):
        by_level.setdefault(i, (r.cfg[key], []))[1].append(r.value)
    grand = math.fsum(r.value for r in rows) / len(rows)
    total = math.fsum((r.value - grand) ** 2 for r in rows)
    levels = [_level(value, ys) for value, ys in by_level.values()]
    if all(isinstance(v.value, int | float) and not isinstance(v.value, bool) for v in levels):
        levels.sort(key=lambda v: v.value)
    between = math.fsum(v.n * (v.mean - grand) ** 2 for v in levels)
    share = min(1.0, between / total) if total > 0 else 0.0
    means = [v.mean for v in levels]
    return KeyEffect(key, tuple(levels), max(means) - min(means), share)


def _level(value: Any, ys: list[float]) -> Level:
    mean = math.fsum(ys) / len(ys)
    return Level(value, mean, math.sqrt(math.fsum((y - mean) ** 2 for y in ys) / len(ys)), len(ys))


def _left_out(members: Sequence[CellRecord], values: Sequence[float | None]) -> dict[str, int]:
    counts = {"with no value yet": 0, "failed or cancelled": 0, "non-finite": 0}
    for c, v in zip(members, values, strict=True):
        if c.state in NOT_RESULTS:
            counts["failed or cancelled"] += 1
        elif v is None:
            counts["with no value yet"] += 1
        elif not math.isfinite(v):
            counts["non-finite"] += 1
    return counts


def _note(
    total: int, kept: int, counts: dict[str, int], full: bool, balanced: bool, covered: int, expected: int
) -> str | None:
    said = []
    left = total - kept
    if left and counts["with no value yet"] == left:
        verb = "has" if left == 1 else "have"
        said.append(f"{left} of {total} cells {verb} no value yet: means over the {kept} that do")
    elif left:
        why = ", ".join(f"{n} {what}" for what, n in counts.items() if n)
        verb = "is" if left == 1 else "are"
        said.append(f"{left} of {total} cells {verb} left out ({why}): means over the {kept} others")
    if not full:
        said.append(
            f"not a full grid ({covered} of {expected} combinations have a value): "
            "each key's share is its own and may overlap another's"
        )
    elif not balanced:
        said.append("some combinations have more cells than others: each key's share may overlap another's")
    return "; ".join(said) or None
