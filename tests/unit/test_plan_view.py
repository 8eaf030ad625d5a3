"""`sweepq plan`'s table (sweepq/cli/plan_view.py): a small sweep whole, a large one summarised, --all every row.

--all of a large sweep is written line by line; these hold its text equal to the table rich lays out.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from sweepq.cli import plan_view
from sweepq.cli.plain import SafeConsole
from sweepq.cli.plan_view import PlanListing, print_plan
from sweepq.spec.preflight import preflight
from sweepq.spec.types import Sweep
from unit.support import sweep_from

SMALL = PlanListing(whole_up_to=4, ends=2)


def printed(sweep: Sweep, all_rows: bool = False, width: int = 200, listing: PlanListing = SMALL) -> str:
    checked = preflight(sweep, "s.yaml", preview=True)
    console = SafeConsole(width=width, color_system=None, record=True, file=io.StringIO())
    print_plan(console, sweep, checked.root, checked.commands, all_rows, listing)
    return console.export_text()


def rich_table(sweep: Sweep, width: int = 200) -> str:
    """The whole table as rich lays it out (what a small sweep prints under its first line)."""
    console = SafeConsole(width=width, color_system=None, record=True, file=io.StringIO())
    console.print(plan_view._table(sweep.cells, preflight(sweep, "s.yaml", preview=True).commands))
    return console.export_text()


def test_a_small_sweep_is_listed_whole(tmp_path: Path) -> None:
    sweep = sweep_from("name: s\ntrain: m:f\ngroups:\n  - {name: a, grid: {lr: [0.1, 0.2]}}\n  - {name: b}\n", tmp_path)
    assert printed(sweep) == (
        "s: 3 cells in 2 group(s), root runs/s, runs m:f\n"
        " cell  group  cfg\n"
        ' 1.1   a      {"lr": 0.1}\n'
        ' 1.2   a      {"lr": 0.2}\n'
        " 2.1   b      {}\n"
    ).replace("runs/s", str(tmp_path / "runs" / "s"))


def test_a_large_sweep_shows_its_groups_and_its_first_and_last_cells(tmp_path: Path) -> None:
    text = "name: s\ntrain: m:f\ngroups:\n  - {name: a, grid: {lr: [1, 2, 3]}}\n  - {name: b, grid: {lr: [4, 5, 6]}}\n"
    assert printed(sweep_from(text, tmp_path)) == (
        f"s: 6 cells in 2 group(s), root {tmp_path / 'runs' / 's'}, runs m:f\n"
        " group  cells  first  last\n"
        " a          3  1.1    1.3\n"
        " b          3  2.1    2.3\n"
        " cell  group  cfg\n"
        ' 1.1   a      {"lr": 1}\n'
        ' 1.2   a      {"lr": 2}\n'
        " …     …      …\n"
        ' 2.2   b      {"lr": 5}\n'
        ' 2.3   b      {"lr": 6}\n'
        "2 of 6 cells not shown: --all lists every row, --json every cell\n"
    )


PROGRAM = """\
name: s
program: t.py
params: {data: /data/%s}
groups:
  - {name: first, grid: {lr: [0.001, 0.003, 0.01], seed: [1, 2, 3]}}
  - {name: other, grid: {lr: [1e-05]}}
"""


@pytest.mark.parametrize("data", ["set", "漢字é"], ids=["ascii", "wide"])
@pytest.mark.parametrize("form", ["train", "program"])
def test_all_rows_of_a_large_sweep_are_the_table_rich_lays_out(tmp_path: Path, form: str, data: str) -> None:
    (tmp_path / "t.py").write_text("")
    text = PROGRAM % data
    sweep = sweep_from(text if form == "program" else text.replace("program: t.py", "train: m:f"), tmp_path)
    for width in (200, 60):  # the table fits the console, or rich folds its long values
        shown = printed(sweep, all_rows=True, width=width)
        assert shown[shown.index(" cell ") :] == rich_table(sweep, width), shown  # below the first line
    assert shown.count("\n") > len(sweep.cells) + 2  # at 60 cells wide, long values fold
    wide = printed(sweep, all_rows=True)
    assert wide.count("\n") == 2 + len(sweep.cells)
    written_by_lines = plan_view._print_lines(
        SafeConsole(width=200, file=io.StringIO()), sweep.cells, preflight(sweep, "s.yaml", preview=True).commands
    )
    # A wide character (in a command line: the cfg's JSON escapes it) is measured by rich's layout.
    assert written_by_lines is (form == "train" or data == "set")
