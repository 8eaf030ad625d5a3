"""The sweep's ETA: when its last cell ends, from measured speeds and a simulation of the workers.

Pure: no database and no clock (the caller gives `now`); queue/forecast/reads.py reads its input.

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
  Pools add whole microseconds (exact in any order), so the settled cells can come summed by the
  queue (`Settled`) rather than cell by cell, with the same result.
- **What is left**: a running cell ends its remaining steps at its speed from its latest point (or,
  before its first step, after its start-up); an interrupted or queued cell runs, after one
  start-up, from its newest committed checkpoint (what it will resume from) to its length. A cell
  in back-off cannot start before its `retry_after` (unless the clock went back: as
  `claim.retry_due` decides).
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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple

from sweepq.queue.forecast.spans import MIN_SPAN_S as MIN_SPAN_S  # the model's parts, re-exported
from sweepq.queue.forecast.spans import AttemptSeen, Span, pools, span
from sweepq.queue.forecast.spans import Point as Point
from sweepq.queue.states import CLAIMABLE, CellState, claim_rank
from sweepq.queue.states import UNSETTLED as UNSETTLED

#: The cells that take a worker, now or later; the others only lend their measures (`Settled`).

# The input is a tuple per cell and per attempt (not a dataclass): a live view builds one per cell of
# the sweep at every refresh, and a tuple is several times cheaper to make.


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


class CellForecast(NamedTuple):  # one per cell of the sweep: a tuple is the cheapest to make
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
    cells: Mapping[str, CellForecast] = field(default_factory=dict)

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


class _Cells(Mapping[str, CellForecast]):
    """Each cell's forecast, made when asked for: a sweep of 100,000 cells asks for a few."""

    def __init__(self, speed: Mapping[str, float], ends: Mapping[str, datetime | None]) -> None:
        self._speed, self._ends = speed, ends  # a stalled cell's end: None

    def __getitem__(self, cell: str) -> CellForecast:
        if cell not in self._ends and cell not in self._speed:
            raise KeyError(cell)
        return CellForecast(self._speed.get(cell), self._ends.get(cell))

    def __iter__(self) -> Iterator[str]:
        return iter(self._speed.keys() | self._ends.keys())

    def __len__(self) -> int:
        return len(self._speed.keys() | self._ends.keys())


@dataclass(frozen=True)
class Settled:
    """The settled cells (done, failed, cancelled) as the forecast needs them. They take no worker:
    they lend the fall-backs their speeds, start-ups and lengths, and keep their own speed."""

    spans: Sequence[tuple[int, str, Span]] = ()  # (group, cell, span) of each attempt with a step past its start
    lengths: Mapping[int, tuple[int, int]] = field(default_factory=dict)  # group: (total steps, cells that know theirs)
    began: datetime | None = None  # the earliest start of their attempts
    last_end: datetime | None = None  # the latest end

    def plus(self, cells: Iterable[CellSeen]) -> Settled:
        """These and settled cells read one by one."""
        spans, lengths, attempts = list(self.spans), dict(self.lengths), list[AttemptSeen]()
        for c in cells:
            spans += [(c.group, c.id, s) for a in c.attempts if (s := span(a)) is not None]
            attempts += c.attempts
            if c.total_steps:
                steps, n = lengths.get(c.group, (0, 0))
                lengths[c.group] = (steps + c.total_steps, n + 1)
        began, last_end = _when(attempts, self)
        return Settled(spans, lengths, began, last_end)


def _when(attempts: Sequence[AttemptSeen], settled: Settled) -> tuple[datetime | None, datetime | None]:
    """When the first of `attempts` and `settled` started, and the last ended (attempts made since their cell
    was last run afresh: a reset cell's earlier attempts are not the sweep's time any more)."""
    began = [a.started_at for a in attempts if a.current] + ([settled.began] if settled.began else [])
    ends = [a.ended_at for a in attempts if a.ended_at and a.current] + ([settled.last_end] if settled.last_end else [])
    return min(began, default=None), max(ends, default=None)


@dataclass(frozen=True)
class _Measures:
    """Every cell's speed and length with the fallbacks of the model, and the start-up."""

    speed: dict[str, float]  # the cell's own, when measured
    length: dict[str, int | None]  # the unsettled cells'
    startup: float | None
    group_speed: dict[int, float | None]
    sweep_speed: float | None

    @classmethod
    def of(cls, cells: Sequence[CellSeen], settled: Settled) -> _Measures:
        """`cells`: the unsettled ones; `settled`: the others."""
        spans = [(c.group, c.id, s) for c in cells for a in c.attempts if (s := span(a)) is not None]
        spans += settled.spans
        measured = [s.startup for _, _, s in spans if s.startup is not None and s.stepping(None)]
        startup = statistics.median(measured) if measured else None
        speed, groups, whole = pools(spans, startup)
        return cls(
            speed=speed,
            length=_lengths(cells, settled.lengths),
            startup=startup,
            group_speed={g: p.seconds_per_step(startup) for g, p in groups.items()},
            sweep_speed=whole.seconds_per_step(startup),
        )

    def seconds_per_step(self, c: CellSeen) -> float | None:
        for v in (self.speed.get(c.id), self.group_speed.get(c.group), self.sweep_speed):
            if v is not None:
                return v
        return None


def _lengths(cells: Sequence[CellSeen], settled: Mapping[int, tuple[int, int]]) -> dict[str, int | None]:
    """Each cell's total steps: its own, else its group's mean, else the sweep's (settled cells' counted)."""
    by_group = {g: list(v) for g, v in settled.items()}
    for c in cells:
        if c.total_steps:
            sums = by_group.setdefault(c.group, [0, 0])
            sums[0] += c.total_steps
            sums[1] += 1
    known = [v for v in by_group.values() if v[1]]
    sweep = round(sum(v[0] for v in known) / sum(v[1] for v in known)) if known else None
    group = {g: round(steps / n) for g, (steps, n) in by_group.items() if n}
    return {c.id: c.total_steps or group.get(c.group, sweep) for c in cells}


class _Job(NamedTuple):
    """A claimable cell for the simulation: its rank in claim order, when it may start, how long it runs."""

    rank: tuple[int, int, int]
    cell: str
    due: datetime
    seconds: float


def forecast(
    cells: Sequence[CellSeen], workers: int, now: datetime, late_s: float = math.inf, settled: Settled | None = None
) -> Forecast:
    """The sweep's ETA and each cell's, as of `now`, with `workers` workers (see the module's model).

    `settled`: settled cells summed (those in `cells` are summed the same way first).
    A running cell whose projected end is over `late_s` seconds past is stalled: it is taken to end
    now, its own ETA is unknown, and the sweep's is a lower bound (`why` "stalled").
    """
    unsettled = [c for c in cells if c.state in UNSETTLED]
    if settled is None or len(unsettled) < len(cells):
        settled = (settled or Settled()).plus(c for c in cells if c.state not in UNSETTLED)
    m = _Measures.of(unsettled, settled)
    running = [c for c in unsettled if c.state is CellState.RUNNING]
    workers = max(1, workers, len(running))
    began, last_end = _when([a for c in unsettled for a in c.attempts], settled)
    ends: dict[str, datetime] = {}
    late: set[str] = set()
    # A cell has no speed only when none was measured anywhere (its group's and the sweep's pool the
    # cell's own): the sweep's speed says it for every cell at once.
    no_rate = m.sweep_speed is None and bool(unsettled)
    if not no_rate:
        projected = {c.id: _running_end(c, m, now) for c in running}
        late = {i for i, end in projected.items() if (now - end).total_seconds() > late_s}
        ends = {i: max(end, now) for i, end in projected.items()}
        lasting: dict[tuple[float, int, int], float] = {}  # most queued cells of a group last as long
        jobs = [_job(c, m, now, lasting) for c in unsettled if c.state in CLAIMABLE]
        ends |= _schedule(jobs, [*ends.values(), *[now] * (workers - len(running))])
    why = _why(no_rate, any(m.length[c.id] is None for c in unsettled), bool(late))
    return Forecast(
        now=now,
        workers=workers,
        ends_at=max(ends.values()) if ends else None,
        complete=not why,
        why=why,
        startup_seconds=m.startup,
        began=began,
        last_end=last_end,
        cells=_Cells(m.speed, {i: None if i in late else t for i, t in ends.items()} if late else ends),
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


def _job(c: CellSeen, m: _Measures, now: datetime, lasting: dict[tuple[float, int, int], float]) -> _Job:
    spp, length = m.seconds_per_step(c) or 0.0, m.length[c.id]
    key = (spp, length or 0, c.resume_step)
    if (seconds := lasting.get(key)) is None:
        seconds = lasting[key] = (m.startup or 0.0) + _seconds((length or 0) - c.resume_step, spp).total_seconds()
    rank = claim_rank(c.state, c.group, c.idx)
    return _Job(rank, c.id, _due(c, now), seconds)


def _due(c: CellSeen, now: datetime) -> datetime:
    """When a claimable cell may start: after its back-off, unless the clock went back since it began."""
    if c.retry_after is None or c.retry_after <= now or (c.updated_at is not None and c.updated_at > now):
        return now
    return c.retry_after


def _seconds(steps: int, seconds_per_step: float) -> timedelta:
    return timedelta(seconds=max(0, steps) * seconds_per_step)


def _schedule(jobs: Iterable[_Job], free: list[datetime]) -> dict[str, datetime]:
    """List scheduling: each worker, when free, takes the first job in claim order that is due by then.
    Jobs due at once (most of a sweep) come from a sorted list; only those in a back-off use the heap."""
    heapq.heapify(free)
    start = free[0] if free else None
    now = sorted((j for j in jobs if start is None or j.due <= start), key=lambda j: j.rank)
    later = sorted((j for j in jobs if start is not None and j.due > start), key=lambda j: (j.due, j.rank))
    ready: list[tuple[tuple[int, int, int], int]] = []  # the due ones of `later`: (rank, index into later)
    ends: dict[str, datetime] = {}
    lengths: dict[float, timedelta] = {}
    i = n = 0
    while n < len(now) or i < len(later) or ready:
        t = free[0]
        if n == len(now) and not ready and later[i].due > t:
            t = later[i].due  # nothing is due yet: this worker waits for the first back-off to end
        while i < len(later) and later[i].due <= t:
            heapq.heappush(ready, (later[i].rank, i))
            i += 1
        if ready and (n == len(now) or ready[0][0] < now[n].rank):
            job = later[heapq.heappop(ready)[1]]
        else:
            job, n = now[n], n + 1
        if (length := lengths.get(job.seconds)) is None:
            length = lengths[job.seconds] = timedelta(seconds=job.seconds)
        ends[job.cell] = t + length
        heapq.heapreplace(free, ends[job.cell])
    return ends
