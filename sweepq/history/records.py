"""The metric history as typed records: what one attempt logged, and a cell's stitched curves.

A `Logged` is one line of an attempt's metrics.jsonl (one `run.log` call). A
`Point` is one value of one metric, with where it came from (attempt, line).
A cell's `CellHistory` holds one `Series` per metric (the curve: attempts in
order, no step twice), the `LostTail`s (what an attempt logged after the step
a later attempt resumed from, marked with how that attempt ended), the points
a resumed attempt logged again (`repeated`), and the cell's checkpoints.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sweepq.queue.records import AttemptRecord


@dataclass(frozen=True)
class Logged:
    """One `run.log(step, **values)` call: its step, wall time (seconds since the epoch) and numbers."""

    step: int
    time: float
    values: dict[str, float]
    line: int  # its line in the attempt's metrics.jsonl, from 1 (line 1 is the header)


@dataclass(frozen=True)
class AttemptLog:
    """What one attempt's metrics.jsonl holds: its points in the order logged.

    `torn`: the file ended in an incomplete line (the writer was killed mid-write; the
    line is ignored). `damaged`: lines before the end that could not be read (skipped).
    """

    attempt: int
    points: tuple[Logged, ...]
    torn: bool = False
    damaged: int = 0
    out_of_range: int = 0  # lines holding numbers no history holds (format.py): skipped, or their values dropped


class Status(StrEnum):
    """What became of a logged value in the stitched history."""

    KEPT = "kept"  # on the cell's curve
    LOST = "lost"  # logged after the step a later attempt resumed from: that attempt's lost tail
    REPEATED = "repeated"  # another value of this metric at this step is on the curve


@dataclass(frozen=True)
class Point:
    step: int
    time: float
    value: float
    attempt: int
    line: int  # where it came from: its attempt's metrics.jsonl, this line


@dataclass(frozen=True)
class Series:
    """One metric's curve of one cell: steps strictly increasing, each point from one attempt."""

    cell: str
    metric: str
    points: tuple[Point, ...]

    @property
    def steps(self) -> list[int]:
        return [p.step for p in self.points]

    @property
    def values(self) -> list[float]:
        return [p.value for p in self.points]

    def segments(self) -> list[tuple[int, tuple[Point, ...]]]:
        """The curve cut where the attempt changes: (attempt, its consecutive points), in step order."""
        out: list[tuple[int, tuple[Point, ...]]] = []
        start = 0
        for i in range(1, len(self.points) + 1):
            if i == len(self.points) or self.points[i].attempt != self.points[start].attempt:
                out.append((self.points[start].attempt, self.points[start:i]))
                start = i
        return out


@dataclass(frozen=True)
class LostTail:
    """What `attempt` logged of `metric` after the step a later attempt resumed from (steps increasing)."""

    cell: str
    attempt: int
    reason: str | None  # how that attempt ended (None while it runs)
    metric: str
    points: tuple[Point, ...]


@dataclass(frozen=True)
class AttemptInfo:
    """What stitching needs of an attempt's receipt (queue/records.AttemptRecord)."""

    number: int
    reason: str | None
    start_step: int
    resumed: bool  # restored a checkpoint (at start_step); False: started from scratch

    @classmethod
    def of(cls, record: AttemptRecord) -> AttemptInfo:
        """From an AttemptRecord (Store.attempts)."""
        return cls(record.number, record.reason, record.start_step, record.start_checkpoint_sha is not None)


@dataclass(frozen=True)
class CheckpointMark:
    """A checkpoint of the cell, to mark on a curve (`state`: committed, superseded or corrupt)."""

    step: int
    attempt: int | None
    state: str


@dataclass(frozen=True)
class CellHistory:
    cell: str
    attempts: tuple[AttemptInfo, ...]
    series: dict[str, Series]  # metric -> curve, in the order metrics were first logged
    lost: tuple[LostTail, ...] = ()  # by attempt, then metric
    repeated: tuple[tuple[str, Point], ...] = ()  # (metric, point) off the curve: another is there
    checkpoints: tuple[CheckpointMark, ...] = ()
    damaged: dict[int, int] = field(default_factory=dict)  # attempt -> unreadable lines skipped
    out_of_range: dict[int, int] = field(default_factory=dict)  # attempt -> lines with numbers out of range

    @property
    def metrics(self) -> list[str]:
        return list(self.series)

    def lost_of(self, metric: str) -> list[LostTail]:
        return [t for t in self.lost if t.metric == metric]

    def every_value(self) -> Iterator[tuple[str, Point, Status, str | None]]:
        """Every logged value once: (metric, point, status, the reason of a lost one), by attempt, line, metric."""
        rows: list[tuple[str, Point, Status, str | None]] = [
            (s.metric, p, Status.KEPT, None) for s in self.series.values() for p in s.points
        ]
        rows += [(t.metric, p, Status.LOST, t.reason) for t in self.lost for p in t.points]
        rows += [(m, p, Status.REPEATED, None) for m, p in self.repeated]
        rows.sort(key=lambda r: (r[1].attempt, r[1].line, r[0]))
        return iter(rows)
