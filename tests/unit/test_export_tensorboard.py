"""`sweepq export tensorboard` in process: read back with TensorBoard's own reader, on a read-only root.

The root is a real queue (SQLite) and real metrics.jsonl files written by the
history writer; the export is read with TensorBoard's EventAccumulator and its
hparams protos, and compared with the stitched history point for point.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import sweepq.history
from sweepq.cli.main import main
from sweepq.history import CellHistory, stitched
from sweepq.layout import CellPaths
from sweepq.queue.records import Outcome
from sweepq.run.history_writer import HistoryWriter
from unit.support import WORKER, Launch, sweep_from

pytest.importorskip("tensorboard", reason="export tensorboard needs the tensorboard extra")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import metadata, plugin_data_pb2

SWEEP = """\
name: tb
train: trainers:train
metric: {name: loss, goal: min}
grid: {lr: [0.1, 0.2, 0.3], optim: [{name: sgd, momentum: 0.9, nesterov: true}]}
"""
CELLS = ["1.1", "1.2", "1.3"]


def build_root(tmp_path: Path, launch: Launch) -> Path:
    """1.1: attempt 1 lost after step 7 (checkpoint at 5), attempt 2 resumed from 5 to 9.

    1.2: one attempt; 1.3 queued.
    """
    root = tmp_path / "root"
    store = launch(root, sweep_from(SWEEP, tmp_path))
    plan = [
        ("1.1", None, range(1, 8), "lost"),
        ("1.1", 5, range(6, 10), "completed"),
        ("1.2", None, range(1, 5), "completed"),
    ]
    for cell, start, steps, reason in plan:
        claim = store.claim(cell, WORKER)
        assert claim is not None
        if start is not None:
            store.attempt_started(cell, claim.number, start_step=start, start_checkpoint_sha="abc")
        w = HistoryWriter(CellPaths(root, cell).metrics(claim.number), cell, claim.number)
        for s in steps:
            w.append(s, {"loss": 1 / s + claim.number / 7, "acc": s / 3})
        w.close()
        if cell == "1.1":
            store.record_checkpoint(cell, 5, path="cells/1.1/checkpoints/step-5", attempt=1)
        store.finish(cell, claim.number, Outcome(reason=reason, end_step=steps[-1]))
    store.close()
    return root


def read_run(folder: Path) -> tuple[dict[str, list[tuple[int, float]]], dict[str, bytes]]:
    """Every scalar tag's (step, value) points, and the hparams plugin's contents by tag."""
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    scalars = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    return scalars, acc.PluginTagToContent(metadata.PLUGIN_NAME)


def hparams_of(content: bytes) -> dict[str, Any]:
    info = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
    return {k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind")) for k, v in info.hparams.items()}


def f32(x: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", x))[0])  # as TensorBoard stores a scalar


def expected_scalars(h: CellHistory) -> dict[str, list[tuple[int, float]]]:
    out = {name: [(p.step, f32(p.value)) for p in s.points] for name, s in h.series.items()}
    if "loss" in h.series:
        best = min(h.series["loss"].points, key=lambda p: p.value)
        out["best/loss"] = [(best.step, f32(best.value))]
    return out


def export(dest: Path, root: Path) -> Any:
    return CliRunner().invoke(main, ["export", "tensorboard", str(dest), str(root)])


def test_export_tensorboard_reads_back_as_the_stitched_history(tmp_path: Path, launch: Launch) -> None:
    root = build_root(tmp_path, launch)
    histories = {c: stitched(root, c) for c in CELLS}
    mnt = tmp_path / "ro"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("a read-only root needs a tmpfs remounted read-only (mount as root)")
    out = tmp_path / "tb" / "runs"
    try:
        shutil.copytree(root, mnt / "root")
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        first = export(out, mnt / "root")
        files = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
        second = export(out, mnt / "root")
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
    for r in (first, second):
        assert r.exit_code == 0, r.output
        assert f"wrote 26 points of 3 cells to {out}" in r.output
    # the second export replaced the first: the same runs, the same points, nothing doubled or left beside
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == files
    assert sorted(p.name for p in out.iterdir()) == [".sweepq-export", *CELLS]
    assert sorted(p.name for p in out.parent.iterdir()) == ["runs"]

    cfg = {"optim.name": "sgd", "optim.momentum": 0.9, "optim.nesterov": True}
    for cell, lr in zip(CELLS, [0.1, 0.2, 0.3], strict=True):
        scalars, hparams = read_run(out / cell)
        assert scalars == expected_scalars(histories[cell])
        assert hparams_of(hparams[metadata.SESSION_START_INFO_TAG]) == {"lr": lr, **cfg}
    assert [s for s, _ in read_run(out / "1.1")[0]["loss"]] == list(range(1, 10))  # the lost tail 6, 7 left out
    # one experiment record (TensorBoard reads one), naming every hparam and metric
    experiments = [read_run(out / c)[1].get(metadata.EXPERIMENT_TAG) for c in CELLS]
    assert experiments[1:] == [None, None] and experiments[0] is not None
    experiment = plugin_data_pb2.HParamsPluginData.FromString(experiments[0]).experiment
    assert sorted((i.name, i.differs) for i in experiment.hparam_infos) == sorted(
        [("lr", True), *((k, False) for k in cfg)]
    )
    assert [m.name.tag for m in experiment.metric_infos] == ["best/loss", "loss", "acc"]


def test_export_tensorboard_replaces_only_its_own_folder(tmp_path: Path, launch: Launch) -> None:
    root = build_root(tmp_path, launch)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    r = export(mine, root)
    assert r.exit_code == 2
    assert f"error: {mine} holds files sweepq did not write: sweepq export tensorboard replaces" in r.output
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    (tmp_path / "afile").write_text("x")
    r = export(tmp_path / "afile", root)
    assert r.exit_code == 2 and "is a file: sweepq export tensorboard writes a folder of runs" in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "mine", "root"]  # nothing half-written beside

    empty = tmp_path / "empty"
    empty.mkdir()
    assert export(empty, root).exit_code == 0 and (empty / "1.1").is_dir()
    (empty / "1.1" / "extra").write_text("mine now")  # an export's folder is sweepq's: replaced whole
    assert export(empty, root).exit_code == 0 and not (empty / "1.1" / "extra").exists()


def test_without_tensorboard_the_export_says_what_to_install(
    tmp_path: Path, launch: Launch, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = build_root(tmp_path, launch)
    for name in [m for m in sys.modules if m == "tensorboard" or m.startswith("tensorboard.")]:
        monkeypatch.setitem(sys.modules, name, None)  # how Python marks a module absent: importing it fails
    monkeypatch.delitem(sys.modules, "sweepq.history.tensorboard", raising=False)
    monkeypatch.delattr(sweepq.history, "tensorboard", raising=False)
    r = export(tmp_path / "out", root)
    assert r.exit_code == 2
    assert "sweepq export tensorboard needs tensorboard: pip install 'sweepq[tensorboard]'" in r.output
    assert not (tmp_path / "out").exists()


def test_the_cli_loads_neither_tensorboard_nor_torch() -> None:
    code = "import sys, sweepq.cli.main; print(sorted({'tensorboard', 'torch'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
