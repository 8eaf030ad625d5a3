"""A launch's output when its terminal goes away: the log file takes over and training goes on.

Losing the terminal never stops a sweep. When the terminal hangs up (SIGHUP),
or a write to stdout fails (the reader of a pipe exited, as in `sweepq launch
SPEC | head`; a terminal that is gone while `nohup` ignores SIGHUP answers
EIO), the launch points the descriptors that went bad at the sweep's log file
(`<root>/launch.log`), or at /dev/null when that cannot be written either, and
goes on. The descriptors themselves are replaced (dup2), so every writer of the
process follows, the interpreter's last flush at exit included: it cannot fail
or print a traceback (Python's "Note on SIGPIPE" recommends the same).

A SIGHUP that the user chose to ignore (`nohup`, `trap '' HUP`) stays ignored.
"""

from __future__ import annotations

import errno
import io
import os
import signal
import sys
import time
from pathlib import Path
from typing import IO, Any, cast

from rich.console import Console

from sweepq.cli.plain import SafeConsole

WIDE = 1000  # tables are not cut to 80 columns in files (as app.out() does)


class Terminal:
    """Where a launch's stdout and stderr go: where they started, until that goes away."""

    def __init__(self) -> None:
        self.log: Path | None = None  # known once the root is
        self.moved: str | None = None  # why the output left its terminal or pipe (None while it has not)
        self._ttys = [fd for fd in (1, 2) if _isatty(fd)]  # those still on their terminal
        self._console: Console | None = None
        self._hung_up = False  # the hangup moved the output: the next failed write was still the terminal's

    def console(self) -> Console:
        """The console on stdout (one per process) whose failed writes move the output instead of raising."""
        if self._console is None:
            stream = cast(IO[str], _Guarded(self, sys.stdout))
            self._console = SafeConsole(file=stream, soft_wrap=False)  # no markup, escapes shown
            if not self._console.is_terminal:
                self._console.width = WIDE
        return self._console

    def keep_on_hangup(self) -> None:
        """From now on a SIGHUP moves the output to the log; one that is ignored stays ignored."""
        if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
            signal.signal(signal.SIGHUP, self._on_hangup)

    def _on_hangup(self, _signum: int, _frame: Any) -> None:
        # Descriptors only: the interrupted code may be inside a buffered write of the same stream.
        self._hung_up = bool(self._ttys)
        self.move("SIGHUP (the terminal went away)", list(self._ttys))

    def gone(self) -> bool:
        """Has the output left its terminal? A hung-up terminal stops saying it is one: that is
        how a launch whose SIGHUP is ignored notices, before a write fails."""
        lost = [fd for fd in self._ttys if not _isatty(fd)]
        if lost:
            self.move("the terminal is gone", lost)
        return self.moved is not None

    def write_failed(self, error: OSError) -> None:
        if self._hung_up:
            self._hung_up = False
            return  # a write that failed on the terminal just before the hangup moved the output
        if 1 in self._ttys and not _isatty(1):
            self.gone()  # a hung-up terminal (SIGHUP ignored) answers EIO: say what happened, not the errno
            return
        name = errno.errorcode.get(error.errno or 0, "error")
        self.move(f"writing the output failed ({name}: {error.strerror})", _same_file_as(1))

    def move(self, why: str, fds: list[int]) -> None:
        """Point `fds` at the log (or /dev/null), say why there, and go on."""
        for fd in fds:
            target = self._target(fd)
            try:
                os.dup2(target, fd)
            finally:
                os.close(target)
            if fd in self._ttys:
                self._ttys.remove(fd)
        if fds:
            self.moved = why
            if self._console is not None:
                self._console.width = WIDE
                # A log, not a terminal: no styles (rich decides this once, when the console is made).
                self._console._color_system = None
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        note = f"\n[{stamp}] {why}: the launch goes on; only SIGINT or SIGTERM (sweepq stop) stop it\n"
        try:
            os.write(1, note.encode())
        except OSError:
            pass

    def _target(self, fd: int) -> int:
        """A descriptor of the log, or of /dev/null when the log is what failed or cannot be opened."""
        if self.log is not None and not _is_file(fd, self.log):
            try:
                return os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError:
                pass
        return os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)


class _Guarded(io.TextIOBase):
    """A text stream for rich: a write that fails moves the output and is never an error."""

    def __init__(self, terminal: Terminal, stream: IO[str]) -> None:
        super().__init__()
        self._terminal = terminal
        self._stream = stream
        self._unflushed: list[str] = []  # what a failed flush may have dropped, written again after the move

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._stream, "encoding", None) or "utf-8"

    def write(self, s: str) -> int:
        self._unflushed.append(s)
        try:
            self._stream.write(s)
        except OSError as e:
            self._failed(e)
        return len(s)

    def flush(self) -> None:
        try:
            self._stream.flush()
            self._unflushed.clear()
        except OSError as e:
            self._failed(e)

    def _failed(self, error: OSError) -> None:
        # What did not get through goes where the output went: the log, else /dev/null (cannot fail).
        for _ in range(2):
            self._terminal.write_failed(error)
            try:
                self._stream.write("".join(self._unflushed))
                self._stream.flush()
                self._unflushed.clear()
                return
            except OSError as again:
                error = again

    def isatty(self) -> bool:
        try:
            return _isatty(self._stream.fileno())
        except (OSError, ValueError):
            return False

    def fileno(self) -> int:
        return self._stream.fileno()


def _isatty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def _same_file_as(fd: int) -> list[int]:
    """`fd` and the other standard outputs that write to the same file, pipe or terminal."""
    try:
        st = os.fstat(fd)
    except OSError:
        return [fd]
    return [fd] + [other for other in (1, 2) if other != fd and _is_same(other, st)]


def _is_same(fd: int, st: os.stat_result) -> bool:
    try:
        other = os.fstat(fd)
    except OSError:
        return False
    return (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino)


def _is_file(fd: int, path: Path) -> bool:
    try:
        return _is_same(fd, os.stat(path))
    except OSError:
        return False
