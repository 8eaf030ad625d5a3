"""Human output: pure functions from records to rich renderables (tested with golden text).

The JSON of `--json` is the stable interface; these tables are for people and
may change. Columns appear only when some row has something to show.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from sweepq.queue.records import AttemptRecord, CellRecord, CheckpointRecord, EventRecord
from sweepq.queue.states import CLAIMABLE, CellState
from sweepq.spec.sweep import Metric

STATE_STYLE = {
    CellState.QUEUED: "dim",
    CellState.RUNNING: "bold cyan",
    CellState.INTERRUPTED: "yellow",
    CellState.DONE: "green",
    CellState.FAILED: "bold red",
    CellState.CANCELLED: "magenta",
}


def to_text(renderable: RenderableType, width: int = 120) -> str:
    """Plain text of a renderable (for golden tests and non-terminals)."""
    console = Console(width=width, color_system=None, force_terminal=False, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def shown_path(p: Any) -> str:
    """A path as a user typed it: relative to the current folder when inside it."""
    from pathlib import Path

    path = Path(p)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve())) or "."
    except ValueError:
        return str(path)


def fmt_num(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            return str(v)
        return f"{v:.4g}" if abs(v) >= 1e-3 or v == 0 else f"{v:.2e}"
    return str(v)


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return ""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return ""


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return ""
    s = float(s)
    if s < 60:
        return f"{s:.1f}s"
    m, sec = divmod(round(s), 60)
    if m < 60:
        return f"{m}m{sec:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


def fmt_time(t: datetime | None) -> str:
    if t is None:
        return ""
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def fmt_epoch(c: CellRecord) -> str:
    if c.epoch is None and c.total_epochs is None:
        return ""
    done = "" if c.epoch is None else f"{int(c.epoch)}" if c.epoch == int(c.epoch) else f"{c.epoch:.1f}"
    return f"{done or 0}/{fmt_num(c.total_epochs)}" if c.total_epochs else done


def fmt_step(c: CellRecord) -> str:
    if c.step is None:
        return ""
    return f"{c.step}/{c.total_steps}" if c.total_steps else str(c.step)


def fmt_progress(p: float | None) -> str:
    return "" if p is None else f"{100 * p:.0f}%"


def metric_of(c: CellRecord, metric: Metric | None) -> tuple[str, Any]:
    """(name, latest value) of the sweep's metric, else of the first logged scalar."""
    if metric is not None:
        return metric.name, c.metrics.get(metric.name)
    for k, v in c.metrics.items():
        if k != "epoch":
            return k, v
    return "", None


def summary(cells: Sequence[CellRecord]) -> Text:
    counts = Counter(c.state for c in cells if not c.removed)
    parts = [f"{counts[s]} {s}" for s in CellState if counts[s]]
    line = Text(f"{sum(counts.values())} cells: " + ", ".join(parts))
    removed = sum(1 for c in cells if c.removed)
    if removed:
        line.append(f" ({removed} no longer in the sweep file)", style="dim")
    return line


def status_table(
    cells: Sequence[CellRecord],
    metric: Metric | None,
    title: str | None = None,
    dead: set[str] | None = None,
    etas: dict[str, float] | None = None,
    stalls: dict[str, float] | None = None,
    notes: dict[str, str] | None = None,
    now: datetime | None = None,
) -> RenderableType:
    """`stalls`: seconds without progress of running cells past their threshold (Store.stalls);
    `notes`: what the last attempt of a cell said, when its machine failed it (Store.fault_notes)."""
    dead, etas = dead or set(), etas or {}
    told = _Told(stalls or {}, notes or {}, now or datetime.now(UTC))
    mname = metric.name if metric else next((metric_of(c, None)[0] for c in cells if c.metrics), "")
    cols: list[tuple[str, Any, str]] = [
        ("cell", lambda c: c.id + (" (gone)" if c.removed else ""), "left"),
        ("group", lambda c: c.group_name, "left"),
        ("state", lambda c: Text(str(c.state), style=STATE_STYLE[c.state]), "left"),
        ("epoch", fmt_epoch, "right"),
        ("step", fmt_step, "right"),
        ("progress", lambda c: fmt_progress(c.progress), "right"),
        ("eta", lambda c: fmt_seconds(etas[c.id]) if c.id in etas and c.id not in dead else "", "right"),
        (mname or "metric", lambda c: fmt_num(c.metrics.get(mname)) if mname else "", "right"),
        ("best", lambda c: fmt_num(c.best), "right"),
        ("attempts", lambda c: str(c.attempts) if c.attempts else "", "right"),
        ("last reason", lambda c: c.last_reason or "", "left"),
        ("note", lambda c: "no live process: reaped at the next launch" if c.id in dead else told.note(c), "left"),
    ]
    table = Table(title=title, title_justify="left", box=None, pad_edge=False, header_style="bold")
    rows = [[fn(c) for _, fn, _ in cols] for c in cells]
    keep = [i for i, (name, _, _) in enumerate(cols) if i < 3 or any(_present(r[i]) for r in rows)]
    for i in keep:
        # What happened must stay readable: states and reasons are never cut, the note wraps first.
        whole = cols[i][0] in ("cell", "state", "last reason")
        table.add_column(cols[i][0], justify=cols[i][2], no_wrap=whole)  # type: ignore[arg-type]
    for r in rows:
        table.add_row(*[r[i] for i in keep])
    return Group(table, Text(""), summary(cells))


def _present(v: Any) -> bool:
    return bool(v.plain if isinstance(v, Text) else v)


@dataclass(frozen=True)
class _Told:
    """What the status table says of a cell beyond its columns, as of `now`."""

    stalls: dict[str, float]
    notes: dict[str, str]
    now: datetime

    def note(self, c: CellRecord) -> str:
        parts = [
            "cancel requested" if c.cancel_requested else self._retry(c),
            f"no progress for {fmt_age(self.stalls[c.id])}" if c.id in self.stalls else "",
            self.notes.get(c.id, "") if c.state is not CellState.RUNNING else "",
        ]
        return "; ".join(p for p in parts if p)

    def _retry(self, c: CellRecord) -> str:
        if c.state not in CLAIMABLE or c.retry_after is None:
            return ""
        # As the queue decides (reads.retry_due): never longer than the back-off given at
        # `updated_at`, and due at once on a clock set back before it.
        wait = min(c.retry_after - self.now, c.retry_after - c.updated_at).total_seconds()
        return f"retry in {fmt_seconds(wait)}" if wait > 0 and self.now >= c.updated_at else "retry due"


def fmt_age(s: float) -> str:
    """A duration as people say it: "45 s", "12 min", "3.5 h"."""
    if s < 90:
        return f"{s:.0f} s"
    if s < 90 * 60:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def show_cell(
    cell: CellRecord,
    attempts: Sequence[AttemptRecord],
    checkpoints: Sequence[CheckpointRecord],
    events: Sequence[EventRecord],
    metric: Metric | None,
) -> RenderableType:
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    head.add_row("cell", f"{cell.id} (group {cell.group_name})")
    head.add_row("state", Text(str(cell.state), style=STATE_STYLE[cell.state]))
    head.add_row("cfg", json.dumps(cell.cfg, sort_keys=True))
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
    parts: list[RenderableType] = [head, Text("")]
    parts.append(attempts_table(attempts, title="attempts", with_cell=False))
    shown = [c for c in checkpoints if c.state != "superseded"]
    if shown:
        parts += [Text(""), checkpoints_table(shown)]
    hidden = len(checkpoints) - len(shown)
    if hidden:
        parts.append(
            Text(f"({hidden} superseded checkpoint(s) deleted by retention not shown; --json lists all)", style="dim")
        )
    if events:
        ev = Table(title="history", title_justify="left", box=None, header_style="bold")
        for col in ("time", "event", "detail"):
            ev.add_column(col)
        for e in events:
            ev.add_row(fmt_time(e.at), e.kind, json.dumps(e.detail, sort_keys=True) if e.detail else "")
        parts += [Text(""), ev]
    return Group(*parts)


def attempts_table(
    attempts: Sequence[AttemptRecord], title: str | None = None, with_cell: bool = True
) -> RenderableType:
    table = Table(title=title, title_justify="left", box=None, header_style="bold")
    if not attempts:
        return (
            Text("no attempts yet", style="dim")
            if title is None
            else Group(Text(title, style="bold"), Text("none yet", style="dim"))
        )
    cols = (["cell"] if with_cell else []) + [
        "#",
        "started",
        "ended",
        "host",
        "pid",
        "steps",
        "reason",
        "wall",
        "peak mem",
        "note",
    ]
    for col in cols:
        table.add_column(col, justify="right" if col in ("#", "pid", "wall", "peak mem") else "left")
    for a in attempts:
        steps = f"{a.start_step}→{a.end_step if a.end_step is not None else '?'}"
        note = a.note or ""
        if a.reason not in (None, "completed", "preempted") and a.error_tail:
            note = (note + " | " if note else "") + a.error_tail.strip().splitlines()[-1]
        row: list[str | Text] = [a.cell] if with_cell else []
        row += [
            str(a.number),
            fmt_time(a.started_at),
            fmt_time(a.ended_at) if a.ended_at else "running",
            a.host,
            str(a.pid or ""),
            steps,
            Text(a.reason or "", style="red" if a.reason not in (None, "completed", "preempted") else ""),
            fmt_seconds(a.wall_seconds),
            fmt_bytes(a.peak_memory_bytes),
            note,
        ]
        table.add_row(*row)
    return table


def checkpoints_table(checkpoints: Sequence[CheckpointRecord]) -> RenderableType:
    table = Table(title="checkpoints", title_justify="left", box=None, header_style="bold")
    for col in ("step", "epoch", "state", "metrics", "size", "path"):
        table.add_column(col, justify="right" if col in ("step", "epoch", "size") else "left")
    for c in checkpoints:
        metrics = ", ".join(f"{k}={fmt_num(v)}" for k, v in c.metrics.items())
        note = f" ({c.note})" if c.note and c.state != "committed" else ""
        table.add_row(str(c.step), fmt_num(c.epoch), c.state + note, metrics, fmt_bytes(c.size_bytes), c.path)
    return table


def report_table(rows: Sequence[dict[str, Any]]) -> RenderableType:
    table = Table(box=None, header_style="bold")
    for col in ("reason", "attempts", "wall hours", "gpu hours", "steps run", "steps lost", "share of wall"):
        table.add_column(col, justify="left" if col == "reason" else "right")
    total_wall = sum(r["wall_hours"] for r in rows) or 1.0
    for r in rows:
        unknown = "+?" if r.get("steps_unknown") else ""  # a program that does not report its steps
        table.add_row(
            r["reason"],
            str(r["attempts"]),
            f"{r['wall_hours']:.3f}",
            f"{r['gpu_hours']:.3f}",
            f"{r['steps_run']}{unknown}",
            f"{r['steps_lost']}{unknown}",
            f"{100 * r['wall_hours'] / total_wall:.1f}%",
        )
    unknown_total = sum(r.get("steps_unknown", 0) for r in rows)
    if not unknown_total:
        return table
    note = Text(
        f"+?: {unknown_total} attempt(s) ran a program that does not report its steps to sweepq, so what they ran "
        "and lost is unknown (sweepq.Run.from_env() or an integration makes it known)",
        style="dim",
    )
    return Group(table, note)


def best_table(rows: Sequence[dict[str, Any]], metric: Metric | None) -> RenderableType:
    name = metric.name if metric else "metric"
    table = Table(box=None, header_style="bold")
    for col in ("rank", "cell", "state", f"best {name}", "step", "checkpoint"):
        table.add_column(col, justify="right" if col in ("rank", "step") else "left")
    for r in rows:
        table.add_row(
            str(r["rank"] or ""), r["cell"], r["state"], fmt_num(r["best"]), str(r["step"] or ""), r["checkpoint"] or ""
        )
    return table
