"""Export commands: `sweepq export csv DIR`, `sweepq export tensorboard DIR`. They read like read commands
(never write into the root).

What they read is committed: the queue through a read-only connection, and each
attempt's metrics.jsonl up to its last whole line. Each file is written beside
its final name and renamed over it only once every file is written, so an export
either replaces all its files or none, and exporting the same sweep again gives
the same bytes. The TensorBoard export owns its whole folder (a run a cell): it is
written beside DIR and renamed into place, replacing an export sweepq wrote before.
"""

from __future__ import annotations

import contextlib
import csv
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import click

from sweepq.atomic import fsync_dir, tmp_name
from sweepq.cli.app import friendly, main, reading, root_option
from sweepq.errors import UsageError
from sweepq.history import tables
from sweepq.history.read import stitched_all
from sweepq.history.records import CellHistory
from sweepq.layout import CellPaths
from sweepq.spec.sweep import select_cells


@main.group()
def export() -> None:
    """Write a sweep's results in formats other tools read (the root is only read)."""


def _export_arguments(command: Callable[..., None]) -> Callable[..., None]:
    """DIR, [SPEC_OR_ROOT], --root and --cell, as every export takes them."""
    for option in reversed(
        (
            click.argument("dest", metavar="DIR", type=click.Path()),
            click.argument("spec", required=False, metavar="[SPEC_OR_ROOT]", type=click.Path()),
            root_option,
            click.option("--cell", "cells", multiple=True, help="Only these cells (id, group or pattern; repeatable)."),
            friendly,
        )
    ):
        command = option(command)
    return command


@export.command("csv")
@_export_arguments
def csv_command(dest: str, spec: str | None, root: str | None, cells: tuple[str, ...]) -> None:
    """Write tidy CSVs into DIR: metrics.csv, attempts.csv, cells.csv.

    DIR is created if missing; the three files are replaced whole, together.
    metrics.csv has one row per logged value (cell, attempt, step, name, value, time),
    with `status` kept (on the cell's stitched curve), lost (logged after the step a
    later attempt resumed from; `reason` says how that attempt ended) or repeated (a
    step logged again). SPEC_OR_ROOT is the sweep file or its root folder (default:
    --root, else the current folder).
    """
    with reading(spec, root) as store:
        folder = _folder(Path(dest))  # once the root is known good: a refused command leaves no folder
        chosen = select_cells(store.cells(), cells) if cells else store.cells()
        ids = [c.id for c in chosen]
        order = {cell: i for i, cell in enumerate(ids)}
        attempts = sorted((a for a in store.attempts() if a.cell in order), key=lambda a: (order[a.cell], a.number))
        metric = store.settings().metric
        header, cell_rows = tables.cell_table(chosen, metric.name if metric else None)
        counted: dict[tuple[str, int], tuple[int, int]] = {}

        def metric_rows() -> Iterator[list[str]]:
            """One cell at a time (a sweep's history need not fit in memory); counts for attempts.csv."""
            for h in stitched_all(store, ids):
                for attempt, n in h.damaged.items():
                    click.echo(
                        f"warning: {CellPaths(store.root, h.cell).metrics(attempt)}: {n} unreadable line(s) skipped",
                        err=True,
                    )
                yield from tables.metric_rows(h)
                counted.update(((h.cell, a), c) for a, c in tables.counts(h).items())

        _write_all(
            folder,
            {  # in this order: attempts.csv needs what writing metrics.csv counted
                "metrics.csv": (tables.METRICS_HEADER, metric_rows()),
                "attempts.csv": (tables.ATTEMPTS_HEADER, tables.attempt_rows(attempts, counted)),
                "cells.csv": (header, cell_rows),
            },
        )
    values = sum(logged for logged, _ in counted.values())
    click.echo(
        f"wrote {values} logged values of {len(ids)} cells ({len(attempts)} attempts) to {folder}: "
        "metrics.csv, attempts.csv, cells.csv"
    )


def _folder(dest: Path) -> Path:
    """DIR, created if missing; refused when it names a file or cannot be made (before anything is read)."""
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"{dest} is a file: sweepq export csv writes three files into a folder, name a folder")
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create the folder {dest}: {e.strerror}. Name a folder this user may write") from e
    if not os.access(dest, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write into {dest}: permission denied. Name a folder this user may write")
    return dest


def _write_all(folder: Path, files: dict[str, tuple[list[str], Iterable[list[str]]]]) -> None:
    """Every file to a temporary name first; then all renamed. A failure leaves the folder as it was."""
    written: dict[Path, Path] = {}
    try:
        for name, (header, rows) in files.items():
            final = folder / name
            tmp = written[final] = tmp_name(final)
            with open(tmp, "w", newline="", encoding="utf-8") as f:
                writer = csv.writer(f, lineterminator="\n")
                writer.writerow(header)
                writer.writerows(rows)
                f.flush()
                os.fsync(f.fileno())
    except BaseException:
        for tmp in written.values():
            with contextlib.suppress(OSError):
                tmp.unlink()
        raise
    for final, tmp in written.items():
        os.replace(tmp, final)
    fsync_dir(folder)


MARK = ".sweepq-export"  # in a folder `export tensorboard` wrote: only such a folder is replaced whole


@export.command("tensorboard")
@_export_arguments
def tensorboard_command(dest: str, spec: str | None, root: str | None, cells: tuple[str, ...]) -> None:
    """Write TensorBoard runs into DIR: one a cell (DIR/<cell>), with its cfg in the HParams dashboard.

    Each run holds the cell's stitched curves (one value a step; what a resumed
    attempt superseded is left out), its cfg as hparams (nested keys dotted), and
    best/<metric> for the sweep's metric. DIR is replaced whole: it must be new,
    empty, or an earlier export of sweepq's. View with `tensorboard --logdir DIR`.
    """
    try:
        from sweepq.history import tensorboard as tb
    except ImportError as e:
        raise UsageError("sweepq export tensorboard needs tensorboard: pip install 'sweepq[tensorboard]'") from e
    with reading(spec, root) as store:
        target = _replaceable(Path(dest))
        chosen = select_cells(store.cells(), cells) if cells else store.cells()
        cfgs = {c.id: c.cfg for c in chosen}
        metric = store.settings().metric
        tmp = target.parent / f".{target.name}.tmp-{os.getpid()}"
        try:
            tmp.mkdir()
            runs = (tb.CellRun(h, cfgs[h.cell]) for h in _warned(store.root, stitched_all(store, list(cfgs))))
            points = tb.write_runs(tmp, runs, metric.name if metric else None, metric.goal if metric else "max")
            (tmp / MARK).write_text("written by sweepq export tensorboard: replaced whole by the next export\n")
            _swap(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    click.echo(f"wrote {points} points of {len(cfgs)} cells to {target}: view with tensorboard --logdir {target}")


def _warned(root: Path, histories: Iterable[CellHistory]) -> Iterator[CellHistory]:
    for h in histories:
        for attempt, n in h.damaged.items():
            click.echo(f"warning: {CellPaths(root, h.cell).metrics(attempt)}: {n} unreadable line(s) skipped", err=True)
        yield h


def _replaceable(dest: Path) -> Path:
    """DIR when it may be replaced whole (new, empty, or sweepq's export); its parent created."""
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"{dest} is a file: sweepq export tensorboard writes a folder of runs, name a folder")
    if dest.is_dir() and any(dest.iterdir()) and not (dest / MARK).is_file():
        raise UsageError(
            f"{dest} holds files sweepq did not write: sweepq export tensorboard replaces its whole folder, so it "
            "writes only into a new or empty folder, or one it exported to before. Name another folder."
        )
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(
            f"cannot create the folder {dest.parent}: {e.strerror}. Name a folder this user may write"
        ) from e
    if not os.access(dest.parent, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write into {dest.parent}: permission denied. Name a folder this user may write")
    return dest


def _swap(new: Path, dest: Path) -> None:
    """`new` renamed to `dest`; an earlier export moved aside first and removed after."""
    old = new.with_name(new.name + ".old")
    if dest.is_dir() and any(dest.iterdir()):
        os.rename(dest, old)
    os.replace(new, dest)  # onto nothing, or onto an empty folder
    fsync_dir(dest.parent)
    shutil.rmtree(old, ignore_errors=True)
