"""What each MLflow run of a sweep holds: the sweep's parent run and one child run a cell (pure, no MLflow).

A cell's run: its cfg as params (nested keys dotted, strings as they are, every
other value as JSON), its stitched curves as metrics (each kept point at its step
and wall time, in milliseconds as MLflow counts them), and tags: the cell, its
group, state, attempts and their termination reasons, and how many logged values
are not on the curves and why (a lost tail: logged after the step a later attempt
resumed from; a repeated value: another is at that step). Those values are not
logged as metrics: MLflow would draw them on the same curve.

MLflow's status says where the run stands: done -> FINISHED, failed -> FAILED,
cancelled and interrupted (stopped, to be resumed) -> KILLED, running -> RUNNING,
queued -> SCHEDULED.

What MLflow cannot hold is left out by name rather than failing the export (a
key with characters its names refuse, over 250 characters, a param value over
6000): `left_out` says what and why, and the run's `sweepq.left_out` tag names it.
The `digest` of a run is what an export compares to decide whether a run it
wrote before is still right.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweepq.history.records import AttemptInfo, Point, Status
from sweepq.history.tables import flat

if TYPE_CHECKING:
    from sweepq.history.stream import CellStream
    from sweepq.queue.records import AttemptRecord, CellRecord

FORMAT = "sweepq-mlflow/2"  # part of every digest: a change of what a run holds rewrites every run
MAX_KEY = 250  # MLflow's limits (mlflow.utils.validation), checked here so that nothing is cut silently
MAX_PARAM = 6000
MAX_TAG = 8000
_NAME = re.compile(r"^[/\w.\- :]*$")  # what MLflow accepts in a param, metric or tag name

STATUS = {
    "done": "FINISHED",
    "failed": "FAILED",
    "cancelled": "KILLED",
    "interrupted": "KILLED",
    "running": "RUNNING",
    "queued": "SCHEDULED",
}
TERMINATED = frozenset({"FINISHED", "FAILED", "KILLED"})

KIND, CELL, SWEEP, ROOT, DIGEST = "sweepq.kind", "sweepq.cell", "sweepq.sweep", "sweepq.root", "sweepq.digest"


MetricPoint = tuple[str, float, int, int]  # (name, value, timestamp in ms, step)


def _none() -> Iterator[MetricPoint]:
    return iter(())


@dataclass(frozen=True)
class RunContent:
    """One MLflow run as sweepq writes it. `metrics()`: its points, read again from the files at each call
    (a history need not fit in memory); `points` of them; `metrics_digest`: the sha256 of them all."""

    name: str
    tags: dict[str, str]
    status: str
    start_time: int | None
    end_time: int | None
    params: dict[str, str] = field(default_factory=dict)
    metrics: Callable[[], Iterator[MetricPoint]] = _none
    left_out: list[tuple[str, str]] = field(default_factory=list)  # (what, why) MLflow could not hold
    points: int = 0
    metrics_digest: str = ""

    @property
    def digest(self) -> str:
        h = hashlib.sha256()
        head = [FORMAT, self.name, self.tags, self.status, self.start_time, self.end_time, self.params]
        h.update(json.dumps(head, sort_keys=True).encode())
        h.update(self.metrics_digest.encode())
        return h.hexdigest()


def cell_run(cell: CellRecord, history: CellStream, attempts: list[AttemptRecord]) -> RunContent:
    """The child run of `cell` (its `history`, scanned; its `attempts` in order). Reads the history once here
    (what the tags and the digest need) and again each time the run's metrics are written."""
    left_out: list[tuple[str, str]] = []
    params = {}
    for dotted, value in flat(cell.result_cfg, "cfg").items():  # the cfg its results came from
        key, text = dotted.removeprefix("cfg."), value if isinstance(value, str) else _json(value)
        if why := refusal(key) or _too_long(text):
            left_out.append((f"cfg key {key!r}", why))
        else:
            params[key] = text
    refused = {name: why for name in history.metrics if (why := refusal(name))}
    off = _OffCurve()
    kept: set[str] = set()
    points = 0
    digest = hashlib.sha256()
    for name, p, what, _ in history.values():
        off.add(p, what)
        if what is Status.KEPT:
            kept.add(name)
            if name not in refused:
                points += 1
                digest.update(repr((name, p.value, ms(p.time), p.step)).encode())
    # a metric whose every value was superseded has nothing to log, nothing left out
    left_out += [(f"metric {name!r}", why) for name, why in refused.items() if name in kept]

    def metrics() -> Iterator[MetricPoint]:
        for name, p, what, _ in history.values():
            if what is Status.KEPT and name not in refused:
                yield name, p.value, ms(p.time), p.step

    state = str(cell.state)
    tags = {
        KIND: "cell",
        CELL: cell.id,
        "sweepq.group": cell.group_name,
        "sweepq.state": state,
        "sweepq.attempts": str(len(attempts)),
        "sweepq.reasons": ", ".join(f"{a.number}: {a.reason or 'running'}" for a in attempts),
        **off.tags(history.attempts),
    }
    if left_out:
        tags["sweepq.left_out"] = clip("; ".join(f"{what}: {why}" for what, why in left_out))
    status = STATUS.get(state, "RUNNING")
    start = min((ms(a.started_at.timestamp()) for a in attempts), default=None)
    end = _end(cell, attempts, status)
    return RunContent(cell.id, tags, status, start, end, params, metrics, left_out, points, digest.hexdigest())


def sweep_run(name: str, root: Path, cells: list[CellRecord], attempts: Iterable[AttemptRecord]) -> RunContent:
    """The parent run: the sweep, found again by its name and root; its status from every cell's."""
    states = [str(c.state) for c in cells]
    counts = {s: states.count(s) for s in dict.fromkeys(states)}
    started = [ms(a.started_at.timestamp()) for a in attempts]
    ended = [ms(c.finished_at.timestamp()) for c in cells if c.finished_at is not None]
    over = all(s in ("done", "failed", "cancelled") for s in states)
    status = (
        ("FAILED" if "failed" in counts else "KILLED" if "cancelled" in counts else "FINISHED") if over else "RUNNING"
    )
    tags = {
        KIND: "sweep",
        SWEEP: name,
        ROOT: str(root),
        "sweepq.cells": str(len(cells)),
        "sweepq.states": ", ".join(f"{s}: {n}" for s, n in counts.items()),
    }
    end = max(ended, default=None) if over else None
    return RunContent(name, tags, status, min(started, default=None), end)


def refusal(name: str) -> str | None:
    """Why MLflow would refuse `name` as a param, metric or tag name; None when it takes it."""
    if not _NAME.match(name):
        return "MLflow names hold only letters, digits, spaces and _ - . : /"
    norm = posixpath.normpath(name)
    if norm != name or norm == "." or norm.startswith(("..", "/")):
        return "MLflow refuses names that read as another path (empty, '//', '..', a leading or trailing '/')"
    if len(name) > MAX_KEY:
        return f"a name of {len(name)} characters (MLflow: at most {MAX_KEY})"
    return None


def _too_long(value: str) -> str | None:
    return f"a value of {len(value)} characters (MLflow: at most {MAX_PARAM})" if len(value) > MAX_PARAM else None


def ms(seconds: float) -> int:
    return round(seconds * 1000)


def clip(text: str) -> str:
    """A tag value within MLflow's limit (a long list cut, saying so)."""
    return text if len(text) <= MAX_TAG else text[: MAX_TAG - 20] + " ... (cut)"


def _json(v: Any) -> str:
    return json.dumps(v, sort_keys=True, separators=(",", ":"), default=str)


def _end(cell: CellRecord, attempts: list[AttemptRecord], status: str) -> int | None:
    if status not in TERMINATED:
        return None
    ended = [a.ended_at for a in attempts if a.ended_at is not None]
    t: datetime | None = cell.finished_at or max(ended, default=None)
    return ms(t.timestamp()) if t is not None else None


class _OffCurve:
    """What was logged but is not on the curves, counted as the values go by: tags saying how much and why."""

    def __init__(self) -> None:
        self.logged: set[int] = set()  # attempts that logged a value
        self.lost: dict[int, list[int]] = {}  # attempt -> [values lost, lowest step, highest step]
        self.repeated = 0

    def add(self, p: Point, status: Status) -> None:
        self.logged.add(p.attempt)
        if status is Status.LOST:
            seen = self.lost.get(p.attempt)
            if seen is None:
                self.lost[p.attempt] = [1, p.step, p.step]
            else:
                seen[0] += 1
                seen[1], seen[2] = min(seen[1], p.step), max(seen[2], p.step)
        elif status is Status.REPEATED:
            self.repeated += 1

    def tags(self, attempts: Sequence[AttemptInfo]) -> dict[str, str]:
        """Absent when nothing is off the curves."""
        tags: dict[str, str] = {}
        if self.lost:
            tags["sweepq.lost_values"] = str(sum(n for n, _, _ in self.lost.values()))
            tags["sweepq.lost"] = clip("; ".join(self._words(a, attempts) for a in sorted(self.lost)))
        if self.repeated:
            tags["sweepq.repeated_values"] = str(self.repeated)
        return tags

    def _words(self, attempt: int, attempts: Sequence[AttemptInfo]) -> str:
        """`attempt 1 (lost): 2 values at steps 6-7 not logged: attempt 2 resumed from step 5`."""
        n, low, high = self.lost[attempt]
        reason = next((a.reason for a in attempts if a.number == attempt), None) or "running"
        later = next((a for a in attempts if a.number > attempt and a.number in self.logged), None)
        if later is None:
            how = "a later attempt superseded them"
        elif not later.resumed:
            how = f"attempt {later.number} started from scratch"
        else:
            how = f"attempt {later.number} resumed from step {later.start_step}"
        return f"attempt {attempt} ({reason}): {n} values at steps {low}-{high} not logged: {how}"
