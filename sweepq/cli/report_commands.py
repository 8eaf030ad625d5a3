"""`sweepq report`: where the hours went across the sweep, per termination reason."""

from __future__ import annotations

from sweepq.cli import render
from sweepq.cli.app import friendly, json_option, main, out, print_json, reading, root_option
from sweepq.cli.read_commands import place_argument


@main.command()
@place_argument
@root_option
@json_option
@friendly
def report(spec: str | None, root: str | None, as_json: bool) -> None:
    """Where the hours went: attempts, wall and GPU hours, and steps lost, per termination reason.

    SPEC_OR_ROOT is the sweep file or its root folder (default: --root, else the current folder).
    """
    from sweepq.cli.report import by_reason

    with reading(spec, root) as store:
        rows = by_reason(store.attempts())
        if as_json:
            print_json(rows)
        else:
            out().print(render.report_table(rows))
