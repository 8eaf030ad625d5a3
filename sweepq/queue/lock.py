"""The cell lock: an flock on the cell's folder itself, the proof that a cell's owner lives.

The mechanism behind FileLockLiveness (liveness.py), which is what callers use.
The lock sits on the open file description, so a descriptor passed to a child
keeps it held while either process lives; it goes away with the last process
that has it open, however that process ends (kill -9 and power loss included).

The folder is locked rather than a file in it because a lock file can be
deleted under its holder (a tmp cleaner, `find -delete`, a user tidying up):
the next process would then lock a new file of the same name and believe the
cell's owner dead. A folder that holds a cell's files cannot vanish that way.
Whoever locks also checks that the path still names the locked folder
(`names`), so a folder moved or removed and made again is never mistaken for
the one that is locked.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path


class CellLock:
    """A non-blocking exclusive lock on one folder (made if missing); `fd` can be passed to a child."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None

    def try_acquire(self) -> bool:
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        # Locked, and still the folder the path names (not one moved away meanwhile).
        if take(fd) and names(fd, self.path):
            self.fd = fd
            return True
        os.close(fd)
        return False

    def release(self) -> None:
        """Drop this process's hold (children that inherited the descriptor keep theirs)."""
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)

    def __enter__(self) -> CellLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def is_held(path: Path) -> bool:
    """Does some process hold the lock? Creates nothing (read commands ask this).

    Found out by taking the lock and dropping it at once, through a read-only
    descriptor (flock needs no write access, so a read-only root answers too).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except (FileNotFoundError, NotADirectoryError):
        return False  # never locked: no attempt of this cell has started here
    try:
        return held_elsewhere(fd)
    finally:
        os.close(fd)


def take(fd: int) -> bool:
    """Lock `fd`'s file without waiting (filelock's `lock_descriptor`, an flock); False when another holds it."""
    from filelock import lock_descriptor  # here: a read command only asks (`held_elsewhere`)

    return lock_descriptor(fd, blocking=False)


def held_elsewhere(fd: int) -> bool:
    """Does another open file description hold the lock on `fd`'s file? Asked by taking it without waiting,
    which the caller drops by closing `fd`. The standard library's flock, the primitive `take` uses on
    Linux: `status` asks this of every running cell, and importing filelock cost it more than the asking."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    return False


def ensure_held(fd: int) -> bool:
    """Make sure an inherited descriptor holds its lock; False when another process holds it.

    Locking again through the description that holds the lock succeeds at once.
    """
    return take(fd)


def names(fd: int, path: Path) -> bool:
    """Does `path` still name the file or folder open as `fd` (not moved, removed or replaced)?"""
    try:
        now = os.stat(path)
    except OSError:
        return False
    held = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)


@dataclass(frozen=True)
class Holder:
    """A process holding the lock of a folder: its pid and command line (as `ps` would show it)."""

    pid: int
    command: str

    def __str__(self) -> str:
        return f"pid {self.pid} ({self.command})"


COMMAND_CHARS = 200  # a command line is named, not copied: its first characters


def holders(path: Path, exclude: tuple[int, ...] = (), identity: tuple[int, int] | None = None) -> list[Holder]:
    """The processes whose open descriptors hold the flock on the folder `path` (Linux /proc; [] elsewhere).

    A process that inherited the locked descriptor (a forked helper, a daemon that escaped its session)
    holds the lock as its owner did: this names it. Only processes this user may look into are seen, and
    a descriptor counts only when the kernel lists the lock on it (fdinfo's `lock:` line), so a process
    that merely has the folder open (a reader asking `held_elsewhere`) is never named. `identity` (device,
    inode) names the folder when `path` is where a descriptor of it says it is (a folder since moved).
    """
    try:
        key = identity
        if key is None:
            want = os.stat(path)
            key = (want.st_dev, want.st_ino)
        text = os.path.realpath(path)
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    found = []
    for pid in pids:
        if pid in exclude or not _holds(pid, text, key):
            continue
        found.append(Holder(pid, command_of(pid)))
    return found


def _holds(pid: int, text: str, key: tuple[int, int]) -> bool:
    fds = f"/proc/{pid}/fd"
    try:
        names = os.listdir(fds)
    except OSError:  # gone, or another user's
        return False
    for n in names:
        try:
            if os.readlink(f"{fds}/{n}") != text:  # cheap: most descriptors are something else
                continue
            st = os.stat(f"{fds}/{n}")
            if (st.st_dev, st.st_ino) != key:
                continue
            with open(f"/proc/{pid}/fdinfo/{n}") as info:
                if any(line.startswith("lock:") and "FLOCK" in line for line in info):
                    return True
        except OSError:
            continue
    return False


def command_of(pid: int) -> str:
    """A process's command line, its first COMMAND_CHARS characters ("" once it exited)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read(COMMAND_CHARS * 4)
    except OSError:
        return ""
    # Trailing blanks are a title's padding (a forked attempt's, worker/proctitle.py).
    words = raw.replace(b"\0", b" ").decode(errors="replace").rstrip()
    return words if len(words) <= COMMAND_CHARS else words[: COMMAND_CHARS - 3] + "..."
