"""Commands on a sweep's live launch: `stop` (gracefully, as its first Ctrl-C, then wait until it exited).

A launch, in the foreground or detached, holds its root's launch lock
(launch_lock.py) and says there who it is: that is how `stop` finds it.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import click

from sweepq.cli import launch_lock, render
from sweepq.cli.app import friendly, main
from sweepq.cli.roots import resolve_root
from sweepq.errors import SweepqError, UsageError
from sweepq.layout import RootPaths
from sweepq.queue.database import Database
from sweepq.queue.states import CellState
from sweepq.queue.store import Store
from sweepq.results import spelling

# After the grace period the workers kill what is still training; this is the time left to them
# to record those attempts and exit, and to the launch to reap and print its summary.
RECORD_MARGIN_S = 30.0
POLL_S = 0.2


@main.command()
@click.argument("target", required=False, metavar="[ROOT_OR_SPEC]")
@friendly
def stop(target: str | None) -> None:
    """Stop the sweep's live launch gracefully (as a first Ctrl-C: running cells checkpoint) and wait for it.

    ROOT_OR_SPEC is the sweep root or the sweep file (default: the current folder). With no live
    launch there is nothing to stop: it says so and exits 0.
    """
    root = _root(target)
    shown = spelling.shown_path(root)
    h = launch_lock.holder(root)
    if h is None:
        click.echo(f"no launch is running on {shown}: nothing to stop")
        return
    if h.pid is None:
        # Neither launch.json nor the kernel named it: a launch of another user, or one on another host
        # sharing this root's file system (their processes are not in this host's /proc).
        lock = spelling.shown_path(RootPaths(root).launch_lock)
        raise UsageError(
            f"a launch holds {lock} but cannot be found: its {RootPaths(root).launch_info.name} does not name it "
            "and no process of this user on this host holds the lock. Stop it where it runs (as its user, or "
            f"on the host that shares this folder): `sweepq stop {shown}` there, or send its process SIGTERM"
        )
    if not h.here:
        raise UsageError(f"the launch on {shown} runs on host {h.host} (pid {h.pid}): run `sweepq stop` there")
    if h.by_lock:
        info = spelling.shown_path(RootPaths(root).launch_info)
        click.echo(
            f"{info} does not say which launch runs (it is damaged or not that launch's): found it as the "
            f"process holding {spelling.shown_path(RootPaths(root).launch_lock)}, pid {h.pid}"
        )
    try:
        os.kill(h.pid, signal.SIGTERM)  # the launch's first stop; a second SIGTERM would change nothing
    except ProcessLookupError:
        pass  # it has just exited by itself
    click.echo(
        f"stopping the launch on {shown} (pid {h.pid}): each running cell writes a checkpoint and stops "
        f"(its workers wait up to {h.grace_seconds:g} s for it)"
    )
    if not _wait(root, h):
        raise SweepqError(
            f"the launch (pid {h.pid}) is still running {h.grace_seconds + RECORD_MARGIN_S:g} s after the stop; "
            f"see its log {spelling.shown_path(h.log)}; `kill -INT {h.pid}` stops it at once "
            "(as a second Ctrl-C: no emergency checkpoint)"
        )
    _summary(root, h)


def _root(target: str | None) -> Path:
    root = resolve_root(None, target)
    if not (Database.for_root(root).exists() or RootPaths(root).launch_lock.exists()):
        raise UsageError(f"{spelling.shown_path(root)} is not a sweep root: name the sweep's root folder or its file")
    return root


def _wait(root: Path, h: launch_lock.Holder) -> bool:
    """Until the launch exited (its lock is free), saying which cells it waits for; False past the bound."""
    deadline = time.monotonic() + h.grace_seconds + RECORD_MARGIN_S
    said: list[str] | None = None
    store = _store(root)
    try:
        while launch_lock.is_held(root):
            if time.monotonic() > deadline:
                return False
            running = _running(store)
            if running != said:
                said = running
                if running:
                    click.echo(f"  waiting for {', '.join(running)} to checkpoint and stop")
                else:
                    click.echo("  waiting for the launch to record the attempts and exit")
            time.sleep(POLL_S)
    finally:
        if store is not None:
            store.close()
    return True


def _store(root: Path) -> Store | None:
    try:
        return Store.open_readonly(root)
    except SweepqError:
        return None  # no database to read (yet): only the lock is watched


def _running(store: Store | None) -> list[str]:
    if store is None:
        return []
    return [c.id for c in store.cells() if c.state is CellState.RUNNING]


def _summary(root: Path, h: launch_lock.Holder) -> None:
    store = _store(root)
    if store is None:
        click.echo("stopped")
        return
    try:
        cells = [c for c in store.cells() if not c.removed]
        click.echo(f"stopped: {render.summary(cells).plain}")
        resumable = [c.id for c in cells if c.state in (CellState.INTERRUPTED, CellState.QUEUED)]
        spec = h.spec or _recorded_spec(root)  # a launch found by its lock did not say its file
        if resumable and spec:
            click.echo(f"resume with: sweepq launch {_relaunch(root, spec)}")
        elif resumable:
            click.echo(f"resume with: sweepq launch SPEC --root {spelling.shown_path(root)}")
    finally:
        store.close()


def _recorded_spec(root: Path) -> str | None:
    """The sweep file the root's queue names (each launch records its own)."""
    from sweepq.queue.rebuild import spec_path

    try:
        return spec_path(root)
    except SweepqError:
        return None


def _relaunch(root: Path, spec: str) -> str:
    """The arguments of the launch that resumes this root: the file, and --root when the file names another."""
    from sweepq.cli.roots import default_root
    from sweepq.spec.sweep import load_sweep

    shown = spelling.shown_path(spec)
    try:
        same = default_root(load_sweep(spec)).resolve() == root.resolve()
    except SweepqError:
        same = False  # the file changed or went away since: name the root too
    return shown if same else f"{shown} --root {spelling.shown_path(root)}"
