"""Checkpoints of files another library wrote: kept by copy, verified on resume, never the wrong kind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import make_run

from sweepq.checkpoint.files import NotFiles
from sweepq.checkpoint.manifest import OtherKind


def _library_checkpoint(folder: Path, step: int) -> Path:
    """What a library writes: a folder of flat files (as a Hugging Face checkpoint-N/)."""
    out = folder / f"checkpoint-{step}"
    out.mkdir(parents=True)
    (out / "model.bin").write_bytes(bytes(range(256)) * (step + 1))
    (out / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (out / "empty.txt").write_bytes(b"")
    return out


def test_commit_copies_and_resume_verifies(tmp_path: Path) -> None:
    root, lib = tmp_path / "root", tmp_path / "lib"
    run = make_run(root, keep_last=2)
    for step in (10, 20, 30):
        assert run.commit_files(step, _library_checkpoint(lib, step), {"loss": 1.0 / step})
    assert not run.commit_files(30, _library_checkpoint(lib / "again", 30))  # a step kept already
    # The library rewrites its own files in place: sweepq's copy is not a link to them.
    (lib / "checkpoint-30" / "model.bin").write_bytes(b"rewritten")
    kept = sorted(p.name for p in run.paths.checkpoints.iterdir() if p.name.startswith("step-"))
    assert len(kept) == 2  # retention as for run.checkpoint

    again = make_run(root)
    path = again.resume_path()
    assert path is not None and again.start_step == 30
    assert (path / "model.bin").read_bytes() == bytes(range(256)) * 31
    assert json.loads((path / "trainer_state.json").read_text()) == {"global_step": 30}
    assert (path / "empty.txt").read_bytes() == b""
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["kind"] == "files" and manifest["metrics"] == {"loss": 1.0 / 30}
    assert again.resume_path() == path  # asked once per attempt


def test_a_damaged_copy_is_moved_aside_and_the_previous_one_resumed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    run = make_run(root)
    for step in (5, 6):
        run.commit_files(step, _library_checkpoint(tmp_path / "lib", step))
    newest = run.paths.checkpoints / max(p.name for p in run.paths.checkpoints.iterdir() if p.name.startswith("step-"))
    raw = bytearray((newest / "model.bin").read_bytes())
    raw[100] ^= 1
    (newest / "model.bin").write_bytes(bytes(raw))

    again = make_run(root)
    path = again.resume_path()
    assert path is not None and again.start_step == 5
    assert [c["step"] for c in again.corrupt] == [6] and "sha256" in again.corrupt[0]["why"]
    assert not newest.exists()  # moved aside, never tried again


def test_the_other_kind_is_an_error_not_corruption(tmp_path: Path) -> None:
    root = tmp_path / "root"
    state = {"w": torch.ones(3), "step": 4}
    run = make_run(root)
    run.checkpoint(state, 4, force=True)
    run.close(completed=False)
    with pytest.raises(OtherKind, match="resumes from files"):
        make_run(root).resume_path()
    assert any(p.name.startswith("step-") for p in run.paths.checkpoints.iterdir())  # still there

    other = make_run(tmp_path / "other")
    other.commit_files(3, _library_checkpoint(tmp_path / "lib", 3))
    with pytest.raises(OtherKind, match="resumes from a training state"):
        make_run(tmp_path / "other").restore({"w": torch.zeros(3)})


def test_what_cannot_be_kept_is_refused_by_name(tmp_path: Path) -> None:
    run = make_run(tmp_path / "root")
    nested = _library_checkpoint(tmp_path / "lib", 1)
    (nested / "sub").mkdir()
    with pytest.raises(NotFiles, match="sweepq keeps flat checkpoint folders"):
        run.commit_files(1, nested)
    with pytest.raises(NotFiles, match="not a regular file"):
        run.commit_files(1, {"x.ckpt": tmp_path / "missing.ckpt"})
    assert not run.paths.checkpoints.exists() or not any(run.paths.checkpoints.glob("step-*"))
