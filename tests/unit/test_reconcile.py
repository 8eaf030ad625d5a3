"""Reconciling a sweep file with its root (sweepq/queue/reconcile.py), driven from real YAML text."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest

from sweepq.errors import DriftError
from sweepq.queue import reconcile
from sweepq.queue.states import CellState
from sweepq.queue.store import Store
from sweepq.spec.sweep import Sweep
from unit.support import FakeClock, Launch, sweep_from

BASE = """\
name: rec
train: trainers:train
params: {epochs: 3, optim: {name: sgd, lr: 0.1}}
groups:
  - name: a
    grid: {width: [8, 16]}
  - name: b
    grid: {width: [32]}
"""


def existing_of(sweep: Sweep) -> dict[str, tuple[str, dict[str, Any], bool]]:
    """The root as launch would read it after applying `sweep` (nothing removed)."""
    return {c.id: (c.cfg_hash, c.cfg, False) for c in sweep.cells}


def test_a_new_root_gets_every_cell_in_order(tmp_path: Path) -> None:
    sweep = sweep_from(BASE, tmp_path)
    p = reconcile.plan(sweep, {}, accept_changed=False)
    assert [c.id for c in p.new] == ["1.1", "1.2", "2.1"]
    assert (p.changed, p.removed, p.returned, p.unchanged) == ([], [], [], 0)


def test_the_same_file_again_changes_nothing(tmp_path: Path) -> None:
    sweep = sweep_from(BASE, tmp_path)
    p = reconcile.plan(sweep, existing_of(sweep), accept_changed=False)
    assert (p.new, p.changed, p.removed, p.returned, p.unchanged) == ([], [], [], [], 3)


def test_new_cells_are_appended(tmp_path: Path) -> None:
    old = sweep_from(BASE, tmp_path)
    grown = BASE.replace("[8, 16]", "[8, 16, 24]") + "  - name: c\n    grid: {width: [64]}\n"
    p = reconcile.plan(sweep_from(grown, tmp_path), existing_of(old), accept_changed=False)
    assert [(c.id, c.cfg["width"]) for c in p.new] == [("1.3", 24), ("3.1", 64)]
    assert p.unchanged == 3


def test_a_changed_cell_is_refused_with_its_diff(tmp_path: Path) -> None:
    old = sweep_from(BASE, tmp_path)
    changed = sweep_from(BASE.replace("[8, 16]", "[8, 12]"), tmp_path)
    with pytest.raises(DriftError) as exc:
        reconcile.plan(changed, existing_of(old), accept_changed=False)
    message = str(exc.value)
    assert message.startswith("sweep.yaml now gives 1 existing cell(s) a different cfg")
    assert "  1.2: width: 16 -> 12" in message
    assert "--accept-changed" in message


def test_a_changed_cell_is_planned_when_accepted(tmp_path: Path) -> None:
    old = sweep_from(BASE, tmp_path)
    new = sweep_from(BASE.replace("lr: 0.1", "lr: 0.05"), tmp_path)
    p = reconcile.plan(new, existing_of(old), accept_changed=True)
    assert [(c.id, diff) for c, diff in p.changed] == [
        (cid, {"optim.lr": [0.1, 0.05]}) for cid in ("1.1", "1.2", "2.1")
    ]
    assert (p.new, p.unchanged) == ([], 0)


def test_removed_cells_are_reported_and_returned_ones_noticed(tmp_path: Path) -> None:
    full = sweep_from(BASE, tmp_path)
    shrunk = sweep_from(BASE.split("  - name: b")[0], tmp_path)
    p = reconcile.plan(shrunk, existing_of(full), accept_changed=False)
    assert (p.removed, p.unchanged) == (["2.1"], 2)
    existing = existing_of(full)
    existing["2.1"] = (existing["2.1"][0], existing["2.1"][1], True)  # removed by an earlier launch
    again = reconcile.plan(shrunk, existing, accept_changed=False)
    assert again.removed == []  # reported once, when it goes
    back = reconcile.plan(full, existing, accept_changed=False)
    assert (back.returned, back.new, back.unchanged) == (["2.1"], [], 3)


def test_cfg_diff_names_nested_paths() -> None:
    old = {"optim": {"lr": 0.1, "name": "sgd"}, "epochs": 3}
    new = {"optim": {"lr": 0.1, "name": "adam"}, "width": 8}
    assert reconcile.cfg_diff(old, new) == {
        "epochs": [3, None],
        "optim.name": ["sgd", "adam"],
        "width": [None, 8],
    }
    assert reconcile.cfg_diff(old, old) == {}
    assert reconcile.cfg_diff({"x": None}, {}) == {"x": [None, None]}  # present vs missing still differs


# -- applied to a real root, as launch does ---------------------------------------------


def test_apply_appends_and_keeps_existing_cells(tmp_path: Path, launch: Launch) -> None:
    root = tmp_path / "root"
    launch(root, sweep_from(BASE, tmp_path))
    store = launch(root, sweep_from(BASE + "  - name: c\n    grid: {width: [64]}\n", tmp_path))
    assert [(c.id, c.state) for c in store.cells()] == [(i, CellState.QUEUED) for i in ("1.1", "1.2", "2.1", "3.1")]


def test_apply_refuses_drift_and_writes_nothing(tmp_path: Path, launch: Launch) -> None:
    root = tmp_path / "root"
    before = launch(root, sweep_from(BASE, tmp_path))
    cfgs = before.existing_cfgs()
    bigger = BASE.replace("epochs: 3", "epochs: 4") + "  - name: c\n    grid: {width: [64]}\n"
    with pytest.raises(DriftError):
        launch(root, sweep_from(bigger, tmp_path))
    assert before.existing_cfgs() == cfgs  # not even the new cell 3.1
    assert before.events() == []


def test_apply_accepted_drift_gives_new_cfgs_with_history(tmp_path: Path, launch: Launch) -> None:
    root = tmp_path / "root"
    launch(root, sweep_from(BASE, tmp_path))
    changed = sweep_from(BASE.replace("[32]", "[48]"), tmp_path)
    store = launch(root, changed, accept_changed=True)
    cell = store.cell("2.1")
    assert (cell.cfg["width"], cell.cfg_hash) == (48, changed.cells[2].cfg_hash)
    assert [(e.cell, e.kind, e.detail) for e in store.events()] == [
        ("2.1", "cfg_changed", {"changes": {"width": [32, 48]}, "accepted": True})
    ]


def test_apply_marks_removed_cells_and_stops_claiming_them(tmp_path: Path, launch: Launch) -> None:
    root = tmp_path / "root"
    launch(root, sweep_from(BASE, tmp_path))
    store = launch(root, sweep_from(BASE.split("  - name: b")[0], tmp_path))
    assert [c.id for c in store.cells(include_removed=False)] == ["1.1", "1.2"]
    assert store.cell("2.1").removed
    assert store.claimable() == ["1.1", "1.2"]
    assert store.unsettled() == 2
    assert [(e.cell, e.kind) for e in store.events()] == [("2.1", "removed_from_spec")]


def test_two_launches_plan_inside_the_write(tmp_path: Path, clock: FakeClock) -> None:
    """The second launch read an empty root before the first wrote: its plan is made again, and adds nothing."""
    sweep = sweep_from(BASE, tmp_path)
    root = tmp_path / "root"
    early = reconcile.plan(sweep, {}, accept_changed=False)  # both launches' prepare(): all new
    first, second = Store.open(root, create=True, clock=clock), Store.open(root, create=True, clock=clock)

    def planner(existing: reconcile.Existing) -> reconcile.ReconcilePlan:
        return reconcile.plan(sweep, existing, accept_changed=False)

    a = first.apply_reconcile(sweep.settings, str(sweep.path), planner)
    b = second.apply_reconcile(sweep.settings, str(sweep.path), planner)
    assert [len(p.new) for p in (early, a, b)] == [3, 3, 0]
    assert b.unchanged == 3
    assert [c.id for c in second.cells()] == ["1.1", "1.2", "2.1"]
    first.close()
    second.close()


def test_the_file_last_reconciled_is_neither_expanded_nor_compared_again(tmp_path: Path, clock: FakeClock) -> None:
    """A relaunch of 100,000 cells: the digest of the last applied file stands for its plan."""
    store = Store.open(tmp_path / "root", create=True, clock=clock)

    def apply(text: str, folder: Path = tmp_path) -> tuple[Sweep, reconcile.ReconcilePlan]:
        sweep = sweep_from(text, folder)
        planner = partial(reconcile.plan, sweep, accept_changed=False)
        return sweep, store.apply_reconcile(sweep.settings, str(sweep.path), planner, reconcile.plan_digest(sweep))

    _, plan = apply(BASE)
    assert [c.id for c in plan.new] == ["1.1", "1.2", "2.1"] and not plan.same_file
    again, plan = apply(BASE)
    assert plan.same_file and not again.expanded  # nothing compared, nothing expanded
    planner = partial(reconcile.plan, again, accept_changed=False)
    assert store.read_reconcile(planner, reconcile.plan_digest(again)).same_file and not again.expanded
    grown = BASE + "  - name: c\n    grid: {width: [64]}\n"
    _, plan = apply(grown)
    assert [c.id for c in plan.new] == ["3.1"]
    _, plan = apply(BASE)  # back to the first file: compared again, against what the grown one left
    assert (plan.same_file, plan.new, plan.removed) == (False, [], ["3.1"])
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    _, plan = apply(BASE, elsewhere)  # the same text elsewhere resolves root:, data: and program: elsewhere
    assert not plan.same_file and plan.unchanged == 3
    assert [c.id for c in store.cells(include_removed=False)] == ["1.1", "1.2", "2.1"]
    store.close()
