"""The gate between a launch and the workers it starts: they start at once, and claim once it opens.

A relaunch of 100,000 cells checks every cell's DONE.json before any cell may be
claimed (queue/reaper.py, `reconcile_markers`). The launch starts its workers
first, each holding the read end of one pipe, so that their interpreters start
and import while it checks; then it writes one byte per worker (each reads one)
and closes its end. Closed without a byte (nothing to do, or the launch died):
each worker exits without a claim.
"""

from __future__ import annotations

import os

GO = b"g"


def opens(fd: int) -> bool:
    """In a worker: wait for the launch; True at its go, False when it closed the gate without one."""
    try:
        return os.read(fd, 1) == GO
    finally:
        os.close(fd)


def release(fd: int, workers: int, go: bool) -> None:
    """In the launch: let `workers` workers claim (`go`), or send them away; the gate is closed either way."""
    try:
        if go:
            os.write(fd, GO * workers)  # a few bytes: a pipe takes them at once
    finally:
        os.close(fd)
