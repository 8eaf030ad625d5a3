"""`train: module:function` is checked at launch by reading the module, never importing it."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from sweepq.cli.main import main
from sweepq.spec.entry import train_entry_problem

MODULE = """
import torch  # never imported by the check: the folder has no torch module to shadow it
raise SystemExit("this module must not run during the check")

def train(cfg, run):
    return {}

if __name__ == "__main__":
    def only_when_run_directly():
        pass

try:
    from fast import loader
except ImportError:
    loader = None
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "mytrain.py").write_text(MODULE)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "sub.py").write_text("from .impl import *\n")
    (tmp_path / "lazy.py").write_text("def __getattr__(name):\n    return lambda cfg, run: None\n")
    return tmp_path


@pytest.mark.parametrize(
    "train",
    ["mytrain:train", "mytrain:only_when_run_directly", "mytrain:loader", "pkg.sub:anything", "lazy:made_later"],
)
def test_functions_the_module_binds_or_may_bind_pass_without_running_it(folder: Path, train: str) -> None:
    assert train_entry_problem(train, str(folder)) is None


def test_a_misspelt_function_is_named_with_a_suggestion(folder: Path) -> None:
    problem = train_entry_problem("mytrain:trian", str(folder))
    assert problem == f"module 'mytrain' ({folder / 'mytrain.py'}) defines no 'trian': did you mean 'train'?"


def test_a_module_that_cannot_be_found_says_where_it_was_looked_for(folder: Path) -> None:
    problem = train_entry_problem("mytrian:train", str(folder))
    assert problem is not None and problem.startswith(
        "module 'mytrian' cannot be found (not in the sweep file's folder"
    )
    assert train_entry_problem("sweepq.examples.llm_analysis:train", str(folder)) is None  # installed packages too


def test_launch_refuses_a_typo_before_anything_is_written_and_plan_does_not_read_the_code(folder: Path) -> None:
    (folder / "s.yaml").write_text("name: s\ntrain: mytrain:trian\nroot: runs/s\ngrid: {seed: [1, 2]}\n")
    runner = CliRunner()
    launched = runner.invoke(main, ["launch", str(folder / "s.yaml")])
    assert launched.exit_code == 2, launched.output
    assert "train: mytrain:trian: module 'mytrain'" in launched.output and "did you mean 'train'?" in launched.output
    assert not (folder / "runs").exists()
    planned = runner.invoke(main, ["plan", str(folder / "s.yaml")])
    assert planned.exit_code == 0, planned.output
    # plan (which may preview a sweep where its code is not) warns in launch's words, without running the module
    refusal = launched.stderr.removeprefix("error: ").rstrip("\n")
    assert planned.stderr == f"warning: {refusal} `sweepq launch` refuses it.\n"
    assert "1.2" in planned.stdout and not (folder / "runs").exists()
    (folder / "s.yaml").write_text("name: s\ntrain: mytrain:train\nroot: runs/s\ngrid: {seed: [1, 2]}\n")
    assert runner.invoke(main, ["plan", str(folder / "s.yaml")]).stderr == ""
