"""A cell's history stitched while its files are read: memory bounded whatever the history's length.

stitch.py's rule, applied to one value at a time. A first read of the attempts'
files (`CellStream(...)`, the scan) keeps a few numbers a metric: its lowest and
highest step, whether each attempt logged it in increasing steps, and the steps
a resumed attempt logged at or before the step it resumed from. Then, when every
attempt logged each metric in increasing steps (what a training loop does):

- a value of attempt a at step s is lost when a later attempt that logged
  anything started from scratch or resumed from a step below s, else kept;
- except at the steps a resumed attempt logged again (at or before the step it
  resumed from), where the curve may already hold an earlier attempt's value:
  those few values are settled by stitch.py's own sequence, in a second read that
  keeps only them.

So `values()` yields every logged value with its status in the order of
`CellHistory.every_value()` (by attempt, line, metric), reading each file line by
line, and `reduced(limit)` gives a CellHistory whose curves and lost tails keep at
most about `limit` points each (each bucket of steps its min and max, as
`plot.downsample` keeps, and the curve's first and last points and its points at
the cell's checkpoints), for pictures. An attempt that logged a metric's steps out
of order (a step again, or a smaller one), or more than CANDIDATES_MAX values
logged again, falls back to stitch.py over the cell's whole history in memory:
exact, not bounded.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path

from sweepq.history.format import AttemptFile
from sweepq.history.records import (
    AttemptInfo,
    CellHistory,
    CheckpointMark,
    Logged,
    LostTail,
    Point,
    Series,
    Status,
)
from sweepq.history.stitch import stitch
from sweepq.layout import CellPaths

CANDIDATES_MAX = 1_000_000  # values logged again at or before a resume's step, settled in memory
Value = tuple[str, Point, Status, str | None]  # (metric, point, status, the reason of a lost one)
_Key = tuple[int, int, str]  # (attempt, line, metric)


class CellStream:
    """One cell's history, read on demand: `values()`, `reduced()`, or `history()` (whole, in memory)."""

    def __init__(
        self, root: Path, cell: str, attempts: Sequence[AttemptInfo], checkpoints: Sequence[CheckpointMark] = ()
    ) -> None:
        self.root, self.cell = root, cell
        self.attempts = tuple(sorted(attempts, key=lambda a: a.number))
        self.checkpoints = tuple(sorted(checkpoints, key=lambda c: c.step))
        self.reasons = {a.number: a.reason for a in self.attempts}
        self.ranges: dict[str, list[int]] = {}  # metric -> [lowest, highest] step logged, in first-logged order
        self.damaged: dict[int, int] = {}  # attempt -> unreadable lines skipped
        self.out_of_range: dict[int, int] = {}  # attempt -> lines with numbers out of range (format.py)
        self.in_order = True  # every attempt logged each metric in increasing steps
        self._logging: set[int] = set()  # attempts that logged anything
        self._seen: dict[int, int] = {}  # attempt -> the last line the scan read: later reads stop there
        self._again: dict[str, set[int]] = {}  # metric -> steps a resumed attempt logged at or before its resume
        self._scan()
        self._bound = self._bounds()
        self._settled: dict[_Key, Status] = {}
        self.whole = not self.in_order or sum(len(s) for s in self._again.values()) > CANDIDATES_MAX
        if not self.whole and self._again:
            self._settled = self._settle()

    @property
    def metrics(self) -> list[str]:
        """Every metric logged, in first-logged order (a CellHistory's series)."""
        return list(self.ranges)

    def _file(self, attempt: int) -> AttemptFile:
        return AttemptFile(CellPaths(self.root, self.cell).metrics(attempt), attempt)

    def _points(self, attempt: int) -> Iterator[Logged]:
        """The attempt's points as the scan saw them: a running attempt's lines written since are left to the
        next reader (what the scan did not see, its rule did not weigh)."""
        last = self._seen.get(attempt, 0)
        for logged in self._file(attempt).points():
            if logged.line > last:
                return
            yield logged

    def _scan(self) -> None:
        for a in self.attempts:
            f = self._file(a.number)
            last: dict[str, int] = {}
            resumed_at = a.start_step if a.resumed else None
            for logged in f.points():
                self._logging.add(a.number)
                self._seen[a.number] = logged.line
                step = logged.step
                for metric in logged.values:
                    span = self.ranges.get(metric)
                    if span is None:
                        self.ranges[metric] = [step, step]
                    elif step < span[0]:
                        span[0] = step
                    elif step > span[1]:
                        span[1] = step
                    before = last.get(metric)
                    if before is not None and step <= before:
                        self.in_order = False
                    last[metric] = step
                    if resumed_at is not None and step <= resumed_at:
                        self._again.setdefault(metric, set()).add(step)
            if f.damaged:
                self.damaged[a.number] = f.damaged
            if f.out_of_range:
                self.out_of_range[a.number] = f.out_of_range

    def _bounds(self) -> dict[int, float]:
        """Per attempt, the step above which its values are lost: the lowest start of a later logging attempt."""
        bound, running = {}, math.inf
        for a in reversed(self.attempts):
            bound[a.number] = running
            if a.number in self._logging:
                running = min(running, a.start_step if a.resumed else -math.inf)
        return bound

    def _settle(self) -> dict[_Key, Status]:
        """stitch.py's sequence over the values at the steps logged again only: each one's status."""
        curve: dict[tuple[str, int], _Key] = {}
        settled: dict[_Key, Status] = {}
        for a in self.attempts:
            if a.number not in self._logging:
                continue
            for where, holder in list(curve.items()):  # supersede: what lies after the resume leaves the curve
                if not a.resumed or where[1] > a.start_step:
                    settled[holder] = Status.LOST
                    del curve[where]
            for logged in self._points(a.number):
                for metric in logged.values:
                    if logged.step not in self._again.get(metric, ()):
                        continue
                    key, where = (a.number, logged.line, metric), (metric, logged.step)
                    there = curve.get(where)
                    if there is None:
                        curve[where] = key
                    elif there[0] == a.number:  # the same attempt again: its last value (not in order: whole)
                        settled[there] = Status.REPEATED
                        curve[where] = key
                    else:
                        settled[key] = Status.REPEATED
        settled.update(dict.fromkeys(curve.values(), Status.KEPT))
        return settled

    def values(self) -> Iterator[Value]:
        """Every logged value once with its status, by attempt, line, metric (CellHistory.every_value's order)."""
        if self.whole:
            yield from self.history().every_value()
            return
        for a in self.attempts:
            if a.number not in self._logging:
                continue
            bound, reason, settled = self._bound[a.number], self.reasons[a.number], self._settled
            for logged in self._points(a.number):
                step, line = logged.step, logged.line
                for metric in sorted(logged.values):
                    point = Point(step, logged.time, logged.values[metric], a.number, line)
                    status = settled.get((a.number, line, metric)) if settled else None
                    if status is None:
                        status = Status.LOST if step > bound else Status.KEPT
                    yield metric, point, status, reason if status is Status.LOST else None

    def history(self) -> CellHistory:
        """The whole stitched history in memory (stitch.py): for small cells and the out-of-order fallback."""
        logs = {a.number: tuple(self._points(a.number)) for a in self.attempts}
        return stitch(
            self.cell,
            self.attempts,
            logs,
            self.checkpoints,
            damaged=self.damaged,
            out_of_range=self.out_of_range,
        )

    def reduced(self, limit: int, metrics: Collection[str] | None = None) -> CellHistory:
        """The history with each curve and lost tail cut to about `limit` points (the module says which);
        only `metrics` (default: every one). No repeated values: a picture does not draw them."""
        marks = frozenset(c.step for c in self.checkpoints)
        wanted = [m for m in self.ranges if metrics is None or m in metrics]
        curves = {m: _Reducer(self.ranges[m], limit, marks) for m in wanted}
        tails: dict[tuple[int, str], _Reducer] = {}
        for metric, point, status, _ in self.values():
            curve = curves.get(metric)
            if curve is None:
                continue
            if status is Status.KEPT:
                curve.add(point)
            elif status is Status.LOST:
                tail = tails.get((point.attempt, metric))
                if tail is None:
                    tail = tails[point.attempt, metric] = _Reducer(self.ranges[metric], limit, frozenset())
                tail.add(point)
        return CellHistory(
            cell=self.cell,
            attempts=self.attempts,
            series={m: Series(self.cell, m, r.points()) for m, r in curves.items()},
            lost=tuple(
                LostTail(self.cell, a, self.reasons.get(a), m, r.points())
                for (a, m), r in sorted(tails.items(), key=lambda kv: kv[0][0])
            ),
            checkpoints=self.checkpoints,
            damaged=dict(self.damaged),
            out_of_range=dict(self.out_of_range),
        )


class _Reducer:
    """A curve's points as they come (any order), at most about `limit` of them kept.

    Up to `limit` points, all; beyond, the steps of `span` (lowest, highest) cut into limit // 2
    buckets of equal width, each keeping its lowest and highest value (nan counts as the
    lowest, as plot.downsample orders it), and always the first and last point and the
    points at `marks` (the cell's checkpoints, so a dot sits on the curve exactly).
    """

    def __init__(self, span: Sequence[int], limit: int, marks: frozenset[int]) -> None:
        lo, hi = span
        self.lo, self.width, self.limit = lo, hi - lo + 1, max(2, limit)
        self.buckets = max(1, self.limit // 2)
        self.every: list[Point] | None = []
        self.low: dict[int, Point] = {}
        self.high: dict[int, Point] = {}
        self.marks = marks
        self.at_marks: dict[int, Point] = {}
        self.first: Point | None = None
        self.last: Point | None = None

    def add(self, p: Point) -> None:
        if self.first is None or p.step < self.first.step:
            self.first = p
        if self.last is None or p.step >= self.last.step:
            self.last = p
        if p.step in self.marks:
            self.at_marks[p.step] = p
        if self.every is not None:
            self.every.append(p)
            if len(self.every) <= self.limit:
                return
            every, self.every = self.every, None
            for q in every:
                self._bucket(q)
            return
        self._bucket(p)

    def _bucket(self, p: Point) -> None:
        b = (p.step - self.lo) * self.buckets // self.width
        v = _order(p.value)
        low = self.low.get(b)
        if low is None or v < _order(low.value):
            self.low[b] = p
        high = self.high.get(b)
        if high is None or v > _order(high.value):
            self.high[b] = p

    def points(self) -> tuple[Point, ...]:
        if self.every is not None:
            return tuple(sorted(self.every, key=_step))
        kept = {p.step: p for p in (*self.low.values(), *self.high.values(), *self.at_marks.values())}
        for p in (self.first, self.last):
            if p is not None:
                kept[p.step] = p
        return tuple(sorted(kept.values(), key=_step))


def _order(v: float) -> float:
    return -math.inf if math.isnan(v) else v


def _step(p: Point) -> int:
    return p.step
