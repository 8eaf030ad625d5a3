"""Steering commands: `retry`, `cancel`, `reset`: short writes through the store."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime

import click

from sweepq import ownfiles
from sweepq.cli.app import friendly, main, root_option, steering
from sweepq.cli.read_commands import is_place
from sweepq.cli.roots import resolve_root
from sweepq.errors import UsageError
from sweepq.layout import CellPaths, RootPaths
from sweepq.queue import liveness, lock
from sweepq.queue.states import CellState
from sweepq.queue.store import Store
from sweepq.spec.sweep import select_cells


def _selected(store: Store, selectors: tuple[str, ...]) -> list[str]:
    if not selectors:
        raise UsageError("name the cells: ids (2.3), group names or patterns (2.*)")
    return [c.id for c in select_cells(store.cells(), selectors)]


_PLACE_HELP = """

CELLS are ids (2.3), group names or patterns (2.*). SPEC_OR_ROOT, anywhere among them,
is the sweep file or its root folder (default: --root, else the current folder):
`sweepq {name} 2.3 sweep.yaml`.
"""


def _on_cells(fn: Callable[[Store, list[str]], None]) -> click.Command:
    """A steering command on the CELLS its arguments select: `fn(store, ids)` (name and help from `fn`)."""

    @main.command(name=fn.__name__, help=(fn.__doc__ or "") + _PLACE_HELP.format(name=fn.__name__))
    @click.argument("cells", nargs=-1, metavar="CELLS... [SPEC_OR_ROOT]")
    @root_option
    @friendly
    def command(cells: tuple[str, ...], root: str | None) -> None:
        place, selectors = _place_among(cells, fn.__name__)
        with steering(str(resolve_root(place, root))) as store:
            fn(store, _selected(store, selectors))

    return command


def _place_among(args: tuple[str, ...], command: str) -> tuple[str | None, tuple[str, ...]]:
    """The sweep file or root among the arguments (at most one), and the cell selectors."""
    places = [a for a in args if is_place(a)]
    if len(places) > 1:
        raise UsageError(
            f"`{command}` takes one sweep file or root, got {', '.join(places)}: "
            f"sweepq {command} CELLS... [SPEC_OR_ROOT]"
        )
    return (places[0] if places else None), tuple(a for a in args if a not in places)


@_on_cells
def retry(store: Store, ids: list[str]) -> None:
    """Requeue failed or cancelled CELLS with a fresh retry budget."""
    moved = store.retry(ids)
    _report_moves("requeued", moved, ids, store)


@_on_cells
def cancel(store: Store, ids: list[str]) -> None:
    """Cancel CELLS; a running one is first preempted gracefully by its worker."""
    now, requested = store.cancel(ids)
    if now:
        click.echo(f"cancelled: {', '.join(now)}")
    if requested:
        click.echo(f"asked the workers of {', '.join(requested)} to stop them (checkpoint, then cancelled)")
    rest = [i for i in ids if i not in now and i not in requested]
    if rest:
        click.echo(f"unchanged (done, failed or already cancelled): {', '.join(rest)}")


@_on_cells
def reset(store: Store, ids: list[str]) -> None:
    """Start CELLS over from scratch; their checkpoints, DONE.json and output/ move to the attic."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    _require_own(store, ids, stamp)  # before any cell moves: a link refuses the whole command
    done, refused = [], []
    for cid in ids:
        try:
            if _reset_one(store, cid, stamp):
                done.append(cid)
        except _Refused:
            refused.append(cid)  # its own words said why
    _report_moves("reset", done, [i for i in ids if i not in refused], store)
    if refused and not done:
        sys.exit(1)


class _Refused(Exception):
    """A cell that is not reset, its reason already said."""


def _held_words(store: Store, cid: str) -> str:
    """Why a cell whose lock another process holds is not reset: a running attempt, or who holds it."""
    held = lock.holders(CellPaths(store.root, cid).lock)
    if store.cell(cid).state == CellState.RUNNING:
        by = f" (its lock is held by {', '.join(map(str, held))})" if held else ""
        return f"{cid} is running{by}: cancel it first (sweepq cancel {cid})"
    if not held:  # another user's process, or gone meanwhile
        return f"{cid} not reset: another process holds its lock (its folder's descriptor); try again once it exits"
    who = ", ".join(map(str, held))
    pids = " ".join(str(h.pid) for h in held)
    return (
        f"{cid} not reset: its lock is held by {who}, a process that is not a running attempt of this "
        "sweep (a daemon or helper an attempt left, holding the cell folder's descriptor). "
        f"End it (kill {pids}), then run the reset again."
    )


def _require_own(store: Store, ids: list[str], stamp: str) -> None:
    """Nothing moves out of, or into, a folder reached through a link (ownfiles.py): a linked cell folder
    or attic would move another place's files. A link among the items moved goes as the link itself."""
    for cid in ids:
        ownfiles.require_own(store.root, CellPaths(store.root, cid).dir, f"the folder of cell {cid}")
        ownfiles.require_own(store.root, RootPaths(store.root).attic_entry(cid, stamp), "the attic")


def _reset_one(store: Store, cid: str, stamp: str) -> bool:
    """Move a cell's checkpoints, marker and program output to the attic, then requeue it; never while it runs.

    The output goes too: a program that resumes from its own files there (Lightning's
    last.ckpt) would otherwise carry on from where the reset cell stopped.
    """
    paths = CellPaths(store.root, cid)
    owner = liveness.for_root(store.root).take(cid)
    if owner is None:
        click.echo(_held_words(store, cid), err=True)
        raise _Refused
    try:
        attic = RootPaths(store.root).attic_entry(cid, stamp)
        _require_own(store, [cid], stamp)  # again, now that the cell is owned: nothing is linked since
        moved = []
        for item in (paths.checkpoints, paths.done, paths.output):
            if os.path.lexists(item):  # a dangling link too: the cell starts over without it
                attic.mkdir(parents=True, exist_ok=True)
                ownfiles.move(item, attic / item.name)
                moved.append(item.name)
        dropped = _drop_stored_checkpoints(store, paths)
        if not store.reset([cid]):
            return False
        if moved:
            store.add_event(cid, "moved_to_attic", {"path": str(attic.relative_to(store.root)), "items": moved})
        if dropped:
            store.add_event(cid, "checkpoints_deleted", {"storage": dropped[0], "steps": dropped[1]})
        return True
    finally:
        owner.release()


def _drop_stored_checkpoints(store: Store, paths: CellPaths) -> tuple[str, list[int]] | None:
    """A sweep whose checkpoints are kept elsewhere (`storage:`): the cell's committed steps there are
    deleted (the attic is the root's), or the reset cell would resume from them. (where, steps)."""
    from sweepq.checkpoint import storage, storage_url

    where = store.settings().storage
    if storage_url.in_effect(where) is None:
        return None  # the root folder: moved to the attic with the cell's folder above
    checkpoints = storage.for_cell(paths, where)
    steps = checkpoints.steps()
    for step in steps:
        checkpoints.delete(step)
    return (storage_url.shown(storage_url.in_effect(where)), steps) if steps else None


def _report_moves(verb: str, moved: list[str], asked: list[str], store: Store) -> None:
    if moved:
        click.echo(f"{verb}: {', '.join(moved)}")
    rest = [i for i in asked if i not in moved]
    for cid in rest:
        click.echo(f"{cid} not {verb}: it is {store.cell(cid).state}", err=True)
    if rest and not moved:
        sys.exit(1)
