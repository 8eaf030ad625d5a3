"""The overlapped snapshot: optimizer-owned tensors are copied during the next forward/backward.

A checkpoint must hold the state at the step it names, bit for bit, even though
part of its copy runs after `run.checkpoint` returned. These tests slow the
late copy down (as a busy machine would) so that the next forward and backward
pass really run before it, and check every committed checkpoint against a copy
of the state taken at the call.
"""

from __future__ import annotations

import copy
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from conftest import make_run
from torch import nn

from sweepq.checkpoint import commit as checkpoint
from sweepq.checkpoint import serialize, snapshot, storage
from sweepq.layout import CellPaths

LATE_COPY_DELAY = 0.2  # how long a late copy goes on after the next step came to wait for it
STEP_BOUND = 60.0  # a step that never comes: only a hung test waits this long


class Trainer:
    """Adam over a model with BatchNorm (whose buffers change in forward, not in step)."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 4))
        self.opt = torch.optim.Adam(self.model.parameters(), lr=0.01)
        self.state: dict[str, Any] = {"model": self.model, "optimizer": self.opt, "step": 0}

    def linear(self, index: int) -> nn.Linear:
        layer = self.model[index]
        assert isinstance(layer, nn.Linear)
        return layer

    def step(self) -> None:
        x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
        loss = F.cross_entropy(self.model(x), y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        self.state["step"] += 1

    def tensors(self) -> dict[str, torch.Tensor]:
        return {k: v.clone() for k, v in serialize.flatten(self.state)[1].items()}


@pytest.fixture
def slow_late_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    finish = snapshot.Snapshot.finish

    def slow(self: snapshot.Snapshot) -> None:
        if self.late:
            time.sleep(LATE_COPY_DELAY)
        finish(self)

    monkeypatch.setattr(snapshot.Snapshot, "finish", slow)


@pytest.fixture
def copy_late_until_a_step_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """A late copy that ends only after the next optimizer step has come to wait for it.

    Not a fixed delay alone: on a loaded machine a step can take longer than any
    delay, and the copy would end before anyone waited. The copy waits (up to a
    bound that only a hung test reaches) until a step is at the guard, then
    LATE_COPY_DELAY longer, so that step finds it unfinished. Every late copy
    must have a step after it.
    """
    finish, wait = snapshot.Snapshot.finish, snapshot.StepGuard.wait
    stepping = threading.Event()

    def slow(self: snapshot.Snapshot) -> None:
        if self.late:
            stepping.wait(STEP_BOUND)
            stepping.clear()
            time.sleep(LATE_COPY_DELAY)
        finish(self)

    def at_guard(self: snapshot.StepGuard) -> None:
        if self._pending is not None:
            stepping.set()
        wait(self)

    monkeypatch.setattr(snapshot.Snapshot, "finish", slow)
    monkeypatch.setattr(snapshot.StepGuard, "wait", at_guard)


def committed(root: Path, step: int) -> dict[str, torch.Tensor]:
    loaded = checkpoint.load(storage.for_cell(CellPaths(root, "1.1"), None), step)
    return serialize.flatten(loaded.state)[1]


def assert_same(saved: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], step: int) -> None:
    assert set(saved) == set(expected)
    different = [k for k in expected if not torch.equal(saved[k], expected[k])]
    assert not different, f"checkpoint {step} differs from the state at its call in {different}"


def test_every_checkpoint_holds_the_state_at_its_call(tmp_path: Path, copy_late_until_a_step_waits: None) -> None:
    t = Trainer()
    run = make_run(tmp_path)
    expected: dict[int, dict[str, torch.Tensor]] = {}
    for _ in range(6):
        t.step()
        assert run.checkpoint(t.state, t.state["step"])
        expected[t.state["step"]] = t.tensors()
    t.step()  # the last checkpoint's late copy has a step after it too
    run.close(completed=True)
    assert run._guard.waits >= 3  # the next step really waited for the slowed copy
    for step, tensors in expected.items():
        assert_same(committed(tmp_path, step), tensors, step)


def test_the_next_optimizer_step_waits_for_the_late_copy() -> None:
    t = Trainer()
    t.step()
    guard, snapper = snapshot.StepGuard(), snapshot.Snapshotter()
    before = t.tensors()
    snap = snapper.take(serialize.flatten(t.state)[1], guard.owned(t.state))
    guard.arm(snap)
    late = {name for name, *_ in snap.late}
    assert late and not any("running" in n or "num_batches" in n for n in late)  # buffers copied at once
    stepper = threading.Thread(target=t.step)
    stepper.start()
    stepper.join(0.3)
    assert stepper.is_alive(), "optimizer.step() did not wait for the late copy"
    snap.finish()
    stepper.join(10)
    assert not stepper.is_alive()
    assert_same(snap.buffers, before, 1)
    assert not torch.equal(t.tensors()["/model/0.weight"], before["/model/0.weight"])


def test_a_write_outside_the_optimizer_refuses_the_checkpoint(
    tmp_path: Path, slow_late_copy: None, capsys: pytest.CaptureFixture[str]
) -> None:
    t = Trainer()
    run = make_run(tmp_path)
    t.step()
    assert run.checkpoint(t.state, 1)
    with torch.no_grad():
        t.linear(0).weight.mul_(0.5)  # between the call and the end of its late copy
    run._writer.flush()
    assert CellPaths(tmp_path, "1.1").committed_steps() == []
    assert "checkpoint at step 1 not committed" in capsys.readouterr().err
    # From then on everything is copied up front, so the same write cannot tear a checkpoint.
    t.step()
    assert run.checkpoint(t.state, 2)
    expected = t.tensors()
    with torch.no_grad():
        t.linear(0).weight.mul_(0.5)
    run._writer.flush()
    assert_same(committed(tmp_path, 2), expected, 2)
    run.close(completed=True)


def test_a_refused_final_checkpoint_is_taken_again_at_close(tmp_path: Path, slow_late_copy: None) -> None:
    t = Trainer()
    run = make_run(tmp_path)
    t.step()
    run.checkpoint(t.state, 1)
    with torch.no_grad():
        t.linear(3).bias.add_(1.0)
    expected = t.tensors()
    run.close(completed=True)  # the last step's checkpoint was refused: close commits it, complete
    assert CellPaths(tmp_path, "1.1").committed_steps() == [1]
    assert_same(committed(tmp_path, 1), expected, 1)


@pytest.mark.parametrize("force, overlap", [(True, True), (False, False)])
def test_forced_checkpoints_and_overlap_false_copy_everything_up_front(
    tmp_path: Path, slow_late_copy: None, force: bool, overlap: bool
) -> None:
    t = Trainer()
    run = make_run(tmp_path, overlap=overlap)
    t.step()
    run.checkpoint(t.state, 1, force=force)
    expected = t.tensors()
    with torch.no_grad():
        t.linear(0).weight.mul_(0.5)  # would be refused if anything were copied late
    run._writer.flush()
    assert run._guard.waits == 0
    assert_same(committed(tmp_path, 1), expected, 1)
    run.close(completed=False)


def test_a_restored_optimizer_is_guarded_with_its_new_tensors(
    tmp_path: Path, copy_late_until_a_step_waits: None
) -> None:
    """load_state_dict replaces the optimizer's tensors: the guard follows them."""
    t = Trainer()
    run = make_run(tmp_path)
    for _ in range(2):
        t.step()
        run.checkpoint(t.state, t.state["step"])
    t.step()  # every late copy has a step after it (the fixture's rule); this one is not kept
    run.close(completed=False)
    t2 = Trainer()
    run2 = make_run(tmp_path)
    assert run2.restore(t2.state)
    t2.step()
    run2.checkpoint(t2.state, 3)
    expected = t2.tensors()
    t2.step()
    run2.close(completed=False)
    assert run2._guard.waits == 1
    assert_same(committed(tmp_path, 3), expected, 3)
    assert copy.deepcopy(t2.state["step"]) == 4
