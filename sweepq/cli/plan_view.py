"""`sweepq plan`'s table: every cell of a small sweep; of a large one, a summary and its first and last cells.

A sweep of up to `PlanListing.whole_up_to` cells is listed whole, a row a cell, as it
always was. A larger one (a grid of 100,000 cells would be 100,000 rows, and as many
rows held by rich before the first is written) shows the cells per group, the first
and the last `ends` cells, and a line that says how many were left out: `--all` lists
every row, `--json` every cell. Only the rows shown are built (their cfg's JSON, their
command line), so the summary of 100,000 cells costs about what their expansion does.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.segment import Segment, Segments
from rich.style import Style
from rich.table import Table
from rich.text import Text

from sweepq.results import spelling
from sweepq.spec.types import CellSpec, Sweep


@dataclass(frozen=True)
class PlanListing:
    """How much of a sweep `plan` lists without --all (as `status` does: cli/read_commands.Listing)."""

    whole_up_to: int = 50  # a sweep of up to this many cells shows every row
    ends: int = 10  # a larger one: its first and its last this many cells


PLAN_LISTING = PlanListing()


def print_plan(
    console: Console,
    sweep: Sweep,
    root: Path,
    commands: dict[str, list[str]],
    all_rows: bool,
    listing: PlanListing = PLAN_LISTING,
) -> None:
    """The sweep's first line, then its cells: every row (a small sweep, or `all_rows`), else a summary."""
    cells = sweep.cells
    # A W&B file may run a command without `program:` (`command: [bash, run.sh]`): name it, never "None".
    entry = sweep.settings.train or sweep.settings.program or " ".join(sweep.settings.command or ())
    console.print(
        f"{sweep.settings.name}: {len(cells):,} cells in {len(sweep.groups)} group(s), "
        f"root {spelling.shown_path(root)}, runs {entry}",
        markup=False,
    )
    if len(cells) <= max(listing.whole_up_to, 2 * listing.ends):
        console.print(_table(cells, commands))
        return
    if all_rows:
        if not _print_lines(console, cells, commands):
            console.print(_table(cells, commands))
        return
    console.print(_groups(cells))
    first, last = cells[: listing.ends], cells[-listing.ends :]
    console.print(_table(first, commands, gap_before=last))
    left_out = len(cells) - len(first) - len(last)
    console.print(
        Text(f"{left_out:,} of {len(cells):,} cells not shown: --all lists every row, --json every cell", style="dim")
    )


def _groups(cells: Sequence[CellSpec]) -> Table:
    """Per group, in the file's order: its cells, the first and the last."""
    counts = Counter(c.group for c in cells)
    table = Table(box=None, header_style="bold")
    table.add_column("group")
    table.add_column("cells", justify="right")
    table.add_column("first")
    table.add_column("last")
    at = 0
    for group in sorted(counts):
        n = counts[group]
        table.add_row(Text(cells[at].group_name), f"{n:,}", cells[at].id, cells[at + n - 1].id)
        at += n
    return table


def _headers(commands: dict[str, list[str]]) -> tuple[str, ...]:
    return ("cell", "group", "cfg") + (("command",) if commands else ())  # program cells have a command line


def _row(c: CellSpec, commands: dict[str, list[str]]) -> list[str]:
    """A cell's values as the table shows them: its cfg's JSON, its command line for program cells."""
    from sweepq.program.launch import shell_join

    row = [c.id, c.group_name, json.dumps(c.cfg, sort_keys=True)]
    if commands:
        row.append(shell_join(commands[c.id]))
    return row


def _table(cells: Sequence[CellSpec], commands: dict[str, list[str]], gap_before: Sequence[CellSpec] = ()) -> Table:
    """A row a cell; with `gap_before`, a row "…" and then those cells."""
    table = Table(box=None, header_style="bold")
    for col in _headers(commands):
        table.add_column(col, overflow="fold")
    for c in cells:
        table.add_row(*(Text(value) for value in _row(c, commands)))  # Text: a value like "[/x]" is not markup
    if gap_before:
        table.add_row(*(Text("…") for _ in table.columns))
        for c in gap_before:
            table.add_row(*(Text(value) for value in _row(c, commands)))
    return table


def _print_lines(console: Console, cells: Sequence[CellSpec], commands: dict[str, list[str]]) -> bool:
    """Every cell a line, laid out as `_table` lays out a table that fits the console (no box, a space at
    each edge, two between columns, each column as wide as its widest value), `ROWS_AT_ONCE` rows a print.

    Rich lays out every cell of a table before it writes the first line: `plan --all` of 100,000 cells took
    36 s and 400 MB. False, with nothing printed, where rich's layout is needed: a value that is not plain
    ASCII (a wide or a control character: its width is rich's to measure), or a table wider than the
    console (rich folds its long values).
    """
    headers = _headers(commands)
    rows = [_row(c, commands) for c in cells]
    if not all(value.isascii() and value.isprintable() for row in rows for value in row):
        return False
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]
    if sum(widths) + 2 * len(widths) > console.width:
        return False

    def line(values: Sequence[str]) -> str:
        return (" " + "  ".join(v.ljust(w) for v, w in zip(values, widths, strict=True))).rstrip()

    console.print(Segments([Segment(line(headers), _BOLD), Segment.line()]))
    for start in range(0, len(rows), ROWS_AT_ONCE):
        chunk = rows[start : start + ROWS_AT_ONCE]
        console.print(Segments([Segment("\n".join(line(row) for row in chunk)), Segment.line()]))
    return True


ROWS_AT_ONCE = 1000
_BOLD = Style(bold=True)  # the table's header style
