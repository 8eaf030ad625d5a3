"""What a launch says before it starts: the cells it skips, resumes and queues, in the user's words."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.text import Text

from sweepq.queue import reconcile
from sweepq.queue.reads import Census
from sweepq.queue.states import CellState
from sweepq.queue.store import Store
from sweepq.results import spelling
from sweepq.spec.sweep import Sweep


def describe_start(store: Store, sweep: Sweep, root: Path, plan: reconcile.ReconcilePlan, console: Console) -> None:
    """Say what this launch will do, in the user's words: counts, and the first cells of each kind by id."""
    for w in sweep.text_warnings:  # not `warnings`: the same file again is not expanded, its repeats not told again
        console.print(Text.assemble(("warning:", "yellow"), f" {w}"))  # no markup: `w` may quote a value
    census = store.census(LISTED)  # counted in the database: a root of 100,000 cells is not loaded
    name = sweep.settings.name  # the user's words: a `[/x]` in it is text (the console reads no markup)
    console.print(Text.assemble("sweep ", (name, "bold"), f" at {spelling.shown_path(root)}: {cells(census.total)}"))
    if plan.new and len(plan.new) != census.total:
        console.print(f"  new cells: {listed([c.id for c in plan.new[:LISTED]], len(plan.new))}")
    if plan.removed:
        console.print(
            Text.assemble("  ", ("no longer in the file (kept, not run):", "yellow"), f" {listed(plan.removed)}")
        )
    if plan.kept_done and not plan.rerun:
        console.print(Text.assemble("  ", (f"{KEPT_DONE}:", "yellow"), f" {listed(plan.kept_done)}"))
    if plan.requeued:
        console.print(f"  {REQUEUED}: {listed(plan.requeued)}", highlight=False)
    done, resume, queued = (census.counts.get(state, 0) for state in _TOLD)
    if done:
        console.print(f"  skipping (done): {listed(census.first[CellState.DONE], done)}")
    if resume:
        program = sweep.settings.program is not None
        points = [_resume_point(store, cell, program) for cell in census.first[CellState.INTERRUPTED]]
        console.print(f"  resuming first: {listed(points, resume)}")
    if queued:
        console.print(f"  queued: {listed(census.first[CellState.QUEUED], queued)}")


_TOLD = (CellState.DONE, CellState.INTERRUPTED, CellState.QUEUED)
KEPT_DONE = (
    "done under their old cfg (results kept and shown with the cfg they ran with; "
    "`sweepq reset CELL` or --rerun-changed runs the new one)"
)
REQUEUED = "queued again under their new cfg (old results in their history)"


def ending(census: Census) -> Text:
    """The launch's last line: how many cells are in each state (render.summary's words, from counts)."""
    parts = [f"{census.counts[s]} {s}" for s in CellState if census.counts.get(s)]
    line = Text(f"{cells(census.total)}: " + ", ".join(parts))
    if census.removed:
        line.append(f" ({census.removed} no longer in the sweep file)", style="dim")
    return line


def cells(n: int) -> str:
    """`1 cell`, `9 cells`."""
    return f"{n} cell" if n == 1 else f"{n} cells"


LISTED = 20  # cell ids named in one line of the launch's summary; a 100,000-cell sweep gets a count


def listed(items: list[str], total: int | None = None) -> str:
    """The first LISTED items, then how many more: `sweepq status` lists them all."""
    total = len(items) if total is None else total
    shown = ", ".join(items[:LISTED])
    return shown if total <= LISTED else f"{shown}, … and {total - LISTED:,} more (sweepq status lists every cell)"


def _resume_point(store: Store, cell: str, program: bool) -> str:
    """Where an interrupted cell starts again, as far as sweepq can know."""
    committed = [k.step for k in store.checkpoints(cell) if k.state == "committed"]
    if committed:
        return f"{cell} (from checkpoint step {max(committed)})"
    reports = any(a.end_step is not None for a in store.attempts(cell))
    if not program or reports:
        return f"{cell} (from scratch: no checkpoint committed)"
    # A program that keeps its own checkpoints (outside sweepq) may resume from them: sweepq cannot tell.
    return f"{cell} (unknown: sweepq keeps no checkpoint of this program)"
