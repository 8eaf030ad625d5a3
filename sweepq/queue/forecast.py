"""The sweep's ETA: when its last cell ends, from measured speeds and a simulation of the workers.

Pure: no database and no clock (the caller gives `now`); queue/forecast_reads.py reads its input.

The model:
- **An attempt's speed** is seconds per step, from the points where the queue saw it: its start
  (`started_at`, `start_step`), its first checkpoint, and its last point (its end as its receipt
  measured it; else its newest checkpoint or, while it runs, the cell's latest progress). With two
  points past its start, the speed is their slope: the time before the first step (start-up:
  imports, data, the restore) is left out. The attempt's **start-up** is then measured as the
  time from its start to its first point, less the steps before that point at that speed (so
  the time at which its first step was taken, less its start).
- An attempt seen at one point only (no checkpoint yet) mixes start-up and steps: its span counts
  with the sweep's typical start-up (the median of those measured) taken off. A running attempt's
  span counts once its steps cover `MIN_SPAN_S` (its progress arrives once a second) and, when it
  was seen once, once the start-up is known and its steps took at least as long (see Span.stepping).
- **A cell's speed** pools its attempts (their steps over their seconds); a cell with none takes
  its group's (every measured attempt of the group pooled), else the sweep's. **A cell's length**
  is its total steps as the training said it; else the mean of its group's, else of the sweep's.
- **What is left**: a running cell ends its remaining steps at its speed from its latest point (or,
  before its first step, after its start-up); an interrupted or queued cell runs, after one
  start-up, from its newest committed checkpoint (what it will resume from) to its length. A cell
  in back-off cannot start before its `retry_after` (unless the clock went back: as
  `reads.retry_due` decides).
- **The workers** (`workers`, or more when more cells run) take cells as soon as they are free,
  each the first cell in claim order (interrupted first, then queued, by group then index) whose
  back-off is over by then (list scheduling). The sweep's ETA is when the last cell ends.

The ETA is `complete` when every cell's length is known (its own, its group's or the sweep's) and no
running cell is stalled; otherwise it is a lower bound, and `why` says why in a word: "length" (a
cell of unknown length counts its start-up only), "stalled" (a running cell is past its projected
end by more than `late_s`: it is taken to end now). With no speed measured anywhere there is no ETA
(`why` "rate").
"""

from __future__ import annotations

import heapq
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple

from sweepq.queue.states import CLAIMABLE, CellState

# The input is a tuple per cell and per attempt (not a dataclass): a live view builds one per cell of
# the sweep at every refresh, and a tuple is several times cheaper to make.


class Point(NamedTuple):
    """A step the queue saw an attempt reach, and when."""

    at: datetime
    step: int


class AttemptSeen(NamedTuple):
    started_at: datetime
    start_step: int
    first: Point | None = None  # the earliest point past its start (its first checkpoint)
    last: Point | None = None  # the latest (its end, newest checkpoint, or latest progress)
    ended_at: datetime | None = None  # None while it runs


class CellSeen(NamedTuple):
    id: str
    group: int
    idx: int  # its index in its group (the claim order: group, then index)
    state: CellState
    total_steps: int | None
    resume_step: int = 0  # its newest committed checkpoint: where its next attempt starts
    retry_after: datetime | None = None
    updated_at: datetime | None = None  # when its back-off began (with retry_after)
    attempts: tuple[AttemptSeen, ...] = ()  # oldest first; a running cell's current one last


@dataclass(frozen=True)
class CellForecast:
    seconds_per_step: float | None  # its own measured speed (None: not measured)
    ends_at: datetime | None  # None: settled, or no speed known


@dataclass(frozen=True)
class Forecast:
    now: datetime
    workers: int
    ends_at: datetime | None  # None: nothing left to run, or no speed measured anywhere
    complete: bool
    why: str  # "" when complete, else "length", "stalled" (a lower bound) or "rate" (no ETA): see above
    startup_seconds: float | None  # the sweep's median measured start-up
    began: datetime | None  # when the sweep's first attempt started
    last_end: datetime | None  # when its latest attempt ended
    cells: dict[str, CellForecast] = field(default_factory=dict)

    @property
    def seconds_left(self) -> float | None:
        return None if self.ends_at is None else (self.ends_at - self.now).total_seconds()

    def cell_seconds_left(self, cell: str) -> float | None:
        f = self.cells.get(cell)
        return None if f is None or f.ends_at is None else (f.ends_at - self.now).total_seconds()

    def steps_per_second(self, cell: str) -> float | None:
        f = self.cells.get(cell)
        spp = None if f is None else f.seconds_per_step
        return None if not spp else 1.0 / spp


#: A running attempt's speed counts once its steps cover this many seconds: its progress reaches the
#: queue about once a second, so a shorter span is mostly that jitter (an ended attempt always counts).
MIN_SPAN_S = 5.0


@dataclass(frozen=True)
class Span:
    """Steps an attempt ran and the seconds they took; `startup` when it was measured (steady: the
    seconds are the steps' alone), None when the seconds hold its start-up too."""

    steps: int
    seconds: float
    startup: float | None
    ended: bool = True

    def stepping(self, startup: float | None) -> float | None:
        """The seconds its steps took, given the sweep's start-up; None when they say nothing yet.

        A running attempt seen once counts only when the start-up is known and its steps took at
        least as long: until then its span is mostly its own start-up, which varies from one attempt
        to the next (an ended one counts whatever it holds, start-up and all, if none is known).
        """
        if self.startup is not None:
            seconds = self.seconds
        elif self.ended:
            seconds = self.seconds - (startup or 0.0)
        elif startup is None:
            return None
        else:
            seconds = self.seconds - startup if self.seconds - startup >= startup else 0.0
        return seconds if seconds > 0 and (self.ended or seconds >= MIN_SPAN_S) else None


def span(a: AttemptSeen) -> Span | None:
    """What an attempt showed of its speed (None: no step past its start)."""
    first, last = a.first, a.last
    if last is None or last.step <= a.start_step:
        return None
    if first is not None and last.step > first.step and last.at > first.at:
        seconds = (last.at - first.at).total_seconds()
        before = (first.at - a.started_at).total_seconds()
        startup = before - (first.step - a.start_step) * seconds / (last.step - first.step)
        return Span(last.step - first.step, seconds, min(max(0.0, startup), max(0.0, before)), a.ended_at is not None)
    return Span(last.step - a.start_step, (last.at - a.started_at).total_seconds(), None, a.ended_at is not None)


@dataclass
class _Pool:
    steps: int = 0
    seconds: float = 0.0

    def add(self, s: Span, startup: float | None) -> None:
        seconds = s.stepping(startup)
        if seconds is not None:
            self.steps += s.steps
            self.seconds += seconds

    @property
    def seconds_per_step(self) -> float | None:
        return self.seconds / self.steps if self.steps else None


@dataclass(frozen=True)
class _Measures:
    """Every cell's speed and length with the fallbacks of the model, and the start-up."""

    speed: dict[str, float]  # the cell's own, when measured
    length: dict[str, int | None]
    startup: float | None
    group_speed: dict[int, float | None]
    sweep_speed: float | None

    @classmethod
    def of(cls, cells: Sequence[CellSeen]) -> _Measures:
        spans = {c.id: [s for a in c.attempts if (s := span(a)) is not None] for c in cells if c.attempts}
        measured = [s.startup for ss in spans.values() for s in ss if s.startup is not None and s.stepping(None)]
        startup = statistics.median(measured) if measured else None
        own: dict[str, _Pool] = defaultdict(_Pool)
        groups: dict[int, _Pool] = defaultdict(_Pool)
        whole = _Pool()
        for c in cells:
            for s in spans.get(c.id, ()):
                for pool in (own[c.id], groups[c.group], whole):
                    pool.add(s, startup)
        return cls(
            speed={i: spp for i, pool in own.items() if (spp := pool.seconds_per_step) is not None},
            length=_lengths(cells),
            startup=startup,
            group_speed={g: p.seconds_per_step for g, p in groups.items()},
            sweep_speed=whole.seconds_per_step,
        )

    def seconds_per_step(self, c: CellSeen) -> float | None:
        for v in (self.speed.get(c.id), self.group_speed.get(c.group), self.sweep_speed):
            if v is not None:
                return v
        return None


def _lengths(cells: Sequence[CellSeen]) -> dict[str, int | None]:
    """Each cell's total steps: its own, else its group's mean, else the sweep's."""
    by_group: dict[int, list[int]] = defaultdict(list)
    for c in cells:
        if c.total_steps:
            by_group[c.group].append(c.total_steps)
    known = [t for ts in by_group.values() for t in ts]
    sweep = round(statistics.fmean(known)) if known else None
    group = {g: round(statistics.fmean(ts)) for g, ts in by_group.items()}
    return {c.id: c.total_steps or group.get(c.group, sweep) for c in cells}


@dataclass(frozen=True)
class _Job:
    """A claimable cell for the simulation: its rank in claim order, when it may start, how long it runs."""

    rank: tuple[int, int, int]
    cell: str
    due: datetime
    seconds: float


def forecast(cells: Sequence[CellSeen], workers: int, now: datetime, late_s: float = math.inf) -> Forecast:
    """The sweep's ETA and each cell's, as of `now`, with `workers` workers (see the module's model).

    A running cell whose projected end is over `late_s` seconds past is stalled: it is taken to end
    now, its own ETA is unknown, and the sweep's is a lower bound (`why` "stalled").
    """
    m = _Measures.of(cells)
    unsettled = [c for c in cells if c.state is CellState.RUNNING or c.state in CLAIMABLE]
    running = [c for c in unsettled if c.state is CellState.RUNNING]
    workers = max(1, workers, len(running))
    attempts = [a for c in cells for a in c.attempts]
    ends: dict[str, datetime] = {}
    late: set[str] = set()
    no_rate = any(m.seconds_per_step(c) is None for c in unsettled)
    if not no_rate:
        projected = {c.id: _running_end(c, m, now) for c in running}
        late = {i for i, end in projected.items() if (now - end).total_seconds() > late_s}
        ends = {i: max(end, now) for i, end in projected.items()}
        jobs = [_job(c, m, now) for c in unsettled if c.state in CLAIMABLE]
        ends |= _schedule(jobs, [*ends.values(), *[now] * (workers - len(running))])
    why = _why(no_rate, any(m.length[c.id] is None for c in unsettled), bool(late))
    return Forecast(
        now=now,
        workers=workers,
        ends_at=max(ends.values()) if ends else None,
        complete=not why,
        why=why,
        startup_seconds=m.startup,
        began=min((a.started_at for a in attempts), default=None),
        last_end=max((a.ended_at for a in attempts if a.ended_at is not None), default=None),
        cells={i: CellForecast(m.speed.get(i), None if i in late else ends.get(i)) for i in {*m.speed, *ends}},
    )


def _why(no_rate: bool, unknown_length: bool, stalled: bool) -> str:
    return "rate" if no_rate else "length" if unknown_length else "stalled" if stalled else ""


def _running_end(c: CellSeen, m: _Measures, now: datetime) -> datetime:
    """When a running cell ends: its remaining steps from its latest point (or after its start-up)."""
    spp, length = m.seconds_per_step(c) or 0.0, m.length[c.id]
    a = c.attempts[-1] if c.attempts else AttemptSeen(now, c.resume_step)
    if a.last is not None and a.last.step > a.start_step:
        return a.last.at + _seconds((length or a.last.step) - a.last.step, spp)
    begins = max(now, a.started_at + timedelta(seconds=m.startup or 0.0))
    return begins + _seconds((length or 0) - max(a.start_step, c.resume_step), spp)


def _job(c: CellSeen, m: _Measures, now: datetime) -> _Job:
    spp, length = m.seconds_per_step(c) or 0.0, m.length[c.id]
    seconds = (m.startup or 0.0) + _seconds((length or 0) - c.resume_step, spp).total_seconds()
    rank = (CLAIMABLE.index(c.state), c.group, c.idx)
    return _Job(rank, c.id, _due(c, now), seconds)


def _due(c: CellSeen, now: datetime) -> datetime:
    """When a claimable cell may start: after its back-off, unless the clock went back since it began."""
    if c.retry_after is None or c.retry_after <= now:
        return now
    if c.updated_at is not None and c.updated_at > now:
        return now
    return c.retry_after


def _seconds(steps: int, seconds_per_step: float) -> timedelta:
    return timedelta(seconds=max(0, steps) * seconds_per_step)


def _schedule(jobs: Iterable[_Job], free: list[datetime]) -> dict[str, datetime]:
    """List scheduling: each worker, when free, takes the first job in claim order that is due by then."""
    heapq.heapify(free)
    later = sorted(jobs, key=lambda j: (j.due, j.rank))
    ready: list[tuple[tuple[int, int, int], int]] = []  # (rank, index into later)
    ends: dict[str, datetime] = {}
    i = 0
    while i < len(later) or ready:
        t = heapq.heappop(free)
        if not ready and later[i].due > t:
            t = later[i].due  # nothing is due yet: this worker waits for the first back-off to end
        while i < len(later) and later[i].due <= t:
            heapq.heappush(ready, (later[i].rank, i))
            i += 1
        job = later[heapq.heappop(ready)[1]]
        ends[job.cell] = t + timedelta(seconds=job.seconds)
        heapq.heappush(free, ends[job.cell])
    return ends
