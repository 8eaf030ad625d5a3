"""One finished tiny sweep, launched once per test session, for tests that only need its files.

test_readonly.py and test_repair.py copy it (never change the original): the
launch is the slow part, so it runs once for both.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import HERE, cli, write

SPEC = """
name: tiny
train: trainers:train
root: runs/tiny
params: {steps: 10}
checkpoint: {every_steps: 5, keep_last: 2}
metric: {name: score, goal: max}
grid: {seed: [1, 2]}
"""

_launched: dict[str, Path] = {}


def finished(factory: pytest.TempPathFactory) -> Path:
    """A folder holding tiny.yaml, trainers.py and runs/tiny, where both cells are done: copy it first."""
    if "dir" not in _launched:
        d = factory.mktemp("tiny")
        shutil.copy(HERE / "trainers.py", d / "trainers.py")
        spec = write(d / "tiny.yaml", SPEC)
        r = cli("launch", str(spec), "--workers", "2", "--no-live", cwd=d)
        assert r.returncode == 0, r.stdout + r.stderr
        _launched["dir"] = d
    return _launched["dir"]


def die_with_a_write_open(db: Path, sql: str) -> None:
    """A writer that commits `sql` and dies without closing (kill -9): its -wal and -shm stay, holding it."""
    code = (
        "import os, sqlite3, sys\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "c.execute('PRAGMA journal_mode=WAL')\n"
        "c.execute(sys.argv[2])\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(db), sql], check=True)
    assert Path(f"{db}-wal").stat().st_size > 0 and Path(f"{db}-shm").exists()


@dataclass(frozen=True)
class Ran:
    code: int
    stdout: str
    stderr: str


# Runs the `sweepq` command group (sweepq.cli.main) once per command line, in one process: a command costs
# its work, not another interpreter importing sqlalchemy, rich and click (a second each on a busy machine).
_DRIVER = """
import json, sys, traceback
from click.testing import CliRunner
from sweepq.cli.main import main
answers = {}
for name, args in json.loads(sys.argv[1]).items():
    r = CliRunner().invoke(main, args)
    err = r.stderr
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        err += "".join(traceback.format_exception(r.exception))
    answers[name] = [r.exit_code, r.stdout, err]
print(json.dumps(answers))
"""


def sweepq_many(
    commands: dict[str, list[str]], user: list[str] | None = None, cwd: Path | None = None
) -> dict[str, Ran]:
    """Each command line's exit code and output, run one after another in one `sweepq` process (as `user`)."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    r = subprocess.run(
        [*(user or []), sys.executable, "-c", _DRIVER, json.dumps(commands)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd or "/",
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    return {name: Ran(*answer) for name, answer in json.loads(r.stdout).items()}


def is_root() -> bool:
    return os.geteuid() == 0
