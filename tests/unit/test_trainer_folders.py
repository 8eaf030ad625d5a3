"""The Hugging Face callback keeps the Trainer's own `checkpoint-N/` folders within a limit once sweepq has
its verified copies (the Trainer alone, without save_total_limit, keeps every one: 12-13 per cell)."""

from __future__ import annotations

from pathlib import Path

from sweepq.integrations.transformers import _prune_saved


def saved(output_dir: Path, *steps: int) -> None:
    for step in steps:
        (output_dir / f"checkpoint-{step}").mkdir()
        (output_dir / f"checkpoint-{step}" / "model.safetensors").write_bytes(b"x" * step)


def test_the_newest_folders_and_the_best_are_kept_and_nothing_else_of_the_folder_is_touched(tmp_path: Path) -> None:
    saved(tmp_path, 4, 8, 12, 16, 20, 100)
    (tmp_path / "checkpoint-notes.txt").write_text("mine")  # not a Trainer folder: left alone
    (tmp_path / "eval_results.json").write_text("{}")
    elsewhere = tmp_path.parent / "other-sweep-step"
    elsewhere.mkdir()
    (elsewhere / "model.safetensors").write_bytes(b"theirs")
    (tmp_path / "checkpoint-2").symlink_to(elsewhere)  # a link named like a folder: removed itself, never followed

    _prune_saved(tmp_path, 3, best=str(tmp_path / "checkpoint-8"))

    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["checkpoint-100", "checkpoint-16", "checkpoint-20", "checkpoint-8", "checkpoint-notes.txt",
                    "eval_results.json"]  # fmt: skip
    assert (tmp_path / "checkpoint-100" / "model.safetensors").read_bytes() == b"x" * 100  # sorted by step, not name
    assert (elsewhere / "model.safetensors").read_bytes() == b"theirs"


def test_a_limit_never_removes_the_folder_just_saved(tmp_path: Path) -> None:
    saved(tmp_path, 4, 8)
    _prune_saved(tmp_path, 0, best=None)  # a limit of 0 still keeps the newest: the Trainer may resume from it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-8"]
