"""Which columns a table keeps when the terminal is too narrow for all of them: the one place that says.

Per table: the columns always shown, then the others in the order they are
kept while they fit (each first in its short form: header and values
abbreviated); what is left over is dropped whole and named in a footnote.
`METRIC` is the sweep's metric (or the first logged one), `PARAMS` the cfg keys
that vary across the cells, `SAME` those the same in every cell (shown with
--all-params), each kept in the sweep's order. A note is never dropped: it is a
column when it fits whole after all the others, else it goes under the table, a
line a row. The README's "Looking at a sweep" states the same order.
"""

from __future__ import annotations

METRIC = "<metric>"
PARAMS = "<params>"
SAME = "<same params>"

ORDER: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "status": (
        ("cell", "state"),
        (
            *(METRIC, "progress", PARAMS, SAME, "best", "last reason", "attempts", "host", "lease age", "use"),
            *("eta", "rate"),
            *("step", "epoch", "group", "note"),
        ),
    ),
    "best": (("rank", "cell", METRIC), (PARAMS, SAME, "step", "checkpoint", "state")),
    "attempts": (
        ("cell", "#", "reason"),
        ("steps", "wall", "started", "ended", "peak mem", "use", "host", "pid", "note"),
    ),
    "checkpoints": (("step", "state"), ("metrics", "epoch", "size", "path")),
    "history": (("time", "event"), ("detail",)),
    "report": (
        ("reason",),
        (
            *("wall hours", "attempts", "steps lost", "share of wall", "steps run", "gpu hours"),
            *("training lost h", "downtime h"),  # the split of what was lost: the sentence under the table too
        ),
    ),
}


def ranks(table: str) -> dict[str, int]:
    """Column name -> its rank in `table` (0 is kept first)."""
    always, then = ORDER[table]
    return {name: i for i, name in enumerate(always + then)}


def kept(table: str) -> int:
    """How many of `table`'s first ranks are never dropped."""
    return len(ORDER[table][0])
