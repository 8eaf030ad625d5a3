"""An attempt's logs, bounded: stdout.log and stderr.log keep their head and their tail.

A program that prints without end (a debug print in a loop) would otherwise grow its
attempt's log until the sweep's disk is full, and stop every worker of the sweep with it.
So the attempt process (attempt/main.py) points its standard output and error, which its
program or its training code inherit, at two pipes, and this small process of its own
copies them into the log files:

* each log keeps its first SWEEPQ_LOG_KEEP bytes (default 4 MiB) and its last as many,
  cut at line ends; where the middle was dropped, one line says how much:
  `[sweepq: 1.0 GiB dropped here (1073741824 bytes, 1048576 lines): this log keeps its first
  4.0 MiB and its last 4.0 MiB (SWEEPQ_LOG_KEEP)]`. While the attempt runs, a log holds at
  most its head, that line and twice its tail; once it ends, its head, that line and its tail.
* an attempt whose logs received more than SWEEPQ_LOG_FLOOD bytes together (default 1 GiB;
  0: no limit) is a log flood: this process tells the attempt (SIGXFSZ, "file size limit
  exceeded"), which stops its program or its training, and the attempt ends `log_flood`
  (sweepq.outcome), a reason of its own with no retry.

It is a process of its own, not a thread of the attempt: training code that holds the GIL
while it writes (a C++ extension's log) never waits on a copier that needs the GIL, and
the copying never costs the training its interpreter. It runs as `python -I -S` this file
and imports only the standard library. It ignores the stop signals (its attempt stops and
then tells it to finish), and finishes on its own when the attempt is gone.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import select
import signal
import socket
import stat
import subprocess
import sys
from types import FrameType
from typing import Any

ENV_KEEP = "SWEEPQ_LOG_KEEP"  # bytes kept at each end of a log; 0: logs are not bounded
ENV_FLOOD = "SWEEPQ_LOG_FLOOD"  # bytes both logs of an attempt may receive before it is a flood; 0: no limit
KEEP_BYTES = 4 << 20
FLOOD_BYTES = 1 << 30
CHUNK = 1 << 20
DRAIN_MAX = 64 << 20  # what a finish still copies of a writer that never stops (a program's leftover child)
F_SETPIPE_SZ = 1031


# -- one log file ----------------------------------------------------------------------------------------


class BoundedLog:
    """A log file written as head + (a line saying what was dropped) + tail, never longer than that."""

    def __init__(self, fd: int, keep: int) -> None:
        self.fd = fd
        self.keep = keep
        self.size = os.fstat(fd).st_size  # what is there already (the attempt's first lines) is its head
        self.head_end: int | None = None  # where the head ends, once it is full
        self.head_newline = True
        self.head = bytearray()  # the head as it fills (at most `keep` bytes), to end it at a line end
        self.tail = bytearray()  # everything after the head still in the file (without the dropped line)
        self.dropped = 0
        self.dropped_lines = 0
        self.received = 0

    def feed(self, data: bytes) -> None:
        self.received += len(data)
        if self.head_end is None:
            room = max(self.keep - self.size, 0)
            take, data = data[:room], data[room:]
            if take:
                self._write(take, self.size)
                self.head += take
            if not data:
                return
            # The head is full and more comes: it ends at its last line end (if that keeps half of it);
            # what follows that line end is in the file already, as the tail's first bytes.
            cut = self.head.rfind(b"\n") + 1
            if cut < len(self.head) // 2:
                cut = len(self.head)
            self.tail = self.head[cut:]
            self.head_end = self.size - len(self.tail)
            self.head_newline = self.head[:cut].endswith(b"\n") if cut else self._ends_with_newline()
            self.head = bytearray()
        self.tail += data
        if len(self.tail) > 2 * self.keep:
            self._compact()
        else:
            self._write(data, self.size)

    def finish(self) -> dict[str, int]:
        """The log as it stays: head, the dropped line, the last `keep` bytes."""
        if self.head_end is not None and len(self.tail) > self.keep:
            self._compact()
        return {"received": self.received, "dropped": self.dropped, "dropped_lines": self.dropped_lines}

    def marker(self) -> bytes:
        lead = "" if self.head_newline else "\n"
        return (
            f"{lead}[sweepq: {size_text(self.dropped)} dropped here ({self.dropped} bytes, {self.dropped_lines} "
            f"lines): this log keeps its first {size_text(self.keep)} and its last {size_text(self.keep)} "
            f"({ENV_KEEP})]\n"
        ).encode()

    def _compact(self) -> None:
        """Drop the oldest of the tail down to `keep` bytes (from a line start), rewrite the line and the tail."""
        assert self.head_end is not None
        excess = len(self.tail) - self.keep
        newline = self.tail.find(b"\n", excess, excess + self.keep // 2)
        cut = newline + 1 if newline >= 0 else excess
        self.dropped += cut
        self.dropped_lines += self.tail.count(b"\n", 0, cut)
        del self.tail[:cut]
        self.size = self.head_end
        self._write(self.marker() + bytes(self.tail), self.head_end)
        os.ftruncate(self.fd, self.size)

    def _write(self, data: bytes, offset: int) -> None:
        view = memoryview(data)
        while view:
            try:
                n = os.pwrite(self.fd, view, offset)
            except OSError as e:
                if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
                    return  # a full disk takes nothing more: dropped, never raised (the attempt says the disk)
                raise
            view, offset = view[n:], offset + n
        self.size = max(self.size, offset)

    def _ends_with_newline(self) -> bool:
        if self.size == 0:
            return True
        try:
            return os.pread(self.fd, 1, self.size - 1) == b"\n"
        except OSError:  # opened for writing only: the line then starts on a line of its own
            return False


def size_text(n: int) -> str:
    """1.0 GiB, 4.0 MiB, 512 B (as diskfull says sizes; this file imports nothing of sweepq)."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


# -- the keeper process ----------------------------------------------------------------------------------


class Source:
    """One pipe into a log. The attempt's own pipes are copied as they come. A rank's (rank_streams) are
    copied in whole lines, each marked `[rank<N>]:` as `torchrun --tee` marks them: ranks print at once
    into one log, and a program printing unbuffered writes a line and its newline apart, so raw copies
    would cut one rank's line with another's. A line is held until its end (a newline, or the carriage
    return a progress bar redraws with), at most CHUNK bytes, and whatever is held when the pipe ends."""

    def __init__(self, log: BoundedLog, prefix: bytes | None = None) -> None:
        self.log = log
        self.prefix = prefix
        self.held = bytearray()
        self.at_line_start = True

    def feed(self, data: bytes) -> None:
        if self.prefix is None:
            self.log.feed(data)
            return
        self.held += data
        end = max(self.held.rfind(b"\n"), self.held.rfind(b"\r")) + 1
        if end == 0 and len(self.held) < CHUNK:
            return
        self._put(end or len(self.held))

    def close(self) -> None:
        if self.held:
            self._put(len(self.held))

    def _put(self, end: int) -> None:
        assert self.prefix is not None
        out = bytearray()
        for line in bytes(self.held[:end]).splitlines(keepends=True):  # at \n, \r and \r\n
            if self.at_line_start:
                out += self.prefix
            out += line
            self.at_line_start = line.endswith((b"\n", b"\r"))
        del self.held[:end]
        self.log.feed(bytes(out))


def keep(pipes: list[int], logs: list[int], ctl: socket.socket, attempt: int, keep_bytes: int, flood: int) -> None:
    """Copy each pipe into its log until the attempt says finish (or is gone); SIGXFSZ to it on a flood.

    The attempt may add a rank's two pipes (a message `rank N` carrying their ends): they go into the
    same two logs, line by line (Source)."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    bounded = [BoundedLog(w, keep_bytes) for w in logs]
    sources = {r: Source(log) for r, log in zip(pipes, bounded, strict=True)}
    reading = list(pipes)
    told = False
    while True:
        ready, _, _ = select.select([*reading, ctl.fileno()], [], [])
        for fd in ready:
            if fd == ctl.fileno():
                continue
            data = os.read(fd, CHUNK)
            if not data:
                _ended(fd, reading, sources)
                continue
            sources[fd].feed(data)
        if flood and not told and sum(b.received for b in bounded) > flood:
            told = True
            try:
                os.kill(attempt, signal.SIGXFSZ)
            except ProcessLookupError:
                pass
        if ctl.fileno() not in ready:
            continue
        try:
            msg, fds, _, _ = socket.recv_fds(ctl, 64, 2)
        except OSError:
            msg, fds = b"", []
        if msg.startswith(b"rank ") and len(fds) == 2:
            prefix = b"[rank%d]:" % int(msg.split()[1])
            for fd, log in zip(fds, bounded, strict=True):
                sources[fd] = Source(log, prefix)
                reading.append(fd)
            ctl.send(b"ok")
            continue
        for fd in fds:  # none is expected with any other message
            os.close(fd)
        _drain(reading, sources)
        if msg == b"sync":
            ctl.send(b"ok")
            continue
        for source in sources.values():
            source.close()
        stats = {"flooded": told, **_total(b.finish() for b in bounded)}
        try:
            ctl.send(json.dumps(stats).encode())
        except OSError:
            pass
        return


def _ended(fd: int, reading: list[int], sources: dict[int, Source]) -> None:
    """A pipe whose every writer is gone: what it held goes in, and a rank's end is closed."""
    reading.remove(fd)
    sources[fd].close()
    if sources[fd].prefix is not None:
        os.close(fd)
        del sources[fd]


def _drain(reading: list[int], sources: dict[int, Source]) -> None:
    """What the pipes hold now (a program that exited: all it printed), without waiting for more."""
    for fd in list(reading):
        os.set_blocking(fd, False)
        copied = 0
        try:
            while copied < DRAIN_MAX:
                data = os.read(fd, CHUNK)
                if not data:
                    _ended(fd, reading, sources)
                    break
                sources[fd].feed(data)
                copied += len(data)
        except BlockingIOError:
            pass
        finally:
            if fd in reading:
                os.set_blocking(fd, True)


def _total(parts: Any) -> dict[str, int]:
    total = {"received": 0, "dropped": 0, "dropped_lines": 0}
    for part in parts:
        for k in total:
            total[k] += part[k]
    return total


# -- the attempt's side ----------------------------------------------------------------------------------

_capture: Capture | None = None
_limits: Limits | None = None  # this attempt's, once captured
_flooded = False


class LogFlood(BaseException):
    """Raised in training code that printed past SWEEPQ_LOG_FLOOD (a BaseException: `except Exception`
    around a print does not swallow it)."""


class Capture:
    """This attempt's standard output and error, going through a keeper process into bounded logs."""

    def __init__(self, proc: subprocess.Popen[bytes], ctl: socket.socket, saved: tuple[int, int], limits: Limits):
        self.proc = proc
        self.ctl = ctl
        self.saved = saved
        self.limits = limits
        self.stats: dict[str, Any] | None = None

    def sync(self) -> None:
        """Everything printed so far is in the files (a program that exited: before its tail is read)."""
        try:
            self.ctl.send(b"sync")
            self.ctl.recv(64)
        except OSError:
            pass

    def rank_streams(self, rank: int) -> tuple[int, int] | None:
        """Two new pipes, the write ends returned (standard output, error) for `rank` of the attempt's
        program: the keeper copies them into the same logs, line by line, each line marked (Source)."""
        pipes: list[tuple[int, int]] = []
        try:
            pipes = [os.pipe() for _ in range(2)]
            socket.send_fds(self.ctl, [b"rank %d" % rank], [r for r, _ in pipes])
            if self.ctl.recv(64) != b"ok":
                raise OSError("the log keeper did not take the rank's pipes")
        except OSError:
            for fd in (fd for pipe in pipes for fd in pipe):
                os.close(fd)
            return None
        for r, _ in pipes:
            os.close(r)  # the keeper has its own copies
        return pipes[0][1], pipes[1][1]

    def finish(self) -> dict[str, Any] | None:
        """The logs as they stay; this process's output goes straight to its files again."""
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)
        try:
            self.ctl.send(b"finish")
            answer = self.ctl.recv(4096)
            self.stats = json.loads(answer) if answer else None
        except (OSError, ValueError):
            self.stats = None
        self.ctl.close()
        self.proc.wait()
        return self.stats


class Limits:
    def __init__(self, keep: int, flood: int) -> None:
        self.keep, self.flood = keep, flood

    @classmethod
    def from_env(cls, environ: Any = os.environ) -> Limits:
        return cls(_bytes(environ.get(ENV_KEEP), KEEP_BYTES), _bytes(environ.get(ENV_FLOOD), FLOOD_BYTES))

    def flood_words(self) -> str:
        return (
            f"printed more than {size_text(self.flood)} to stdout.log and stderr.log ({ENV_FLOOD}) and was stopped: "
            f"a log flood (each log keeps its first and last {size_text(self.keep)}; its middle was dropped)"
        )


def _bytes(text: str | None, default: int) -> int:
    try:
        return max(0, int(text)) if text not in (None, "") else default
    except ValueError:
        return default


def capture() -> Capture | None:
    """Point fd 1 and 2 (the worker's log files) at a keeper process; None where they are not files
    or SWEEPQ_LOG_KEEP is 0 (then nothing is bounded)."""
    global _capture, _limits
    limits = Limits.from_env()
    if _capture is not None or limits.keep == 0:
        return _capture
    try:
        if not all(stat.S_ISREG(os.fstat(fd).st_mode) for fd in (1, 2)):
            return None
        logs = [os.open(f"/proc/self/fd/{fd}", os.O_RDWR | os.O_CLOEXEC) for fd in (1, 2)]
    except OSError:
        return None
    pipes = [os.pipe() for _ in range(2)]
    for _, w in pipes:
        try:
            fcntl.fcntl(w, F_SETPIPE_SZ, CHUNK)  # fewer wake-ups for a fast writer; the default where refused
        except OSError:
            pass
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    reads = [r for r, _ in pipes]
    args = [*map(str, reads), *map(str, logs), str(theirs.fileno()), str(os.getpid()), str(limits.keep)]
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", os.path.abspath(__file__), *args, str(limits.flood)],
            pass_fds=(*reads, *logs, theirs.fileno()),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=2,  # its own trouble, if any: straight into stderr.log
            start_new_session=True,  # a terminal's Ctrl-C never reaches it: its attempt tells it to finish
        )
    except OSError as e:  # no process to be had (a limit on processes, no memory): the logs go unbounded
        for fd in (*reads, *logs, *(w for _, w in pipes)):
            os.close(fd)
        mine.close()
        theirs.close()
        print(f"sweepq: this attempt's logs are not bounded: no log keeper could start: {e}", file=sys.stderr)
        return None
    theirs.close()
    for fd in (*reads, *logs):
        os.close(fd)
    saved = (os.dup(1), os.dup(2))
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os.dup2(pipes[0][1], 1)
    os.dup2(pipes[1][1], 2)
    for _, w in pipes:
        os.close(w)
    _limits = limits
    signal.signal(signal.SIGXFSZ, _on_flood)
    _capture = Capture(proc, mine, saved, limits)
    return _capture


def _on_flood(signum: int, frame: FrameType | None) -> None:
    global _flooded
    _flooded = True


def _on_flood_raising(signum: int, frame: FrameType | None) -> None:
    global _flooded
    if not _flooded:
        _flooded = True
        raise LogFlood(flood_words() or "printed past its flood limit")


def start_raising() -> None:
    """While training code runs in this process: a flood raises LogFlood in it (a loop that prints
    and never asks `run.should_stop` is stopped all the same)."""
    if _capture is not None:
        signal.signal(signal.SIGXFSZ, _on_flood_raising)
        if _flooded:
            raise LogFlood(flood_words() or "printed past its flood limit")


def stop_raising() -> None:
    """From here on a flood only marks the attempt (sweepq's own code runs, not the user's)."""
    if _capture is not None:
        signal.signal(signal.SIGXFSZ, _on_flood)


def flooded() -> bool:
    return _flooded


def flood_words() -> str | None:
    """Why this attempt was stopped for its output; None when it was not."""
    return _limits.flood_words() if _flooded and _limits is not None else None


def rank_streams(rank: int) -> tuple[int, int] | None:
    """The standard output and error (write ends, to close once given) for `rank` of a program of several
    ranks; None where the logs are not kept by a keeper: the rank then inherits the attempt's."""
    return _capture.rank_streams(rank) if _capture is not None else None


def sync() -> None:
    if _capture is not None:
        _capture.sync()


def finish() -> dict[str, Any] | None:
    global _capture
    if _capture is None:
        return None
    stats = _capture.finish()
    _capture = None
    return stats


if __name__ == "__main__":
    out_r, err_r, out_log, err_log, ctl_fd, attempt_pid, keep_bytes, flood_bytes = map(int, sys.argv[1:9])
    keep([out_r, err_r], [out_log, err_log], socket.socket(fileno=ctl_fd), attempt_pid, keep_bytes, flood_bytes)
    os._exit(0)
