"""How a result's values are written, alike in a terminal's tables and on the HTML page.

A number in 4 significant digits, a step against its total, a cell's metric (the
sweep's, else the first it logged), a path as the user would type it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sweepq.queue.records import CellRecord
from sweepq.spec.types import Metric


def shown_path(p: Any) -> str:
    """A path as a user typed it: relative to the current folder when inside it."""
    path = Path(p)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve())) or "."
    except ValueError:
        return str(path)


def fmt_num(v: Any) -> str:
    """A metric's or a number's value in 4 significant digits (tiny ones in exponent form)."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            return str(v)
        return f"{v:.4g}" if abs(v) >= 1e-3 or v == 0 else f"{v:.2e}"
    return str(v)


def fmt_step(c: CellRecord) -> str:
    """A cell's step, against its total steps when the program told them."""
    if c.step is None:
        return ""
    return f"{c.step}/{c.total_steps}" if c.total_steps else str(c.step)


def metric_of(c: CellRecord, metric: Metric | None) -> tuple[str, Any]:
    """(name, latest value) of the sweep's metric, else of the first logged scalar."""
    if metric is not None:
        return metric.name, c.metrics.get(metric.name)
    for k, v in c.metrics.items():
        if k != "epoch":
            return k, v
    return "", None
