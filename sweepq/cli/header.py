"""The header above the status table: the sweep's ETA, elapsed time, workers, and counts per state.

A pure renderable (golden-tested): the time facts on one side, the counts on the other, on one line
when the console is wide enough, else on two; a part is moved to the next line whole, never cut.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

from sweepq.cli.render import STATE_STYLE, fmt_seconds
from sweepq.queue.forecast.model import Forecast
from sweepq.queue.records import CellRecord
from sweepq.queue.states import TERMINAL, CellState

SEP = " · "
#: Why an ETA is only a lower bound (Forecast.why), in the header's words.
BOUND_WHY = {"length": "length unknown", "stalled": "a cell stalled"}


@dataclass(frozen=True)
class Header:
    """Groups of parts: a group stays on one line when it fits, parts wrap inside it when not."""

    groups: tuple[tuple[Text, ...], ...]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from flow(self.groups, options.max_width)


def flow(groups: Sequence[Sequence[Text]], width: int) -> list[Text]:
    """The groups on one line if they fit together, else each from a line of its own, wrapped at parts."""
    joined = [_join(g) for g in groups if g]
    if sum(cell_len(t.plain) for t in joined) + len(SEP) * (len(joined) - 1) <= width:
        return [_join(joined)] if joined else []
    lines: list[Text] = []
    for group in groups:
        line: list[Text] = []
        for part in group:
            if line and cell_len(_join([*line, part]).plain) > width:
                lines.append(_join(line))
                line = []
            line.append(part)
        if line:
            lines.append(_join(line))
    return lines


def _join(parts: Sequence[Text]) -> Text:
    return Text(SEP, style="dim").join(parts)


def header(cells: Sequence[CellRecord], fc: Forecast, since: datetime | None, live: bool) -> Header:
    """`since`: when elapsed time starts (the sweep's first attempt, or this launch); `live`: whether
    workers run now (else the ETA is what `fc.workers` would take after a relaunch)."""
    return header_of_counts(Counter(c.state for c in cells if not c.removed), fc, since, live)


def header_of_counts(counts: Mapping[CellState, int], fc: Forecast, since: datetime | None, live: bool) -> Header:
    """The same from the cells still in the sweep counted by state (Store.census: one query at any size)."""
    settled = all(s in TERMINAL for s, n in counts.items() if n)
    times = [*_eta(fc, settled), *_elapsed(fc, since, settled), *_workers(fc, live, settled)]
    return Header((tuple(times), _counts(counts)))


def _eta(fc: Forecast, settled: bool) -> list[Text]:
    left = fc.seconds_left
    if settled:
        return []
    if left is None:
        return [Text("eta unknown (speed not measured yet)")]
    if fc.complete:
        return [Text.assemble("eta ", (duration(left), "bold"))]
    return [Text.assemble("eta at least ", (duration(left), "bold"), f" ({BOUND_WHY.get(fc.why, fc.why)})")]


def _elapsed(fc: Forecast, since: datetime | None, settled: bool) -> list[Text]:
    if since is None:
        return []
    if settled:
        return [Text(f"took {duration(((fc.last_end or fc.now) - since).total_seconds())}")]
    return [Text(f"elapsed {duration((fc.now - since).total_seconds())}")]


def _workers(fc: Forecast, live: bool, settled: bool) -> list[Text]:
    if settled:
        return []
    n = f"{fc.workers} worker{'s' if fc.workers != 1 else ''}"
    return [Text(n)] if live else [Text(f"not running: eta for {n}", style="yellow")]


def _counts(counts: Mapping[CellState, int]) -> tuple[Text, ...]:
    return tuple(Text(f"{counts[s]} {s}", style=STATE_STYLE[s]) for s in CellState if counts.get(s))


def duration(seconds: float) -> str:
    """Whole seconds under a minute (an ETA is no stopwatch), else as the tables say it."""
    seconds = max(0.0, seconds)
    return f"{seconds:.0f}s" if seconds < 59.5 else fmt_seconds(seconds)


def per_cell(fc: Forecast, cells: Sequence[CellRecord]) -> tuple[dict[str, float], dict[str, float]]:
    """The status table's columns from the forecast: seconds left per unsettled cell, and steps per
    second of every cell whose own speed was measured."""
    etas, rates = {}, {}
    for c in cells:
        left, rate = fc.cell_seconds_left(c.id), fc.steps_per_second(c.id)
        if left is not None:
            etas[c.id] = left
        if rate is not None:
            rates[c.id] = rate
    return etas, rates
