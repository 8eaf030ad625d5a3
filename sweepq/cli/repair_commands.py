"""`sweepq repair`: a new queue from the sweep file and the files, when the database is damaged or lost."""

from __future__ import annotations

from pathlib import Path

import click
from rich.text import Text

from sweepq.cli.app import friendly, main, out
from sweepq.cli.roots import default_root
from sweepq.errors import UsageError
from sweepq.queue import rebuild
from sweepq.queue.database import Database
from sweepq.results import spelling
from sweepq.spec.sweep import Sweep, load_sweep


@main.command()
@click.argument("spec", required=False, metavar="SPEC_OR_ROOT", type=click.Path(exists=True))
@click.option("--root", "root", metavar="DIR", help="The sweep root, when it is not the one SPEC names.")
@click.option("--force", is_flag=True, help="Rebuild even a database that is not damaged (it is moved aside).")
@friendly
def repair(spec: str | None, root: str | None, force: bool) -> None:
    """Move a damaged database aside and rebuild the queue from the sweep file and the cells' files.

    Done cells stay done (their DONE.json), cells with checkpoints resume from the newest that verifies,
    the others are queued; new attempts are numbered after the old ones. Then `sweepq launch` goes on.
    """
    sweep, target = _sweep_and_root(spec, root)
    result = rebuild.rebuild(target, sweep, force=force)
    _report(sweep, target, result)


def _sweep_and_root(spec: str | None, root: str | None) -> tuple[Sweep, Path]:
    """The sweep file and the root: SPEC is either; a root alone names its file in a sound database only."""
    if spec is not None and not Path(spec).is_dir():
        sweep = load_sweep(spec)
        return sweep, (Path(root) if root else default_root(sweep)).resolve()
    target = Path(root or spec or ".").resolve()
    words = rebuild.damage(target, Database.for_root(target))
    named = rebuild.spec_path(target) if words is None and Database.for_root(target).exists() else None
    if named is None or not Path(named).is_file():
        why = f"its database is damaged ({words})" if words else "its database names no sweep file that exists"
        raise UsageError(
            f"`sweepq repair` needs the sweep file of {target}: {why}, and the file gives the cells, their "
            f"order and settings. Run `sweepq repair SPEC --root {target}` with the sweep file it was launched with."
        )
    return load_sweep(named), target


def _report(sweep: Sweep, root: Path, r: rebuild.Rebuilt) -> None:
    con = out()
    where = spelling.shown_path(root)
    con.print(
        Text.assemble("rebuilt the queue of sweep ", (sweep.settings.name, "bold"), f" at {where} from its files")
    )
    if r.damage:
        con.print(f"  the old database was damaged: {r.damage}")
    if r.moved_to is not None:
        con.print(
            f"  it was moved to {spelling.shown_path(r.moved_to)} (with its -wal/-shm if any): nothing was deleted"
        )
    resumable = ", ".join(f"{c} (from step {s})" for c, s in r.resumable.items())
    con.print(f"  {len(r.done)} done" + (f": {', '.join(r.done)}" if r.done else ""))
    con.print(f"  {len(r.resumable)} resumable" + (f": {resumable}" if resumable else ""))
    con.print(f"  {len(r.queued)} queued" + (f": {', '.join(r.queued)}" if r.queued else ""))
    if r.attempts:
        con.print(
            f"  {r.attempts} earlier attempt(s) recorded from their folders (note: {rebuild.RECOVERED}); "
            "new attempts are numbered after them"
        )
    if r.not_in_file:
        con.print(
            Text.assemble(
                "  ", ("cell folders not in the sweep file (left alone):", "yellow"), f" {', '.join(r.not_in_file)}"
            )
        )
    again = f" --root {where}" if root != default_root(sweep).resolve() else ""
    con.print(f"run `sweepq launch {spelling.shown_path(sweep.path)}{again}` to go on")
