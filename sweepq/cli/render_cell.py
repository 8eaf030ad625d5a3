"""One cell's page (`sweepq show`): its cfg a key a line, attempts, checkpoints, history (pure, golden-tested)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from sweepq.cli.columns import kept, ranks
from sweepq.cli.fit import Column, FittedTable
from sweepq.cli.render import (
    STATE_STYLE,
    attempts_table,
    fmt_bytes,
    fmt_epoch,
    fmt_num,
    fmt_progress,
    fmt_step,
    fmt_time,
    ran_older_note,
)
from sweepq.queue.records import AttemptRecord, CellRecord, CheckpointRecord, EventRecord
from sweepq.results import params
from sweepq.spec.types import Metric
from sweepq.worker import usage_text


def show_cell(
    cell: CellRecord,
    attempts: Sequence[AttemptRecord],
    checkpoints: Sequence[CheckpointRecord],
    events: Sequence[EventRecord],
    metric: Metric | None,
) -> RenderableType:
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold", no_wrap=True)
    head.add_column(overflow="fold")  # a long string value folds; numbers are short
    head.add_row("cell", f"{cell.id} (group {cell.group_name})")
    head.add_row("state", Text(str(cell.state), style=STATE_STYLE[cell.state]))
    head.add_row("cfg", cfg_grid(cell.result_cfg))  # the cfg its result (below) came from
    if cell.new_cfg is not None:
        head.add_row("", Text(ran_older_note(cell), style="yellow"))
    prog = " ".join(
        x
        for x in (
            f"epoch {fmt_epoch(cell)}" if fmt_epoch(cell) else "",
            f"step {fmt_step(cell)}" if fmt_step(cell) else "",
            fmt_progress(cell.progress),
        )
        if x
    )
    if prog:
        head.add_row("progress", prog)
    if cell.metrics:
        head.add_row("metrics", ", ".join(f"{k}={fmt_num(v)}" for k, v in cell.metrics.items()))
    if cell.best is not None:
        name = metric.name if metric else "best"
        head.add_row("best", f"{name}={fmt_num(cell.best)} at step {cell.best_step}")
    used = attempts[-1].usage if attempts else None  # the newest attempt's (running: so far)
    if usage_text.usage_detail(used):
        head.add_row("usage", usage_text.usage_detail(used))
    if usage_text.low_gpu_flag(used):
        head.add_row("flag", Text(usage_text.low_gpu_flag(used) or "", style="yellow"))
    parts: list[RenderableType] = [head, Text("")]
    parts.append(attempts_table(attempts, title="attempts", with_cell=False))
    shown = [c for c in checkpoints if c.state != "superseded"]
    if shown:
        parts += [Text(""), checkpoints_table(shown, metric)]
    hidden = len(checkpoints) - len(shown)
    if hidden:
        parts.append(
            Text(f"({hidden} superseded checkpoint(s) deleted by retention not shown; --json lists all)", style="dim")
        )
    if events:
        rank = ranks("history")
        cols = [
            Column("time", [fmt_time(e.at) for e in events], rank["time"]),
            Column("event", [e.kind for e in events], rank["event"]),
            Column(
                "detail",
                [json.dumps(e.detail, sort_keys=True) if e.detail else "" for e in events],
                rank["detail"],
                prose="wrap",
            ),
        ]
        parts += [Text(""), FittedTable(cols, kept=kept("history"), title="history")]
    return Group(*parts)


def cfg_grid(cfg: dict[str, Any]) -> RenderableType:
    """One cell's cfg, a flattened key a line (`optim.lr  0.001`)."""
    if not cfg:
        return "{}"
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for key, value in params.lines(cfg):
        grid.add_row(key, value)
    return grid


def checkpoints_table(checkpoints: Sequence[CheckpointRecord], metric: Metric | None = None) -> RenderableType:
    rank = ranks("checkpoints")
    best = best_checkpoint(checkpoints, metric)
    cols = [
        Column("step", [str(c.step) for c in checkpoints], rank["step"], "right"),
        Column("epoch", [fmt_num(c.epoch) for c in checkpoints], rank["epoch"], "right"),
        Column(
            "state",
            [
                c.state
                + (f" ({c.note})" if c.note and c.state != "committed" else "")
                + (f" (best {metric.name})" if c is best and metric is not None else "")
                for c in checkpoints
            ],
            rank["state"],
        ),
        Column(
            "metrics",
            [", ".join(f"{k}={fmt_num(v)}" for k, v in c.metrics.items()) for c in checkpoints],
            rank["metrics"],
            prose="wrap",
        ),
        Column("size", [fmt_bytes(c.size_bytes) for c in checkpoints], rank["size"], "right"),
        Column("path", [c.path for c in checkpoints], rank["path"]),
    ]
    return FittedTable(cols, kept=kept("checkpoints"), title="checkpoints")


def best_checkpoint(checkpoints: Sequence[CheckpointRecord], metric: Metric | None) -> CheckpointRecord | None:
    """The committed checkpoint holding the best value of the sweep's metric (as `sweepq best` picks it)."""
    if metric is None:
        return None
    scored = [
        (float(v), c)
        for c in checkpoints
        if c.state == "committed"
        and isinstance(v := c.metrics.get(metric.name), (int, float))
        and not isinstance(v, bool)
        and math.isfinite(v)
    ]
    if not scored:
        return None
    pick = max if metric.goal == "max" else min
    return pick(scored, key=lambda x: x[0])[1]
