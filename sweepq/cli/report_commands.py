"""`sweepq report`: where the hours went across the sweep, per termination reason."""

from __future__ import annotations

from pathlib import Path

import click

from sweepq.cli import render
from sweepq.cli.app import friendly, json_option, main, out, print_json, reading, root_option, sqlite_reading
from sweepq.cli.read_commands import place_argument
from sweepq.errors import UsageError


@main.command()
@place_argument
@root_option
@json_option
@click.option("--grid", "grid_only", is_flag=True, help="Only what matters in the grid (with --json: the analyses).")
@click.option(
    "--metric",
    "metric_name",
    metavar="NAME",
    help="Analyse this metric's last logged value (default: the best value of the sweep's metric).",
)
@click.option(
    "--html",
    "html_file",
    metavar="FILE",
    help="Write the whole sweep as one offline HTML page (FILE.html) instead of printing the tables.",
)
@friendly
def report(
    spec: str | None, root: str | None, as_json: bool, grid_only: bool, metric_name: str | None, html_file: str | None
) -> None:
    """Where the hours went: attempts, wall and GPU hours, and steps lost, per termination reason; then
    what matters in the grid: per cfg key, the metric's mean for each value and the key's share of its
    variance, keys ranked.

    SPEC_OR_ROOT is the sweep file or its root folder (default: --root, else the current folder).
    """
    from sweepq.cli import grid_view
    from sweepq.results.report import by_reason

    if html_file is not None:
        _html(spec, root, html_file, as_json)
        return
    with sqlite_reading(spec, root) as store:
        rows = by_reason(store.attempts(), store.checkpoint_times())
        if as_json and not grid_only:  # the hours per reason alone: what --json has always printed
            print_json(rows)
            return
        # analysed before anything is printed: a misspelt --metric prints nothing but its error
        cells = store.cells(include_removed=False)
        analyses, what_matters = grid_view.section(cells, store.settings().metric, metric_name)
        if as_json:
            print_json([a.to_json() for a in analyses])
            return
        if not grid_only:
            out().print(render.report_table(rows))
            out().print()
        out().print(what_matters)


def _html(spec: str | None, root: str | None, html_file: str, as_json: bool) -> None:
    """`--html FILE`: the cells, curves, hours and failures in one self-contained page."""
    from sweepq.history.read import skipped_lines
    from sweepq.html import page
    from sweepq.html.gather import gather

    if as_json:
        raise UsageError("--html writes a page and --json prints JSON: choose one")
    path = page.output(Path(html_file))  # before the root is read: a refused FILE costs nothing
    with reading(spec, root) as store:
        report = gather(store)
    for cell in dict.fromkeys(c for c, _ in sorted({*report.damaged, *report.out_of_range})):
        damaged = {a: n for (c, a), n in report.damaged.items() if c == cell}
        out_of_range = {a: n for (c, a), n in report.out_of_range.items() if c == cell}
        for line in skipped_lines(report.root, cell, damaged, out_of_range):
            click.echo(line, err=True)
    size = page.write(path, report)
    drawn = len(report.charts.charts)
    click.echo(
        f"wrote {path}: {len(report.cells)} cells, {drawn} metric chart(s), {size / 1e6:.2f} MB; it needs no network"
    )
