"""What keeps a launch fast on a large root: bulk inserts, compares by hash, a stat per done cell, counts not lists."""

from __future__ import annotations

import io
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rich.console import Console
from sqlalchemy.orm import Session

from sweepq.cli import launch_summary, render
from sweepq.errors import DriftError
from sweepq.layout import CellPaths
from sweepq.queue import reaper, reconcile
from sweepq.queue.records import Outcome
from sweepq.queue.schema import CellRow
from sweepq.queue.states import CellState, Reason
from sweepq.queue.store import Store
from sweepq.spec.sweep import Sweep
from unit.support import WORKER, FakeClock, Launch, sweep_from

CELLS = 30
LARGE = f"""\
name: large
train: trainers:train
params: {{epochs: 3, opt: {{name: sgd, extra: [1, {{b: 2, a: 1}}]}}}}
grid: {{seed: {list(range(1, CELLS + 1))}}}
"""


@pytest.fixture
def large(tmp_path: Path) -> Sweep:
    return sweep_from(LARGE, tmp_path)


def done(store: Store, *cells: str) -> None:
    for cell in cells:
        claim = store.claim(cell, WORKER)
        assert claim is not None
        assert store.finish(cell, claim.number, Outcome(Reason.COMPLETED)) is CellState.DONE


def test_the_bulk_insert_writes_the_rows_the_orm_writes(tmp_path: Path, large: Sweep, launch: Launch) -> None:
    store = launch(tmp_path / "root", large)
    cell = large.cells[4]
    with Session(store.engine) as s, s.begin():  # the same cell, the ORM's way, under another id
        now = store.clock()
        row = dict(cfg=cell.cfg, cfg_hash=cell.cfg_hash, state=CellState.QUEUED, attempts=0, budget_base=0)
        row |= dict(group_name=cell.group_name, cancel_requested=False, removed=False, created_at=now, updated_at=now)
        s.add(CellRow(id="9.9", group_number=9, index=9, **row))
    with sqlite3.connect(store.paths.db) as db:
        bulk, orm = (db.execute("select * from cells where id = ?", (cid,)).fetchone() for cid in (cell.id, "9.9"))
    assert bulk[3:] == orm[3:] and bulk[:3] == (cell.id, 1, 5)
    assert [c.id for c in store.cells()] == [c.id for c in large.cells] + ["9.9"]


def test_a_relaunch_compares_by_hash_and_reads_only_the_changed_cfgs(
    tmp_path: Path, large: Sweep, launch: Launch
) -> None:
    store = launch(tmp_path / "root", large)
    existing = store.read_reconcile(lambda existing: existing)  # type: ignore[arg-type,return-value]
    assert isinstance(existing, reconcile.Existing) and len(existing) == CELLS
    assert {cfg for _, cfg, _ in existing.values()} == {None}  # no cfg read
    changed = sweep_from(LARGE.replace("sgd", "adam"), tmp_path)
    with pytest.raises(DriftError) as refused:
        launch(tmp_path / "root", changed)
    lines = str(refused.value).splitlines()
    assert lines[0].startswith(f"sweep.yaml now gives {CELLS} existing cell(s) a different cfg;")
    assert lines[1] == "  1.1: opt.name: 'sgd' -> 'adam'"  # the old value: read on demand
    assert len(lines) == 1 + reconcile.LISTED + 2
    assert lines[-2] == f"  … and {CELLS - reconcile.LISTED} more cells whose cfg changed"
    accepted = launch(tmp_path / "root", changed, accept_changed=True)
    assert accepted.cell("1.30").cfg["opt"]["name"] == "adam"
    assert len([e for e in accepted.events() if e.kind == "cfg_changed"]) == CELLS


def test_without_its_cfgs_a_root_cannot_be_diffed() -> None:
    with pytest.raises(ValueError, match="without their cfgs"):
        reconcile._old_cfgs({"1.1": ("h", None, False)}, ["1.1"])


def test_a_done_marker_is_read_again_only_when_it_changed_after_the_queue_heard(
    tmp_path: Path, large: Sweep, launch: Launch, clock: FakeClock
) -> None:
    store = launch(tmp_path / "root", large)
    for cell in ("1.1", "1.2", "1.3"):
        CellPaths(store.root, cell).dir.mkdir(parents=True)
        CellPaths(store.root, cell).done.write_text("{}")  # no marker: a relaunch must notice, if it looks
    clock.now = datetime.now(UTC) + timedelta(hours=1)
    done(store, "1.1")  # the queue heard after the file was written: the file is trusted without a read
    clock.now = datetime.now(UTC) - timedelta(hours=1)
    done(store, "1.2")  # the file changed after the queue heard: read, and found to be no marker
    done(store, "1.4")  # no file at all: seen by its stat
    changes = dict(reaper.reconcile_markers(store))
    assert changes == {
        "1.2": "requeued: DONE.json is not a done marker: cell is missing",
        "1.4": "requeued: no DONE.json",
    }
    assert [store.cell(c).state for c in ("1.1", "1.2", "1.3", "1.4")] == [
        CellState.DONE,
        CellState.QUEUED,
        CellState.QUEUED,  # queued, with a file that is no marker: left queued
        CellState.QUEUED,
    ]


def test_the_launch_summary_counts_and_names_the_first_cells_of_each_kind(
    tmp_path: Path, large: Sweep, launch: Launch
) -> None:
    store = launch(tmp_path / "root", large)
    done(store, *(f"1.{i}" for i in range(1, 24)))
    claim = store.claim("1.25", WORKER)
    assert claim is not None
    store.finish("1.25", claim.number, Outcome(Reason.PREEMPTED))
    out = io.StringIO()
    plan = reconcile.ReconcilePlan(unchanged=CELLS)
    launch_summary.describe_start(store, large, store.root, plan, Console(file=out, width=400, highlight=False))
    first20 = ", ".join(f"1.{i}" for i in range(1, 21))
    assert out.getvalue().splitlines() == [
        f"sweep large at {store.root}: {CELLS} cells",
        f"  skipping (done): {first20}, … and 3 more (sweepq status lists every cell)",
        "  resuming first: 1.25 (from scratch: no checkpoint committed)",
        "  queued: 1.24, 1.26, 1.27, 1.28, 1.29, 1.30",
    ]
    census = store.census(2)
    assert (census.counts[CellState.DONE], census.first[CellState.DONE], census.removed) == (23, ["1.1", "1.2"], 0)
    assert launch_summary.ending(census).plain == f"{CELLS} cells: 6 queued, 1 interrupted, 23 done"
    assert launch_summary.ending(census).plain == render.summary(store.cells()).plain  # its words, from counts
