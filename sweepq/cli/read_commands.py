"""Read commands: `status`, `show`, `attempts`, `report`, `best`. They never write, not even a lock file."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console, Group, RenderableType

from sweepq.cli import failures, header, render, render_cell
from sweepq.cli.app import friendly, json_option, main, out, print_json, reading, root_option
from sweepq.errors import UsageError
from sweepq.execution import usage_text
from sweepq.spec.sweep import select_cells

if TYPE_CHECKING:
    from sweepq.queue.store import Store


def is_place(arg: str | None) -> bool:
    """Does a command-line argument name a sweep file or a sweep root, rather than cells?

    Cell selectors (2.3, a group name, 2.*) hold no slash and no .yaml, so a path with
    either is a place; a bare name is one only when it is a folder holding a queue.
    """
    from sweepq.queue.database import Database

    if not arg:
        return False
    path = Path(arg)
    if path.suffix in (".yaml", ".yml") or "/" in arg or arg in (".", ".."):
        return True
    return path.is_dir() and Database.for_root(path).exists()


def cell_and_place(cell: str | None, place: str | None, command: str) -> tuple[str, str | None]:
    """CELL and SPEC_OR_ROOT as given, or the other way round (`show sweep.yaml 2.3` means the same)."""
    if is_place(cell) and not is_place(place):
        cell, place = place, cell
    if not cell:
        raise UsageError(f"name the cell: sweepq {command} CELL [SPEC_OR_ROOT], with a cell id like 2.3")
    return cell, place


place_argument = click.argument("spec", required=False, metavar="[SPEC_OR_ROOT]", type=click.Path())


all_params_option = click.option(
    "--all-params", is_flag=True, help="Every cfg key as a column, not only those that vary across the cells."
)


@main.command()
@place_argument
@root_option
@json_option
@click.option("--watch", is_flag=True, help="Refresh until the sweep has nothing left to run (or Ctrl-C).")
@click.option(
    "--every", default=2.0, show_default=True, type=click.FloatRange(min=0.1), metavar="SECONDS", help="With --watch."
)
@all_params_option
@friendly
def status(spec: str | None, root: str | None, as_json: bool, watch: bool, every: float, all_params: bool) -> None:
    """Every cell at a glance: state, progress, the cfg keys that vary, metrics, attempts, why a cell failed.

    SPEC_OR_ROOT is the sweep file or its root folder (default: --root, else the current folder).
    Columns that do not fit the terminal are left out (a footnote names them); --json has everything.
    """
    with reading(spec, root) as store:
        metric = store.settings().metric
        if as_json:
            fc, stalls = store.forecast(status_workers(store)[0]), store.stalls()
            usages = usage_text.latest_by_cell(store.attempts())
            print_json(
                [
                    c.to_json()
                    | {
                        "cfg": c.cfg,
                        "alive": _alive(store, c),
                        "eta_seconds": fc.cell_seconds_left(c.id),
                        "rate_steps_per_second": fc.steps_per_second(c.id),
                        "no_progress_seconds": stalls.get(c.id),
                        "usage": usages.get(c.id),
                    }
                    for c in store.cells()
                ]
            )
            return

        def table() -> RenderableType:
            cells = store.cells()
            workers, live = status_workers(store)
            fc = store.forecast(workers)
            etas, rates = header.per_cell(fc, cells)
            return Group(
                header.header(cells, fc, fc.began, live),
                render.status_table(
                    cells,
                    metric,
                    dead=_dead_running(store),
                    etas=etas,
                    rates=rates,
                    all_params=all_params,
                    usages=usage_text.latest_by_cell(store.attempts()),
                    **_told(store),
                ),
            )

        if watch:
            _watch(store, out(), every, table)
        else:
            out().print(table())


def status_workers(store: Store) -> tuple[int, bool]:
    """How many workers the forecast counts, and whether any runs: the live launch's, else as many as
    cells have a live owner (workers started by hand), else one (what a relaunch would take at the least)."""
    from sweepq.cli import launch_lock  # psutil and the lock: only for the commands that ask
    from sweepq.queue import liveness

    live = launch_lock.holder(store.root)
    owners = liveness.for_root(store.root)
    running = sum(1 for cell, _ in store.running() if owners.owner_alive(cell))  # a killed worker runs nothing
    if live is not None and live.workers:
        return max(live.workers, running), True
    return max(1, running), running > 0 or live is not None


def _watch(store: Store, con: Console, every: float, table: Callable[[], RenderableType]) -> None:
    """The table again every `every` seconds until no cell is left to run (or Ctrl-C): live in a terminal,
    one table after another elsewhere (a file, a pipe)."""
    from rich.live import Live

    try:
        if not con.is_terminal:
            con.print(table())
            while store.unsettled():
                time.sleep(every)
                con.print()
                con.print(table())
            return
        with Live(table(), console=con, auto_refresh=False) as live:
            while store.unsettled():
                time.sleep(every)
                live.update(table(), refresh=True)
    except KeyboardInterrupt:
        pass  # how a watch ends: not an error


def _told(store: Store) -> dict[str, Any]:
    """What status says beyond the columns: cells without progress, why cells failed, a full disk's words."""
    return {"stalls": store.stalls(), "notes": told_notes(store, store.cells())}


def told_notes(store: Store, cells: list[Any]) -> dict[str, str]:
    """The status table's notes: why each failed cell failed (and where its logs are), a full disk's words."""
    told = failures.failure_notes(cells, lambda reason: store.attempts(reason=reason), render.shown_path(store.root))
    return told | store.fault_notes()  # the disk's own words say more than its exception


def _alive(store: Store, cell: Any) -> bool | None:
    """For running cells: does a live process own the cell? (None for other states.)"""
    from sweepq.queue import liveness
    from sweepq.queue.states import CellState

    if cell.state is not CellState.RUNNING:
        return None
    return liveness.for_root(store.root).owner_alive(cell.id)


def _dead_running(store: Store) -> set[str]:
    return {c.id for c in store.cells() if _alive(store, c) is False}


@main.command()
@click.argument("cell", required=False, metavar="CELL")
@place_argument
@root_option
@json_option
@friendly
def show(cell: str | None, spec: str | None, root: str | None, as_json: bool) -> None:
    """One cell: cfg, attempts (receipts), checkpoints with their metrics, history.

    CELL is a cell id like 2.3. SPEC_OR_ROOT is the sweep file or its root folder
    (default: --root, else the current folder): `sweepq show 2.3 sweep.yaml`.
    """
    from sweepq.checkpoint.marker import read_done
    from sweepq.layout import CellPaths

    cell, spec = cell_and_place(cell, spec, "show")
    with reading(spec, root) as store:
        rec = store.cell(one_cell(store, cell, "show"))
        attempts = store.attempts(rec.id)
        ckpts = store.checkpoints(rec.id)
        events = store.events(rec.id)
        if as_json:
            d = rec.to_json()
            d.update(
                cfg=rec.cfg,
                cfg_hash=rec.cfg_hash,
                attempts=[a.to_json() for a in attempts],
                checkpoints=[c.to_json() for c in ckpts],
                history=[e.to_json() for e in events],
                done=read_done(CellPaths(store.root, rec.id)),
            )
            print_json(d)
            return
        out().print(render_cell.show_cell(rec, attempts, ckpts, events, store.settings().metric))


def one_cell(store: Store, selector: str, command: str) -> str:
    cells = select_cells(store.cells(), [selector])
    if len(cells) != 1:
        raise UsageError(f"{selector!r} names {len(cells)} cells; `{command}` takes one cell id like 2.3")
    return cells[0].id


@main.command()
@place_argument
@root_option
@click.option("--cell", "cells", multiple=True, help="Only these cells (id, group or pattern; repeatable).")
@click.option("--reason", default=None, help="Only attempts that ended with this reason.")
@json_option
@friendly
def attempts(spec: str | None, root: str | None, cells: tuple[str, ...], reason: str | None, as_json: bool) -> None:
    """Every attempt's receipt, newest first.

    SPEC_OR_ROOT is the sweep file or its root folder (default: --root, else the current folder).
    """
    from sweepq.queue.states import Reason

    if reason is not None and reason not in {r.value for r in Reason}:
        raise UsageError(f"unknown reason {reason!r}: one of {', '.join(r.value for r in Reason)}")
    with reading(spec, root) as store:
        wanted = {c.id for c in select_cells(store.cells(), cells)} if cells else None
        rows = [a for a in store.attempts(reason=reason, newest_first=True) if wanted is None or a.cell in wanted]
        if as_json:
            print_json([a.to_json() for a in rows])
        else:
            out().print(render.attempts_table(rows))


@main.command()
@place_argument
@root_option
@json_option
@click.option("--top", default=3, show_default=True, help="How many winners to rank.")
@all_params_option
@friendly
def best(spec: str | None, root: str | None, as_json: bool, top: int, all_params: bool) -> None:
    """Per cell, the best metric, the cfg keys that vary and the checkpoint that holds it; winners first.

    SPEC_OR_ROOT is the sweep file or its root folder (default: --root, else the current folder).
    """
    from sweepq.cli.report import best_per_cell

    with reading(spec, root) as store:
        metric = store.settings().metric
        rows = best_per_cell(store, metric, top)
        if as_json:
            print_json(rows)
        else:
            out().print(render.best_table(rows, metric, all_params=all_params))
