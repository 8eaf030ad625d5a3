"""Export commands: `sweepq export csv DIR`, `sweepq export tensorboard DIR`, `sweepq export mlflow`. They read
like read commands (never write into the root).

What they read is committed: the queue through a read-only connection, and each
attempt's metrics.jsonl up to its last whole line. Each file is written beside
its final name and renamed over it only once every file is written, so an export
either replaces all its files or none, and exporting the same sweep again gives
the same bytes. The TensorBoard export owns its whole folder (a run a cell): it is
written beside DIR and renamed into place, replacing an export sweepq wrote before.
The MLflow export writes through MLflow's client and rewrites only the runs whose
content changed (history/mlflow.py says how).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import click

from sweepq.atomic import fsync_dir, tmp_name
from sweepq.cli.app import friendly, main, reading, root_option
from sweepq.errors import UsageError
from sweepq.history import tables
from sweepq.history.read import skipped_lines, streams
from sweepq.history.records import Status
from sweepq.history.stream import CellStream
from sweepq.layout import RootPaths
from sweepq.spec.sweep import select_cells

if TYPE_CHECKING:
    from sweepq.history.mlflow_runs import RunContent


@main.group()
def export() -> None:
    """Write a sweep's results in formats other tools read (the root is only read)."""


def _export_arguments(command: Callable[..., None]) -> Callable[..., None]:
    """DIR, then the sweep's arguments: the exports that write files."""
    return click.argument("dest", metavar="DIR", type=click.Path())(_sweep_arguments(command))


def _sweep_arguments(command: Callable[..., None]) -> Callable[..., None]:
    """[SPEC_OR_ROOT], --root and --cell, as every export takes them."""
    for option in reversed(
        (
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

    Spreadsheet-safe: a field starting with =, +, -, @, tab or CR (a metric name, a
    cfg value) is written after a single quote ', so a spreadsheet shows it as text
    and never runs it; numbers such as -0.5 are written as they are.
    """
    with reading(spec, root) as store:
        chosen = select_cells(store.cells(), cells) if cells else store.cells()
        folder = _folder(Path(dest))  # once the root and cells are known good: a refused command leaves no folder
        ids = [c.id for c in chosen]
        order = {cell: i for i, cell in enumerate(ids)}
        attempts = sorted((a for a in store.attempts() if a.cell in order), key=lambda a: (order[a.cell], a.number))
        metric = store.settings().metric
        header, cell_rows = tables.cell_table(chosen, metric.name if metric else None)
        counted: dict[tuple[str, int], tuple[int, int]] = {}

        def metric_rows() -> Iterator[list[str]]:
            """Row by row, stitched while read (a cell's history need not fit in memory); counts for attempts.csv."""
            for stream in _warned(streams(store, ids)):
                logged: Counter[int] = Counter()
                lost: Counter[int] = Counter()
                for value in stream.values():
                    logged[value[1].attempt] += 1
                    lost[value[1].attempt] += value[2] is Status.LOST
                    yield tables.value_row(stream.cell, value)
                counted.update(((stream.cell, a), (n, lost[a])) for a, n in logged.items())

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
        f"wrote {values} logged values of {_n(len(ids), 'cell')} ({_n(len(attempts), 'attempt')}) to {folder}: "
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
                writer = tables.csv_writer(f)  # a field holding a CR quoted
                writer.writerow(tables.csv_row(header))  # spreadsheet-safe fields (history/tables.py)
                writer.writerows(tables.csv_row(row) for row in rows)
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
    """Write TensorBoard runs into DIR: one a cell (`DIR/<cell>`), with its cfg in the HParams dashboard.

    Each run holds the cell's stitched curves (one value a step; what a resumed
    attempt superseded is left out), its cfg as hparams (nested keys dotted), and
    `best/<metric>` for the sweep's metric. DIR is replaced whole: it must be new,
    empty, or an earlier export of sweepq's. View with `tensorboard --logdir DIR`.
    """
    try:
        from sweepq.history import tensorboard as tb
    except ImportError as e:
        raise UsageError("sweepq export tensorboard needs tensorboard: pip install 'sweepq[tensorboard]'") from e
    with reading(spec, root) as store:
        target = _replaceable(Path(dest))
        chosen = select_cells(store.cells(), cells) if cells else store.cells()
        cfgs = {c.id: c.result_cfg for c in chosen}  # the cfg each result came from
        metric = store.settings().metric
        tmp = target.parent / f".{target.name}.tmp-{os.getpid()}"
        try:
            tmp.mkdir()
            runs = [tb.CellRun(s, cfgs[s.cell]) for s in _warned(streams(store, list(cfgs)))]  # scanned: small
            points = tb.write_runs(tmp, runs, metric.name if metric else None, metric.goal if metric else "max")
            (tmp / MARK).write_text("written by sweepq export tensorboard: replaced whole by the next export\n")
            _swap(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    click.echo(f"wrote {points} points of {_n(len(cfgs), 'cell')} to {target}: view with tensorboard --logdir {target}")


def _warned(cells: Iterable[CellStream]) -> Iterator[CellStream]:
    """Each cell's history, once a line per file it skipped lines of is said (scanned: the counts are known)."""
    for stream in cells:
        for line in skipped_lines(stream.root, stream.cell, stream.damaged, stream.out_of_range):
            click.echo(line, err=True)
        yield stream


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


@export.command("mlflow")
@click.option(
    "--tracking-uri",
    metavar="URI",
    envvar="MLFLOW_TRACKING_URI",
    default="sqlite:///mlflow.db",
    show_default=True,
    help="The MLflow store: sqlite:///PATH.db or a tracking server's http(s):// address (or $MLFLOW_TRACKING_URI).",
)
@click.option(
    "--experiment", metavar="NAME", help="The MLflow experiment (created if missing); default: the sweep's name."
)
@_sweep_arguments
def mlflow_command(
    spec: str | None, root: str | None, cells: tuple[str, ...], tracking_uri: str, experiment: str | None
) -> None:
    """Write the sweep to MLflow: a parent run named after the sweep, a child run a cell.

    Each child holds its cell's cfg as params (nested keys dotted), its stitched
    curves as metrics (each kept point at its step and time; what a resumed attempt
    superseded is not logged, and the tags sweepq.lost_values and sweepq.lost say how
    much and why), and tags: sweepq.cell, sweepq.group, sweepq.state, sweepq.attempts,
    sweepq.reasons (each attempt's termination reason). Run status: done -> FINISHED,
    failed -> FAILED, cancelled or interrupted -> KILLED, running -> RUNNING, queued ->
    SCHEDULED. Run it again at will: only the cells that changed are written again,
    nothing is doubled. The default store is MLflow's own default, mlflow.db in the
    current folder.
    """
    try:
        from sweepq.history import mlflow as mf
        from sweepq.history.mlflow_runs import cell_run, sweep_run
    except ImportError as e:
        raise UsageError("sweepq export mlflow needs MLflow: pip install 'sweepq[mlflow]'") from e
    if experiment == "":
        raise UsageError("--experiment needs a name: give one, or leave the option out for the sweep's name")
    uri = mf.absolute(tracking_uri)
    with reading(spec, root) as store:
        _not_the_queue(mf.sqlite_file(uri), store.root)
        chosen = select_cells(store.cells(), cells) if cells else store.cells()
        name = store.settings().name
        client, experiment_id = mf.connect(uri, experiment or name)
        attempts = store.attempts()
        by_cell = {c.id: [a for a in attempts if a.cell == c.id] for c in chosen}
        records = {c.id: c for c in chosen}
        left_out: dict[tuple[str, str], list[str]] = {}

        def runs() -> Iterator[RunContent]:
            for stream in _warned(streams(store, list(records))):
                run = cell_run(records[stream.cell], stream, by_cell[stream.cell])
                for what in run.left_out:
                    left_out.setdefault(what, []).append(stream.cell)
                yield run

        sweep = sweep_run(name, store.root.resolve(), store.cells(), attempts)
        done = mf.write(client, experiment_id, sweep, runs())
    for (what, why), where in left_out.items():
        click.echo(
            f"warning: {what} is not in MLflow for {_cells(where)}: {why} (the tag sweepq.left_out says so)", err=True
        )
    click.echo(
        f"exported {done.points} points of {_n(len(chosen), 'cell')} to the MLflow experiment "
        f"{experiment or name!r} in {uri}: {_n(done.written, 'run')} written, {done.unchanged} unchanged "
        f"(the sweep's run: {done.parent})"
    )
    if uri.startswith(("http://", "https://")):
        click.echo(f"view at {uri.rstrip('/')}/#/experiments/{experiment_id}")
    else:
        click.echo(
            f"view with: mlflow ui --backend-store-uri {uri}   (the UI needs the full package: pip install mlflow)"
        )


def _not_the_queue(target: Path | None, root: Path) -> None:
    """MLflow's store must not be the root's own queue (MLflow would migrate its own tables into it)."""
    queue = RootPaths(root).db
    if target is not None and target.exists() and queue.exists() and target.samefile(queue):
        raise UsageError(
            f"{target} is this sweep's queue: sweepq export mlflow writes MLflow's runs into a database of their "
            "own. Name another file, e.g. --tracking-uri sqlite:///mlflow.db"
        )


def _cells(ids: list[str]) -> str:
    return (
        f"cell {ids[0]}"
        if len(ids) == 1
        else f"{_n(len(ids), 'cell')} ({', '.join(ids[:3])}{', ...' if len(ids) > 3 else ''})"
    )


def _n(count: int, noun: str) -> str:
    """`1 cell`, `2 cells`: the words a count takes."""
    return f"{count} {noun}{'' if count == 1 else 's'}"
