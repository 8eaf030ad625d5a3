"""`sweepq plot`: a sweep's stitched metric curves as a PNG or SVG. It reads like a read command.

matplotlib is an optional extra, imported only when this command runs (the other
commands start without it); the picture is drawn by sweepq/history/plot.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from sweepq.cli.app import friendly, main, reading, root_option
from sweepq.errors import UsageError
from sweepq.history.read import skipped_lines, streams
from sweepq.history.records import CellHistory
from sweepq.spec.sweep import select_cells

NEEDS_MATPLOTLIB = "sweepq plot needs matplotlib: pip install 'sweepq[plot]'"
PICTURE_POINTS = 2_000_000  # the points all curves of a picture keep together while it is drawn
MIN_POINTS = 100  # the fewest a curve keeps, however many cells


@main.command()
@click.argument("spec", required=False, metavar="[SPEC_OR_ROOT]", type=click.Path())
@root_option
@click.option(
    "--metric",
    default=None,
    metavar="NAME",
    help="The metric to draw (default: the sweep's metric, else the first logged).",
)
@click.option(
    "--cells", "cells", multiple=True, metavar="SELECTOR", help="Only these cells (id, group or pattern; repeatable)."
)
@click.option("--by", "by", default=None, metavar="CFG_KEY", help="One curve per value of this cfg key: mean and band.")
@click.option(
    "-o", "--output", "output", required=True, metavar="FILE", help="The picture to write: FILE.png or FILE.svg."
)
@friendly
def plot(
    spec: str | None, root: str | None, metric: str | None, cells: tuple[str, ...], by: str | None, output: str
) -> None:
    """Draw each cell's metric curve, stitched across resumes, into FILE (.png or .svg).

    Lost tails (what an attempt logged after the step a later attempt resumed from)
    are dashed in a lighter shade, checkpoints are dots on the curve; on the sweep's
    metric, each cell's best point (by its goal) is starred: another metric has no
    direction, so no best. With --by KEY: one curve per value of
    that cfg key, the mean over its cells with their min-max band. SPEC_OR_ROOT is the
    sweep file or its root folder (default: --root, else the current folder).
    """
    path = _output(Path(output))
    try:
        from sweepq.history import plot as draw
    except ImportError as e:
        raise UsageError(NEEDS_MATPLOTLIB) from e
    with reading(spec, root) as store:
        chosen = select_cells(store.cells(), cells) if cells else store.cells()
        scanned = list(streams(store, [c.id for c in chosen]))  # a few numbers a metric each
        for stream in scanned:
            for line in skipped_lines(store.root, stream.cell, stream.damaged, stream.out_of_range):
                click.echo(line, err=True)
        settings = store.settings()
        name = choose_metric(
            [s.metrics for s in scanned], metric, settings.metric.name if settings.metric else None, store.root
        )
        # each curve read and cut to what a picture shows as it is read: a history need not fit in memory
        limit = max(MIN_POINTS, min(draw.MAX_POINTS, PICTURE_POINTS // max(1, len(scanned))))
        histories = [s.reduced(limit, [name]) for s in scanned]
        # a best point only where "best" has a direction: the sweep's metric, by its goal; no other metric has one
        goal = settings.metric.goal if settings.metric and settings.metric.name == name else None
        title = f"{settings.name}: {name}"
        if by is None:
            pic = draw.draw_cells(histories, name, goal, path, title)
        else:
            cfgs = {c.id: c.result_cfg for c in chosen}  # the cfg each curve came from
            pic = draw.draw_groups(group_by(histories, cfgs, by), name, by, path, f"{title} by {by}")
    what = "cells" if by is None else f"values of {by}"
    click.echo(f"wrote {path}: {name}, {pic.curves} {what}, {pic.points} points drawn")


def _output(path: Path) -> Path:
    """FILE, refused before anything is read when its kind is unknown or its folder cannot take it."""
    if path.suffix.lower() not in (".png", ".svg"):
        raise UsageError(f"{path}: sweepq plot writes .png or .svg pictures; name the output FILE.png or FILE.svg")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(
            f"no folder {folder} to write {path.name} into: create it, or name a FILE in a folder that exists"
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write into {folder}: permission denied. Name a FILE in a folder this user may write")
    if path.is_dir():
        raise UsageError(f"{path} is a folder: name the picture FILE.png or FILE.svg")
    return path


def choose_metric(metrics: list[list[str]], wanted: str | None, sweeps: str | None, root: Path) -> str:
    """The metric to draw: the one asked for, else the sweep's metric, else the first one logged
    (`metrics`: each cell's, in first-logged order)."""
    logged: dict[str, None] = {}
    for names in metrics:
        logged.update(dict.fromkeys(names))
    if not logged:
        raise UsageError(
            f"no metric history in {root} for these cells: nothing was logged with run.log yet. "
            "Launch the sweep (or wait for its first logged step), then plot again"
        )
    if wanted is not None:
        if wanted not in logged:
            raise UsageError(f"no cell logged a metric named {wanted!r}; the metrics logged are: {', '.join(logged)}")
        return wanted
    return sweeps if sweeps in logged else next(iter(logged))


def group_by(histories: list[CellHistory], cfgs: dict[str, dict[str, Any]], key: str) -> dict[str, list[CellHistory]]:
    """The cells by their value of cfg `key` (values in first-seen order); a key no cell has is refused."""
    if not any(key in cfgs.get(h.cell, {}) for h in histories):
        keys = sorted({k for h in histories for k in cfgs.get(h.cell, {})})
        raise UsageError(f"no cell has the cfg key {key!r}; the keys are: {', '.join(keys) or '(none)'}")
    groups: dict[str, list[CellHistory]] = {}
    for h in histories:
        cfg = cfgs.get(h.cell, {})
        groups.setdefault(str(cfg[key]) if key in cfg else "(unset)", []).append(h)
    return groups
