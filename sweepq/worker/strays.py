"""What an attempt that exited left running, found and ended by its worker: SIGTERM, SIGKILL after a grace.

The attempt's log keepers are the exception: each finishes by itself once its attempt is gone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweepq.host import logkeeper
from sweepq.queue import lock

STRAY_GRACE_S = 5.0  # a leftover process SIGTERMed gets this long to exit before its SIGKILL


@dataclass(frozen=True)
class Ended:
    """A process an attempt left behind, ended by its worker: who, and the signal that ended it."""

    pid: int
    command: str
    signal: str  # "SIGTERM", or "SIGKILL" when it outlived STRAY_GRACE_S

    def __str__(self) -> str:
        return f"pid {self.pid} ({self.command})"

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "command": self.command, "signal": self.signal}


def leftovers(spare: tuple[int, ...], session: int, locked: int | None) -> list[int]:
    """What an attempt that exited left running: never allowed to hold its cell.

    Three ways to find them, each catching what another misses: this worker's descendants (it is a
    child subreaper, so whatever an attempt forked, daemons that left their session included, is
    re-parented here when its parent exits); the members of the attempt's session (its process
    started one: helpers that are still some other process's child); and any process of this user
    holding the lock of the folder the attempt locked (a helper that inherited the descriptor, wherever it
    went), that folder known by `locked`, the worker's descriptor of it (None: not looked for), wherever
    it is now. `spare` are pids kept with their descendants (the worker's template process).
    """
    import psutil

    me = os.getpid()
    kept = {me}
    found: set[int] = set()
    for pid in spare:
        try:
            kept.update([pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))])
        except psutil.Error:
            pass
    try:
        found.update(c.pid for c in psutil.Process(me).children(recursive=True))
    except psutil.Error:
        pass
    found.update(_in_session(session))
    if locked is not None:
        try:
            st = os.fstat(locked)
            where = Path(os.readlink(f"/proc/self/fd/{locked}"))
        except OSError:
            pass
        else:
            found.update(h.pid for h in lock.holders(where, exclude=tuple(kept), identity=(st.st_dev, st.st_ino)))
    return sorted(found - kept)


LOG_KEEPER = os.path.abspath(logkeeper.__file__)  # as the keeper starts itself


def log_keepers(pids: list[int]) -> tuple[list[int], list[int]]:
    """(the others, the attempt's own log keepers): a keeper finishes by itself once its attempt is gone
    (host/logkeeper.py), after copying what the pipes still hold; it is waited for, not ended."""
    keepers = [pid for pid in pids if LOG_KEEPER in _command_of(pid)]
    return [pid for pid in pids if pid not in keepers], keepers


def _command_of(pid: int) -> str:
    return lock.command_of(pid)


def wait_then_end(pids: list[int], grace: float = STRAY_GRACE_S) -> list[Ended]:
    """Wait up to `grace` for processes that finish by themselves, then SIGKILL the rest (returned)."""
    import psutil

    procs = []
    for pid in pids:
        try:
            procs.append((psutil.Process(pid), _command_of(pid)))
        except psutil.Error:
            continue
    alive = _kill_after(grace, [p for p, _ in procs])
    late = {p.pid for p in alive}
    return [Ended(p.pid, command, "SIGKILL") for p, command in procs if p.pid in late]


def _kill_after(grace: float, procs: list[Any]) -> list[Any]:
    """Wait up to `grace` for `procs` (psutil processes) to exit, SIGKILL the rest; returns those killed."""
    import psutil

    _, alive = psutil.wait_procs(procs, timeout=grace)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace)
    return list(alive)


def _in_session(session: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            fields = stat[stat.rindex(b")") + 2 :].split()  # after the command, which may hold spaces
            if int(fields[3]) == session:  # state, ppid, pgrp, session
                out.append(int(name))
        except (OSError, ValueError, IndexError):
            continue
    return out


def end_processes(pids: list[int], grace: float = STRAY_GRACE_S) -> list[Ended]:
    """SIGTERM each, SIGKILL whatever outlives `grace`; returns those that were running, how each ended."""
    import psutil

    procs: list[psutil.Process] = []
    named: dict[int, str] = {}
    for pid in pids:
        try:
            p = psutil.Process(pid)
            if p.status() == psutil.STATUS_ZOMBIE:
                continue  # already exited: holds nothing, reaped with the others
            named[pid] = lock.command_of(pid)
            p.terminate()
            procs.append(p)
        except psutil.Error:
            continue
    alive = _kill_after(grace, procs)
    killed = {p.pid for p in alive}
    return [Ended(p.pid, named[p.pid], "SIGKILL" if p.pid in killed else "SIGTERM") for p in procs]


def ended_words(ended: list[Ended]) -> str:
    """The note an attempt's row keeps about them."""
    n = len(ended)
    return f"sweepq ended {n} process{'es' if n > 1 else ''} the attempt left running: " + ", ".join(map(str, ended))


def alive_since(pid: int | None, before: float) -> bool:
    """Is `pid` a live process started no later than `before` (a POSIX time)?

    A pid recorded on an attempt may have been reused since its process died: a process of that pid
    started after the attempt's last sign of life is somebody else.
    """
    if pid is None:
        return False
    import psutil

    try:
        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE and p.create_time() <= before + 1.0
    except psutil.Error:
        return False
