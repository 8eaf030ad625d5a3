"""Read commands: `status`, `show`, `attempts`, `report`, `best`. They never write, not even a lock file."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import click
from rich.console import Console, RenderableType

from sweepq.cli import render
from sweepq.cli.app import friendly, json_option, main, out, print_json, reading, root_option
from sweepq.errors import UsageError
from sweepq.queue.store import Store
from sweepq.spec.sweep import select_cells


@main.command()
@click.argument("spec", required=False, metavar="[SPEC_OR_ROOT]", type=click.Path())
@root_option
@json_option
@click.option("--watch", is_flag=True, help="Refresh until the sweep has nothing left to run (or Ctrl-C).")
@click.option(
    "--every", default=2.0, show_default=True, type=click.FloatRange(min=0.1), metavar="SECONDS", help="With --watch."
)
@friendly
def status(spec: str | None, root: str | None, as_json: bool, watch: bool, every: float) -> None:
    """Every cell at a glance: state, progress, metrics, attempts, last reason."""
    with reading(spec, root) as store:
        metric = store.settings().metric
        if as_json:
            etas, stalls = store.etas(), store.stalls()
            print_json(
                [
                    c.to_json()
                    | {
                        "alive": _alive(store, c),
                        "eta_seconds": etas.get(c.id),
                        "no_progress_seconds": stalls.get(c.id),
                    }
                    for c in store.cells()
                ]
            )
            return
        con = out()
        if not watch:
            con.print(
                render.status_table(store.cells(), metric, dead=_dead_running(store), etas=store.etas(), **_told(store))
            )
            return
        _watch(
            store,
            con,
            every,
            lambda: render.status_table(
                store.cells(), metric, dead=_dead_running(store), etas=store.etas(), **_told(store)
            ),
        )


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
    """What status says beyond the columns: cells without progress, and a full disk's words."""
    return {"stalls": store.stalls(), "notes": store.fault_notes()}


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
@click.argument("cell")
@root_option
@json_option
@friendly
def show(cell: str, root: str | None, as_json: bool) -> None:
    """One cell: cfg, attempts (receipts), checkpoints with their metrics, history."""
    from sweepq.checkpoint.marker import read_done
    from sweepq.layout import CellPaths

    with reading(None, root) as store:
        rec = store.cell(_one_cell(store, cell))
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
        out().print(render.show_cell(rec, attempts, ckpts, events, store.settings().metric))


def _one_cell(store: Store, selector: str) -> str:
    cells = select_cells(store.cells(), [selector])
    if len(cells) != 1:
        raise UsageError(f"{selector!r} names {len(cells)} cells; `show` takes one cell id like 2.3")
    return cells[0].id


@main.command()
@root_option
@click.option("--cell", "cells", multiple=True, help="Only these cells (id, group or pattern; repeatable).")
@click.option("--reason", default=None, help="Only attempts that ended with this reason.")
@json_option
@friendly
def attempts(root: str | None, cells: tuple[str, ...], reason: str | None, as_json: bool) -> None:
    """Every attempt's receipt, newest first."""
    from sweepq.queue.states import Reason

    if reason is not None and reason not in {r.value for r in Reason}:
        raise UsageError(f"unknown reason {reason!r}: one of {', '.join(r.value for r in Reason)}")
    with reading(None, root) as store:
        wanted = {c.id for c in select_cells(store.cells(), cells)} if cells else None
        rows = [a for a in store.attempts(reason=reason, newest_first=True) if wanted is None or a.cell in wanted]
        if as_json:
            print_json([a.to_json() for a in rows])
        else:
            out().print(render.attempts_table(rows))


@main.command()
@root_option
@json_option
@friendly
def report(root: str | None, as_json: bool) -> None:
    """Where the hours went: attempts, wall and GPU hours, and steps lost, per termination reason."""
    from sweepq.cli.report import by_reason

    with reading(None, root) as store:
        rows = by_reason(store.attempts())
        if as_json:
            print_json(rows)
        else:
            out().print(render.report_table(rows))


@main.command()
@root_option
@json_option
@click.option("--top", default=3, show_default=True, help="How many winners to rank.")
@friendly
def best(root: str | None, as_json: bool, top: int) -> None:
    """Per cell, the best metric and the checkpoint that holds it; then the sweep's winners."""
    from sweepq.cli.report import best_per_cell

    with reading(None, root) as store:
        metric = store.settings().metric
        rows = best_per_cell(store, metric, top)
        if as_json:
            print_json(rows)
        else:
            out().print(render.best_table(rows, metric))
