"""What an attempt showed of its speed (a `Span`) and spans pooled by cell, group and sweep.

Part of the forecast's model (queue/forecast/model.py says it whole): an attempt's speed leaves out its
start-up where two points past its start measure it; spans add up in whole microseconds, so that
pools summed in any order, or by the database, are the same to the last bit.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, NamedTuple


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
    # Made since the cell was last run afresh (`reset`, `retry`, `--rerun-changed` raise its budget_base):
    # only those count in the sweep's elapsed time (an attempt before a reset still measures its speed).
    current: bool = True


#: A running attempt's speed counts once its steps cover this many seconds: its progress reaches the
#: queue about once a second, so a shorter span is mostly that jitter (an ended attempt always counts).
MIN_SPAN_S = 5.0


_US = timedelta(microseconds=1)


class Span(NamedTuple):
    """Steps an attempt ran and the time they took, in whole microseconds; `startup` when it was
    measured (steady: the time is the steps' alone), None when the time holds its start-up too."""

    steps: int
    micros: int
    startup: float | None
    ended: bool = True

    @property
    def seconds(self) -> float:
        return self.micros / 1e6

    def stepping(self, startup: float | None) -> float | None:
        """The seconds its steps took, given the sweep's start-up; None when they say nothing yet.

        A running attempt seen once counts only when the start-up is known and its steps took at least
        as long: until then its span is mostly its own start-up, which varies from one attempt to the
        next (an ended one counts whatever it holds, start-up and all, if none is known)."""
        _, micros, own, ended = self  # unpacked: called for every attempt of the sweep
        if own is not None:
            seconds = micros / 1e6
        elif ended:
            seconds = micros / 1e6 - (startup or 0.0)
        elif startup is None:
            return None
        else:
            seconds = micros / 1e6 - startup if micros / 1e6 - startup >= startup else 0.0
        return seconds if seconds > 0 and (ended or seconds >= MIN_SPAN_S) else None


def span(a: AttemptSeen) -> Span | None:
    """What an attempt showed of its speed (None: no step past its start)."""
    first, last = a.first, a.last
    if last is None or last.step <= a.start_step:
        return None
    if first is not None and last.step > first.step and last.at > first.at:
        micros = (last.at - first.at) // _US
        before = (first.at - a.started_at) // _US / 1e6
        startup = before - (first.step - a.start_step) * (micros / 1e6) / (last.step - first.step)
        return Span(last.step - first.step, micros, min(max(0.0, startup), max(0.0, before)), a.ended_at is not None)
    return Span(last.step - a.start_step, (last.at - a.started_at) // _US, None, a.ended_at is not None)


class Pool(NamedTuple):
    """Spans added up: their steps, their microseconds, and how many had the start-up taken off."""

    steps: int = 0
    micros: int = 0
    takeoffs: int = 0

    def seconds_per_step(self, startup: float | None) -> float | None:
        return (self.micros / 1e6 - self.takeoffs * (startup or 0.0)) / self.steps if self.steps else None


def pools(
    spans: Iterable[tuple[int, str, Span]], startup: float | None
) -> tuple[dict[str, float], dict[int, Pool], Pool]:
    """The spans that count, pooled by cell, by group and for the whole sweep (a loop over every
    attempt of the sweep: kept to plain lists and one look-up a pool). By cell, only each pool's
    seconds per step (`Pool.seconds_per_step`, in the same operations): no Pool for every cell."""
    own: dict[Any, list[int]] = {}  # by cell (str)
    groups: dict[Any, list[int]] = {}  # by group (int)
    whole = [0, 0, 0]
    stepping, measured = Span.stepping, startup is not None
    for group, cell, s in spans:
        if stepping(s, startup) is None:
            continue
        steps, micros, takeoff = s[0], s[1], int(measured and s[2] is None)
        whole[0], whole[1], whole[2] = whole[0] + steps, whole[1] + micros, whole[2] + takeoff
        if (pool := own.get(cell)) is None:
            own[cell] = [steps, micros, takeoff]
        else:
            pool[0], pool[1], pool[2] = pool[0] + steps, pool[1] + micros, pool[2] + takeoff
        if (pool := groups.get(group)) is None:
            groups[group] = [steps, micros, takeoff]
        else:
            pool[0], pool[1], pool[2] = pool[0] + steps, pool[1] + micros, pool[2] + takeoff
    off = startup or 0.0
    speed = {c: (p[1] / 1e6 - p[2] * off) / p[0] for c, p in own.items() if p[0]}
    return speed, {g: Pool(*p) for g, p in groups.items()}, Pool(*whole)
