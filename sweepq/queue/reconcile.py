"""Reconciling a sweep file with its root: new cells appended, changed cells refused, gone cells reported.

A changed cell is refused unless the launch accepts it. Accepted, the cell takes the new
cfg; a done cell keeps its result under the cfg it ran with (`cells.ran_cfg`, shown beside
the result everywhere) or, with RERUN, is queued again to run the new one.

Computed first from a read, without writing (so bad input leaves nothing
behind), then computed again and written inside one write transaction by
Store.apply_reconcile (so two launches starting at once agree).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import sweepq.spec as spec_package
from sweepq.errors import DriftError
from sweepq.spec.types import CellSpec, Sweep
from sweepq.version import __version__

Cfg = dict[str, Any]
Stored = tuple[str, Cfg | None, bool]  # (cfg_hash, cfg or None when it was not read, removed)
#: Changed cells named one a line in the refusal; past this many, a count.
LISTED = 20


class Existing(dict[str, Stored]):
    """The cells a root holds: cell id -> (cfg_hash, cfg, removed).

    A root of 100,000 cells is compared with its file by hash alone: a cfg left None
    was not read, and `read_cfgs` reads those the diffs of changed cells need.
    """

    def __init__(
        self, rows: Iterable[tuple[str, Stored]] = (), read_cfgs: Callable[[list[str]], Mapping[str, Cfg]] | None = None
    ) -> None:
        super().__init__(rows)
        self.read_cfgs = read_cfgs


#: `accept_changed` as launch passes it: False refuses changed cfgs; KEEP (or True, `--accept-changed`)
#: gives changed cells the new cfg and keeps done cells' results under the cfg they ran with; RERUN
#: (`--rerun-changed`) also queues those done cells again, to run the new cfg.
KEEP, RERUN = "keep", "rerun"
Accept = bool | str


@dataclass
class ReconcilePlan:
    new: list[CellSpec] = field(default_factory=list)
    changed: list[tuple[CellSpec, dict[str, Any]]] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)  # in the root, gone from the file
    returned: list[str] = field(default_factory=list)  # gone earlier, back in the file now
    unchanged: int = 0
    same_file: bool = False  # the file last reconciled, unchanged: its cells were not compared
    rerun: bool = False  # done cells whose result came from an older cfg are queued again (RERUN)
    # Filled in by the write (definition.py), which sees the cells' states:
    kept_done: list[str] = field(default_factory=list)  # done, kept under the cfg they ran with
    requeued: list[str] = field(default_factory=list)  # done under an older cfg, queued again for the new one


def plan_digest(sweep: Sweep) -> str:
    """What a plan depends on besides the stored cells: the file's text, its path, the code that expands it.

    The store keeps the digest of the last plan it applied; a launch whose digest is
    the same skips expanding and comparing every cell (seconds at 100,000 cells).
    The path is in it because `root:`, `data:` and `program:` are resolved against it.
    """
    text = f"{sweep.source_sha256}\0{sweep.path}\0{_expansion_code()}"
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


@lru_cache(maxsize=1)
def _expansion_code() -> str:
    """sweepq's version and the text of the package that parses and expands a sweep file."""
    digest = hashlib.sha256(__version__.encode())
    for path in sorted(Path(spec_package.__file__ or "").parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def flat(cfg: Any, prefix: str = "") -> dict[str, Any]:
    """{"optim": {"lr": 1}} -> {"optim.lr": 1}: the paths a user reads in a diff."""
    if not isinstance(cfg, dict) or not cfg:
        return {prefix: cfg} if prefix else {}
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        out.update(flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def cfg_diff(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """path -> [old, new] for every path that differs (missing is None)."""
    a, b = flat(old), flat(new)
    return {k: [a.get(k), b.get(k)] for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k) or (k in a) != (k in b)}


def plan(sweep: Sweep, existing: Mapping[str, Stored], accept_changed: Accept) -> ReconcilePlan:
    """Compare the file's cells with the root's; raise DriftError on changed cfgs unless accepted (KEEP, RERUN)."""
    p = ReconcilePlan(rerun=accept_changed == RERUN)
    in_file = set()
    changed = []
    for cell in sweep.cells:
        in_file.add(cell.id)
        stored = existing.get(cell.id)
        if stored is None:
            p.new.append(cell)
            continue
        old_hash, _, removed = stored
        if removed:
            p.returned.append(cell.id)
        if old_hash != cell.cfg_hash:
            changed.append(cell)
        else:
            p.unchanged += 1
    old = _old_cfgs(existing, [cell.id for cell in changed])
    p.changed = [(cell, cfg_diff(old[cell.id], cell.cfg)) for cell in changed]
    p.removed = [cid for cid, (_, _, removed) in existing.items() if cid not in in_file and not removed]
    if p.changed and not accept_changed:
        raise DriftError(drift_message(sweep, p.changed))
    return p


def _old_cfgs(existing: Mapping[str, Stored], cells: list[str]) -> dict[str, Cfg]:
    """The stored cfgs of `cells`, read now where the root was compared by hash."""
    cfgs = {cid: existing[cid][1] for cid in cells}
    unread = [cid for cid, cfg in cfgs.items() if cfg is None]
    if unread:
        read = existing.read_cfgs if isinstance(existing, Existing) else None
        if read is None:
            raise ValueError("the stored cells were read without their cfgs, and with no way to read them")
        cfgs.update(read(unread))
    return {cid: cfg for cid, cfg in cfgs.items() if cfg is not None}


def drift_message(sweep: Sweep, changed: list[tuple[CellSpec, dict[str, Any]]]) -> str:
    lines = [
        f"{sweep.path.name} now gives {len(changed)} existing cell(s) a different cfg; "
        "their checkpoints and results belong to the old one:"
    ]
    for cell, diff in changed[:LISTED]:
        parts = ", ".join(f"{k}: {v[0]!r} -> {v[1]!r}" for k, v in diff.items())
        lines.append(f"  {cell.id}: {parts}")
    if len(changed) > LISTED:
        lines.append(f"  … and {len(changed) - LISTED:,} more cells whose cfg changed")
    lines.append(
        "Nothing was changed. Put the new values in new cells (a new group), use a new root, or "
        "relaunch with --accept-changed to give these cells the new cfg (recorded in their history): "
        "cells not done run it, resuming from their checkpoints; done cells stay done with their results, "
        "shown with the cfg they ran with, until `sweepq reset CELL` runs the new one from scratch. "
        "Relaunch with --rerun-changed instead to queue the done ones again now: they resume from their "
        "last checkpoint under the new cfg, their old results kept in their history."
    )
    return "\n".join(lines)
