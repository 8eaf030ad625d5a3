"""The `sweepq` command: parse, call the domain, render. Read commands never write.

Exit codes: 0 success, 1 some cell failed (launch) or an internal error,
2 bad input (nothing was written), 130 interrupted.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar

import click
from rich.console import Console

from sweepq.cli import render
from sweepq.cli.launch import default_root, launch, resolve_root
from sweepq.errors import SweepqError, UsageError
from sweepq.layout import RootPaths
from sweepq.queue.lock import CellLock
from sweepq.queue.store import Store
from sweepq.spec.sweep import load_sweep, select_cells

F = TypeVar("F", bound=Callable[..., Any])


def friendly(fn: F) -> F:
    """Turn sweepq's errors into one paragraph on stderr and their exit code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SweepqError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(e.exit_code)

    return wrapper  # type: ignore[return-value]


def out() -> Console:
    """Wide when piped (tables are not cut to 80 columns in files and CI logs)."""
    console = Console(highlight=False, soft_wrap=False)
    if not console.is_terminal:
        console = Console(highlight=False, soft_wrap=False, width=1000)
    return console


def print_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, default=str, allow_nan=False))


root_option = click.option(
    "--root", "root", metavar="DIR", help="The sweep root (or a sweep file); default: from SPEC or the current folder."
)
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output (stable fields).")


@contextmanager
def reading(spec: str | None, root: str | None) -> Iterator[Store]:
    """The store of the root named by SPEC, --root or the current folder, never written."""
    store = Store.open_readonly(resolve_root(spec, root))
    try:
        yield store
    finally:
        store.close()


@contextmanager
def steering(root: str | None) -> Iterator[Store]:
    """The store for a steering command (migrated if needed, short writes)."""
    store = Store.open(resolve_root(None, root))
    try:
        yield store
    finally:
        store.close()


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="sweepq")
def main() -> None:
    """Run hyperparameter sweeps of PyTorch training that survive disconnects, preemptions and reboots."""


# -- plan ------------------------------------------------------------------------------


@main.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@json_option
@friendly
def plan(spec: str, as_json: bool) -> None:
    """Expand SPEC and list its cells in run order (touches nothing on disk)."""
    from sweepq.spec.command import render_command

    sweep = load_sweep(spec)
    root = default_root(sweep)
    rows = []
    for c in sweep.cells:
        row: dict[str, Any] = {"cell": c.id, "group": c.group_name, "cfg": c.cfg, "cfg_hash": c.cfg_hash}
        if sweep.settings.program is not None or sweep.settings.form == "wandb":
            args_file = str(root / "cells" / c.id / "args.json")
            row["command"] = render_command(sweep.settings, c.cfg, args_json_file=args_file, environ=os.environ)
        rows.append(row)
    for w in sweep.warnings:
        click.echo(f"warning: {w}", err=True)
    if as_json:
        print_json(rows)
        return
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for col in ("cell", "group", "cfg") + (("command",) if rows and "command" in rows[0] else ()):
        table.add_column(col, overflow="fold")
    for r in rows:
        cells = [r["cell"], r["group"], json.dumps(r["cfg"], sort_keys=True)]
        if "command" in r:
            from sweepq.execution.program import shell_join

            cells.append(shell_join(r["command"]))
        table.add_row(*cells)
    con = out()
    entry = sweep.settings.train or sweep.settings.program
    con.print(
        f"{sweep.settings.name}: {len(rows)} cells in {len(sweep.groups)} group(s), "
        f"root {render.shown_path(root)}, runs {entry}"
    )
    con.print(table)


# -- launch and worker --------------------------------------------------------------------


@main.command(name="launch")
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--root", "root", metavar="DIR", help="Where the sweep lives (overrides `root:` in SPEC).")
@click.option("--workers", "-w", default=2, show_default=True, type=click.IntRange(1, 256), help="Worker processes.")
@click.option("--gpus", default=None, metavar="0,1,...", help="GPU indices, shared round-robin among workers.")
@click.option("--accept-changed", is_flag=True, help="Give existing cells a changed cfg (recorded in their history).")
@click.option("--no-live", is_flag=True, help="Print state changes as lines instead of a live table.")
@friendly
def launch_cmd(
    spec: str, root: str | None, workers: int, gpus: str | None, accept_changed: bool, no_live: bool
) -> None:
    """Run the sweep in SPEC until every cell is done, failed or cancelled (safe to repeat)."""
    gpu_list = [g.strip() for g in gpus.split(",") if g.strip()] if gpus else []
    if gpus is not None and not all(g.isdigit() for g in gpu_list):
        raise UsageError(f"--gpus takes GPU indices like 0,1; got {gpus!r}")
    console = out()
    live = console.is_terminal and not no_live
    sys.exit(launch(spec, root, workers, gpu_list, accept_changed, console, live))


@main.command()
@click.option("--root", "root", required=True, metavar="DIR", help="The sweep root.")
@click.option("--name", default=None, help="This worker's name in receipts (default host:pid).")
@click.option("--parent-pid", type=int, default=None, hidden=True, help="Stop gracefully when this process dies.")
@friendly
def worker(root: str, name: str | None, parent_pid: int | None) -> None:
    """Run one worker on an existing sweep root (for other machines and schedulers)."""
    from sweepq.execution.procs import die_with_parent
    from sweepq.execution.worker import Worker

    if parent_pid is not None:
        die_with_parent(parent_pid)
    path = resolve_root(None, root)
    if not RootPaths(path).db.exists():
        raise UsageError(f"{path} is not a sweep root: launch the sweep once with `sweepq launch SPEC --root {root}`")
    sys.exit(Worker(path, name=name).run())


# -- reading ---------------------------------------------------------------------------------


@main.command()
@click.argument("spec", required=False, type=click.Path(dir_okay=False))
@root_option
@json_option
@click.option("--watch", is_flag=True, help="Refresh every second until interrupted.")
@friendly
def status(spec: str | None, root: str | None, as_json: bool, watch: bool) -> None:
    """Every cell at a glance: state, progress, metrics, attempts, last reason."""
    with reading(spec, root) as store:
        metric = store.settings().metric
        if as_json:
            etas = store.etas()
            print_json(
                [c.to_json() | {"alive": _alive(store, c), "eta_seconds": etas.get(c.id)} for c in store.cells()]
            )
            return
        con = out()
        if not watch:
            con.print(render.status_table(store.cells(), metric, dead=_dead_running(store), etas=store.etas()))
            return
        from rich.live import Live

        with Live(console=con, refresh_per_second=2) as live:
            try:
                while True:
                    live.update(
                        render.status_table(store.cells(), metric, dead=_dead_running(store), etas=store.etas())
                    )
                    time.sleep(1)
            except KeyboardInterrupt:
                pass


def _alive(store: Store, cell: Any) -> bool | None:
    """For running cells: does a live process hold the cell's lock? (None for other states.)"""
    from sweepq.layout import CellPaths
    from sweepq.queue.lock import is_free
    from sweepq.queue.states import CellState

    if cell.state is not CellState.RUNNING:
        return None
    return not is_free(CellPaths(store.root, cell.id).lock)


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


# -- steering ------------------------------------------------------------------------------


def _selected(store: Store, selectors: tuple[str, ...]) -> list[str]:
    if not selectors:
        raise UsageError("name the cells: ids (2.3), group names or patterns (2.*)")
    return [c.id for c in select_cells(store.cells(), selectors)]


@main.command()
@click.argument("cells", nargs=-1)
@root_option
@friendly
def retry(cells: tuple[str, ...], root: str | None) -> None:
    """Requeue failed or cancelled CELLS with a fresh retry budget."""
    with steering(root) as store:
        ids = _selected(store, cells)
        moved = store.retry(ids)
        _report_moves("requeued", moved, ids, store)


@main.command()
@click.argument("cells", nargs=-1)
@root_option
@friendly
def cancel(cells: tuple[str, ...], root: str | None) -> None:
    """Cancel CELLS; a running one is first preempted gracefully by its worker."""
    with steering(root) as store:
        ids = _selected(store, cells)
        now, requested = store.cancel(ids)
        if now:
            click.echo(f"cancelled: {', '.join(now)}")
        if requested:
            click.echo(f"asked the workers of {', '.join(requested)} to stop them (checkpoint, then cancelled)")
        rest = [i for i in ids if i not in now and i not in requested]
        if rest:
            click.echo(f"unchanged (done, failed or already cancelled): {', '.join(rest)}")


@main.command()
@click.argument("cells", nargs=-1)
@root_option
@friendly
def reset(cells: tuple[str, ...], root: str | None) -> None:
    """Start CELLS over from scratch; their checkpoints and DONE.json move to the attic."""
    with steering(root) as store:
        ids = _selected(store, cells)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        done = [cid for cid in ids if _reset_one(store, cid, stamp)]
        _report_moves("reset", done, ids, store)


def _reset_one(store: Store, cid: str, stamp: str) -> bool:
    """Move a cell's checkpoints and marker to the attic, then requeue it; never while it runs."""
    from sweepq.layout import CellPaths

    paths = CellPaths(store.root, cid)
    lock = CellLock(paths.lock)
    if not lock.try_acquire():
        click.echo(f"{cid} is running: cancel it first (sweepq cancel {cid})", err=True)
        return False
    try:
        attic = RootPaths(store.root).attic / cid / stamp
        moved = []
        for item in (paths.checkpoints, paths.done):
            if item.exists():
                attic.mkdir(parents=True, exist_ok=True)
                shutil.move(str(item), str(attic / item.name))
                moved.append(item.name)
        if not store.reset([cid]):
            return False
        if moved:
            store.add_event(cid, "moved_to_attic", {"path": str(attic.relative_to(store.root)), "items": moved})
        return True
    finally:
        lock.release()


def _report_moves(verb: str, moved: list[str], asked: list[str], store: Store) -> None:
    if moved:
        click.echo(f"{verb}: {', '.join(moved)}")
    rest = [i for i in asked if i not in moved]
    for cid in rest:
        click.echo(f"{cid} not {verb}: it is {store.cell(cid).state}", err=True)
    if rest and not moved:
        sys.exit(1)


if __name__ == "__main__":
    main()
