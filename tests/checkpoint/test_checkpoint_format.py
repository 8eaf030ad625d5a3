"""The checkpoint files themselves: valid safetensors, odd states round trip, damage is detected."""

from __future__ import annotations

import hashlib
import json
import math
import random
import struct
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file
from safetensors.torch import save as st_save

from sweepq.checkpoint import commit as checkpoint
from sweepq.checkpoint import serialize, snapshot, storage
from sweepq.checkpoint.manifest import STATE, TENSORS, CheckpointCorrupt
from sweepq.checkpoint.storage import LocalFolder
from sweepq.layout import CellPaths


def commit(folder: Path, state: dict[str, Any], step: int = 1, image: bool = True) -> checkpoint.Committed:
    """As Run does: RNG and state captured in the training thread, the RNG encoded on the writer's side.

    image=False: the tensor file built from the tensors alone (buffered writes), not from the snapshot's image.
    """
    rng = serialize.capture_rng()
    skeleton, tensors = serialize.flatten(state)
    snap = snapshot.Snapshotter().take(tensors)
    skeleton, buffers = serialize.with_rng(skeleton, snap.buffers, rng)
    meta = {"metrics": {"loss": 0.5}, "epoch": 1.0}
    return checkpoint.write_checkpoint(
        LocalFolder(folder), step, skeleton, buffers, meta, snap.image if image else None
    )


def test_rng_encoded_later_is_the_same_as_flattened_with_the_state() -> None:
    state = odd_state()
    rng = serialize.capture_rng()
    together_skeleton, together = serialize.flatten({**state, serialize.RNG_KEY: rng})
    skeleton, tensors = serialize.with_rng(*serialize.flatten(state), rng)
    assert json.dumps(skeleton) == json.dumps(together_skeleton)
    assert list(tensors) == list(together)
    assert all(torch.equal(tensors[k], together[k]) for k in together)
    assert {"/__rng__/torch", "/__rng__/numpy/1"} <= set(tensors)


def odd_state() -> dict[str, Any]:
    return {
        "f32": torch.randn(3, 5),
        "bf16": torch.randn(7).to(torch.bfloat16),  # odd sizes: alignment of what follows
        "f16": torch.randn(3).to(torch.float16),
        "f64": torch.tensor(2.5, dtype=torch.float64),  # 0-d
        "i8": torch.arange(3, dtype=torch.int8),
        "bool": torch.tensor([True, False, True]),
        "empty": torch.zeros(0, 4),
        "transposed": torch.arange(12.0).reshape(3, 4).t(),  # not contiguous
        "np_i16": np.arange(5, dtype=np.int16),
        "np_u32": np.arange(6, dtype=np.uint32).reshape(2, 3),
        "keys": {3: "int key", 2.5: "float key", True: "bool key", None: "none key"},
        "tuple": (1, 2.5, "x", None, (torch.ones(2),)),
        "bytes": b"\x00\xffraw",
        "dtype": torch.bfloat16,
        "nan": float("nan"),
        "big": torch.randn(400_000),  # above lanes.SMALL: the pipelined paths
    }


def same(a: Any, b: Any) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a, b)
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b)
        for k in a:
            same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            same(x, y)
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b)
    else:
        assert a == b and type(a) is type(b)


@pytest.mark.parametrize("image", [True, False])
def test_files_are_safetensors_the_library_reads(tmp_path: Path, image: bool) -> None:
    state = odd_state()
    c = commit(tmp_path, state, image=image)
    _, tensors = serialize.flatten(state)
    path = c.path / TENSORS
    by_library = load_file(str(path))
    assert set(by_library) == set(tensors) | {"/__rng__/torch", "/__rng__/numpy/1"}
    for name, t in tensors.items():
        assert torch.equal(by_library[name], t.contiguous()), name
    with safe_open(str(path), framework="pt") as f:
        assert set(f.keys()) == set(by_library)
        assert torch.equal(f.get_tensor("/big"), state["big"])
    # the manifest's sizes and sha256 are those of the files
    m = json.loads((c.path / "manifest.json").read_text())
    for name in (TENSORS, STATE):
        data = (c.path / name).read_bytes()
        assert m["files"][name] == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


@pytest.mark.parametrize("image", [True, False])
def test_odd_states_round_trip(tmp_path: Path, image: bool) -> None:
    state = odd_state()
    c = commit(tmp_path, state, image=image)
    loaded = checkpoint.load(LocalFolder(tmp_path), c.step)
    assert loaded.step == 1 and loaded.manifest["metrics"] == {"loss": 0.5}
    expected = {**state, "transposed": state["transposed"].contiguous()}
    same(expected, loaded.state)
    # the loaded tensors are independent and writable
    loaded.state["f32"].add_(1)
    assert torch.equal(loaded.state["tuple"][4][0], torch.ones(2))


def test_optimizer_state_round_trips_and_training_continues_identically(tmp_path: Path) -> None:
    def make() -> tuple[torch.nn.Module, torch.optim.Optimizer, Any]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        return model, opt, sched

    def train(model: Any, opt: Any, sched: Any, n: int) -> None:
        for _ in range(n):
            x = torch.randn(16, 4)
            loss = model(x).pow(2).mean() + random.random() * 0 + float(np.random.rand()) * 0
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()

    model, opt, sched = make()
    train(model, opt, sched, 3)
    c = commit(tmp_path, {"model": model, "optimizer": opt, "scheduler": sched, "step": 3})
    train(model, opt, sched, 3)
    reference = [p.detach().clone() for p in model.parameters()]

    model2, opt2, sched2 = make()
    loaded = checkpoint.load(LocalFolder(tmp_path), c.step)
    state = {"model": model2, "optimizer": opt2, "scheduler": sched2, "step": 0}
    serialize.load_into(state, loaded.state)
    assert loaded.rng is not None
    serialize.restore_rng(loaded.rng)  # torch.set_rng_state on a loaded tensor
    assert state["step"] == 3
    train(model2, opt2, sched2, 3)
    for a, b in zip(reference, model2.parameters(), strict=True):
        assert torch.equal(a, b)


def damaged(tmp_path: Path, how: str, name: str) -> int:
    c = commit(tmp_path, {"w": torch.randn(300_000), "v": torch.randn(3)})
    path = c.path / name
    data = bytearray(path.read_bytes())
    if how == "flip":
        data[len(data) // 2] ^= 0x01
    else:
        data = data[: len(data) - 3]
    path.write_bytes(bytes(data))
    return c.step


@pytest.mark.parametrize("how", ["flip", "truncate"])
@pytest.mark.parametrize("name", [TENSORS, STATE])
def test_verification_detects_damage(tmp_path: Path, how: str, name: str) -> None:
    step = damaged(tmp_path, how, name)
    with pytest.raises(CheckpointCorrupt) as e:
        checkpoint.load(LocalFolder(tmp_path), step)
    assert name in e.value.why
    with pytest.raises(CheckpointCorrupt):
        storage.verify(LocalFolder(tmp_path), step)


def test_reader_falls_back_to_the_previous_checkpoint(tmp_path: Path) -> None:
    cell = CellPaths(tmp_path, "1.1")
    commit(cell.checkpoints, {"w": torch.full((300_000,), 1.0)}, step=10)
    newest = commit(cell.checkpoints, {"w": torch.full((300_000,), 2.0)}, step=20)
    data = bytearray((newest.path / TENSORS).read_bytes())
    data[-1] ^= 0x80
    (newest.path / TENSORS).write_bytes(bytes(data))
    seen: list[tuple[int, str]] = []
    loaded = checkpoint.load_newest(
        storage.for_cell(cell, None), on_corrupt=lambda step, why, moved: seen.append((step, why))
    )
    assert loaded is not None and loaded.step == 10 and float(loaded.state["w"][0]) == 1.0
    assert [s for s, _ in seen] == [20] and "sha256" in seen[0][1]
    assert cell.committed_steps() == [10]


def test_parse_reads_library_files_and_rejects_malformed_headers() -> None:
    tensors = {
        "a": torch.randn(5).to(torch.bfloat16),
        "b": torch.randn(3, 3),
        "c": torch.arange(4),
        "e": torch.zeros(0),
    }
    data = st_save(tensors)
    for source in (bytearray(data), np.frombuffer(bytearray(data), dtype=np.uint8)):
        parsed = serialize.load_safetensors(source)
        assert set(parsed) == set(tensors)
        for k, t in tensors.items():
            assert torch.equal(parsed[k], t)
    # an unaligned float32 (a file another tool wrote) is copied, not viewed
    header = {
        "h": {"dtype": "F16", "shape": [1], "data_offsets": [0, 2]},
        "f": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]},
    }
    parsed = serialize.load_safetensors(bytearray(_file(header, b"\x00\x3c" + struct.pack("<f", 1.5))))
    assert float(parsed["f"]) == 1.5 and float(parsed["h"]) == 1.0

    def bad(header: Any, body: bytes = b"\x00" * 8) -> None:
        with pytest.raises(ValueError):
            serialize.parse_safetensors(bytearray(_file(header, body)))

    bad({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})  # does not cover the data
    bad({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})  # size does not match the shape
    bad({"x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})  # a gap at the start
    bad(
        {
            "x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
            "y": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},
        }
    )  # overlap
    bad({"x": {"dtype": "Q7", "shape": [2], "data_offsets": [0, 8]}})  # unknown dtype
    bad({"x": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})
    bad([1, 2])
    with pytest.raises(ValueError):
        serialize.parse_safetensors(bytearray(struct.pack("<Q", 1000) + b"{}"))  # header past the end


def _file(header: Any, body: bytes) -> bytes:
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + body


def test_snapshot_buffers_are_reused_and_detached() -> None:
    snap = snapshot.Snapshotter()
    w = torch.nn.Parameter(torch.randn(4, 4))
    first = snap.take({"w": w}).buffers["w"]
    assert not first.requires_grad and first.grad_fn is None and torch.equal(first, w.detach())
    with torch.no_grad():
        w.add_(1)
    again = snap.take({"w": w}).buffers["w"]
    assert again.data_ptr() == first.data_ptr() and torch.equal(again, w.detach())
    bigger = snap.take({"w": torch.ones(5)}).buffers["w"]
    assert bigger.shape == (5,)
    assert set(snap.take({"v": torch.zeros(2)}).buffers) == {"v"} and set(snap.buffers) == {"v"}


def test_async_writer_reports_errors_and_survives_its_thread_exiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoint._Thread, "IDLE_EXIT", 0.05)
    w = checkpoint.AsyncWriter()
    done: list[int] = []
    w.submit(lambda: done.append(1))
    w.flush()
    assert done == [1] and not w.busy

    def boom() -> None:
        raise OSError("disk full")

    w.submit(boom)
    with pytest.raises(OSError, match="disk full"):
        w.flush()
    w.flush()  # reported once
    time.sleep(0.2)  # the idle thread exits; the next submit starts another

    def slow() -> None:
        time.sleep(0.05)
        done.append(2)

    w.submit(slow)
    assert w.busy
    w.flush()
    assert done == [1, 2] and w.last_seconds >= 0.04


def test_a_write_in_flight_at_exit_completes(tmp_path: Path) -> None:
    """An exit hook waits for the write in flight (program.py does): hashing must still work then."""
    import subprocess
    import sys

    script = f"""
import atexit, time, torch
from pathlib import Path
from sweepq.checkpoint import commit as checkpoint
from sweepq.checkpoint import serialize
from sweepq.checkpoint import snapshot
from sweepq.checkpoint.storage import LocalFolder
w = checkpoint.AsyncWriter()
skeleton, tensors = serialize.flatten({{"w": torch.randn(1_000_000)}})
buffers = snapshot.Snapshotter().take(tensors).buffers
def job():
    time.sleep(0.3)  # still writing when the interpreter starts shutting down
    checkpoint.write_checkpoint(LocalFolder(Path({str(tmp_path)!r})), 5, skeleton, buffers, {{}})
atexit.register(w.flush)
w.submit(job)
"""
    r = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    storage.verify(LocalFolder(tmp_path), 5)


def test_superseded_checkpoints_are_deleted_in_the_background(tmp_path: Path) -> None:
    cell = CellPaths(tmp_path, "1.1")
    commit(cell.checkpoints, {"w": torch.randn(300_000)}, step=1)
    commit(cell.checkpoints, {"w": torch.randn(3)}, step=2)
    storage.for_cell(cell, None).delete(1)
    assert cell.committed_steps() == [2]  # out of the committed namespace at once
    w = checkpoint.AsyncWriter()
    w.flush()  # waits for the deletes too
    assert sorted(p.name for p in cell.checkpoints.iterdir()) == ["step-2"]
