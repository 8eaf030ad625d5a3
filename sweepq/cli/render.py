"""Human output: pure functions from records to rich renderables (tested with golden text).

The JSON of `--json` is the stable interface; these tables are for people and
may change. Columns appear only when some row has something to show, and a
table keeps to the console's width by the priority order of cli/columns.py.
"""

from __future__ import annotations

import io
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from sweepq.analysis.grid import flatten
from sweepq.cli import param_columns
from sweepq.cli.columns import METRIC, PARAMS, SAME, kept, ranks
from sweepq.cli.fit import Column, FittedTable, short_header
from sweepq.cli.plain import SafeConsole
from sweepq.queue.records import AttemptRecord, CellRecord
from sweepq.queue.states import CLAIMABLE, CellState
from sweepq.results import params, report
from sweepq.results.spelling import fmt_num, fmt_step, metric_of
from sweepq.spec.types import Metric
from sweepq.worker import usage_text
from sweepq.worker.usage_text import low_gpu_flag

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
    console = SafeConsole(width=width, color_system=None, force_terminal=False, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


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


def fmt_rate(steps_per_second: float | None, short: bool = False) -> str:
    """A speed as steps a second, or seconds a step when under one step a second ("3.2 s/step")."""
    if not steps_per_second:
        return ""
    if steps_per_second >= 1:
        return f"{_three(steps_per_second)}{'/s' if short else ' steps/s'}"
    return f"{_three(1 / steps_per_second)}{'s/st' if short else ' s/step'}"


def _three(v: float) -> str:
    """Three significant digits, never in exponent form."""
    return f"{v:.0f}" if v >= 99.5 else f"{v:.1f}" if v >= 9.95 else f"{v:.2f}"


def fmt_time(t: datetime | None) -> str:
    if t is None:
        return ""
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def fmt_short_time(t: datetime | None) -> str:
    """A time in 11 cells: month, day, hours and minutes (UTC)."""
    return "" if t is None else t.astimezone(UTC).strftime("%m-%d %H:%M")


def fmt_epoch(c: CellRecord) -> str:
    if c.epoch is None and c.total_epochs is None:
        return ""
    if c.state == CellState.DONE and c.epoch is not None:
        # Epochs run, counted whole: a library that counts from 0 logs its last epoch's middle (37.5 of 38).
        ran = math.ceil(c.epoch)
        return f"{ran}/{fmt_num(c.total_epochs)}" if c.total_epochs else f"{ran}"
    done = "" if c.epoch is None else f"{int(c.epoch)}" if c.epoch == int(c.epoch) else f"{c.epoch:.1f}"
    return f"{done or 0}/{fmt_num(c.total_epochs)}" if c.total_epochs else done


def fmt_progress(p: float | None) -> str:
    return "" if p is None else f"{100 * p:.0f}%"


DEAD_NOTE = "no live process: reaped at the next launch"


def summary(cells: Sequence[CellRecord]) -> Text:
    counts = Counter(c.state for c in cells if not c.removed)
    return summary_of_counts(counts, sum(1 for c in cells if c.removed))


def summary_of_counts(counts: Mapping[CellState, int], removed: int) -> Text:
    """The cells still in the sweep counted by state, and those gone from its file (Store.census)."""
    parts = [f"{counts[s]} {s}" for s in CellState if counts.get(s)]
    total = sum(counts.values())
    line = Text(f"{total} cell: " if total == 1 else f"{total} cells: ")
    line.append(", ".join(parts))
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
    all_params: bool = False,
    usages: dict[str, dict[str, Any]] | None = None,
    rates: dict[str, float] | None = None,
    footer: RenderableType | None = None,
    leases: Mapping[str, tuple[str | None, float]] | None = None,
) -> RenderableType:
    """`etas`: seconds until each cell ends (the forecast's, header.per_cell);
    `leases`: on a server database, each leased cell's holder's host and the seconds since its last
    renewal (columns `host` and `lease age` for the running cells; None: no such columns);
    `stalls`: seconds without progress of running cells past their threshold (Store.stalls);
    `notes`: what the last attempt of a cell said, when its machine failed it (Store.fault_notes);
    `all_params`: every cfg key, not only those that vary across the cells;
    `usages`: each cell's CPU/GPU use from its newest attempt (usage_text.latest_by_cell);
    `rates`: each cell's measured steps per second (header.per_cell);
    `footer`: what ends a table of some of the sweep's cells (status_footer), in place of the summary
    of the cells shown and of the cfg keys the same in every one of them (true of the rows shown only)."""
    dead, etas, usages, rates = dead or set(), etas or {}, usages or {}, rates or {}
    told = _Told(stalls or {}, notes or {}, now or datetime.now(UTC))
    mname = metric.name if metric else next((metric_of(c, None)[0] for c in cells if c.metrics), "")
    mvalues = [fmt_num(c.metrics.get(mname)) if mname else "" for c in cells]
    rank = ranks("status")
    cols = [
        Column("cell", [c.id + (" (gone)" if c.removed else "") for c in cells], rank["cell"]),
        Column("group", [c.group_name for c in cells], rank["group"]),
        Column("state", [Text(str(c.state), style=STATE_STYLE[c.state]) for c in cells], rank["state"]),
        Column("epoch", [fmt_epoch(c) for c in cells], rank["epoch"], "right"),
        Column("step", [fmt_step(c) for c in cells], rank["step"], "right"),
        Column("progress", [fmt_progress(c.progress) for c in cells], rank["progress"], "right"),
        Column(
            "eta",
            [fmt_seconds(etas[c.id]) if c.id in etas and c.id not in dead else "" for c in cells],
            rank["eta"],
            "right",
        ),
        Column(
            "rate",
            [fmt_rate(rates.get(c.id)) for c in cells],
            rank["rate"],
            "right",
            short_values=[fmt_rate(rates.get(c.id), short=True) for c in cells],
        ),
        *param_columns.columns([c.result_cfg for c in cells], all_params, rank[PARAMS], rank[SAME]),
        Column(mname or "metric", mvalues, rank[METRIC], "right", short_name=short_header(mname, mvalues)),
        Column("best", [fmt_num(c.best) for c in cells], rank["best"], "right"),
        Column("attempts", [str(c.attempts) if c.attempts else "" for c in cells], rank["attempts"], "right"),
        *_lease_columns(cells, leases, rank),
        Column("use", [usage_text.usage_cell(usages.get(c.id)) for c in cells], rank["use"], "right"),
        Column("last reason", [c.last_reason or "" for c in cells], rank["last reason"], short_name="reason"),
        Column(
            "note",
            [DEAD_NOTE if c.id in dead else _joined(told.note(c), low_gpu_flag(usages.get(c.id))) for c in cells],
            rank["note"],
            prose="below",
        ),
    ]
    table = FittedTable(cols, kept=kept("status"), title=title)
    if footer is not None:
        return Group(table, Text(""), footer)
    return Group(table, param_columns.Constants([c.result_cfg for c in cells], all_params), Text(""), summary(cells))


def _lease_columns(
    cells: Sequence[CellRecord], leases: Mapping[str, tuple[str | None, float]] | None, rank: dict[str, int]
) -> list[Column]:
    """Where each running cell runs and how long ago its holder last renewed its lease (a server database)."""
    if leases is None:
        return []
    held = [leases.get(c.id) if c.state is CellState.RUNNING else None for c in cells]
    return [
        Column("host", [h[0] or "" if h else "" for h in held], rank["host"]),
        Column("lease age", [fmt_seconds(h[1]) if h else "" for h in held], rank["lease age"], "right"),
    ]


def status_footer(counts: Mapping[CellState, int], removed: int, shown: int, why: str) -> Group:
    """Under a table of some of the sweep's cells: how many it left out and why, then the counts."""
    total = sum(counts.values()) + removed
    line = Text(f"{total - shown:,} of {total:,} cells not shown ({why}): --all shows every row", style="dim")
    return Group(line, summary_of_counts(counts, removed))


def _joined(*parts: str | None) -> str:
    return "; ".join(p for p in parts if p)


@dataclass(frozen=True)
class _Told:
    """What the status table says of a cell beyond its columns, as of `now`."""

    stalls: dict[str, float]
    notes: dict[str, str]
    now: datetime

    def note(self, c: CellRecord) -> str:
        parts = [
            ran_older_note(c),
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


def ran_older_note(c: CellRecord) -> str:
    """What a done cell kept under an older cfg says beside its result (launch --accept-changed): the values
    it ran with are those in its cfg columns; the sweep file's new ones run only when asked."""
    if c.new_cfg is None:
        return ""
    return f"ran with an older cfg ({cfg_change(c.result_cfg, c.new_cfg)}); `sweepq reset {c.id}` runs the new one"


def cfg_change(ran: Mapping[str, Any], now: Mapping[str, Any]) -> str:
    """`epochs=2, now 4`: each flattened key whose value differs, as it ran and as the file gives it now."""
    a, b = flatten(ran), flatten(now)

    def spelt(flat: Mapping[str, Any], k: str) -> str:
        return params.full(flat[k]) if k in flat else "(none)"

    return ", ".join(
        f"{k}={spelt(a, k)}, now {spelt(b, k)}"
        for k in sorted(set(a) | set(b))
        if (k in a) != (k in b) or a.get(k) != b.get(k)
    )


def fmt_age(s: float) -> str:
    """A duration as people say it: "45 s", "12 min", "3.5 h"."""
    if s < 90:
        return f"{s:.0f} s"
    if s < 90 * 60:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def attempts_table(
    attempts: Sequence[AttemptRecord], title: str | None = None, with_cell: bool = True
) -> RenderableType:
    if not attempts:
        return (
            Text("no attempts yet", style="dim")
            if title is None
            else Group(Text(title, style="bold"), Text("none yet", style="dim"))
        )
    rank = ranks("attempts")
    failed = [a.reason not in (None, "completed", "preempted") for a in attempts]
    cols = [
        Column("cell", [a.cell for a in attempts], rank["cell"]),
        Column("#", [str(a.number) for a in attempts], rank["#"], "right"),
        Column(
            "started",
            [fmt_time(a.started_at) for a in attempts],
            rank["started"],
            short_values=[fmt_short_time(a.started_at) for a in attempts],
            family="time",
        ),
        Column(
            "ended",
            [fmt_time(a.ended_at) if a.ended_at else "running" for a in attempts],
            rank["ended"],
            short_values=[fmt_short_time(a.ended_at) if a.ended_at else "running" for a in attempts],
            family="time",
        ),
        Column("host", [a.host for a in attempts], rank["host"]),
        Column("pid", [str(a.pid or "") for a in attempts], rank["pid"], "right"),
        Column("use", [usage_text.usage_cell(a.usage) for a in attempts], rank["use"], "right"),
        Column(
            "steps",
            [f"{a.start_step}→{a.end_step if a.end_step is not None else '?'}" for a in attempts],
            rank["steps"],
        ),
        Column(
            "reason",
            [Text(a.reason or "", style="red" if bad else "") for a, bad in zip(attempts, failed, strict=True)],
            rank["reason"],
        ),
        Column("wall", [fmt_seconds(a.wall_seconds) for a in attempts], rank["wall"], "right"),
        Column("peak mem", [fmt_bytes(a.peak_memory_bytes) for a in attempts], rank["peak mem"], "right"),
        Column(
            "note",
            [_attempt_note(a, bad) for a, bad in zip(attempts, failed, strict=True)],
            rank["note"],
            prose="below",
        ),
    ]
    labels = [f"{a.cell} #{a.number}" if with_cell else f"#{a.number}" for a in attempts]
    return FittedTable(cols if with_cell else cols[1:], kept=kept("attempts"), title=title, labels=labels)


def _attempt_note(a: AttemptRecord, failed: bool) -> str:
    note = a.note or ""
    if failed and a.error_tail:
        note = (note + " | " if note else "") + a.error_tail.strip().splitlines()[-1]
    return note


def report_table(rows: Sequence[dict[str, Any]]) -> RenderableType:
    total_wall = sum(r["wall_hours"] for r in rows) or 1.0
    unknown = ["+?" if r.get("steps_unknown") else "" for r in rows]  # a program that does not report its steps
    rank = ranks("report")

    def right(name: str, values: list[str]) -> Column:
        return Column(name, values, rank[name], "right")

    cols = [
        Column("reason", [r["reason"] for r in rows], rank["reason"]),
        right("attempts", [str(r["attempts"]) for r in rows]),
        right("wall hours", [f"{r['wall_hours']:.3f}" for r in rows]),
        right("gpu hours", [f"{r['gpu_hours']:.3f}" for r in rows]),
        right("steps run", [f"{r['steps_run']}{u}" for r, u in zip(rows, unknown, strict=True)]),
        right("steps lost", [f"{r['steps_lost']}{u}" for r, u in zip(rows, unknown, strict=True)]),
        right("share of wall", [f"{100 * r['wall_hours'] / total_wall:.1f}%" for r in rows]),
        # report.by_reason's split of what was lost: training done again, and downtime (not in wall hours)
        right("training lost h", [f"{r.get('training_lost_hours', 0.0):.3f}" for r in rows]),
        right("downtime h", [f"{r.get('downtime_hours', 0.0):.3f}" for r in rows]),
    ]
    table = FittedTable(cols, kept=kept("report"))
    notes: list[RenderableType] = []
    unknown_total = sum(r.get("steps_unknown", 0) for r in rows)
    if unknown_total:
        notes.append(
            Text(
                f"+?: {unknown_total} attempt(s) ran a program that does not report its steps to sweepq, so what "
                "they ran and lost is unknown (sweepq.Run.from_env() or an integration makes it known)",
                style="dim",
            )
        )
    if (split := report.hours_words(rows)) is not None:
        notes.append(Text(split))
    return Group(table, *notes) if notes else table


def best_table(rows: Sequence[dict[str, Any]], metric: Metric | None, all_params: bool = False) -> RenderableType:
    """`rows` from report.best_per_cell (each with its cell's cfg)."""
    mname = metric.name if metric else "metric"
    name = f"best {mname}"
    values = [fmt_num(r["best"]) for r in rows]
    rank = ranks("best")
    cols = [
        Column("rank", [str(r["rank"] or "") for r in rows], rank["rank"], "right"),
        Column("cell", [r["cell"] for r in rows], rank["cell"]),
        Column(
            "state",
            [
                r["state"]
                + (" (ran with an older cfg)" if r.get("new_cfg") is not None else "")
                + (" (inexact resume)" if r.get("inexact_resume") else "")
                for r in rows
            ],
            rank["state"],
        ),
        *param_columns.columns([r["cfg"] for r in rows], all_params, rank[PARAMS], rank[SAME]),
        Column(name, values, rank[METRIC], "right", short_name=short_header(mname, values)),
        Column("step", [str(r["step"] or "") for r in rows], rank["step"], "right"),
        Column("checkpoint", [r["checkpoint"] or "" for r in rows], rank["checkpoint"]),
    ]
    return Group(FittedTable(cols, kept=kept("best")), param_columns.Constants([r["cfg"] for r in rows], all_params))
