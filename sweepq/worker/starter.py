"""How a worker starts an attempt's process: a fork of its template, else a fresh interpreter.

Attempts start from the worker's template process (worker/template.py), which has imported
sweepq's attempt and, for train cells, torch and the user's module once; the attempt is a fork of
it, re-parented to this worker, which is a child subreaper for that purpose. Where the template
declined (a thread or CUDA at import, an import that failed), or with `start: fresh` in the sweep
file (or SWEEPQ_START=fresh in the environment), each attempt starts a fresh interpreter,
`python -m sweepq.attempt`.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from sweepq.host import diskfull
from sweepq.wire import template as wire
from sweepq.worker import proctitle

ENV_START = "SWEEPQ_START"  # "fresh": every attempt in a new interpreter, whatever the sweep file says
PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class Launch:
    """One attempt's process as Popen would be asked for it."""

    attempt_file: Path
    cwd: str
    env: dict[str, str]
    stdout: Path
    stderr: Path
    fds: tuple[int, ...]  # passed on (pass_fds)


class Forked:
    """An attempt forked from the template: this worker's child (adopted), watched like a Popen."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
            time.sleep(0.05)
        return self.returncode or 0

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


Child = Forked | subprocess.Popen[bytes]


def become_subreaper() -> bool:
    """Adopt orphaned descendants (the template's forks): Linux only; False where it cannot."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def reap_orphans(template: Template | None) -> None:
    """Collect adopted descendants that exited (what an attempt's own children left behind)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not pid:
            return
        if template is not None and pid == template.proc.pid:
            template.proc.returncode = os.waitstatus_to_exitcode(status)


def fresh(launch: Launch) -> subprocess.Popen[bytes]:
    with open(launch.stdout, "ab") as out, open(launch.stderr, "ab") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "sweepq.attempt", str(launch.attempt_file)],
            pass_fds=launch.fds,
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env=launch.env,
            cwd=launch.cwd,
            start_new_session=True,  # terminal signals reach it only through this worker
        )


class Template:
    """The worker's end of its template process."""

    def __init__(self, train: str, spec_dir: str, root: Path) -> None:
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        widest = str(root / "cells" / ("9" * 24) / "attempts" / ("9" * 9) / "attempt.json")
        room = proctitle.room([sys.executable, "-m", "sweepq.attempt", widest])
        args = [str(theirs.fileno()), str(os.getpid()), train, spec_dir, room]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sweepq.worker.template", *args],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=sys.stderr.fileno(),  # what the user's module prints on import: in the worker's log, once
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            cwd=spec_dir,
        )
        theirs.close()
        self.ready: wire.Ready | None = None

    def wait_ready(self) -> wire.Ready:
        if self.ready is None:
            msg, _ = wire.receive(self.sock)
            self.ready = msg if isinstance(msg, wire.Ready) else wire.Ready(ok=False, why=self._died())
        return self.ready

    def spawn(self, launch: Launch) -> Forked | wire.Declined | str:
        """The forked attempt; or the template declined it (its code changed: it exits); or why it died."""
        with open(launch.stdout, "ab") as out, open(launch.stderr, "ab") as err:
            fds = [out.fileno(), err.fileno(), *launch.fds]
            named = {name: fds.index(int(v)) for name, v in launch.env.items() if _names_fd(v, launch.fds)}
            msg = wire.Spawn(
                attempt_file=str(launch.attempt_file),
                cwd=launch.cwd,
                env={k: v for k, v in launch.env.items() if k not in named},
                stdout=0,
                stderr=1,
                inherit=list(range(2, len(fds))),
                fd_env=named,
            )
            try:
                wire.send(self.sock, msg, fds)
            except OSError:
                return self._died()
        answer, _ = wire.receive(self.sock)
        if isinstance(answer, wire.Spawned) and answer.pid > 0:
            return Forked(answer.pid)
        return answer if isinstance(answer, wire.Declined) else self._died()

    def close(self) -> None:
        self.sock.close()  # the template exits when its end reads nothing
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _died(self) -> str:
        code = self.proc.poll()
        return "the template process exited" + (f" ({code})" if code is not None else "")


def _names_fd(value: str, fds: tuple[int, ...]) -> bool:
    return value.isdigit() and int(value) in fds


class Starter:
    """Starts a worker's attempts: through the template where it serves, else fresh interpreters."""

    def __init__(self, root: Path, train: str | None, spec_dir: str, start: str) -> None:
        self.root = root
        self.train = train
        self.spec_dir = spec_dir
        self.off: str | None = None  # why attempts start fresh, once said
        if start == "fresh" or os.environ.get(ENV_START) == "fresh":
            self.off = "asked for (start: fresh)"
        elif not become_subreaper():
            self.off = "this system cannot adopt the template's forks"
        self.template: Template | None = None

    def _template(self) -> Template:
        """The template, started at the first attempt (a worker with nothing to run never pays for one)."""
        if self.template is None:
            self.template = Template(self.train or "", self.spec_dir, self.root)
        return self.template

    def start(self, launch: Launch) -> Child:
        """The attempt's process: forked from the template, else a fresh interpreter (its receipt says which)."""
        for _ in range(2):  # a template whose code went stale is replaced once
            if self.off is not None:
                break
            template = self._template()
            ready = template.wait_ready()
            if not ready.ok:
                self._turn_off(ready.why or "the template is not ready")
                break
            forked = template.spawn(launch)
            if isinstance(forked, Forked):
                return forked
            if not isinstance(forked, wire.Declined):
                self._turn_off(forked)  # it died: do not pay for another one at every attempt
                break
            self._retire()
            diskfull.say(f"sweepq worker: a new template process: {forked.why}")
        return fresh(launch)

    def reap(self) -> None:
        reap_orphans(self.template)

    def close(self) -> None:
        self._retire()

    def _turn_off(self, why: str) -> None:
        self.off = why
        self._retire()
        diskfull.say(f"sweepq worker: each attempt starts a fresh interpreter: {why}")

    def _retire(self) -> None:
        if self.template is not None:
            self.template.close()
            self.template = None
