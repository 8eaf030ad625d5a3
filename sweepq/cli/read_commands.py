"""Read commands: `status`, `show`, `attempts`, `report`, `best`. They never write, not even a lock file."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console, Group, RenderableType

from sweepq.cli import fit, header, json_stream, render, render_cell
from sweepq.cli.app import friendly, json_option, main, out, print_json, root_option, sqlite_reading
from sweepq.errors import UsageError
from sweepq.results import failures, spelling

if TYPE_CHECKING:
    from sweepq.queue.opening import Reader
    from sweepq.queue.records import CellRecord
    from sweepq.queue.store import Store

    Queue = Store | Reader  # a Store, or status's Reader

_RUNNING = "running"  # CellState.RUNNING as the cells table stores it


def is_place(arg: str | None) -> bool:
    """Does a command-line argument name a sweep file or a sweep root, rather than cells?

    Cell selectors (2.3, a group name, 2.*) hold no slash and no .yaml, so a path with
    either is a place; a bare name is one only when it is a folder holding a queue.
    """
    from sweepq.queue.opening import database_file

    if not arg:
        return False
    path = Path(arg)
    if path.suffix in (".yaml", ".yml") or "/" in arg or arg in (".", ".."):
        return True
    try:
        return path.is_dir() and database_file(path).exists()
    except OSError:  # a name longer than a file name may be (ENAMETOOLONG): no place, so a selector
        return False


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
@click.option("--all", "all_rows", is_flag=True, help="Every cell a row, however large the sweep.")
@all_params_option
@friendly
def status(
    spec: str | None, root: str | None, as_json: bool, watch: bool, every: float, all_rows: bool, all_params: bool
) -> None:
    """Every cell at a glance: state, progress, the cfg keys that vary, metrics, attempts, why a cell failed.

    SPEC_OR_ROOT is the sweep file or its root folder (default: --root, else the current folder).
    A sweep of more than 50 cells shows the cells that need attention (running, interrupted, failed,
    waiting to retry: the first 20 not running) and its 5 best done cells; --all shows every row.
    Columns that do not fit the terminal are left out (a footnote names them); --json has everything:
    a list with an object per cell, indented in a terminal, else one cell a line (for jq, a file).
    """
    with sqlite_reading(spec, root) as store:
        if as_json:
            json_stream.write_texts(status_json(store), sys.stdout, lines=not sys.stdout.isatty())
            return

        def table() -> RenderableType:
            return status_view(store, all_rows, all_params)

        if watch:
            _watch(store, out(), every, table)
        else:
            fit.print_streamed(out(), table())


@dataclass(frozen=True)
class Listing:
    """How much of a sweep `status` lists without --all."""

    whole_up_to: int = 50  # a sweep of up to this many cells (gone ones included) shows every row
    troubled: int = 20  # interrupted, failed and waiting-to-retry cells shown, the first in cell order
    best: int = 5  # done cells shown, the best by the sweep's metric (without one: the last finished)


LISTING = Listing()


def status_view(store: Queue, all_rows: bool, all_params: bool, listing: Listing = LISTING) -> RenderableType:
    """The header and the table: every cell, or on a large sweep those `attention` picks and a footer."""
    from sweepq.queue.states import CellState

    metric = store.settings().metric
    census = store.census()
    owners = Owners(store)
    workers, live = status_workers(store, owners)
    fc = store.forecast(workers)
    footer = None
    if all_rows or census.total + census.removed <= listing.whole_up_to:
        cells = store.cells()
        head = header.header(cells, fc, fc.began, live)
    else:
        cells, why = attention(store, listing)
        footer = render.status_footer(census.counts, census.removed, len(cells), why)
        head = header.header_of_counts(census.counts, fc, fc.began, live)
    etas, rates = header.per_cell(fc, cells)
    usages = store.usages(None if footer is None else [c.id for c in cells])
    table = render.status_table(
        cells,
        metric,
        dead={c.id for c in cells if c.state is CellState.RUNNING and not owners.alive(c.id)},
        leases=owners.leases,
        etas=etas,
        rates=rates,
        all_params=all_params,
        usages=usages,
        footer=footer,
        **_told(store, cells),
    )
    from sweepq.slurm.submit import describe_jobs

    jobs = describe_jobs(store.root)  # the workers of a `launch --on slurm`: each job and its state
    return Group(head, table, jobs) if jobs else Group(head, table)


def attention(store: Queue, listing: Listing = LISTING) -> tuple[list[CellRecord], str]:
    """The cells of a large sweep that `status` shows, and in words which: every running cell (a stalled
    one, one whose owner died), the first interrupted, failed or waiting to retry, then the best done.
    One query a part, each reading only the rows it shows."""
    from sweepq.queue.states import CellState

    metric = store.settings().metric
    running = store.cells_in([CellState.RUNNING])
    troubled = store.cells_in([CellState.INTERRUPTED, CellState.FAILED], listing.troubled, backing_off=True)
    best = store.best_done(metric.goal if metric else None, listing.best)
    done = f"the {listing.best} best done by {metric.name}" if metric else f"the {listing.best} last done"
    why = f"shown: every running cell, the first {listing.troubled} interrupted, failed or waiting to retry, {done}"
    return [*running, *troubled, *best], why


def status_json(store: Queue) -> Iterator[str]:
    """Every cell's `status --json` object as JSON text (one line), in cell order, made one at a time
    from the listing's plain rows (times and JSON columns already spelt as JSON)."""
    from sweepq.queue.records import cell_line

    owners = Owners(store)
    fc, stalls, usages = store.forecast(status_workers(store, owners)[0]), store.stalls(), store.usage_texts()
    for r in store.cell_listing():
        cell = r.id
        alive = owners.alive(cell) if r.state == _RUNNING else None
        more = (alive, fc.cell_seconds_left(cell), fc.steps_per_second(cell), stalls.get(cell))
        yield cell_line(r, more, usages.get(cell))


class Owners:
    """Whether a running cell's owner lives, as `status` asks it: the root's liveness, cell by cell (a
    file lock each); on a server database every lease at once, in one statement (leases.py `holders`),
    whose holder's host and last renewal `status` shows (`leases`: None on SQLite)."""

    def __init__(self, store: Queue) -> None:
        from sweepq.queue import liveness

        self.held: dict[str, tuple[str | None, float, bool]] | None = None
        read = getattr(store, "holders", None)  # a server's reader (server_text.py) reads the leases itself
        if read is None:
            self.owners = liveness.for_root(store.root)
            table = getattr(self.owners, "holders", None)  # a TableLiveness: leases.py
            if table is not None:
                self.held = {c: (h.host, h.age_seconds, h.alive) for c, h in table().items()}
        else:
            self.held = read()
        self.leases = None if self.held is None else {c: (h[0], h[1]) for c, h in self.held.items()}

    def alive(self, cell: str) -> bool:
        if self.held is None:
            return self.owners.owner_alive(cell)
        holder = self.held.get(cell)
        return holder is not None and holder[2]


def status_workers(store: Queue, owners: Owners | None = None) -> tuple[int, bool]:
    """How many workers the forecast counts, and whether any runs: the live launch's, else as many as
    cells have a live owner (workers started by hand), else one (what a relaunch would take at the least)."""
    from sweepq.cli import launch_lock  # psutil and the lock: only for the commands that ask

    live = launch_lock.holder(store.root)
    owners = owners or Owners(store)
    running = sum(1 for cell, _ in store.running() if owners.alive(cell))  # a killed worker runs nothing
    if live is not None and live.workers:
        return max(live.workers, running), True
    return max(1, running), running > 0 or live is not None


def _watch(store: Queue, con: Console, every: float, table: Callable[[], RenderableType]) -> None:
    """The table again every `every` seconds until no cell is left to run, or until the sweep it saw run
    stops (a `sweepq stop`, a Ctrl-C in the launch's terminal, its workers killed), or Ctrl-C: live in a
    terminal, one table after another elsewhere (a file, a pipe). A watch started before anything runs
    waits for a launch (started next, in another terminal)."""
    from rich.live import Live

    saw_running = False

    def go_on() -> bool:
        nonlocal saw_running
        if not store.unsettled():
            return False
        runs = status_workers(store)[1]
        saw_running = saw_running or runs
        return runs or not saw_running

    try:
        if not con.is_terminal:
            con.print(table())
            while go_on():
                time.sleep(every)
                con.print()
                con.print(table())
        else:
            with Live(table(), console=con, auto_refresh=False) as live:
                while go_on():
                    time.sleep(every)
                    live.update(table(), refresh=True)
    except KeyboardInterrupt:
        return  # how a watch ends: not an error
    left = store.unsettled()
    if left:
        con.print(
            f"nothing runs on this sweep any more, {left} cell{'s' if left != 1 else ''} left: the launch "
            "stopped (run the same launch command again to go on)",
            soft_wrap=True,
        )


def _told(store: Queue, cells: list[CellRecord]) -> dict[str, Any]:
    """What status says beyond the columns: cells without progress, why cells failed, a full disk's words."""
    return {"stalls": store.stalls(), "notes": told_notes(store, cells)}


def told_notes(store: Queue, cells: list[CellRecord]) -> dict[str, str]:
    """The status table's notes: why each failed cell failed (and where its logs are), a full disk's words.

    The newest attempts of the cells told, in one read, not every attempt that ended the same way."""
    last = store.last_attempts([c.id for c in cells if failures.told_failure(c)])
    told = failures.failure_notes(
        cells, lambda reason: [a for a in last if a.reason == reason], spelling.shown_path(store.root)
    )
    told |= store.fault_notes()  # the disk's own words say more than its exception
    for cell, steps in store.inexact_resumes().items():  # a result that may differ from an uninterrupted run's
        told[cell] = "; ".join(p for p in (told.get(cell, ""), inexact_note(steps)) if p)
    return told


def inexact_note(steps: list[int]) -> str:
    """The flag of a cell whose program declared a resume inexact (its data order restarted)."""
    at = ", ".join(str(s) for s in steps if s >= 0)
    return f"inexact resume{' from step ' + at if at else ''}: data order restarted"


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
    from sweepq.durable import cache
    from sweepq.layout import CellPaths

    cell, spec = cell_and_place(cell, spec, "show")
    with sqlite_reading(spec, root) as store:
        rec = store.cell(one_cell(store, cell, "show"))
        cache.fill(store, [rec.id])  # its DONE.json and receipts, when only the sweep's storage has them
        attempts = store.attempts(rec.id)
        ckpts = store.checkpoints(rec.id)
        events = store.events(rec.id)
        if as_json:
            d = rec.to_json()
            d.update(
                cfg=rec.result_cfg,  # the one its result came from; new_cfg: the file's, when it differs
                new_cfg=rec.new_cfg,
                cfg_hash=rec.cfg_hash,
                attempts=[a.to_json() for a in attempts],
                checkpoints=[c.to_json() for c in ckpts],
                history=[e.to_json() for e in events],
                done=read_done(CellPaths(store.root, rec.id)),
            )
            print_json(d)
            return
        out().print(render_cell.show_cell(rec, attempts, ckpts, events, store.settings().metric))


def one_cell(store: Store | Reader, selector: str, command: str) -> str:
    from sweepq.spec.select import select_cells

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
    with sqlite_reading(spec, root) as store:
        from sweepq.spec.select import select_cells

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
    from sweepq.results.report import best_per_cell, no_best_checkpoint

    with sqlite_reading(spec, root) as store:
        metric = store.settings().metric
        rows = best_per_cell(store, metric, top)
        missing = no_best_checkpoint(rows, metric)
        if missing:
            click.echo(f"warning: {missing}", err=True)
        if as_json:
            print_json(rows)
        else:
            out().print(render.best_table(rows, metric, all_params=all_params))
