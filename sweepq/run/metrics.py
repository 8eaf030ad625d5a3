"""What Run makes of logged values: plain scalars, the non-finite loss check, the best so far."""

from __future__ import annotations

import math
import sys
from typing import Any

from sweepq.run.errors import NonFiniteLoss
from sweepq.spec.sweep import Metric


def scalar(v: Any) -> Any:
    """A tensor or numpy value as a plain Python number (or list), for JSON."""
    if type(v) is float or type(v) is int:  # most logged values, every step: nothing to convert
        return v
    torch = sys.modules.get("torch")  # a tensor exists only once torch is loaded; a supervisor never loads it
    if torch is not None and isinstance(v, torch.Tensor):
        v = v.detach()
        return v.item() if v.numel() == 1 else v.tolist()
    if hasattr(v, "item") and callable(v.item):
        try:
            return v.item()
        except (TypeError, ValueError):
            return v
    return v


def plain(values: dict[str, Any]) -> dict[str, Any]:
    """Every value as `scalar` makes it, under a string key."""
    return {str(k): scalar(v) for k, v in values.items()}


def check_finite(step: int, values: dict[str, Any]) -> None:
    """Raise NonFiniteLoss for the first loss (any name containing "loss") that is NaN or infinite."""
    for name, value in values.items():
        if "loss" not in name.lower():
            continue
        v = scalar(value)
        if isinstance(v, float) and not math.isfinite(v):
            raise NonFiniteLoss(step, name, v)


def improved(metric: Metric | None, best: float | None, values: dict[str, Any]) -> float | None:
    """The metric's new best among `values`, or None when it is absent, not finite or no better."""
    if metric is None or metric.name not in values:
        return None
    v = scalar(values[metric.name])
    if not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    better = best is None or (v > best if metric.goal == "max" else v < best)
    return float(v) if better else None
