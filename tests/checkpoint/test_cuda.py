"""The GPU path of checkpoints: pinned snapshots, map_location, CUDA RNG streams, exact resume.

Skipped where torch sees no GPU (CI has none); run on a machine that has one with
`pytest tests/test_cuda.py`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from conftest import make_run
from torch import nn

from sweepq.checkpoint import serialize

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def trainer(seed: int = 0) -> dict[str, Any]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(32, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 4)).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    return {"model": model, "optimizer": opt, "step": 0}


def train_step(state: dict[str, Any]) -> None:
    x = torch.randn(16, 32, device="cuda")  # drawn from the CUDA generator: its state must resume too
    y = torch.randint(0, 4, (16,), device="cuda")
    loss = F.cross_entropy(state["model"](x), y)
    state["optimizer"].zero_grad(set_to_none=True)
    loss.backward()
    state["optimizer"].step()
    state["step"] += 1


def tensors(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu().clone() for k, v in serialize.flatten(state)[1].items()}


@pytest.fixture(autouse=True)
def deterministic(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(False)


def test_snapshots_of_gpu_tensors_are_pinned_and_taken_before_the_call_returns(tmp_path: Path) -> None:
    state = trainer()
    run = make_run(tmp_path)
    train_step(state)
    assert run.checkpoint(state, 1)
    expected = tensors(state)
    train_step(state)  # changes the GPU tensors at once: none of them may be copied late
    run.close(completed=False)
    gpu_buffers = [b for n, b in run._snap.buffers.items() if "/model/" in n or "/optimizer/" in n]
    assert gpu_buffers and all(b.is_pinned() for b in gpu_buffers if b.numel() > 1)
    restored = trainer(seed=1)
    assert make_run(tmp_path).restore(restored, map_location="cuda")
    got = tensors(restored)
    assert all(torch.equal(got[k], expected[k]) for k in expected)
    assert all(t.is_cuda for t in restored["model"].state_dict().values())


def test_an_interrupted_gpu_run_resumes_bit_exactly(tmp_path: Path) -> None:
    torch.cuda.manual_seed_all(7)
    whole = trainer()
    for _ in range(12):
        train_step(whole)
    reference = tensors(whole)

    torch.cuda.manual_seed_all(7)
    first = trainer()
    run = make_run(tmp_path, every_steps=5)
    for _ in range(7):  # checkpoints at step 5; steps 6-7 are lost, as in a crash
        train_step(first)
        run.checkpoint(first, first["step"])
    run.close(completed=False)
    torch.cuda.manual_seed_all(12345)  # a new process: other CUDA RNG state until restore puts it back
    second = trainer(seed=99)
    run2 = make_run(tmp_path, every_steps=5)
    assert run2.restore(second) and second["step"] == 5
    while second["step"] < 12:
        train_step(second)
        run2.checkpoint(second, second["step"])
    run2.close(completed=True)
    got = tensors(second)
    different = [k for k in reference if not torch.equal(got[k], reference[k])]
    assert not different, different
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
