"""One live launch per sweep root: the launch lock, and who holds it.

A launch holds `.sweepq/launch.lock` (a whole-file flock: the kernel drops it
however the process ends, kill -9 included) for its whole life, and writes who
it is beside it (`.sweepq/launch.json`) for the words of a refused second
launch and for `sweepq stop`. The lock, not that file, says whether a launch
lives: what a crashed launch left is ignored. Workers started by hand (`sweepq
worker --root`) never take it: they may join a live launch. Asking who holds
the lock creates nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sweepq.atomic import atomic_write_json, read_json
from sweepq.cli import render
from sweepq.errors import UsageError
from sweepq.layout import RootPaths
from sweepq.queue.lock import held_elsewhere, names, take


@dataclass(frozen=True)
class Holder:
    """The live launch of a root, as it described itself."""

    pid: int | None  # None: it has not said who it is yet (it is starting)
    host: str = ""
    started_at: str = ""
    log: str = ""
    spec: str = ""
    grace_seconds: float = 0.0  # how long its workers give a training process to checkpoint and stop
    workers: int = 0  # how many workers it started (0: it did not say)

    @property
    def here(self) -> bool:
        import socket  # here: `status` asks only while a launch holds the lock

        return self.host == socket.gethostname()


def holder(root: Path) -> Holder | None:
    """The root's live launch, or None when no launch holds the lock (creates nothing)."""
    paths = RootPaths(root)
    if not _is_held(paths.launch_lock):
        return None
    try:
        info = read_json(paths.launch_info)
    except (OSError, ValueError):
        info = None
    return _described(info) or Holder(pid=None)


def _described(info: Any) -> Holder | None:
    """The holder from launch.json, unless that file is a dead launch's (its pid gone or reused)."""
    if not isinstance(info, dict):
        return None
    try:
        h = Holder(
            pid=int(info["pid"]),
            host=str(info["host"]),
            started_at=str(info["started_at"]),
            log=str(info["log"]),
            spec=str(info["spec"]),
            grace_seconds=float(info["grace_seconds"]),
            workers=int(info.get("workers", 0)),  # absent from the file of an older launch
        )
        created = float(info["created"])
    except (KeyError, TypeError, ValueError):
        return None
    if h.here and not _same_process(h.pid, created):
        return None
    return h


def _same_process(pid: int | None, created: float) -> bool:
    import psutil  # here: a read command asks only while a launch holds the lock

    try:
        return abs(psutil.Process(pid).create_time() - created) < 0.01
    except (psutil.Error, ValueError):
        return False


def refusal(root: Path, h: Holder | None) -> str:
    """Why a second launch starts nothing, and what to do instead."""
    shown = render.shown_path(root)
    who = "it is starting" if h is None or h.pid is None else f"pid {h.pid} on {h.host}, since {h.started_at}"
    log = render.shown_path(RootPaths(root).launch_log)
    return (
        f"a launch is already running on the sweep root {shown} ({who}), so this one started nothing: "
        f"follow it with `sweepq status --watch --root {shown}` or `tail -f {log}`, "
        f"stop it with `sweepq stop {shown}`, or add workers to it with `sweepq worker --root {shown}`"
    )


@contextmanager
def held(root: Path, spec: str, grace_seconds: float, workers: int = 0) -> Iterator[None]:
    """Hold the root's launch lock for the block; raises UsageError when another launch holds it."""
    paths = RootPaths(root)
    fd = _take(paths.launch_lock)
    if fd is None:
        raise UsageError(refusal(root, holder(root)))
    try:
        import socket

        import psutil

        me = psutil.Process()
        atomic_write_json(
            paths.launch_info,
            {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "created": me.create_time(),  # tells this process from a later one with its pid
                "started_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
                "log": str(paths.launch_log),
                "spec": spec,
                "grace_seconds": grace_seconds,
                "workers": workers,
            },
        )
        yield
    finally:
        paths.launch_info.unlink(missing_ok=True)
        os.close(fd)  # the lock goes with it (and with the process, however it ends)


def _take(path: Path) -> int | None:
    """A descriptor holding the lock on `path`, or None when another process holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    # Locked, and still the file the path names: a lock file deleted under its holder and made
    # again by this process would be a second, unheld lock.
    if take(fd) and names(fd, path):
        return fd
    os.close(fd)
    return None


def _is_held(path: Path) -> bool:
    """Taking the lock and dropping it at once, through a read-only descriptor: creates nothing."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False  # no launch ever ran here (or the root cannot be read: then none can be asked)
    try:
        return held_elsewhere(fd)
    finally:
        os.close(fd)
