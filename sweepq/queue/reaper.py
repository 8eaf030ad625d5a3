"""Liveness: closing attempts whose processes are gone, and keeping the database true to the disk.

A `running` cell whose lock can be taken belongs to processes that are all
dead (see lock.py). The reaper closes its attempt from what the dead process
left: its receipt file, else a DONE.json that verifies, else `lost`. Every
close (by a worker, an orphaned training process or a reaper) first mirrors
the cell's committed checkpoints from disk into the database, so messages lost
with a dead process cost nothing.
"""

from __future__ import annotations

import hashlib

from sweepq.atomic import read_json
from sweepq.checkpoint import manifest, marker
from sweepq.layout import MANIFEST_NAME, CellPaths
from sweepq.queue.lock import CellLock
from sweepq.queue.records import Outcome
from sweepq.queue.states import CellState, Reason
from sweepq.queue.store import CheckpointState, Store


def sync_checkpoints(store: Store, cell: str) -> None:
    """Make the database's checkpoint rows agree with the committed folders on disk."""
    paths = CellPaths(store.root, cell)
    on_disk = manifest.committed_manifests(paths)
    known = {c.step: c for c in store.checkpoints(cell) if c.state != CheckpointState.CORRUPT}
    for step, m in on_disk.items():
        row = known.get(step)
        if row is not None and row.state == CheckpointState.COMMITTED and row.manifest_sha256:
            continue
        mpath = paths.checkpoint(step) / MANIFEST_NAME
        store.record_checkpoint(
            cell,
            step,
            path=(paths.checkpoint(step)).relative_to(store.root).as_posix(),
            epoch=m.get("epoch"),
            metrics=m.get("metrics") or {},
            manifest_sha256=hashlib.sha256(mpath.read_bytes()).hexdigest(),
            attempt=m.get("attempt"),
            size_bytes=sum(int(f.get("size", 0)) for f in m["files"].values()),
        )
    gone = [s for s, c in known.items() if c.state == CheckpointState.COMMITTED and s not in on_disk]
    store.set_checkpoint_state(cell, gone, CheckpointState.SUPERSEDED, note="no longer on disk")


def finish_attempt(store: Store, cell: str, number: int, outcome: Outcome) -> CellState | None:
    sync_checkpoints(store, cell)
    return store.finish(cell, number, outcome)


def outcome_from_files(store: Store, cell: str, number: int, last_step: int | None) -> Outcome:
    """What a dead attempt left behind, best evidence first."""
    paths = CellPaths(store.root, cell)
    receipt = paths.receipt(number)
    if receipt.exists():
        try:
            o = Outcome.from_json(read_json(receipt))
            o.note = ((o.note + "; ") if o.note else "") + "closed from its receipt file"
            return o
        except (OSError, ValueError, TypeError):
            pass
    rec = store.cell(cell)
    done, _ = marker.verify_done(paths, rec.cfg_hash)
    if done is not None and done.get("attempt") == number:
        return Outcome(
            Reason.COMPLETED,
            end_step=done.get("step"),
            metrics=done.get("metrics"),
            note="closed from DONE.json: its process ended before the database was told",
        )
    mine = [s for s, m in manifest.committed_manifests(paths).items() if m.get("attempt") == number]
    known = [x for x in (last_step, max(mine) if mine else None) if x is not None]
    return Outcome(
        Reason.LOST,
        end_step=max(known) if known else None,
        note="the process vanished (no receipt, lock free): kill -9, reboot or power loss",
    )


def reap(store: Store, override: Outcome | None = None) -> list[tuple[str, str]]:
    """Close the attempts of running cells whose lock is free; returns (cell, reason) pairs."""
    reaped = []
    for cell, number in store.running():
        lock = CellLock(CellPaths(store.root, cell).lock)
        if not lock.try_acquire():
            continue  # its process lives
        try:
            rec = store.cell(cell)
            if rec.state is not CellState.RUNNING or rec.attempts != number:
                continue
            outcome = outcome_from_files(store, cell, number, rec.step)
            if override is not None and outcome.reason == Reason.LOST:
                outcome = Outcome(override.reason, end_step=rec.step, note=override.note)
            if finish_attempt(store, cell, number, outcome) is not None:
                reaped.append((cell, str(outcome.reason)))
        finally:
            lock.release()
    return reaped


def reconcile_markers(store: Store) -> list[tuple[str, str]]:
    """DONE.json wins over the database: repair cells it says are done, requeue done cells without one.

    Running cells are left to the reaper (their lock decides).
    """
    changes = []
    for rec in store.cells():
        if rec.state is CellState.RUNNING:
            continue
        paths = CellPaths(store.root, rec.id)
        if rec.state is CellState.DONE:
            if not paths.done.exists() or marker.read_done(paths) is None:
                if store.requeue_missing_marker(rec.id, "DONE.json is missing or unreadable"):
                    changes.append((rec.id, "requeued: DONE.json missing"))
            continue
        done, _ = marker.verify_done(paths, rec.cfg_hash)
        if done is not None and store.repair_done(rec.id, done):
            sync_checkpoints(store, rec.id)
            changes.append((rec.id, "done: repaired from DONE.json"))
    return changes
