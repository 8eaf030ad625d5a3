"""A curve cut to a few points for a picture: each bucket of steps keeps its min and max, so a spike survives.

The rule of `sweepq plot` (history/plot.py's `downsample`), in numpy: a report reads
thousands of curves of thousands of points, and a loop in Python over each would
cost minutes at 10,000 cells. Values that are not finite are left out first: a
picture has no place for them (the status table says nan).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from sweepq.history.records import Point

Floats = NDArray[np.float64]


def finite(points: Sequence[Point]) -> tuple[Floats, Floats]:
    """(steps, values) of the points whose value is finite, as float arrays in step order."""
    steps = np.fromiter((p.step for p in points), np.float64, len(points))
    values = np.fromiter((p.value for p in points), np.float64, len(points))
    keep = np.isfinite(values)
    return steps[keep], values[keep]


def reduce(steps: Floats, values: Floats, limit: int) -> tuple[Floats, Floats]:
    """At most `limit` points: the points cut into limit // 2 buckets in step order, each keeping its min and max."""
    n = len(steps)
    if n <= limit:
        return steps, values
    buckets = max(1, limit // 2)
    # point i is in bucket b when b*n//buckets <= i < (b+1)*n//buckets, exactly as `sweepq plot` cuts them
    bucket = ((np.arange(n) + 1) * buckets + n - 1) // n - 1
    order = np.lexsort((values, bucket))  # by bucket, then by value: a bucket's min first, its max last
    ends = np.flatnonzero(np.diff(bucket[order])) + 1
    first = order[np.concatenate(([0], ends))]
    last = order[np.concatenate((ends - 1, [n - 1]))]
    keep = np.unique(np.concatenate((first, last)))  # sorted: back in step order
    return steps[keep], values[keep]
