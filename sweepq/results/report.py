"""Sweep-wide answers: where the hours went (`report`) and who won (`best`)."""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sweepq.queue.records import AttemptRecord
from sweepq.queue.states import CheckpointState, Reason
from sweepq.spec.types import Metric

if TYPE_CHECKING:
    from sweepq.queue.opening import Reader
    from sweepq.queue.store import Store

    CellReads = Store | Reader  # a Store, or a Reader (read commands)


def unknown_steps(a: AttemptRecord) -> bool:
    """A program ran but told sweepq nothing of its steps (no Run.from_env(), no integration)."""
    return a.end_step is None and (a.exit_code is not None or a.exit_signal is not None)


def steps_lost(attempts: Sequence[AttemptRecord]) -> dict[tuple[str, int], int | None]:
    """(cell, attempt number) -> steps that the next attempt had to train again; None: unknown.

    An attempt that trained to step 830 followed by one resuming from the
    checkpoint at step 800 lost 30 steps; one followed by a fresh start lost all.
    A program that does not report its steps lost an unknown number: never 0.
    """
    by_cell: dict[str, list[AttemptRecord]] = defaultdict(list)
    for a in attempts:
        by_cell[a.cell].append(a)
    lost: dict[tuple[str, int], int | None] = {}
    for cell, items in by_cell.items():
        items.sort(key=lambda a: a.number)
        for prev, nxt in itertools.pairwise(items):
            if unknown_steps(prev):
                lost[(cell, prev.number)] = None
            elif prev.end_step is not None:
                lost[(cell, prev.number)] = max(0, prev.end_step - (nxt.start_step or 0))
    return lost


def training_lost(
    attempts: Sequence[AttemptRecord], made: Mapping[tuple[str, int, int], datetime]
) -> dict[tuple[str, int], float]:
    """(cell, attempt number) -> seconds of its training that the next attempt had to do again.

    The training lost runs from when the checkpoint the next attempt resumed from was made (`made`:
    (cell, attempt, step) -> its time) to the attempt's end, its last sign of life when it was found
    dead: all of its time, from its start, when the next attempt resumed from a checkpoint it did not
    make (an earlier attempt's, or none). Like `steps_lost`, only an attempt followed by another.
    """
    by_cell: dict[str, list[AttemptRecord]] = defaultdict(list)
    for a in attempts:
        by_cell[a.cell].append(a)
    lost: dict[tuple[str, int], float] = {}
    for cell, items in by_cell.items():
        items.sort(key=lambda a: a.number)
        for prev, nxt in itertools.pairwise(items):
            if prev.ended_at is None:
                continue
            since = made.get((cell, prev.number, nxt.start_step or 0))
            if since is None or since < prev.started_at:
                since = prev.started_at
            lost[(cell, prev.number)] = max(0.0, (prev.ended_at - since).total_seconds())
    return lost


def downtime(a: AttemptRecord) -> float:
    """Seconds from an attempt's last sign of life until a later process found it dead and closed it (the
    reap, just before its cell could start again): nobody trained the cell, and nobody knew. 0 for an
    attempt its closer saw end, and for those of older roots (no `closed_at`)."""
    if a.ended_at is None or a.closed_at is None:
        return 0.0
    return max(0.0, (a.closed_at - a.ended_at).total_seconds())


def by_reason(
    attempts: Sequence[AttemptRecord], made: Mapping[tuple[str, int, int], datetime] | None = None
) -> list[dict[str, Any]]:
    """One row per termination reason (running attempts under "running").

    `steps_run` and `steps_lost` add up what is known; `steps_unknown` counts the
    attempts of programs that do not report their steps (their share is unknown).
    `wall_hours` is each attempt's life, from its start to its end (a reaped one's last sign of life);
    `training_lost_hours` the part of it the next attempt did again (`training_lost`, with `made`: each
    checkpoint's time); `downtime_hours`, apart from the wall hours, the time from a reaped attempt's
    last sign of life to its reap (`downtime`).
    """
    lost = steps_lost(attempts)
    lost_time = training_lost(attempts, made or {})
    rows: dict[str, dict[str, Any]] = {}
    for a in attempts:
        key = a.reason or "running"
        r = rows.setdefault(key, _row(key))
        r["attempts"] += 1
        r["wall_hours"] += (a.wall_seconds or 0.0) / 3600
        r["gpu_hours"] += (a.gpu_seconds or 0.0) / 3600
        if a.end_step is not None:
            r["steps_run"] += max(0, a.end_step - (a.start_step or 0))
        elif unknown_steps(a):
            r["steps_unknown"] += 1
        r["steps_lost"] += lost.get((a.cell, a.number)) or 0
        r["training_lost_hours"] += lost_time.get((a.cell, a.number), 0.0) / 3600
        r["downtime_hours"] += downtime(a) / 3600
    order = [r.value for r in Reason] + ["running"]
    return sorted(rows.values(), key=lambda r: order.index(r["reason"]) if r["reason"] in order else len(order))


def _row(reason: str) -> dict[str, Any]:
    counts = ("attempts", "steps_run", "steps_lost", "steps_unknown")
    hours = dict.fromkeys(("wall_hours", "gpu_hours", "training_lost_hours", "downtime_hours"), 0.0)
    return {"reason": reason} | hours | dict.fromkeys(counts, 0)


def hours_words(rows: Sequence[dict[str, Any]]) -> str | None:
    """The sentence under the hours table (and on the HTML page) that splits what was lost: training done
    again, and downtime; None when neither was any."""
    lost = sum(r.get("training_lost_hours", 0.0) for r in rows)
    down = sum(r.get("downtime_hours", 0.0) for r in rows)
    if not lost and not down:
        return None
    return (
        f"training lost: {lost:.3f} h ({_clock(lost)}), from the checkpoint each next attempt resumed from to "
        f"the last sign of life of the attempt before it; downtime: {down:.3f} h ({_clock(down)}), from an "
        "attempt's last sign of life until a later launch found it dead, not counted in wall hours"
    )


def _clock(hours: float) -> str:
    """Hours as 1h02m03s, 1m53s or 17s (whole seconds, rounded)."""
    s = round(hours * 3600)
    h, m, sec = s // 3600, s % 3600 // 60, s % 60
    return f"{h}h{m:02d}m{sec:02d}s" if h else f"{m}m{sec:02d}s" if m else f"{sec}s"


def best_per_cell(store: CellReads, metric: Metric | None, top: int) -> list[dict[str, Any]]:
    """Per cell: the best value of the sweep's metric and the checkpoint that holds it, ranked; its cfg."""
    rows: list[dict[str, Any]] = []
    kept = store.checkpoints_in(CheckpointState.COMMITTED) if metric is not None else {}
    inexact = store.inexact_resumes()  # cells whose data order restarted on a resume (Run.resume_inexact)
    for c in store.cells(include_removed=False):
        best_ckpt = None
        if metric is not None:
            scored = [
                (float(k.metrics[metric.name]), k) for k in kept.get(c.id, ()) if _finite(k.metrics.get(metric.name))
            ]
            if c.best is not None:
                # Only a checkpoint that holds the cell's best is named: one holding a worse value is not it
                # (`no_best_checkpoint` says so); at the best's own step first.
                scored = sorted((x for x in scored if x[0] == c.best), key=lambda x: x[1].step != c.best_step)
            if scored:
                pick = max if metric.goal == "max" else min
                best_ckpt = pick(scored, key=lambda x: x[0])
        value = best_ckpt[0] if best_ckpt else c.best
        rows.append(
            {
                "cell": c.id,
                "state": str(c.state),
                "best": value,
                "step": best_ckpt[1].step if best_ckpt else c.best_step,
                "checkpoint": best_ckpt[1].path if best_ckpt else None,
                "rank": None,
                "cfg": c.result_cfg,  # the cfg the best came from (a done cell may hold an older one's result)
                "new_cfg": c.new_cfg,
                "inexact_resume": inexact.get(c.id),  # the steps resumed from inexactly: may differ from a whole run
            }
        )
    # Winners are finished cells: a failed cell's early score is not a result.
    ranked = [r for r in rows if r["best"] is not None and r["state"] == "done"]
    ranked.sort(key=lambda r: float(r["best"] or 0.0), reverse=metric is None or metric.goal == "max")
    for i, r in enumerate(ranked[:top], start=1):
        r["rank"] = i
    return ranked + [r for r in rows if r not in ranked]


def no_best_checkpoint(rows: list[dict[str, Any]], metric: Metric | None, listed: int = 10) -> str | None:
    """One line when done cells have a best value but no checkpoint that holds it (best_per_cell's rows)."""
    if metric is None:
        return None
    cells = [r["cell"] for r in rows if r["state"] == "done" and r["best"] is not None and r["checkpoint"] is None]
    if not cells:
        return None
    named = ", ".join(cells[:listed]) + (f", … and {len(cells) - listed:,} more" if len(cells) > listed else "")
    return (
        f"no checkpoint holds the best {metric.name} of {len(cells):,} done cell(s) ({named}): sweepq keeps the "
        f"best checkpoint when your loop passes metrics={{{metric.name!r}: ...}} to run.checkpoint where it "
        "evaluates (with checkpoint: {keep_best: true}, the default)"
    )


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
