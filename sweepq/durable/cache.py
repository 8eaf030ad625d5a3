"""The root as a cache of the storage: what a read command reads, copied in from the sweep's storage first.

The read commands (`logs`, `show`, `plot`, `report`, `export`) read a cell's files in the root's
layout. When the sweep's storage is not the root (a bucket, a mounted folder), the machine that
trained a cell may be gone with its root, and this machine's root (any folder, with the sweep file)
may never have held the cell's files. So before reading, `fill` copies into the root each file the
storage has and the root lacks: the root is a cache, never needed, and the storage is what counts.

A copy is taken again when it may have changed: DONE.json (a later attempt's), and the files of
an attempt whose receipt is not in the storage yet (it still runs elsewhere: its history and logs
grow). A file of the root that the storage does not have is left as it is (this machine's own
attempt, not shipped yet). A root that cannot be written (read-only) is left as it is, and a
storage that does not answer is said once on stderr: the command then reads what the root has.
With the storage the root itself, nothing is done at all.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sweepq.atomic import atomic_write_bytes
from sweepq.durable.files import CellFiles, is_root
from sweepq.durable.opening import for_cell
from sweepq.layout import DONE_NAME, CellPaths

WORKERS = 8  # cells fetched at once (an object store answers each request in milliseconds)


def fill(store: Any, cells: Iterable[str]) -> int:
    """Copy the files of `cells` that only the sweep's storage has into the root of `store` (a Store or a
    Reader: its `root` and `settings().storage`); how many files were copied."""
    cells = list(cells)
    if not cells:
        return 0
    root: Path = store.root
    where = store.settings().storage
    first = CellPaths(root, cells[0])
    if is_root(for_cell(first, where), first):
        return 0  # the storage is the root: its files are read where they are

    refused: list[str] = []

    def one(cell: str) -> int:
        paths = CellPaths(root, cell)
        try:
            return fill_cell(paths, for_cell(paths, where))
        except Exception as e:  # an unreachable storage: the command reads what the root has, and says so
            refused.append(f"{e.__class__.__name__}: {e}")
            return 0

    with ThreadPoolExecutor(max_workers=min(WORKERS, len(cells))) as pool:
        copied = sum(pool.map(one, cells))
    if refused:
        print(
            f"sweepq: the sweep's storage did not answer for {len(refused)} cell(s) ({refused[0]}): "
            "what this root holds of them is shown",
            file=sys.stderr,
        )
    return copied


def fill_cell(cell: CellPaths, files: CellFiles) -> int:
    """One cell's files (the module's doc says which are copied again)."""
    names = files.names("attempts/")
    ended = {n.split("/")[1] for n in names if n.endswith("/receipt.json")}
    copied = 0
    for name in [DONE_NAME, *names]:
        local = cell.dir / name
        parts = name.split("/")
        growing = len(parts) == 3 and parts[1] not in ended
        if name != DONE_NAME and not growing and local.exists():
            continue
        data = files.read(name)
        if data is None:
            continue
        if growing and _size(local) > len(data):
            continue  # this machine's own copy is ahead (its attempt runs here)
        try:
            local.parent.mkdir(parents=True, exist_ok=True)
            if not (local.exists() and local.read_bytes() == data):
                atomic_write_bytes(local, data)
                copied += 1
        except OSError:
            continue  # a root that cannot be written: the command reads what it has
    return copied


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1
