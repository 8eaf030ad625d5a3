"""`sweepq launch --detach`: the same launch in the background, out of reach of the terminal.

The sweep file is planned and checked here first (bad input: its paragraph and
exit 2, nothing started) and applied to the root (so that it is a sweep root
before the log is written into it), then the launch runs again without --detach in a new
session (no controlling terminal: closing it sends nothing there), stdin from
/dev/null, stdout and stderr appended to `<root>/launch.log`. This process
waits only until that launch holds the root and its workers started (it says so
on a pipe), or until it ended at once (nothing to do, a launch already there),
then says where the sweep runs and how to follow and stop it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import click

from sweepq.cli import launch_lock
from sweepq.cli.launch import apply, prepare
from sweepq.errors import UsageError
from sweepq.layout import RootPaths
from sweepq.results import spelling


def launch_detached(
    spec: str, root: str | None, workers: int, gpus: list[str], accept_changed: bool | str, on: str = "local"
) -> int:
    prepared = prepare(spec, root, accept_changed)  # raises UsageError: nothing written, nothing started
    live = launch_lock.holder(prepared.root)
    if live is not None:
        raise UsageError(launch_lock.refusal(prepared.root, live))
    apply(prepared).close()  # the root becomes a sweep root before its log is written into it
    argv = [sys.executable, "-m", "sweepq.cli", "launch", str(Path(spec).resolve()), "--root", str(prepared.root)]
    argv += ["--workers", str(workers), "--no-live"]
    argv += ["--gpus", ",".join(gpus)] if gpus else []
    argv += ["--on", on] if on != "local" else []
    argv += ["--rerun-changed"] if accept_changed == "rerun" else ["--accept-changed"] if accept_changed else []
    log = RootPaths(prepared.root).launch_log
    log.parent.mkdir(parents=True, exist_ok=True)
    read_end, write_end = os.pipe()
    with open(log, "ab") as out:
        out.write(f"\n-- sweepq launch --detach, {time.strftime('%Y-%m-%d %H:%M:%S')} --\n".encode())
        out.flush()
        start = out.tell()
        child = subprocess.Popen(
            [*argv, "--ready-fd", str(write_end)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            pass_fds=(write_end,),
            start_new_session=True,  # no controlling terminal: its hangup and Ctrl-C never reach the sweep
        )
    os.close(write_end)
    with os.fdopen(read_end, "rb") as ready:
        started = ready.readline() == b"ready\n"  # else EOF: the launch ended before its workers started
    said = _since(log, start)
    if not started:
        code = child.wait()
        click.echo(said, nl=False, err=code != 0)
        if code != 0:
            click.echo(f"error: the launch in the background ended at once (exit {code}); its log: {log}", err=True)
        return code
    click.echo(said, nl=False)
    _tell(prepared.root, child.pid)
    return 0


def _since(log: Path, start: int) -> str:
    """What the launch wrote to its log so far."""
    with open(log, "rb") as f:
        f.seek(start)
        return f.read().decode(errors="replace")


def _tell(root: Path, pid: int) -> None:
    shown = spelling.shown_path(root)
    log = spelling.shown_path(RootPaths(root).launch_log)
    click.echo(
        f"launched in the background: pid {pid}; it goes on when this terminal closes\n"
        f"  follow it:  sweepq status --watch --root {shown}\n"
        f"              tail -f {log}\n"
        f"  stop it:    sweepq stop {shown}   (gracefully, as a first Ctrl-C: running cells checkpoint first)"
    )
