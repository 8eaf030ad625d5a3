"""Which committed checkpoints a cell keeps, and which one a resume may load after a `nan`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def to_keep(
    manifests: dict[int, dict[str, Any]],
    keep_last: int,
    metric: tuple[str, str] | None,
    protect: set[int],
) -> set[int]:
    """Steps that retention keeps: the newest `keep_last`, the best by metric, `protect`."""
    steps = sorted(manifests, reverse=True)
    keep = set(steps[: max(1, keep_last)]) | (protect & set(steps))
    if metric is not None:
        name, goal = metric
        scored = [
            (float(m["metrics"][name]), s)
            for s, m in manifests.items()
            if isinstance(m.get("metrics"), dict) and _finite(m["metrics"].get(name))
        ]
        if scored:
            best = max(scored) if goal == "max" else min(scored, key=lambda x: (x[0], -x[1]))
            keep.add(best[1])
    return keep


def rollback_limit(steps: Iterable[int], nan_step: int | None) -> int | None:
    """After a `nan` at nan_step: the newest step a resume may load, -1 for a fresh start.

    The newest checkpoint before the bad step is where the bad interval started,
    so the resume rolls back one further. None when there is no rollback.
    """
    if nan_step is None:
        return None
    before = sorted((s for s in steps if s < nan_step), reverse=True)
    return before[1] if len(before) > 1 else -1


def _finite(v: Any) -> bool:
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer too large for a float
        return False
    return f == f and f not in (float("inf"), float("-inf"))
