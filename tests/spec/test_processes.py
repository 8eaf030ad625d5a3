"""`processes:` of the sweep file and of a group: ranks per attempt, validated before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweepq.errors import SpecError
from sweepq.program.ranks import gpu_sets, rank_env
from sweepq.spec.sweep import load_sweep

PROGRAM = """
name: p
program: ddp.py
{top}
groups:
  - {{name: one, grid: {{lr: [0.1]}}}}
  - {{name: two, grid: {{lr: [0.2]}}{group}}}
"""


def load(tmp_path: Path, top: str = "", group: str = "", entry: str = "program: ddp.py") -> object:
    (tmp_path / "ddp.py").write_text("")
    (tmp_path / "train.py").write_text("def train(cfg, run):\n    pass\n")
    text = PROGRAM.format(top=top, group=group).replace("program: ddp.py", entry)
    spec = tmp_path / "s.yaml"
    spec.write_text(text)
    return load_sweep(spec)


def test_processes_of_the_sweep_and_of_a_group(tmp_path: Path) -> None:
    settings = load(tmp_path, top="processes: 2", group=", processes: 4").settings  # type: ignore[attr-defined]
    assert settings.processes_of("1.1") == 2 and settings.processes_of("2.1") == 4
    assert settings.most_processes() == 4
    assert load(tmp_path).settings.processes_of("2.1") == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("top", "group", "where"),
    [
        ("processes: 0", "", "processes"),
        ("processes: -1", "", "processes"),
        ("processes: 1.5", "", "processes"),
        ("processes: two", "", "processes"),
        ("processes: true", "", "processes"),
        ("", ", processes: 0", "groups[2].processes"),
    ],
)
def test_processes_must_be_a_positive_whole_number(tmp_path: Path, top: str, group: str, where: str) -> None:
    with pytest.raises(SpecError) as e:
        load(tmp_path, top=top, group=group)
    assert where in str(e.value) and "positive whole number of ranks" in str(e.value)


def test_train_cells_take_several_processes(tmp_path: Path) -> None:
    settings = load(tmp_path, group=", processes: 2", entry="train: train:train").settings  # type: ignore[attr-defined]
    assert settings.processes_of("1.1") == 1 and settings.processes_of("2.1") == 2


def test_a_worker_takes_a_gpu_per_rank() -> None:
    assert gpu_sets(["0", "1", "2", "3"], 2, 2) == ["0,1", "2,3"]
    assert gpu_sets(["0", "1", "2", "3"], 2, 1) == ["0", "1", "2", "3"]  # one each, in turn, as before
    assert gpu_sets([], 2, 2) == []
    with pytest.raises(ValueError, match=r"need 4 \(one per rank\).*--workers 1"):
        gpu_sets(["0", "1", "2"], 2, 2)


def test_rank_env_is_torchruns() -> None:
    env = rank_env(1, 2, 29500, "run")
    assert {k: env[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")} == {
        "RANK": "1",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "2",
    }
    assert env["MASTER_ADDR"] == "127.0.0.1" and env["MASTER_PORT"] == "29500"
    assert env["TORCHELASTIC_MAX_RESTARTS"] == "0"
