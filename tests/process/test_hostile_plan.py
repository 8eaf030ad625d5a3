"""Hostile sweep files through the real CLI: one paragraph on stderr, exit 2, nothing created.

The in-process tests (tests/spec/test_hostile.py) cover each case's words; these
prove, for the cases that used to escape as tracebacks or hang (recursion, NaN
in `--json`, alias bombs, a symbolic-link loop, a huge file), that the command
turns them into an exit code and a paragraph, and that a secret given as
${envvar:NAME} reaches the program but nothing sweepq writes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import cli, env_with, write

LAUGHS = "train: m:f\ngrid: {s: [1]}\nparams:\n" + "\n".join(
    ['  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"  {n}: &{n} [" + ",".join([f"*{p}"] * 9) + "]" for p, n in zip("abcdefgh", "bcdefghi", strict=True)]
)

HOSTILE = {
    "deep": ("train: m:f\nparams: {a: " + "[" * 1000 + "]" * 1000 + "}\ngrid: {s: [1]}\n", "nested more than 100"),
    "nan": ("train: m:f\nparams: {a: .nan}\ngrid: {s: [1]}\n", "finite numbers only"),
    "laughs": (LAUGHS + "\n", "SWEEPQ_MAX_YAML_NODES"),
    "loop": ("train: m:f\nroot: loop\ngrid: {s: [1]}\n", "loop of symbolic links"),
}


def assert_one_paragraph(r, words: str) -> None:
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr  # no traceback
    assert words in r.stderr and r.stdout == ""


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_plan_refuses_hostile_files_with_one_paragraph(tmp_path: Path, case: str) -> None:
    text, words = HOSTILE[case]
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    spec = write(tmp_path / f"{case}.yaml", text)
    before = sorted(os.listdir(tmp_path))
    assert_one_paragraph(cli("plan", str(spec), "--json", cwd=tmp_path), words)
    assert sorted(os.listdir(tmp_path)) == before


def test_a_50_mb_sweep_file_is_refused_by_its_size(tmp_path: Path) -> None:
    spec = tmp_path / "big.yaml"
    with spec.open("wb") as file:
        file.truncate(50 * 1024 * 1024)
    assert_one_paragraph(cli("plan", str(spec)), "the file is 52,428,800 bytes")


def test_launch_refuses_a_root_that_is_not_empty_and_a_missing_program_writing_nothing(tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.mkdir()
    write(taken / "notes.txt", "mine")
    spec = write(tmp_path / "s.yaml", "train: m:f\nroot: taken\ngrid: {s: [1]}\n")
    assert_one_paragraph(cli("launch", str(spec), cwd=tmp_path), "neither empty nor a sweep root")
    assert os.listdir(taken) == ["notes.txt"]
    spec = write(tmp_path / "s.yaml", "program: trian.py\ngrid: {s: [1]}\n")
    assert_one_paragraph(cli("launch", str(spec), cwd=tmp_path), "program: 'trian.py' cannot be found")
    assert sorted(os.listdir(tmp_path)) == ["s.yaml", "taken"]


def test_plan_warns_of_a_program_that_is_not_here_and_launch_refuses_it(tmp_path: Path) -> None:
    """A sweep written here for a cluster: plan is a preview (it needs no program file), launch runs cells."""
    write(tmp_path / "s.yaml", "program: on_cluster.py\ngrid: {s: [1, 2]}\n")
    refusal = (
        f"s.yaml: program: 'on_cluster.py' cannot be found (no file {tmp_path.resolve() / 'on_cluster.py'} and no "
        "command of that name on PATH), so every cell would fail to start. Fix the name, or install it."
    )
    for args in ([], ["--json"]):
        plan = cli("plan", "s.yaml", *args, cwd=tmp_path)
        assert plan.returncode == 0, plan.stderr
        assert plan.stderr == f"warning: {refusal} `sweepq launch` refuses it.\n"
        assert "1.2" in plan.stdout and "on_cluster.py" in plan.stdout  # every cell, its command line
    launch = cli("launch", "s.yaml", "--workers", "1", "--no-live", cwd=tmp_path)
    assert launch.returncode == 2, launch.stdout + launch.stderr
    assert launch.stderr == f"error: {refusal}\n" and launch.stdout == ""
    assert os.listdir(tmp_path) == ["s.yaml"]  # neither wrote anything


SECRET = "s3cr3t-4f9e"
CHECKS_TOKEN = f"""
import sys
# Exit 3 unless the real value arrived: sweepq must mask only what it writes.
sys.exit(0 if sys.argv[1:3] == ["--token={SECRET}", "{SECRET}"] else 3)
"""


def test_an_envvar_secret_reaches_the_program_and_nothing_sweepq_writes(tmp_path: Path) -> None:
    write(tmp_path / "check.py", CHECKS_TOKEN)
    spec = write(
        tmp_path / "s.yaml",
        "program: check.py\nroot: runs/s\ngrid: {s: [1]}\n"
        "command: ['${env}', '${interpreter}', '${program}', '--token=${envvar:TOK}', '${envvar:TOK}', '${args}']\n",
    )
    env = env_with(TOK=SECRET)
    plan = cli("plan", str(spec), env=env)
    assert plan.returncode == 0 and "'--token=***' '***'" in plan.stdout and SECRET not in plan.stdout
    r = cli("launch", str(spec), "--workers", "1", "--no-live", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stdout + r.stderr  # the program got the real value
    assert SECRET not in r.stdout + r.stderr
    root = tmp_path / "runs" / "s"
    log = (root / "cells" / "1.1" / "attempts" / "1" / "stdout.log").read_text()
    assert "check.py '--token=***' '***' --s=1" in log
    written = [path for path in root.rglob("*") if path.is_file()]
    assert any(path.name == "sweepq.db" for path in written)
    for path in written:
        assert SECRET.encode() not in path.read_bytes(), path
