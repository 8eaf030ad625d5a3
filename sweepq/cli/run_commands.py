"""Commands that run the sweep: `plan` (expand only), `launch` (workers until settled), `worker` (one)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

from sweepq.cli import render
from sweepq.cli.app import friendly, json_option, main, out, print_json
from sweepq.cli.launch import default_root, launch, resolve_root
from sweepq.errors import UsageError
from sweepq.layout import RootPaths
from sweepq.queue.database import Database
from sweepq.spec.sweep import load_sweep


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
            args_file = str(RootPaths(root).cell(c.id).args)
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
    if not Database.for_root(path).exists():
        raise UsageError(f"{path} is not a sweep root: launch the sweep once with `sweepq launch SPEC --root {root}`")
    sys.exit(Worker(path, name=name).run())
