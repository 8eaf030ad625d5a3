"""A real small file system for tests: a tmpfs mounted on a folder, filled up and freed on demand.

Mounting needs root; elsewhere `small_disk` skips with the reason (a full disk cannot be made
with chmod). The fill takes every free byte, so the next write that needs room fails with
ENOSPC exactly as on a disk that filled up; `free()` gives the room back.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

FILLER = ".filler"  # hidden: no listing of the sweep's folders sees it
INODE_FILLER = ".inodes"  # a hidden folder of empty files that takes every free inode


class SmallDisk:
    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def free_bytes(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def fill(self) -> None:
        """Take every free byte (a file written with fallocate, then topped up page by page)."""
        fd = os.open(self.path / FILLER, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)
        try:
            if self.free_bytes:
                try:
                    os.posix_fallocate(fd, os.fstat(fd).st_size, self.free_bytes)
                except OSError as e:
                    if e.errno != errno.ENOSPC:  # something took a page meanwhile: the loop below finishes
                        raise
            block = b"\0" * 4096
            while True:
                try:
                    os.write(fd, block)
                except OSError as e:
                    if e.errno == errno.ENOSPC:
                        break
                    raise
        finally:
            os.close(fd)
        assert self.free_bytes == 0

    def free(self) -> None:
        (self.path / FILLER).unlink(missing_ok=True)

    @property
    def free_inodes(self) -> int:
        return os.statvfs(self.path).f_favail

    def fill_inodes(self, folder: Path | None = None) -> int:
        """Take every free inode with empty files (in `folder`, default a hidden one); how many were made."""
        where = folder or self.path / INODE_FILLER
        made = 0
        try:
            where.mkdir(exist_ok=True)
            while True:
                os.close(os.open(where / str(made), os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600))
                made += 1
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
        assert self.free_inodes == 0
        return made

    def free_inodes_back(self, folder: Path | None = None) -> None:
        where = folder or self.path / INODE_FILLER
        for child in where.iterdir():
            child.unlink()

    def remount(self, mode: str) -> None:
        subprocess.run(["mount", "-o", f"remount,{mode}", str(self.path)], check=True, capture_output=True)


@contextmanager
def small_disk(path: Path, size: str, inodes: int | None = None) -> Iterator[SmallDisk]:
    """A tmpfs of `size` ("4m") on `path` (with at most `inodes` files and folders), unmounted
    afterwards; skips the test when it cannot mount."""
    if os.geteuid() != 0:
        pytest.skip("a full disk needs a small file system of its own: mounting a tmpfs needs root")
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (f",nr_inodes={inodes}" if inodes else "")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield SmallDisk(path)
    finally:
        # Lazily: a process the test started may still hold a file there for a moment.
        subprocess.run(["umount", "-l", str(path)], capture_output=True)
