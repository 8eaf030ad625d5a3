"""Rebuilding a root's queue from its files, when its database is damaged or lost (`sweepq repair`).

What the files say wins, as on every launch: a cell whose DONE.json verifies
is done; a cell with a committed checkpoint that verifies is interrupted at
the newest such step (the next attempt resumes there); any other cell is
queued. The sweep file gives the cells, their order and the settings, as when
a launch first made the queue.

Attempt numbers are never given twice: every `attempts/<n>/` folder on disk is
recorded as attempt n of its cell (its reason from its receipt, `lost` without
one, and a note saying it was recovered), and the cell's counter starts above
the highest, so a new attempt never writes into an old attempt's folder nor is
confused with its receipt. Retry budgets start afresh, as after `sweepq retry`.

The new database is written beside the old one and sealed; then the old one
(with its log and index) is renamed aside, never deleted, and the new one is
renamed into its place. Every cell of the file is owned (liveness) meanwhile,
so no worker can claim one; a cell that a live process owns refuses the repair.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import update

from sweepq.atomic import read_json
from sweepq.checkpoint import marker, storage, storage_url
from sweepq.checkpoint.manifest import CheckpointCorrupt, CheckpointTooNew
from sweepq.errors import UsageError
from sweepq.layout import CellPaths
from sweepq.outcome import account_of
from sweepq.queue import liveness, lock, opening, reconcile
from sweepq.queue.attempts import Attempts
from sweepq.queue.database import Database
from sweepq.queue.opening import cell_folders
from sweepq.queue.reaper import sync_checkpoints
from sweepq.queue.records import Outcome
from sweepq.queue.schema import AttemptRow, CellRow, SweepRow
from sweepq.queue.states import CellState, Reason
from sweepq.queue.store import Store
from sweepq.spec.sweep import CellSpec, Sweep

RECOVERED = "recovered from disk by repair"


@dataclass
class Rebuilt:
    """What a repair did, for its report."""

    damage: str | None  # what was wrong with the old database (None: rebuilt with --force)
    moved_to: Path | None  # where the old database went (None: there was none)
    done: list[str] = field(default_factory=list)
    resumable: dict[str, int] = field(default_factory=dict)  # cell -> the step it resumes from
    queued: list[str] = field(default_factory=list)
    attempts: int = 0  # old attempts recorded from their folders
    not_in_file: list[str] = field(default_factory=list)  # cell folders the sweep file no longer has


def damage(root: Path, database: Database) -> str | None:
    """What is wrong with a root's database, in words; None when it reads as a sound queue."""
    if not database.exists():
        return f"the file is missing, but {root} has cell folders" if cell_folders(root) else None
    words = database.damage()
    if words is None and database.revision() is None and cell_folders(root):
        words = "it holds no queue, but the root has cell folders"
    return words


def spec_path(root: Path) -> str | None:
    """The sweep file a sound database names (launch records it); None when it names none."""
    store = _Rebuilding.open_readonly(root)
    try:
        return store.spec_path()
    finally:
        store.close()


def rebuild(root: Path, sweep: Sweep, *, force: bool = False) -> Rebuilt:
    """Move the database aside and make a new queue from the sweep file and the files; see the module."""
    database = Database.for_root(root)
    why = damage(root, database)
    if why is None and database.exists():  # a sound queue of a newer sweepq is never rebuilt by this one
        opening.check_known(database.revision(), database.describe())
    if why is None and not force:
        raise UsageError(_not_damaged(root, database))
    if database.path is None:
        raise UsageError(f"the database {database.describe()} is not a file of the root: repair rebuilds SQLite files")
    owned = _own_every_cell(root, sweep)
    try:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        staging = database.staging(f"rebuilding-{stamp}-{os.getpid()}")
        try:
            staging.upgrade()
            store = _Rebuilding(root, staging)
            result = Rebuilt(why, None, not_in_file=sorted(set(cell_folders(root)) - {c.id for c in sweep.cells}))
            # The storage as a launch chooses it (SWEEPQ_STORAGE_URL, --storage, before the file's).
            chosen = storage_url.settled(sweep.settings.storage, str(sweep.path))
            settings = dataclasses.replace(sweep.settings, storage=chosen)
            store.apply_reconcile(settings, str(sweep.path), lambda have: reconcile.plan(sweep, have, False))
            for cell in sweep.cells:
                store.recover(cell, result)
        except BaseException:
            staging.discard()  # a half-built queue of ours, never the user's database
            raise
        staging.seal()
        result.moved_to = database.move_aside(f".{'damaged' if why else 'replaced'}-{stamp}")
        database.install(staging)
        return result
    finally:
        for o in owned:
            o.release()


def _not_damaged(root: Path, database: Database) -> str:
    if not database.exists():
        return f"{root} has no database and no cell folders: it is not a sweep root, there is nothing to repair"
    return (
        f"the database at {database.describe()} is not damaged (SQLite's check finds every page sound and it "
        "holds a queue): there is nothing to repair. To rebuild the queue from the files all the same, add "
        "--force (the current database is moved aside, not deleted)."
    )


def _own_every_cell(root: Path, sweep: Sweep) -> list[liveness.Ownership]:
    """Own every cell with a folder, so no worker claims one meanwhile; refuse when a live process owns one."""
    owners = liveness.for_root(root)
    in_file = {c.id for c in sweep.cells}
    owned: list[liveness.Ownership] = []
    for cell in cell_folders(root):
        got = owners.take(cell) if cell in in_file else None
        if got is None and (cell in in_file or owners.owner_alive(cell)):
            for o in owned:
                o.release()
            raise UsageError(_owned_words(root, cell, owners))
        if got is not None:
            owned.append(got)
    return owned


def _owned_words(root: Path, cell: str, owners: liveness.Liveness) -> str:
    """Why the repair stops at a cell that a live process owns, naming the processes that hold it."""
    held = lock.holders(CellPaths(root, cell).lock)
    if not held:
        return (
            f"cell {cell} of {root} is owned by a live process: a launch or a worker is running on this "
            "root. Stop it first (Ctrl-C in its terminal, or `sweepq stop`), then run the repair again."
        )
    pids = " ".join(str(h.pid) for h in held)
    return (
        f"cell {cell} of {root} is owned by a live process: its lock is held by {', '.join(map(str, held))}. "
        "If that is an attempt of a launch or a worker running on this root, stop the launch first (Ctrl-C in "
        "its terminal, or `sweepq stop`); "
        f"if it is a process an attempt left behind, end it (kill {pids}). Then run the repair again."
    )


class _Rebuilding(Store):
    """The store verbs that only a rebuild needs: rows written from what the files say."""

    def spec_path(self) -> str | None:
        with self.tx.read() as s:
            row = s.get(SweepRow, 1)
            return None if row is None else row.spec_path

    def recover(self, cell: CellSpec, result: Rebuilt) -> None:
        paths = CellPaths(self.root, cell.id)
        numbers = _attempt_numbers(paths)
        for n in numbers:
            self._recover_attempt(cell.id, n, paths)
        result.attempts += len(numbers)
        highest = max(numbers, default=0)
        self._set(cell.id, attempts=highest, budget_base=highest)  # fresh budgets, numbers above the old ones
        if not paths.dir.is_dir():
            result.queued.append(cell.id)
            return
        sync_checkpoints(self, cell.id)
        done, _ = marker.verify_done(paths, cell.cfg_hash, storage.for_cell(paths, self.settings().storage))
        if done is not None and self.repair_done(cell.id, done):
            best, best_step = done.get("best"), done.get("best_step")
            if isinstance(best, int | float) and isinstance(best_step, int | None):
                self._set(cell.id, best=best, best_step=best_step)
            result.done.append(cell.id)
            return
        step, metrics = _newest_sound_checkpoint(paths, self.settings().storage)
        if step is None:
            result.queued.append(cell.id)
            return
        last = self.attempt(cell.id, highest) if highest else None
        self._set(
            cell.id,
            state=CellState.INTERRUPTED,
            step=step,
            metrics=metrics or None,
            last_reason=last.reason if last is not None else None,
        )
        self.add_event(cell.id, "rebuilt", {"state": "interrupted", "step": step, "note": RECOVERED})
        result.resumable[cell.id] = step

    def _set(self, cell: str, **values: Any) -> None:
        with self.tx.write() as s:
            s.execute(update(CellRow).where(CellRow.id == cell).values(updated_at=self.clock(), **values))

    def _recover_attempt(self, cell: str, number: int, paths: CellPaths) -> None:
        folder = paths.attempt_dir(number)
        outcome = _receipt(paths, number)
        started = _mtime(paths.attempt_file(number)) or _mtime(folder) or self.clock()
        ended = _newest_mtime(folder) or started
        row = AttemptRow(cell_id=cell, number=number, worker="", host="", started_at=started, start_step=0, gpus=[])
        Attempts.fill_attempt(row, outcome, ended)
        row.note = f"{RECOVERED}: {outcome.note}" if outcome.note else RECOVERED
        with self.tx.write() as s:
            s.add(row)


# Attempt numbers are SQLite INTEGERs (64 bits): the next attempt, one above the highest folder, must fit too.
# Above this SQLite would count on in floats (attempt 9.223372036854776e+18) or refuse the number.
HIGHEST_ATTEMPT = 2**63 - 2


def _attempt_numbers(paths: CellPaths) -> list[int]:
    folder = paths.attempt_dir(1).parent
    if not folder.is_dir():
        return []
    numbers = []
    for p in folder.iterdir():
        if not (p.is_dir() and p.name.isascii() and p.name.isdigit()):
            continue
        if len(p.name) > 19 or int(p.name) > HIGHEST_ATTEMPT:  # by length first: no int() of a long name
            raise UsageError(
                f"{p} is numbered beyond any attempt sweepq makes: attempt numbers run from 1 to "
                f"{HIGHEST_ATTEMPT} (SQLite's integers, with room for the next attempt), and no attempt could "
                "follow this one. sweepq did not write this folder: move it out of the root, then run the repair "
                "again (nothing was changed)."
            )
        if int(p.name) > 0:
            numbers.append(int(p.name))
    return sorted(numbers)


def _receipt(paths: CellPaths, number: int) -> Outcome:
    """The attempt's own account, when its receipt reads and names a known reason; else `lost`."""
    try:
        account = account_of(read_json(paths.receipt(number)))
    except (OSError, ValueError, TypeError):
        account = None
    if account is None or account.reason not in {r.value for r in Reason}:
        return Outcome(Reason.LOST, note="no readable receipt")
    numbers = {k: v for k, v in vars(account).items() if k in _NUMERIC and not isinstance(v, int | float)}
    for k in numbers:  # a receipt from another version or hand: keep what has the right type
        setattr(account, k, None)
    if not isinstance(account.note, str | None):
        account.note = None
    return account


_NUMERIC = frozenset(
    {"end_step", "start_step", "exit_code", "exit_signal", "wall_seconds", "gpu_seconds", "peak_memory_bytes"}
)


def _newest_sound_checkpoint(paths: CellPaths, where: str | None) -> tuple[int | None, dict[str, Any]]:
    """(the newest committed step whose every file verifies, its metrics); a newer sweepq's stops the search."""
    checkpoints = storage.for_cell(paths, where)
    for step in checkpoints.steps():
        try:
            m = storage.verify(checkpoints, step)
        except CheckpointTooNew:
            return step, {}  # the resume meets it and says "upgrade sweepq"; never fall back past it
        except CheckpointCorrupt:
            continue
        return step, m.get("metrics") or {}
    return None, {}


def _mtime(path: Path) -> datetime | None:
    try:
        return datetime.fromtimestamp(path.stat().st_mtime, UTC)
    except OSError:
        return None


def _newest_mtime(folder: Path) -> datetime | None:
    """When an attempt last wrote anything: the nearest thing to its end a folder keeps."""
    times = [t for t in (_mtime(p) for p in folder.iterdir()) if t is not None] if folder.is_dir() else []
    return max(times, default=None)
