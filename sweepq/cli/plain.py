"""Where every human line sweepq prints is made safe: the one console class and the one sanitiser.

Metric names, cfg values, exception messages, log lines and sweep names are written by users and
their training code. Printed through rich with markup on, a `[/x]` in them raised MarkupError (and
stopped a launch); printed raw, an ESC sequence in them set the window title or wrote the clipboard.
So no console sweepq makes reads markup, and every character it writes that is a control character
(C0, DEL, C1: all but newline and tab) is shown as its Python escape, `\\x1b`, visible and inert.
The styles sweepq itself adds are rich `Style`s on `Text`, never markup in a string.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.text import Text

from sweepq.cli.visible import CONTROL as _CONTROL
from sweepq.cli.visible import visible


class SafeConsole(Console):
    """A rich Console that never reads markup or emoji codes in a string and never writes a control
    character it was given to print (its own cursor and style codes are `Segment.control` or styles)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.update(markup=False, emoji=False, highlight=False)
        super().__init__(**kwargs)
        self._outer = threading.local()  # per thread: a live display renders from its own

    def render_str(self, text: str, **kwargs: Any) -> Text:
        # Sanitised before it is measured, so tables keep their widths with the visible form.
        kwargs.update(markup=False, emoji=False, highlight=False)
        return super().render_str(visible(text), **kwargs)

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        # Every segment of every renderable passes here (a `Text` built elsewhere included): the one
        # place where what reaches the file is made visible. Spaces that end a line of the whole
        # print are dropped (a table pads its last column); a cell's own lines are left to its table.
        if getattr(self._outer, "on", False):  # a nested render (a table's cell): the outermost one strips
            yield from self._visible_segments(super().render(renderable, options))
            return
        self._outer.on = True
        try:
            yield from self._stripped_lines(self._visible_segments(super().render(renderable, options)))
        finally:
            self._outer.on = False

    @staticmethod
    def _visible_segments(segments: Iterable[Segment]) -> Iterable[Segment]:
        for seg in segments:
            if seg.control or not _CONTROL.search(seg.text):
                yield seg
            else:
                yield Segment(visible(seg.text), seg.style)

    @staticmethod
    def _stripped_lines(segments: Iterable[Segment]) -> Iterable[Segment]:
        line: list[Segment] = []
        for seg in segments:
            if seg.control:
                yield from line
                line = []
                yield seg
                continue
            text = seg.text
            if "\n" not in text:
                line.append(seg)
                continue
            head, _, tail = text.rpartition("\n")
            line.append(Segment(head + "\n", seg.style))
            yield from _stripped(line)
            line = [Segment(tail, seg.style)] if tail else []
        yield from line


def _stripped(line: list[Segment]) -> Iterable[Segment]:
    """The segments of a line ending in a newline, without the spaces before that newline."""
    texts = [s.text for s in line]
    joined = "".join(texts)
    body = joined[:-1]
    cut = len(body) - len(body.rstrip(" "))
    if cut == 0:
        yield from line
        return
    keep = len(body) - cut
    pos = 0
    for s in line:
        end = pos + len(s.text)
        if end <= keep:
            yield s
        elif pos < keep:
            yield Segment(s.text[: keep - pos], s.style)
        pos = end
    yield Segment("\n", None)
