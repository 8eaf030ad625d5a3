"""Tables that fit the terminal: columns kept by priority, abbreviated first, dropped whole, never cut.

A table is built from `Column`s in the order they are shown, each with a rank
(its place in the table's priority order, columns.ORDER). When the columns at
their full form are wider than the console, `choose` keeps them by rank in
their short form (abbreviated headers and values) while they fit, drops the
rest whole, then gives the kept ones their full form again in rank order while
that still fits. A value is never cut by the table: what does not fit is not
shown, and a footnote names it; a note that does not fit goes under the table.
The choice is made when rich renders the table, so one table fits any console
(a terminal, a live view, a file).

A table without a title or a wrapping column is written line by line (`LINES_FROM` rows or more),
each row in the segments rich's table makes of it, padding and styles included, so that a file and a
terminal get the same bytes as from rich's layout (tests/unit/test_render.py holds them equal). Rich
lays out every cell of a table: that took 29 s and 180 MB for 10,000 rows (`status --all`), and a
tenth of `status`'s time for the 30 rows it shows of a large sweep, where the same lines cost a small
part of that.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.segment import Segment, Segments
from rich.style import Style
from rich.table import Table
from rich.text import Text

from sweepq.cli.visible import visible

LINES_FROM = 1  # rows from which a table is written line by line (see above); tests set it either way
SHARE_FROM = 500  # rows from which a column keeps one string per distinct value
GAP = 2  # between two columns (box=None, padding (0, 1), no padding at the edges)
HEADER_MIN = 12  # a short header is cut to this, or to its values' width when wider
WRAP_MIN = 20  # the narrowest a wrapping column gets before it is dropped (never under its longest word)
Justify = Literal["left", "right"]
Cell = str | Text
C = TypeVar("C", str, Text)
# Free text: "wrap" wraps at spaces into the room left; "below" is a column only when it fits unwrapped,
# else each row's text goes under the table on a line of its own (a note is read as a sentence).
Prose = Literal["", "wrap", "below"]


@dataclass(frozen=True)
class Column:
    """One column: its full form, and optionally a shorter one (header and values abbreviated)."""

    name: str  # the full header, and what the footnote calls it
    values: Sequence[Cell]
    rank: int  # lower is kept first; rank < kept: never dropped
    justify: Justify = "left"
    short_name: str | None = None
    short_values: Sequence[Cell] | None = None
    prose: Prose = ""
    family: str = ""  # columns of one family take their full form together, or none does (started, ended)
    called: str = ""  # what the footnote calls it, when not its full header (a cfg key's unambiguous tail)

    def __post_init__(self) -> None:
        # A user's text with a control character is measured as shown (cli/visible.py), so columns keep aligned.
        object.__setattr__(self, "name", _shown(self.name))
        if self.short_name is not None:
            object.__setattr__(self, "short_name", _shown(self.short_name))
        for field in ("values", "short_values"):
            values = getattr(self, field)
            if values is not None and not all(_plain(v).isprintable() for v in values):
                object.__setattr__(self, field, [_shown(v) for v in values])
        if len(self.values) >= SHARE_FROM:  # most values of a long column repeat: one string each is kept
            seen: dict[str, str] = {}
            object.__setattr__(self, "values", _shared(self.values, seen))
            if self.short_values is not None:
                object.__setattr__(self, "short_values", _shared(self.short_values, seen))

    def width(self, short: bool) -> int:
        header = self.short_name if short and self.short_name is not None else self.name
        values = self.short_values if short and self.short_values is not None else self.values
        widest = max([_len(header), *(_len(v) for v in values)])
        if self.prose != "wrap" or not short:
            return widest
        longest = max([_len(header), *(cell_len(w) for v in values for w in _plain(v).split())])
        return min(widest, max(WRAP_MIN, longest))

    def present(self) -> bool:
        return any(_plain(v) for v in self.values)


@dataclass(frozen=True)
class Choice:
    """What `choose` kept (indices into the columns, in table order, and whether short), moved below
    the table, and left out (names, by rank)."""

    kept: list[tuple[int, bool]]
    below: list[int]
    left_out: list[str]


def choose(columns: Sequence[Column], width: int, kept: int) -> Choice:
    """The columns to show in `width` cells: by rank, short first, then widened in rank order."""
    order = sorted(range(len(columns)), key=lambda i: (columns[i].rank, i))
    short: dict[int, bool] = {}
    below = []
    used = -GAP
    for i in order:
        need = GAP + columns[i].width(short=columns[i].prose != "below")
        if columns[i].rank < kept or used + need <= width:
            short[i], used = columns[i].prose != "below", used + need
        elif columns[i].prose == "below":
            below.append(i)
    for i in order:
        if short.get(i) and columns[i].prose != "wrap":
            family = [j for j in order if short.get(j) and _kin(columns[i], columns[j], i == j)]
            more = sum(columns[j].width(short=False) - columns[j].width(short=True) for j in family)
            if used + more <= width:
                used += more
                short.update(dict.fromkeys(family, False))
    left = [columns[i].called or columns[i].name for i in order if i not in short and i not in below]
    return Choice(sorted(short.items()), below, left)


def _kin(a: Column, b: Column, same: bool) -> bool:
    return same or (a.family != "" and a.family == b.family)


def footnote(left_out: Sequence[str], width: int) -> Text:
    """One line naming the columns left out (as many names as the line holds)."""
    return one_line("hidden: ", left_out, " (a wider terminal or --json shows them)", width, always=True)


def one_line(head: str, items: Sequence[str], tail: str, width: int, always: bool = False) -> Text:
    """`head` and the `items` in `width` cells: all of them (and `tail` when `always`), else those that fit
    in their order, "… N more" and `tail` (the first item at least, on a console too narrow for it)."""
    whole = head + ", ".join(items) + (tail if always else "")
    if cell_len(whole) <= width:
        return Text(whole, style="dim")
    room = width - cell_len(head) - cell_len(f", … {len(items)} more{tail}")
    kept: list[str] = []
    for item in items:
        need = cell_len(item) + (2 if kept else 0)
        if need <= room:
            kept.append(item)
            room -= need
    kept = kept or list(items[:1])
    more = f", … {len(items) - len(kept)} more" if len(kept) < len(items) else ""
    return Text(f"{head}{', '.join(kept)}{more}{tail}", style="dim")


@dataclass
class FittedTable:
    """A rich renderable: the table as wide as the console allows; under it, the prose that did not fit
    as a column, and a footnote naming the columns left out."""

    columns: Sequence[Column]
    kept: int = 1  # the first `kept` ranks are always shown
    title: str | None = None
    labels: Sequence[str] | None = None  # what leads a row's text under the table (default: its first value)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for part in self.parts(console, options.max_width, rows_at_once=None):
            yield from part if isinstance(part, list) else [part]

    def parts(self, console: Console, width: int, rows_at_once: int | None) -> Iterator[RenderableType | list[Segment]]:
        """What the table renders, in order: the table (a long one: its lines, `rows_at_once` rows a
        part, as segments), then the prose moved under it and the footnote."""
        shown = [c for c in self.columns if c.rank < self.kept or c.present()]
        choice = choose(shown, width, self.kept)
        picked = [(shown[i], short) for i, short in choice.kept]
        rows = len(shown[0].values) if shown else 0
        if rows >= LINES_FROM and self.title is None and all(col.prose != "wrap" for col, _ in picked):
            step = rows_at_once or rows
            widths = [col.width(short) for col, short in picked]  # each a pass over the column: once
            for start in range(0, rows, step):
                yield list(_lines(console, picked, widths, range(start, min(rows, start + step)), header=start == 0))
        else:
            yield self.table(shown, choice)
        labels = self.labels or [_plain(v) for v in shown[0].values]
        for i in choice.below:
            for label, v in zip(labels, shown[i].values, strict=True):
                if _plain(v):
                    yield Text.assemble(f"{label}: ", v)
        if choice.left_out:
            yield footnote(choice.left_out, width)

    def table(self, shown: Sequence[Column], choice: Choice) -> Table:
        table = Table(title=self.title, title_justify="left", box=None, pad_edge=False, header_style="bold")
        picked = [(shown[i], short) for i, short in choice.kept]
        for col, short in picked:
            header = col.short_name if short and col.short_name is not None else col.name
            if col.prose == "wrap":
                table.add_column(header, justify=col.justify, min_width=col.width(short=True))
            else:
                table.add_column(header, justify=col.justify, no_wrap=True, width=col.width(short))
        for r in range(len(shown[0].values) if shown else 0):
            table.add_row(*[_value(col, short, r) for col, short in picked])
        return table


_BOLD = Style(bold=True)  # the header's style (the table's header_style)


def _lines(
    console: Console, picked: Sequence[tuple[Column, bool]], widths: Sequence[int], rows: range, header: bool
) -> Iterator[Segment]:
    """The table as `table` lays it out (no box, no wrapping, each column as wide as its widest value:
    `widths`), written row by row: every value padded to its column's width, GAP spaces between columns."""
    right = [col.justify == "right" for col, _ in picked]
    if header:
        headers = [col.short_name if short and col.short_name is not None else col.name for col, short in picked]
        yield from _line(console, headers, widths, right, _BOLD)
    for r in rows:
        yield from _line(console, [_value(col, short, r) for col, short in picked], widths, right, None)


def _line(
    console: Console, values: Sequence[Cell], widths: Sequence[int], right: Sequence[bool], style: Style | None
) -> Iterator[Segment]:
    """One row, in the segments rich's table makes of it (so that a terminal gets the same bytes): a value and
    its padding in its own style, the padding between two columns in the row's (the header's bold)."""
    gap = [Segment(" " * GAP)] if style is None else [Segment(" ", style), Segment(" ", style)]
    for i, (v, width, at_right) in enumerate(zip(values, widths, right, strict=True)):
        if i:
            yield from gap
        pad = " " * (width - _len(v))
        if isinstance(v, Text):  # a row's value (headers are plain)
            own = console.get_style(v.style) if v.style else None
            if v.spans:
                parts = [*v.render(console, end="")]
                parts = [Segment(pad, own), *parts] if at_right else [*parts, Segment(pad, own)]
                yield from Segment.apply_style(parts, own) if own is not None else parts
            elif v.plain or pad:
                yield Segment(pad + v.plain if at_right else v.plain + pad, own)
        elif v or pad:
            yield Segment(pad + v if at_right else v + pad, style)
    yield Segment.line()


def _value(col: Column, short: bool, row: int) -> Cell:
    values = col.short_values if short and col.short_values is not None else col.values
    return values[row]


def _shared(values: Sequence[Cell], seen: dict[str, str]) -> list[Cell]:
    """`values` with each string the first of those equal to it (status --all of 100,000 cells: 118 MB of
    columns, most of it copies of a few values, to about 20 MB)."""
    return [seen.setdefault(v, v) if type(v) is str else v for v in values]


def _shown(v: C) -> C:
    """`v` with its control characters in their visible form (most values have none: returned as they are)."""
    if isinstance(v, Text):
        return v if v.plain.isprintable() else Text(visible(v.plain), style=v.style, justify=v.justify)
    return v if v.isprintable() else visible(v)


def _plain(v: Cell) -> str:
    return v.plain if isinstance(v, Text) else v


def _len(v: Cell) -> int:
    if isinstance(v, Text):
        return v.cell_len
    return len(v) if v.isascii() and v.isprintable() else cell_len(v)  # most values: one cell a character


def shorten(s: str, n: int) -> str:
    """`s` in at most `n` cells, its middle replaced by "…" (both ends tell values apart: sizes, suffixes)."""
    if cell_len(s) <= n or n < 3:
        return s
    tail = (n - 1) // 2
    return s[: n - 1 - tail] + "…" + (s[-tail:] if tail else "")


def short_header(name: str, values: Sequence[Cell]) -> str:
    """A long header (a metric's name, a cfg key) cut to its values' width, at least HEADER_MIN."""
    return shorten(name, max(HEADER_MIN, widest(values)))


def widest(values: Iterable[Cell]) -> int:
    return max((_len(v) for v in values), default=0)


def print_streamed(console: Console, renderable: RenderableType, rows_at_once: int = 1000) -> None:
    """`console.print(renderable)`, a long `FittedTable` in it `rows_at_once` rows a call: rich holds
    all that one call prints until it ends (for `status --all` of 100,000 cells, as much again as
    the table's values). A `Group` is printed part by part, as it renders."""
    if isinstance(renderable, Group):
        for child in renderable.renderables:
            print_streamed(console, child, rows_at_once)
    elif isinstance(renderable, FittedTable):
        for piece in renderable.parts(console, console.options.max_width, rows_at_once):
            console.print(Segments(piece) if isinstance(piece, list) else piece)
    else:
        console.print(renderable)
