"""Commands that run the sweep: `plan` (expand only), `launch` (workers until settled), `worker` (one)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from sweepq.cli.app import friendly, json_option, main, out, storage_option
from sweepq.errors import UsageError
from sweepq.spec.sweep import Sweep, load_sweep

# `plan` needs neither the queue nor the launch machinery: they are imported by the commands that use them.


@main.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@json_option
@click.option("--all", "all_rows", is_flag=True, help="Every cell a row, however large the sweep.")
@friendly
def plan(spec: str, as_json: bool, all_rows: bool) -> None:
    """Expand SPEC and list its cells in run order (touches nothing on disk).

    A sweep of more than 50 cells shows its cells per group and its first and last 10 cells;
    --all lists every row, --json every cell. What `sweepq launch` would refuse because this machine
    lacks it (the program, the train: function) is a warning: a plan may preview a sweep where its
    code is not.
    """
    from sweepq.cli.plan_view import print_plan
    from sweepq.spec.preflight import preflight

    sweep = load_sweep(spec)
    # the root, every command line (${envvar:NAME} shown as ***); what this machine lacks, in launch's words
    checked = preflight(sweep, spec, preview=True)
    for w in sweep.warnings:
        click.echo(f"warning: {w}", err=True)
    for problem in checked.absent:
        click.echo(f"warning: {problem} `sweepq launch` refuses it.", err=True)
    if as_json:
        _print_json(sweep, checked.commands)
        return
    print_plan(out(), sweep, checked.root, checked.commands, all_rows)


_ENCODE = json.JSONEncoder(default=str, allow_nan=False).encode  # one encoder: json.dumps builds one a call


def _print_json(sweep: Sweep, commands: dict[str, list[str]]) -> None:
    """A JSON list, one cell a line: each row written as it is encoded, so 100,000 cells take little memory.

    A row is {"cell", "group", "cfg", "cfg_hash"} and, for program cells, "command": the text of
    each value is encoded once where it is the same for many rows (a group's name).
    """
    stream = sys.stdout
    opening = "["
    groups: dict[str, str] = {}
    for c in sweep.cells:
        group = groups.get(c.group_name) or groups.setdefault(c.group_name, _ENCODE(c.group_name))
        command = f', "command": {_ENCODE(commands[c.id])}' if c.id in commands else ""
        cfg = c.cfg_json or _ENCODE(c.cfg)  # the same text: the expansion wrote json.dumps's
        stream.write(
            f'{opening}\n  {{"cell": "{c.id}", "group": {group}, "cfg": {cfg}, "cfg_hash": "{c.cfg_hash}"{command}}}'
        )
        opening = ","
    stream.write("[]\n" if opening == "[" else "\n]\n")
    stream.flush()


@main.command(name="launch")
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--root", "root", metavar="DIR", help="Where the sweep lives (overrides `root:` in SPEC).")
@click.option("--workers", "-w", default=2, show_default=True, type=click.IntRange(1, 256), help="Worker processes.")
@click.option("--gpus", default=None, metavar="0,1,...", help="GPU indices, shared round-robin among workers.")
@click.option(
    "--accept-changed",
    is_flag=True,
    help="Give existing cells a changed cfg (recorded in their history); done cells keep their results, "
    "shown with the cfg they ran with.",
)
@click.option(
    "--rerun-changed",
    is_flag=True,
    help="As --accept-changed, and queue again the done cells whose results came from an older cfg "
    "(they resume from their last checkpoint; their old results stay in their history).",
)
@click.option("--no-live", is_flag=True, help="Print state changes as lines instead of a live table.")
@click.option(
    "--detach", is_flag=True, help="Run in the background, safe from the terminal closing; output to ROOT/launch.log."
)
@click.option("--ready-fd", type=int, default=None, hidden=True, help="Write 'ready' here once the workers started.")
@click.option(
    "--on",
    type=click.Choice(["local", "slurm"]),
    default="local",
    show_default=True,
    help="Where the workers run: local processes, or a Slurm job array (options in the sweep file's slurm:).",
)
@click.option(
    "--database",
    default=None,
    metavar="URL",
    help="The queue's database (a SQLAlchemy URL, e.g. postgresql+psycopg://user@host/db); before "
    "SWEEPQ_DATABASE_URL and the sweep file's database:.",
)
@storage_option
@friendly
def launch_cmd(
    spec: str,
    root: str | None,
    workers: int,
    gpus: str | None,
    accept_changed: bool,
    rerun_changed: bool,
    no_live: bool,
    detach: bool,
    ready_fd: int | None,
    on: str,
    database: str | None,
) -> None:
    """Run the sweep in SPEC until every cell is done, failed or cancelled (safe to repeat)."""
    if database is not None:
        from sweepq.queue.database_url import ENV_DATABASE, dialect

        dialect(database, "--database")  # refused as written, before anything else
        os.environ[ENV_DATABASE] = database  # the command line first; the launch's processes inherit it
    gpu_list = [g.strip() for g in gpus.split(",") if g.strip()] if gpus else []
    if gpus is not None and not all(g.isdigit() for g in gpu_list):
        raise UsageError(f"--gpus takes GPU indices like 0,1; got {gpus!r}")
    # what reconcile.plan takes: refuse a changed cfg, accept it keeping done results, or run them again
    accept: bool | str = "rerun" if rerun_changed else "keep" if accept_changed else False
    if detach:
        from sweepq.cli.background import launch_detached

        sys.exit(launch_detached(spec, root, workers, gpu_list, accept, on))
    from sweepq.cli.launch import MakeLauncher, launch
    from sweepq.cli.terminal import Terminal

    terminal = Terminal()
    live = terminal.console().is_terminal and not no_live
    if on == "slurm" and gpu_list:
        raise UsageError("--gpus chooses local GPUs; on Slurm write slurm: {gpus_per_task: N} in the sweep file")
    make_launcher: MakeLauncher | None = None
    if on == "slurm":  # the workers are a Slurm job array
        from sweepq.cli.slurm_launch import slurm_launcher

        make_launcher = slurm_launcher
    sys.exit(launch(spec, root, workers, gpu_list, accept, terminal, live, ready_fd, make_launcher))


@main.command()
@click.option("--root", "root", required=True, metavar="DIR", help="The sweep root.")
@click.option("--name", default=None, help="This worker's name in receipts (default host:pid).")
@click.option("--parent-pid", type=int, default=None, hidden=True, help="Stop gracefully when this process dies.")
@click.option("--gate-fd", type=int, default=None, hidden=True, help="Claim once the launch says go on this pipe.")
@click.option(
    "--database", default=None, metavar="URL", help="Join the sweep whose queue is on this server (with --sweep)."
)
@click.option("--sweep", "sweep_name", default=None, metavar="NAME", help="The sweep's name on --database's server.")
@click.option(
    "--scheduled",
    is_flag=True,
    help="Run by a scheduler: SIGUSR1/SIGUSR2 stop it like SIGTERM, and it exits 0 when done (or stopped by "
    "SIGINT), 75 when a signal stopped it while cells remain (start it again), 1 when it failed (docs/scale.md).",
)
@storage_option
@friendly
def worker(
    root: str,
    name: str | None,
    parent_pid: int | None,
    gate_fd: int | None,
    database: str | None,
    sweep_name: str | None,
    scheduled: bool,
) -> None:
    """Run one worker on an existing sweep root (for other machines and schedulers)."""
    from sweepq.cli.roots import resolve_root
    from sweepq.host.procs import die_with_parent
    from sweepq.queue.database import Database
    from sweepq.worker.loop import Worker

    if parent_pid is not None:
        die_with_parent(parent_pid)
    path = resolve_root(None, root)
    if database is not None or sweep_name is not None:
        _join_server(path, database, sweep_name)
    if not Database.for_root(path).exists():
        raise UsageError(f"{path} is not a sweep root: launch the sweep once with `sweepq launch SPEC --root {root}`")
    if scheduled:
        from sweepq.slurm.job import run_worker

        sys.exit(run_worker(path, name=name, requeue=False))  # the scheduler acts on the exit code
    sys.exit(Worker(path, name=name, gate=gate_fd).run())


def _join_server(root: Path, database: str | None, sweep_name: str | None) -> None:
    """This machine's root joins the sweep `sweep_name` on the server `database`: recorded in the root,
    as a launch records it, so that the worker's attempts and read commands find the same queue."""
    from sweepq.queue import database_url
    from sweepq.spec.types import LeaseTerms

    if database is None or not sweep_name:
        raise UsageError("--database and --sweep go together: the server's URL and the sweep's name on it")
    if database_url.dialect(database, "--database") != "postgresql":
        raise UsageError("--database: a worker joins a sweep on a PostgreSQL server (a SQLite queue is its root's)")
    os.environ[database_url.ENV_DATABASE] = database  # the command line first; the worker's attempts inherit it
    terms = LeaseTerms()
    chosen = database_url.Chosen(database, "--database")
    database_url.write_record(root, chosen, sweep_name, terms.renew_seconds, terms.expire_seconds)
    # The sweep's own terms, as its launch stored them: a joined worker whose leases expired on other
    # terms would be reaped early, or wait past its peers' expiry before it reclaims their cells.
    from sweepq.queue.database import Database
    from sweepq.queue.store import Store

    if Database.for_root(root).exists():
        store = Store.open(root)
        try:
            terms = store.settings().lease
        finally:
            store.close()
        database_url.write_record(root, chosen, sweep_name, terms.renew_seconds, terms.expire_seconds)
