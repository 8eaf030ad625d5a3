"""A process's command line as `ps`, `top` and psutil show it, rewritten in place (Linux).

A fork of the template (worker/template.py) would show the template's command line; it shows
`python -m sweepq.attempt <attempt.json>` instead, as a fresh attempt does, so that
people and tools find training processes as before. The kernel shows the memory where the
process's arguments were (`arg_start`..`arg_end` in /proc/self/stat); the new line is written
there, padded with NULs, and must fit: the template is started with room to spare (`room`).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

PAD = "-"  # the template's spare argument is made of this: shown until the template shortens its own line


def _area() -> tuple[int, int] | None:
    """The start and end addresses of this process's argument memory."""
    try:
        stat = Path("/proc/self/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    try:  # arg_start and arg_end are fields 48 and 49 of proc(5), counted from 1; the split starts at field 3
        start, end = int(fields[48 - 3]), int(fields[49 - 3])
    except (IndexError, ValueError):
        return None
    return (start, end) if 0 < start < end else None


def room(args: list[str]) -> str:
    """A spare argument that leaves room for `args` on a command line."""
    return PAD * (sum(len(a.encode()) + 1 for a in args) + 1)


def set_cmdline(args: list[str]) -> bool:
    """Show `args` as this process's command line; False (and nothing changed) where it cannot fit."""
    area = _area()
    if area is None:
        return False
    start, end = area
    line = b"\0".join(a.encode() for a in args) + b"\0"
    if not 0 < len(line) <= end - start:
        return False
    try:
        ctypes.memmove(start, line.ljust(end - start, b"\0"), end - start)
    except (MemoryError, OSError):  # a name is worth nothing next to the attempt itself
        return False
    return True
