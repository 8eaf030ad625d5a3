"""The reaper: closing attempts whose processes are gone, and keeping the database true to the disk.

A `running` cell whose ownership can be taken belongs to processes that are
all dead (see liveness.py). The reaper closes its attempt from what the dead
process left: its receipt file, else a DONE.json that verifies, else `lost`. Every
close (by a worker, an orphaned training process or a reaper) first mirrors
the cell's committed checkpoints from disk into the database, so messages lost
with a dead process cost nothing.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from sweepq.atomic import read_json
from sweepq.checkpoint import marker, storage
from sweepq.checkpoint.manifest import CheckpointCorrupt, CheckpointTooNew
from sweepq.durable import files as durable_files
from sweepq.durable import opening as durable_opening
from sweepq.evidence import Evidence, Witness
from sweepq.layout import CELLS_DIR, DONE_NAME, MANIFEST_NAME, CellPaths
from sweepq.outcome import account_of, decide
from sweepq.queue import liveness
from sweepq.queue.records import Outcome
from sweepq.queue.states import CellState, Reason
from sweepq.queue.store import CheckpointState, Store


def sync_checkpoints(store: Store, cell: str, owner: bool = True, written_by: int | None = None) -> None:
    """Make the database's checkpoint rows agree with the committed steps in the sweep's storage.

    A committed folder whose manifest is damaged is corrupt: the cell's owner
    (`owner`: the caller holds the cell's ownership) moves it aside and records
    why, as a training process does when its restore meets one; anyone else
    leaves it, and its row, to the owner.

    A row is a checkpoint's witness (checkpoint/witnessed.py): with `written_by`, only the steps that
    attempt wrote (or that carry no attempt, or are links) get one, so a late commit of an attempt the
    queue moved past is never vouched for by a later attempt's close; 0 records none. None (a repair
    rebuilding the queue from the files) records every step.
    """
    paths = CellPaths(store.root, cell)
    checkpoints = storage.for_cell(paths, store.settings().storage)
    known = {c.step: c for c in store.checkpoints(cell) if c.state != CheckpointState.CORRUPT}
    present = checkpoints.steps()
    for step in present:
        try:
            m, sha = checkpoints.read_manifest(step)
        except CheckpointTooNew:
            continue  # a newer sweepq's: neither mirrored nor touched
        except CheckpointCorrupt as e:
            if owner:
                _quarantine(store, paths, checkpoints, step, e.why)
            continue
        row = known.get(step)
        if row is not None and row.state == CheckpointState.COMMITTED and row.manifest_sha256:
            continue
        by = m.get("attempt")
        if written_by is not None and isinstance(by, int) and by != written_by and checkpoints.linked(step) is None:
            continue  # another attempt's, unwitnessed: its own close (or nobody) vouches for it
        store.record_checkpoint(
            # A row made here is dated when the manifest was written, not now: a checkpoint committed by a
            # process that died before its worker heard of it was made then (report's training lost).
            cell,
            step,
            created_at=_written(checkpoints.location(step) / MANIFEST_NAME),
            path=paths.checkpoint(step).relative_to(store.root).as_posix(),
            epoch=m.get("epoch"),
            metrics=m.get("metrics") or {},
            manifest_sha256=sha,
            attempt=m.get("attempt"),
            size_bytes=sum(f["size"] for f in m["files"].values()),
        )
    gone = [s for s, c in known.items() if c.state == CheckpointState.COMMITTED and s not in present]
    store.set_checkpoint_state(cell, gone, CheckpointState.SUPERSEDED, note="no longer on disk")


def _written(path: Path) -> datetime | None:
    try:
        return datetime.fromtimestamp(os.lstat(path).st_mtime, UTC)
    except OSError:
        return None


def _quarantine(store: Store, paths: CellPaths, checkpoints: storage.CheckpointStorage, step: int, why: str) -> None:
    try:
        moved = checkpoints.quarantine(step)
    except FileNotFoundError:
        return  # gone meanwhile: nothing left to move aside
    path = paths.from_root(paths.relative(moved))
    store.record_checkpoint(paths.cell_id, step, path=path, state=CheckpointState.CORRUPT, note=why)
    store.add_event(paths.cell_id, "checkpoint_corrupt", {"step": step, "why": why})


def finish_attempt(
    store: Store, cell: str, number: int, outcome: Outcome, found_dead: bool = False, last_seen: datetime | None = None
) -> CellState | None:
    # Fenced: an attempt the queue already moved past touches none of the cell's checkpoints, and vouches for
    # none (0); the current one's close witnesses the steps it wrote that are in the storage now.
    current = store.is_current(cell, number)
    sync_checkpoints(store, cell, owner=current, written_by=number if current else 0)
    return store.finish(cell, number, outcome, found_dead=found_dead, last_seen=last_seen)


def last_written(paths: CellPaths, number: int, where: str | None = None) -> datetime | None:
    """The newest sign of life attempt `number` left in its files, as the file system recorded it: the last
    write of each file in its folder (its stdout and stderr logs, metric history, receipt, a program's
    outcome) and of the manifest of each checkpoint it committed. None: it left none.

    The reaper ends a dead attempt at this or at its worker's last flush (`attempts.seen_at`, once a
    second while the worker watched it), whichever is newer (Store.finish): a process can outlive its
    worker by a little (its last log lines, a checkpoint the worker never heard of). Links are not
    followed (a link's own time is the link's); a copy of the root that did not keep mtimes (cp without
    -a) makes them the copy's time, which the reap time still bounds."""
    times: list[float] = []
    try:
        with os.scandir(paths.attempt_dir(number)) as entries:
            for entry in entries:
                try:
                    if entry.is_file(follow_symlinks=False):
                        times.append(entry.stat(follow_symlinks=False).st_mtime)
                except OSError:
                    continue  # gone meanwhile, or unreadable: no sign
    except OSError:
        pass  # no folder: it died before its worker made one
    checkpoints = storage.for_cell(paths, where)
    for step, m in storage.committed_manifests(checkpoints).items():
        if m.get("attempt") == number:
            try:  # a folder's manifest (in a bucket, none: the worker's last flush bounds the end)
                times.append(os.lstat(checkpoints.location(step) / MANIFEST_NAME).st_mtime)
            except OSError:
                continue
    return datetime.fromtimestamp(max(times), UTC) if times else None


def outcome_from_files(store: Store, cell: str, number: int, last_step: int | None) -> Outcome:
    """What a dead attempt left behind, judged by sweepq.outcome (Witness.REAPER).

    Read in the table's order, so a receipt spares the verification of DONE.json.
    """
    paths = CellPaths(store.root, cell)
    where = store.settings().storage
    files = durable_opening.for_cell(paths, where)
    try:
        receipt = read_json(paths.receipt(number))
    except (OSError, ValueError):
        receipt = durable_files.read_json(files, f"attempts/{number}/receipt.json")  # its machine's gone
    if account_of(receipt) is not None:
        return _judged(Evidence(Witness.REAPER, account=receipt))
    checkpoints = storage.for_cell(paths, where)
    done, _ = marker.verify_done(paths, store.cell(cell).cfg_hash, checkpoints, files)
    if done is not None and done.get("attempt") == number:
        return _judged(Evidence(Witness.REAPER, done=done))
    found = storage.committed_manifests(checkpoints)
    mine = [s for s, m in found.items() if m.get("attempt") == number]
    known = [x for x in (last_step, max(mine) if mine else None) if x is not None]
    return _judged(Evidence(Witness.REAPER, step=max(known) if known else None))


def _judged(e: Evidence) -> Outcome:
    o = decide(e)
    assert o is not None  # the reaper always has a verdict
    return o


def reap(
    store: Store, override: Outcome | None = None, owners: liveness.Liveness | None = None
) -> list[tuple[str, str]]:
    """Close the attempts of running cells whose owner is gone; returns (cell, reason) pairs."""
    owners = owners or liveness.for_root(store.root)
    reaped = []
    for cell, number in store.running():
        owner = owners.take(cell)
        if owner is None:
            continue  # its process lives
        try:
            rec = store.cell(cell)
            if rec.state is not CellState.RUNNING or rec.attempts != number:
                continue
            outcome = outcome_from_files(store, cell, number, rec.step)
            if override is not None and outcome.reason == Reason.LOST:
                outcome = Outcome(override.reason, end_step=rec.step, note=override.note)
            # Its worker's last flush, or its files' newer traces: Store.finish's.
            seen = last_written(CellPaths(store.root, cell), number, store.settings().storage)
            if finish_attempt(store, cell, number, outcome, found_dead=True, last_seen=seen) is not None:
                reaped.append((cell, str(outcome.reason)))
        finally:
            owner.release()  # held until the attempt is closed: no worker claims it meanwhile
    return reaped


def reconcile_markers(store: Store) -> list[tuple[str, str]]:
    """DONE.json wins over the database: repair cells it says are done, requeue done cells without one.

    Running cells are left to the reaper (their owner's liveness decides). A relaunch
    of 100,000 done cells must not read 100,000 markers: a cell the queue calls done
    costs one stat of its DONE.json, which is read again only when it was written
    after the queue heard the cell finish (its mtime is later than the cell's
    finished_at: the marker is written first, the queue told after). A marker gone
    is seen by that stat; one damaged or replaced since is read, and requeued if it
    is no marker. The mtime, not the ctime: a root copied with its times (cp -a,
    rsync -a) keeps its mtimes, and a copy would otherwise read every marker on every
    relaunch. Cells not done are read only where they have a folder.
    """
    changes = []
    cells_dir = f"{store.root}/{CELLS_DIR}"  # text, not Path: 100,000 Path joins cost seconds
    kept = store.settings().storage  # the marker that counts is there (the root's copy may be gone)
    # On a server database whose storage is each machine's own root, a cell done on another machine
    # keeps its marker in that machine's root: its absence here proves nothing (a damaged one still does).
    roots_apart = kept is None and store.database.is_server
    for cell, finished_at in store.done_cells():
        if _unchanged(f"{cells_dir}/{cell}/{DONE_NAME}", finished_at):
            continue  # as it was when the queue heard: it was a marker then
        if roots_apart and not os.path.lexists(f"{cells_dir}/{cell}/{DONE_NAME}"):
            continue
        paths = CellPaths(store.root, cell)
        why = marker.load_done(paths, durable_opening.for_cell(paths, kept))[1]  # "no DONE.json" where none is kept
        if why is not None and store.requeue_missing_marker(cell, why):
            changes.append((cell, f"requeued: {why}"))
    if not _any_folder(cells_dir):
        return changes  # no cell ever started here: no marker to find
    unfinished = store.unfinished_cells()
    # Many cells not done: one listing says which have a folder. A few: each is asked (listing 100,000 costs more).
    folders = _cell_folders(store.root) if len(unfinished) > LIST_FOLDERS_FROM else None
    where = store.settings().storage if unfinished else None
    for cell, cfg_hash in unfinished:
        if folders is not None and cell not in folders:
            continue
        paths = CellPaths(store.root, cell)
        done, _ = marker.verify_done(
            paths, cfg_hash, storage.for_cell(paths, where), durable_opening.for_cell(paths, where)
        )
        if done is not None and store.repair_done(cell, done):
            # Not taken: a damaged checkpoint is left as it is. The marker's attempt wrote what it names.
            sync_checkpoints(store, cell, owner=False, written_by=done.get("attempt"))
            changes.append((cell, "done: repaired from DONE.json"))
    return changes


LIST_FOLDERS_FROM = 1000  # cells not done, from which one listing of the cell folders is cheaper than a look each


def _unchanged(done: str, finished_at: float | None) -> bool:
    """Whether the DONE.json at `done` is there and was last written before `finished_at` (epoch seconds)."""
    try:
        written = os.stat(done).st_mtime
    except OSError:
        return False  # gone, or unreadable: load_done says which
    return finished_at is not None and written <= finished_at


def _any_folder(cells_dir: str) -> bool:
    """Whether any cell has a folder yet (or the folder of cells cannot be listed: then ask each cell)."""
    try:
        with os.scandir(cells_dir) as entries:
            return any(entry.is_dir() for entry in entries)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True


def _cell_folders(root: Path) -> set[str] | None:
    """The names of the cell folders on disk, from one listing (None: it cannot be listed, ask each cell)."""
    try:
        with os.scandir(root / CELLS_DIR) as entries:
            return {entry.name for entry in entries if entry.is_dir()}
    except (FileNotFoundError, NotADirectoryError):
        return set()
    except OSError:
        return None
