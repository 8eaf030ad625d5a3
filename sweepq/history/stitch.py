"""A cell's one honest curve per metric, from its attempts' logs and where each attempt started.

The rule, attempt after attempt (in the order they ran):
1. An attempt that logged nothing changes nothing.
2. An attempt that resumed from the checkpoint at step k supersedes every point
   already on a curve at a step after k; one that started from scratch supersedes
   them all. What it supersedes becomes the *lost tail* of the attempt that logged
   it, marked with that attempt's termination reason: training went on from the
   checkpoint, not from those points.
3. Its own points then go on the curves. At a step the curve still holds (at or
   before k: a resumed attempt logging again the step it resumed from), the earlier
   point stays, the one logged again is `repeated`; within one attempt, a step
   logged twice keeps its last value.

So every curve has each step once, and every logged value is kept, lost or
repeated, exactly one of them. Pure: no file, no database (read.py feeds it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from sweepq.history.records import AttemptInfo, CellHistory, CheckpointMark, Logged, LostTail, Point, Series


def stitch(
    cell: str,
    attempts: Sequence[AttemptInfo],
    logs: Mapping[int, Sequence[Logged]],
    checkpoints: Iterable[CheckpointMark] = (),
    damaged: Mapping[int, int] | None = None,
    out_of_range: Mapping[int, int] | None = None,
) -> CellHistory:
    """`logs`: attempt number -> its points as logged (an attempt without an entry logged nothing)."""
    ordered = sorted(attempts, key=lambda a: a.number)
    curves: dict[str, dict[int, Point]] = {}
    lost: dict[tuple[int, str], list[Point]] = {}
    repeated: list[tuple[str, Point]] = []
    for attempt in ordered:
        points = logs.get(attempt.number) or ()
        if not points:
            continue
        _supersede(curves, lost, attempt.start_step if attempt.resumed else None)
        for logged in points:
            for metric, value in logged.values.items():
                point = Point(logged.step, logged.time, value, attempt.number, logged.line)
                curve = curves.setdefault(metric, {})
                there = curve.get(logged.step)
                if there is None:
                    curve[logged.step] = point
                elif there.attempt == attempt.number:  # the same attempt again: its last value
                    repeated.append((metric, there))
                    curve[logged.step] = point
                else:
                    repeated.append((metric, point))
    reasons = {a.number: a.reason for a in ordered}
    return CellHistory(
        cell=cell,
        attempts=tuple(ordered),
        series={m: Series(cell, m, tuple(sorted(c.values(), key=_step))) for m, c in curves.items()},
        lost=tuple(
            LostTail(cell, number, reasons.get(number), metric, tuple(sorted(pts, key=_step)))
            for (number, metric), pts in sorted(lost.items(), key=lambda kv: kv[0][0])
        ),
        repeated=tuple(repeated),
        checkpoints=tuple(sorted(checkpoints, key=lambda c: c.step)),
        damaged={k: v for k, v in (damaged or {}).items() if v},
        out_of_range={k: v for k, v in (out_of_range or {}).items() if v},
    )


def _supersede(
    curves: dict[str, dict[int, Point]], lost: dict[tuple[int, str], list[Point]], after: int | None
) -> None:
    """Move every point after step `after` (every point, for None) off the curves into its attempt's lost tail."""
    for metric, curve in curves.items():
        for step in [s for s in curve if after is None or s > after]:
            point = curve.pop(step)
            lost.setdefault((point.attempt, metric), []).append(point)


def _step(p: Point) -> int:
    return p.step
