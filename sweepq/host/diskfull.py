"""A full disk: telling it from the cell's own failures, naming it, and keeping room to say so.

Running out of space (ENOSPC) or quota (EDQUOT), or a file system remounted
read-only (EROFS), is the machine's fault, not the cell's: the attempt ends
`disk_full` (sweepq.outcome) and the cell resumes from its last committed
checkpoint once there is room again. What users read, in the receipt, `status`,
`show`, `attempts` and the launch, is `describe`'s "disk full on <file system>
(<mount point>, <free> free)".

A disk that is full cannot take those words either. So the training process
keeps a little room from its start (`Reserve`) and gives it back to write its
receipt; its standard streams drop what a full disk refuses rather than raise
from a print on the way out (`guard_streams`); and a worker whose database can
no longer be written stops its training process, so that the process's receipt
is the attempt's account for the next launch's reaper, and exits EXIT_DISK_FULL.
"""

from __future__ import annotations

import errno
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, TextIO

from sweepq.atomic import atomic_write_json
from sweepq.host.logkeeper import size_text  # one wording of sizes (the keeper imports no sweepq)
from sweepq.wire.attempt_spec import ENV_ATTEMPT_FILE

#: The errors that mean "this disk takes nothing more", and how each is said.
DISK_ERRNOS = {errno.ENOSPC: "disk full", errno.EDQUOT: "disk quota exceeded", errno.EROFS: "disk read-only"}
#: A worker that stopped because its database could not be written (sysexits' EX_IOERR).
EXIT_DISK_FULL = 74
#: Room kept for the receipt (a few KiB) and the worker's last transactions after it.
RESERVE_BYTES = 1 << 20
_SQLITE_READONLY, _SQLITE_IOERR, _SQLITE_FULL = 8, 10, 13  # SQLite's primary result codes


# -- telling it apart ----------------------------------------------------------------------------------


def disk_error(e: BaseException) -> tuple[int, str | None] | None:
    """(errno, file name) of the full or read-only disk behind `e`, searched through its causes
    and contexts (an error of the checkpoint writer thread re-raised later, a library's error
    raised while handling one); None when there is none.

    An error that lost its errno on the way (a Rust or C++ library's message) is known by
    the system's words for it, as "No space left on device (os error 28)".
    """
    seen: set[int] = set()
    stack: list[BaseException | None] = [e]
    while stack:
        x = stack.pop()
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, OSError) and x.errno in DISK_ERRNOS:
            return x.errno, _name(x.filename)
        said = _by_words(str(x))
        if said is not None:
            return said, None
        stack += [x.__context__, x.__cause__]
        if isinstance(x, BaseExceptionGroup):
            stack += list(x.exceptions)
    return None


def _name(filename: Any) -> str | None:
    if isinstance(filename, bytes):
        return os.fsdecode(filename)
    return filename if isinstance(filename, str) else None


def _by_words(text: str) -> int | None:
    for number in DISK_ERRNOS:
        if os.strerror(number) in text:
            return number
    return errno.ENOSPC if "database or disk is full" in text else None


def database_full(e: BaseException, db: Path | None) -> str | None:
    """The words for a write to the SQLite database `db` that its disk refused; None for anything else."""
    orig = getattr(e, "orig", e)  # SQLAlchemy wraps the driver's error
    if db is None or not isinstance(orig, sqlite3.Error):
        return None
    code = getattr(orig, "sqlite_errorcode", 0) & 0xFF
    if code == _SQLITE_FULL:
        return describe(errno.ENOSPC, db)
    if code in (_SQLITE_READONLY, _SQLITE_IOERR):  # also a permission or a device error: ask the disk
        state = disk_state(db)
        return describe(state, db) if state is not None else None
    return None


# -- naming it -------------------------------------------------------------------------------------------


def describe(err: int, path: str | os.PathLike[str] | None = None) -> str:
    """'disk full on tmpfs (/mnt/scratch, 12.0 KiB free)' for the file system that holds `path`.

    ENOSPC on a file system whose inode table is full (bytes free, but no file can be
    created) is said as such: 'no free inodes on tmpfs (/mnt/scratch, 64 of 64 used)'.
    Saying "disk full ... 56.1 MiB free" would send the user looking for space that is there.

    Without a path: the attempt's folder (from its attempt file), else the current folder.
    """
    where = _existing(Path(path) if path is not None else _attempt_folder())
    point, source = _mount_of(where)
    try:
        st = os.statvfs(where)
    except OSError:
        return f"{DISK_ERRNOS.get(err, 'disk full')} on {source} ({point}, unknown free)"
    if err == errno.ENOSPC and out_of_inodes(st):
        return f"no free inodes on {source} ({point}, {st.f_files - st.f_ffree} of {st.f_files} used)"
    return f"{DISK_ERRNOS.get(err, 'disk full')} on {source} ({point}, {size_text(st.f_bavail * st.f_frsize)} free)"


def out_of_inodes(st: os.statvfs_result) -> bool:
    """No file can be created there: its inode table is full (a file system without one reports 0 inodes)."""
    return st.f_files > 0 and st.f_favail == 0


def disk_state(path: str | os.PathLike[str]) -> int | None:
    """EROFS for a read-only file system, ENOSPC for one with no room (bytes or inodes) left for this user,
    else None."""
    try:
        st = os.statvfs(_existing(Path(path)))
    except OSError:
        return None
    if st.f_flag & os.ST_RDONLY:
        return errno.EROFS
    return errno.ENOSPC if st.f_bavail == 0 or out_of_inodes(st) else None


def _attempt_folder() -> Path:
    attempt_file = os.environ.get(ENV_ATTEMPT_FILE)
    return Path(attempt_file).parent if attempt_file else Path.cwd()


def _existing(path: Path) -> Path:
    """The path, or its nearest folder that exists (a file that could not be created is not there)."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _mount_of(path: Path) -> tuple[str, str]:
    """(mount point, file system) holding `path`, from /proc/self/mountinfo (the deepest mount above it)."""
    real, best = os.path.realpath(path), ("/", "the disk")
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return best
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, after = left.split(), right.split()
        if len(fields) < 5 or len(after) < 2:
            continue
        point = _unescape(fields[4])
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best[0]):
            fstype, source = after[0], after[1]
            best = (point, source if source not in ("", "none") else fstype)
    return best


def _unescape(field: str) -> str:
    """mountinfo writes a space, tab, newline and backslash in octal (\\040)."""
    for code in ("\\040", "\\011", "\\012", "\\134"):
        field = field.replace(code, chr(int(code[1:], 8)))
    return field


# -- keeping room to say so --------------------------------------------------------------------------------


class Reserve:
    """Room held on the disk of a file that must be written at the end (the receipt), given back to write it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def beside(cls, target: Path, size: int = RESERVE_BYTES) -> Reserve:
        """Hold `size` bytes in a hidden file beside `target`; nothing when the disk has no room already."""
        reserve = cls(target.with_name(f".{target.name}.reserve"))
        try:
            # O_NOFOLLOW: a link left under this name is never followed (truncated through), only unlinked by release
            fd = os.open(reserve.path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            try:
                os.posix_fallocate(fd, 0, size)
            finally:
                os.close(fd)
        except OSError:
            reserve.release()
        return reserve

    def release(self) -> bool:
        """Give the room back; True when there was some."""
        try:
            self.path.unlink()
            return True
        except OSError:
            return False


def write_receipt(path: Path, receipt: dict[str, Any], reserve: Reserve) -> bool:
    """Write the receipt durably, with the reserve's room if the disk is full; False when even that failed.

    The reserve is given back either way. Any other error is raised.
    """
    try:
        for last in (False, True):
            try:
                atomic_write_json(path, receipt)
                return True
            except OSError as e:
                found = disk_error(e)
                if found is None:
                    raise
                if last or not reserve.release():
                    say(f"sweepq: the receipt {path} could not be written: {describe(found[0], path)}")
                    return False
        return False
    finally:
        reserve.release()


class _DropWhenFull:
    """A standard stream whose writes a full disk refused are dropped, never raised from a print."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as e:
            if not _droppable(e):
                raise
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as e:
            if not _droppable(e):
                raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _droppable(e: OSError) -> bool:
    """A full disk, or a log keeper that is gone (the pipe to it broke): what is printed is lost, not raised."""
    return disk_error(e) is not None or e.errno == errno.EPIPE


def guard_streams() -> None:
    """stdout and stderr (log files on the sweep's disk) drop what a full disk refuses."""
    if not isinstance(sys.stdout, _DropWhenFull):
        sys.stdout = _DropWhenFull(sys.stdout)
    if not isinstance(sys.stderr, _DropWhenFull):
        sys.stderr = _DropWhenFull(sys.stderr)


def say(line: str) -> None:
    """One line to stderr, which may be a log file on the very disk that is full."""
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        pass


# -- a worker whose database is full -----------------------------------------------------------------------


class Stoppable(Protocol):
    """A worker's training process, started fresh (Popen) or forked from its template."""

    def poll(self) -> int | None: ...
    def send_signal(self, sig: int) -> None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def kill(self) -> None: ...


def stop_worker(
    words: str, child: Stoppable | None, grace: float, what: str = "the queue database cannot be written"
) -> int:
    """The database (or another file of the worker's: `what`) cannot be written: stop the training
    process gracefully (its receipt file is then the attempt's account, read by the next launch's
    reaper) and return EXIT_DISK_FULL, which the launch reports."""
    say(
        f"sweepq worker: {words}: {what}, so this worker stops "
        "(its running attempt writes its receipt, which the next launch records)"
    )
    if child is not None and child.poll() is None:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(grace)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    return EXIT_DISK_FULL


def worker_disk_error(e: OSError, root: Path) -> tuple[str, str] | None:
    """(the words for the disk, what could not be written) for an error of a worker's own file
    write outside its database (an attempt's folder, its attempt file); None for any other error."""
    found = disk_error(e)
    if found is None:
        return None
    err, name = found
    return describe(err, name or root), f"{name or 'a file of the sweep'} could not be written"


def workers_stopped(db: Path | None, stopped: int | Sequence[str]) -> str:
    """What a launch says when workers exited EXIT_DISK_FULL: how many (or their names), and why."""
    names = [] if isinstance(stopped, int) else list(stopped)
    count = stopped if isinstance(stopped, int) else len(names)
    state = (disk_state(db) if db is not None else None) or errno.ENOSPC
    words = describe(state, db)
    who = "a worker" if count == 1 else f"{count} workers"
    if names:
        who = f"worker {names[0]}" if count == 1 else f"{count} workers ({', '.join(names)})"
    if words.startswith("no free inodes"):
        advice = "Remove some files there (every file takes an inode, however small; its bytes are not the problem)"
    else:
        advice = "Free some space (or remount the file system read-write)"
    return (
        f"{words}: {who} could not write the sweep's files and stopped. {advice}, "
        "then run the same command again: each cell resumes from its last committed checkpoint."
    )
