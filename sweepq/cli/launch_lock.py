"""One live launch per sweep root: the launch lock, and who holds it.

A launch holds `.sweepq/launch.lock` (a whole-file flock: the kernel drops it
however the process ends, kill -9 included) for its whole life, and writes who
it is beside it (`.sweepq/launch.json`) for the words of a refused second
launch and for `sweepq stop`. The lock, not that file, says whether a launch
lives: what a crashed launch left is ignored. Where that file cannot tell
(damaged, replaced, not written yet), the holder is found through the kernel:
the process whose open descriptor of the lock file holds the flock (/proc/PID/fd
and its fdinfo's `lock:` line), so `sweepq stop` works whatever became of the
file. Workers started by hand (`sweepq worker --root`) never take it: they may
join a live launch. Asking who holds the lock creates nothing.
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
from sweepq.errors import UsageError
from sweepq.layout import RootPaths
from sweepq.queue.lock import held_elsewhere, names, take
from sweepq.results import spelling


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
    by_lock: bool = False  # found as the process holding the lock: launch.json did not say (or not of it)

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
    return _described(info) or _found_by_lock(paths) or Holder(pid=None)


def is_held(root: Path) -> bool:
    """Does a live launch hold the root's lock? (Only the lock: cheap enough to poll.)"""
    return _is_held(RootPaths(root).launch_lock)


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


def _found_by_lock(paths: RootPaths) -> Holder | None:
    """The launch as the kernel knows it: the process of this host holding the flock on launch.lock."""
    pid = lock_holder(paths.launch_lock)
    if pid is None:
        return None
    import socket

    import psutil  # here: only when launch.json cannot say who holds the lock

    try:
        created = psutil.Process(pid).create_time()
    except psutil.Error:
        return None  # it exited meanwhile
    started = datetime.fromtimestamp(created, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return Holder(
        pid=pid,
        host=socket.gethostname(),
        started_at=started,
        log=str(paths.launch_log),
        grace_seconds=_grace_of(pid),
        by_lock=True,
    )


def lock_holder(path: Path) -> int | None:
    """The pid of the process (of this host, visible to this user) whose descriptor of `path` holds its flock.

    Linux lists the locks a descriptor holds in /proc/PID/fdinfo/FD (`lock:` lines, since 3.8); the
    descriptors of `path` are those whose file has its device and inode. The pid /proc/locks names for
    the file's inode is asked first (one read), every process's descriptors only when that one does not hold it.
    """
    try:
        st = os.stat(path)
    except OSError:
        return None
    first = _pids_in_proc_locks(st)
    try:
        rest = [int(e) for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return None  # no /proc: nobody to ask
    for pid in [*first, *(p for p in rest if p not in first)]:
        if pid != os.getpid() and _holds(pid, st):
            return pid
    return None


def _pids_in_proc_locks(st: os.stat_result) -> list[int]:
    where = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    pids = []
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:2146499 0 EOF"; a waiter's line has "->" after the number
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == where and fields[4].isdigit():
            pids.append(int(fields[4]))
    return pids


def _holds(pid: int, st: os.stat_result) -> bool:
    """Does a descriptor of process `pid` of the file `st` hold a lock (its fdinfo says so)?"""
    fds = f"/proc/{pid}/fd"
    try:
        entries = os.listdir(fds)
    except OSError:
        return False  # gone, or another user's
    for fd in entries:
        try:
            there = os.stat(f"{fds}/{fd}")
            if (there.st_dev, there.st_ino) != (st.st_dev, st.st_ino):
                continue
            info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
        except OSError:
            continue
        if any(line.startswith("lock:") and " FLOCK " in line for line in info.splitlines()):
            return True
    return False


def _grace_of(pid: int) -> float:
    """The grace period the launch gave its workers: its environment's, else this sweepq's default."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        environ = []
    for entry in environ:
        name, _, value = entry.partition(b"=")
        if name == b"SWEEPQ_GRACE_SECONDS":
            try:
                return float(value)
            except ValueError:
                break
    from sweepq.worker.loop import GRACE_S  # the default (or this process's own setting)

    return GRACE_S


def refusal(root: Path, h: Holder | None) -> str:
    """Why a second launch starts nothing, and what to do instead."""
    shown = spelling.shown_path(root)
    who = "it is starting" if h is None or h.pid is None else f"pid {h.pid} on {h.host}, since {h.started_at}"
    log = spelling.shown_path(RootPaths(root).launch_log)
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
