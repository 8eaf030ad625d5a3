"""The one sanitiser of human output (cli/visible.py), its console (cli/plain.py) and the CSV cell rule."""

from __future__ import annotations

import csv
import io

import pytest
from rich.table import Table
from rich.text import Text

from sweepq.cli import render
from sweepq.cli.plain import SafeConsole
from sweepq.cli.visible import visible, visible_bytes
from sweepq.history.tables import csv_cell, csv_writer


def test_every_control_character_but_newline_and_tab_is_shown_as_its_escape() -> None:
    assert visible("a\x1b]0;pwned\x07b") == r"a\x1b]0;pwned\x07b"
    assert visible("\x00\x7f\x9b\r") == r"\x00\x7f\x9b\x0d"
    assert visible("line\n\tindented é 漢") == "line\n\tindented é 漢"
    assert visible_bytes(b"x\x1b[2Jy\xc2\x9bz\n\xe2\x80\xa6") == b"x\\x1b[2Jy\\x9bz\n\xe2\x80\xa6"


def test_the_console_reads_no_markup_and_writes_no_escape() -> None:
    console = SafeConsole(width=80, color_system=None, file=io.StringIO())
    console.print("acc[/val] [bold]x [/data/shard-17.bin] \x1b]52;c;cHduZWQ=\x07")
    console.print(Text("in a Text: \x1b]0;t\x07"))
    table = Table("name", "value", box=None)
    table.add_row("t\x1b]0;pwned\x07", "[/x]")
    console.print(table)
    assert console.file.getvalue() == (  # type: ignore[attr-defined]
        "acc[/val] [bold]x [/data/shard-17.bin] \\x1b]52;c;cHduZWQ=\\x07\n"
        "in a Text: \\x1b]0;t\n"  # rich's Text drops a BEL itself; the ESC is shown
        " name               value\n"  # measured as shown: the columns stay aligned
        " t\\x1b]0;pwned\\x07  [/x]\n"
    )


def test_lines_end_without_spaces_and_styles_still_reach_a_terminal() -> None:
    console = SafeConsole(width=40, color_system="standard", force_terminal=True, file=io.StringIO())
    console.print(Text.assemble(("done", "green"), "   "))
    assert console.file.getvalue() == "\x1b[32mdone\x1b[0m\n"  # type: ignore[attr-defined]
    assert render.to_text(Text("x\x1b[31m  ")) == "x\\x1b[31m\n"


@pytest.mark.parametrize(
    "field, written",
    [
        ("=HYPERLINK(1)", "'=HYPERLINK(1)"),
        ("+1+2", "'+1+2"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("-x", "'-x"),
        ("\tt", "'\tt"),
        ("\rr", "'\rr"),
        ("-0.5", "-0.5"),
        ("+1e-3", "+1e-3"),
        ("-inf", "-inf"),
        ("-", "'-"),
        ("acc[/val]", "acc[/val]"),
        ("", ""),
    ],
)
def test_a_csv_field_a_spreadsheet_would_run_starts_with_a_quote(field: str, written: str) -> None:
    assert csv_cell(field) == written


def test_a_csv_field_holding_a_carriage_return_is_quoted_and_reads_back() -> None:
    f = io.StringIO(newline="")
    w = csv_writer(f)
    w.writerow(["a", "'\rr", "b\nc"])
    w.writerow(["1", "2", "3"])
    assert f.getvalue() == 'a,"\'\rr","b\nc"\n1,2,3\n'
    assert list(csv.reader(io.StringIO(f.getvalue(), newline=""))) == [["a", "'\rr", "b\nc"], ["1", "2", "3"]]
