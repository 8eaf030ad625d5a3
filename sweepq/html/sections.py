"""The report's sections, each a function of the gathered report returning one HTML string.

Every text that comes from the sweep (its name, root, cell ids, cfg keys and
values, metric names, reasons, error lines) goes through `e()`. Tables are plain
HTML (readable without scripts); a column whose values are all numbers is marked
`class="n"` so that the page's few lines of script sort it by number.
"""

from __future__ import annotations

from collections import Counter
from html import escape
from pathlib import Path
from typing import Any

from sweepq.html.charts import MANY, Chart
from sweepq.html.gather import Report
from sweepq.html.svg import chart_svg, colour_class
from sweepq.layout import CellPaths
from sweepq.queue.records import AttemptRecord, CellRecord
from sweepq.queue.states import CellState
from sweepq.results import failures, params
from sweepq.results.report import hours_words
from sweepq.results.spelling import fmt_num, fmt_step, metric_of, shown_path

FAILURES_SHOWN = 500  # a sweep where thousands failed: the first ones say why, status lists the rest
VALUES_SHOWN = 12  # distinct values of one cfg key listed in the keys' table


def e(text: Any) -> str:
    """`text` as HTML text or an attribute's value: nothing in it can open a tag or end a quote."""
    return escape(str(text), quote=True)


def header(r: Report) -> str:
    counts = Counter(c.state for c in r.cells)
    states = " · ".join(f'<span class="s-{s}">{counts[s]} {s}</span>' for s in CellState if counts[s])
    wall = sum(a.wall_seconds or 0.0 for a in r.attempts) / 3600
    gpu = sum(a.gpu_seconds or 0.0 for a in r.attempts) / 3600
    written = r.written.strftime("%Y-%m-%d %H:%M:%S %Z").strip()
    out = [
        f"<header><h1>{e(r.settings.name)}</h1>",
        f"<p>root <code>{e(shown_path(r.root))}</code> · written {e(written)} by sweepq {e(r.version)}</p>",
        f"<p><b>{len(r.cells)}</b> cells: {states or 'none'}</p>",
        f"<p><b>{wall:.2f}</b> wall hours and <b>{gpu:.2f}</b> GPU hours in <b>{len(r.attempts)}</b> attempts</p>",
    ]
    if r.damaged:
        files = ", ".join(
            f"<code>{e(_in_root(r, CellPaths(r.root, c).metrics(a)))}</code> ({n})"
            for (c, a), n in sorted(r.damaged.items())
        )
        out.append(f'<p class="warn">unreadable lines skipped in metric history: {files}</p>')
    if r.out_of_range:
        files = ", ".join(
            f"<code>{e(_in_root(r, CellPaths(r.root, c).metrics(a)))}</code> ({n})"
            for (c, a), n in sorted(r.out_of_range.items())
        )
        out.append(
            '<p class="warn">lines with numbers out of range skipped in metric history (a step beyond 64-bit '
            f"integers, a time that is not a finite number, a value beyond a double): {files}</p>"
        )
    out.append("</header>")
    return "".join(out)


def status(r: Report) -> str:
    """The cells: state, the cfg keys that vary, step, the sweep's metric, attempts, last reason. Sortable."""
    cfgs = [c.result_cfg for c in r.cells]  # the cfg each result came from
    varying, same = params.split_keys(cfgs)
    named = params.headers(varying)
    flat = [params.flatten(c) for c in cfgs]
    mname = r.metric_name or next((metric_of(c, None)[0] for c in r.cells if c.metrics), "")
    heads = [
        _th("cell", numeric=False),
        _th("state", numeric=False),
        *(_th(named[k], numeric=_all_numbers(f.get(k) for f in flat), title=k) for k in varying),
        _th("step", numeric=True),
        _th(mname or "metric", numeric=True, title=f"{mname}: the latest value logged" if mname else ""),
        _th("best", numeric=True, title=f"the best {mname} (by the sweep's goal)" if r.metric_name else ""),
        _th("attempts", numeric=True),
        _th("last reason", numeric=False),
    ]
    rows = []
    for i, (c, f) in enumerate(zip(r.cells, flat, strict=True)):
        cfg_cells = "".join(f"<td>{e(params.full(f[k])) if k in f else ''}" for k in varying)
        gone = " (gone)" if c.removed else ""
        swatch = f'<i class="sw p{colour_class(i)}"></i>' if r.charts.every_cell else ""  # its lines' colour
        rows.append(
            f'<tr><td>{swatch}{e(c.id)}{gone}<td class="s-{c.state}">{c.state}'
            f"{cfg_cells}<td>{e(fmt_step(c))}<td>{e(fmt_num(c.metrics.get(mname)) if mname else '')}"
            f"<td>{e(fmt_num(c.best))}<td>{c.attempts or ''}<td>{e(c.last_reason or '')}\n"
        )
    return (
        '<section id="cells"><h2>Cells</h2>'
        f"<p>{len(r.cells)} cells; the cfg keys that vary are columns ({len(varying)} of {len(varying) + len(same)}"
        "). Click a column's name to sort by it.</p>"
        f"{_keys(varying, same, flat)}"
        f'<div class="scroll"><table class="sortable" id="cells-table"><thead><tr>{"".join(heads)}</tr></thead>'
        f"<tbody>\n{''.join(rows)}</tbody></table></div></section>"
    )


def _th(name: str, numeric: bool, title: str = "") -> str:
    attrs = (' class="n"' if numeric else "") + (f' title="{e(title)}"' if title else "")
    return f"<th{attrs}>{e(name)}</th>"


def _all_numbers(values: Any) -> bool:
    present = [v for v in values if v is not None]
    return bool(present) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in present)


def _keys(varying: list[str], same: list[str], flat: list[dict[str, Any]]) -> str:
    """Every cfg key with its values (those the same in every cell too), folded."""
    rows = []
    for k in varying:
        values = list(dict.fromkeys(params.full(f[k]) if k in f else "(unset)" for f in flat))
        shown = ", ".join(e(v) for v in values[:VALUES_SHOWN])
        more = f", … {len(values) - VALUES_SHOWN} more" if len(values) > VALUES_SHOWN else ""
        rows.append(f"<tr><td>{e(k)}<td>varies<td>{shown}{more}\n")
    for k in same:
        rows.append(f"<tr><td>{e(k)}<td>same<td>{e(params.full(flat[0][k]))}\n")
    if not rows:
        return ""
    return (
        f"<details><summary>every cfg key ({len(varying)} vary, {len(same)} the same in every cell)</summary>"
        f"<table><thead><tr><th>key<th>in the cells<th>values</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        "</details>"
    )


def curves(r: Report) -> str:
    """Per metric, one chart: each cell's stitched curve (or, with many cells, the best and a band)."""
    intro = (
        "<p>Each cell's curve, stitched across its attempts: solid where kept, <span class=dash>dashed</span> where "
        "an attempt's points were lost (logged after the checkpoint the next attempt resumed from), dots at "
        f"checkpoints, a ringed dot at the cell's best point of the sweep's metric (by its goal; another metric has "
        f"no direction, so no best). {_colours(r)}; point at a line for its cell.</p>"
    )
    figures = [_figure(chart) for chart in r.charts.charts]
    if not figures:
        intro = "<p>No metric history yet: nothing was logged with <code>run.log</code>.</p>"
    more = ""
    if r.charts.more:
        names = ", ".join(f"<code>{e(n)}</code>" for n in r.charts.more)
        more = (
            f"<p>{len(r.charts.more)} more metric(s) logged, not drawn here: {names}. "
            "<code>sweepq plot --metric NAME</code> draws one.</p>"
        )
    return f'<section id="curves"><h2>Curves</h2>{intro}<div class="charts">{"".join(figures)}</div>{more}</section>'


def _colours(r: Report) -> str:
    if r.charts.every_cell:
        return "A line's colour is its cell's swatch in the table"
    return f"With more than {MANY} cells a chart draws a few of them, named in its legend"


def _figure(chart: Chart) -> str:
    goal = {"min": " (the sweep's metric: lower is better)", "max": " (the sweep's metric: higher is better)"}
    what = f"{chart.cells} cell{'s' if chart.cells != 1 else ''}{goal.get(chart.goal or '', '')}"
    legend = ""
    if chart.band is not None:
        what = (
            f"{chart.cells} cells log it: drawn are their median (black) and 10-90 % band (grey), and "
            f"{e(chart.ranked_by)}"
        )
        names = (f'<i class="sw p{colour_class(line.colour)}"></i>{e(line.cell)}' for line in chart.lines)
        legend = f'<p class="legend">{" ".join(names)}</p>'
    return f"<figure><figcaption><b>{e(chart.metric)}</b> · {what}</figcaption>{chart_svg(chart)}{legend}</figure>"


def hours(r: Report) -> str:
    """Attempts, hours and steps per termination reason: where the sweep's time went (`sweepq report`)."""
    total = sum(row["wall_hours"] for row in r.reasons) or 1.0
    unknown = sum(row.get("steps_unknown", 0) for row in r.reasons)
    heads = ["reason", "attempts", "wall hours", "gpu hours", "steps run", "steps lost", "share of wall"]
    heads += ["training lost h", "downtime h"]  # report.by_reason's split, as `sweepq report` shows it
    rows = []
    for row in r.reasons:
        u = "+?" if row.get("steps_unknown") else ""
        rows.append(
            f"<tr><td>{e(row['reason'])}<td>{row['attempts']}<td>{row['wall_hours']:.3f}<td>{row['gpu_hours']:.3f}"
            f"<td>{row['steps_run']}{u}<td>{row['steps_lost']}{u}<td>{100 * row['wall_hours'] / total:.1f}%"
            f"<td>{row['training_lost_hours']:.3f}<td>{row['downtime_hours']:.3f}\n"
        )
    note = ""
    if unknown:
        note = (
            f"<p>+?: {unknown} attempt(s) ran a program that does not report its steps to sweepq, so what they ran "
            "and lost is unknown.</p>"
        )
    if (split := hours_words(r.reasons)) is not None:
        note += f"<p>{e(split)}</p>"
    body = "".join(rows) or f'<tr><td colspan="{len(heads)}">no attempt yet\n'
    return (
        '<section id="hours"><h2>Hours by termination reason</h2>'
        f'<table class="sortable"><thead><tr>{"".join(_th(h, h != "reason") for h in heads)}</tr></thead>'
        f"<tbody>\n{body}</tbody></table>{note}</section>"
    )


def failed(r: Report) -> str:
    """Each cell whose last attempt failed: why, in one line, and where its logs are."""
    told = [c for c in r.cells if failures.told_failure(c)]
    last = {(a.cell, a.number): a for a in r.attempts}
    rows = [_failure_row(r, c, last.get((c.id, c.attempts))) for c in told[:FAILURES_SHOWN]]
    more = ""
    if len(told) > FAILURES_SHOWN:
        more = f"<p>… and {len(told) - FAILURES_SHOWN} more: <code>sweepq status</code> lists every cell.</p>"
    if not told:
        return '<section id="failures"><h2>Failures</h2><p>No cell failed.</p></section>'
    return (
        '<section id="failures"><h2>Failures</h2>'
        f"<p>{len(told)} cell(s) whose last attempt failed.</p>"
        '<table class="sortable"><thead><tr><th>cell<th>state<th>reason<th>why<th>logs</tr></thead><tbody>\n'
        f"{''.join(rows)}</tbody></table>{more}</section>"
    )


def _failure_row(r: Report, c: CellRecord, a: AttemptRecord | None) -> str:
    why = (failures.failure_line(a) if a is not None else None) or ""
    paths = CellPaths(r.root, c.id)
    logs = f"<code>{e(failures.logs_hint(c.id, str(r.root)))}</code>"
    if a is not None:
        files = (paths.stdout(a.number), paths.stderr(a.number))
        logs += "<br>" + " ".join(f"<code>{e(_in_root(r, f))}</code>" for f in files)
    return f'<tr><td>{e(c.id)}<td class="s-{c.state}">{c.state}<td>{e(c.last_reason or "")}<td>{e(why)}<td>{logs}\n'


def _in_root(r: Report, path: Path) -> str:
    return path.relative_to(r.root).as_posix()
