"""Removing, shrinking and moving the sweep's own files without ever following a link out of the root.

A root may hold links that a person or a tool left there: a warm start linked
in as `checkpoints/step-N` from another sweep, a file of a step folder linked
to save space, an `output/` on another disk, a `.writing-*` name that happens
to be a link. sweepq may read through them (a resume verifies every byte it
reads against a manifest, wherever it lies), but nothing it deletes,
truncates, moves or writes is ever reached through one:

  remove            a link is unlinked itself, never what it points at; a
                    folder is emptied by the standard library's rmtree on
                    descriptors (O_NOFOLLOW at every level, so a link inside
                    it is unlinked, not followed)
  shrink_and_remove a large file is shrunk before its folder is removed only
                    when it is a regular file of that very folder with no
                    other name (opened with O_NOFOLLOW beside the folder's
                    own descriptor; a hard link's other name keeps every byte)
  require_own       a folder sweepq changes (a cell's checkpoints/, the
                    attic) must be reached from the root through real
                    folders: a link on the way raises LinkedPath, which names
                    the link, where it leads and what to do
  move              a rename, which moves a link itself; across file systems
                    shutil.move copies links as links before removing them

The root itself may be a link (a root on another disk): links are looked for
below it only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from pathlib import Path

from sweepq.errors import UsageError

# The descriptor-based rmtree (Linux, every Python sweepq supports) is what makes `remove` safe inside a folder.
assert shutil.rmtree.avoids_symlink_attacks


class LinkedPath(UsageError):
    """A folder sweepq would change is reached through a link: changing it would change files outside the root."""

    def __init__(self, link: Path, root: Path, what: str) -> None:
        self.link = link
        self.target = _target(link)
        super().__init__(
            f"{what} is reached through a link: {_shown(link, root)} points to {self.target}. sweepq writes, moves "
            "and deletes only the root's own files, never through a link (the files it points at may be another "
            f"sweep's). Replace the link with a real folder (move what it points at into {_shown(link, root)} if "
            "it is this sweep's), or put the whole root on the other disk; to warm-start a cell from another "
            "sweep, link single steps as checkpoints/step-N, which sweepq reads but never changes."
        )


def is_link(path: Path) -> bool:
    """Whether `path` itself is a symbolic link (dangling ones included)."""
    return os.path.islink(path)


def link_on_the_way(root: Path, path: Path) -> Path | None:
    """The first symbolic link from below `root` down to `path` (itself included); None when there is none.

    Components that do not exist yet are no links. A `path` outside `root` is
    checked from its own name only.
    """
    try:
        parts = path.relative_to(root).parts
        here = root
    except ValueError:
        parts, here = (path.name,), path.parent
    for part in parts:
        here = here / part
        try:
            if stat.S_ISLNK(os.lstat(here).st_mode):
                return here
        except FileNotFoundError:
            return None
    return None


def require_own(root: Path, path: Path, what: str) -> None:
    """Raise LinkedPath when `path` is reached from `root` through a link (see the module)."""
    link = link_on_the_way(root, path)
    if link is not None:
        raise LinkedPath(link, root, what)


def remove(path: Path) -> None:
    """Remove `path`: a link or a file is unlinked itself, a folder with everything in it, no link ever followed.

    Nothing there: nothing to do. Raises OSError when something could not be removed.
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(path)  # refuses a link swapped in since the lstat (OSError): never follows it
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def shrink_and_remove(folder: Path, step: int) -> None:
    """Remove `folder` as `remove` does, first shrinking each large file of it `step` bytes at a time.

    Each cut is made durable before the next (deletion.py says why). A file is
    shrunk only when it is a regular file in the folder itself with one name:
    a link is never opened for writing, and a hard link to another sweep's file
    (or a file this sweep shares with one) keeps every byte. Errors are ignored:
    what is left is cleaned up later.
    """
    try:
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        dfd = -1  # a link (ELOOP), a file or nothing: `remove` takes the name itself away
    if dfd >= 0:
        try:
            for name in os.listdir(dfd):
                _shrink(dfd, name, step)
        except OSError:
            pass
        finally:
            os.close(dfd)
    with contextlib.suppress(OSError):
        remove(folder)


def _shrink(dfd: int, name: str, step: int) -> None:
    try:
        before = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        if not stat.S_ISREG(before.st_mode) or before.st_nlink != 1 or before.st_size <= step:
            return
        fd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except OSError:
        return
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino) or st.st_nlink != 1:
            return  # replaced or linked since the look: leave it to the rmtree
        size = st.st_size
        while size > step:
            size -= step
            os.ftruncate(fd, size)
            os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def move(source: Path, target: Path) -> None:
    """Move `source` (a link moves as the link itself) to `target`, whose folder exists and is the root's own."""
    try:
        os.rename(source, target)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
        shutil.move(str(source), str(target))  # copies links as links (symlinks=True), then removes by `rmtree`


def _target(link: Path) -> str:
    try:
        return os.readlink(link)
    except OSError:
        return "(unreadable)"


def _shown(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)
