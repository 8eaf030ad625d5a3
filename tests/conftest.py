"""Shared helpers of the suite, organised by kind.

tests/unit: the in-process core (state machine, store, outcome rules, renderers);
tests/spec and tests/checkpoint: in-process with real files and threads;
tests/process: real sweepq processes driving the CLI (marked `process`).
"""

from __future__ import annotations

import compileall
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from services.fixtures import postgres_server, postgres_url, s3_bucket, s3_server, slurm_cluster  # noqa: F401  (pytest registers imported fixtures)

HERE = Path(__file__).parent
REPO_ROOT = HERE.parent
SWEEPQ = [sys.executable, "-m", "sweepq.cli"]


def cli(
    *args: str, cwd: Path | None = None, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SWEEPQ, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def cli_json(*args: str, cwd: Path | None = None) -> Any:
    r = cli(*args, "--json", cwd=cwd)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def start(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*SWEEPQ, *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def tree(pid: int) -> list[psutil.Process]:
    try:
        p = psutil.Process(pid)
        return [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def kill_tree(pid: int, sig: int = signal.SIGKILL) -> list[int]:
    """Send `sig` to a process and all its descendants at once (a reboot, for SIGKILL)."""
    procs = tree(pid)
    for p in procs:
        try:
            p.send_signal(sig)
        except psutil.NoSuchProcess:
            pass
    return [p.pid for p in procs]


def wait_gone(pids: list[int], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return
        time.sleep(0.05)
    raise AssertionError(f"processes still alive: {pids}")


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:  # gone between asking and looking: gone
        return False


def wait_for(predicate: Callable[[], Any], timeout: float = 600, what: str = "condition") -> Any:
    """Poll until `predicate` is true; its value. The bound is only a backstop against a hang: on a machine at
    load 30, a torch program took over 120 s to print its first line, so it is as long as a launch's own wait."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def cmdline(p: psutil.Process) -> str:
    """A process's command line, "" once it exited (a zombie has none: processes exit all the time)."""
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""


def trainer_of(launch_pid: int, cell: str | None = None) -> psutil.Process | None:
    """The training process (of `cell`, when given) under a launch or worker, if one runs now."""
    needle = f"cells/{cell}/attempts/" if cell is not None else "sweepq.attempt"
    for p in tree(launch_pid):
        try:
            if needle in " ".join(p.cmdline()):
                return p
        except psutil.NoSuchProcess:
            continue
    return None


def db_rows(root: Path, sql: str) -> list[tuple]:
    """Rows of the root's queue, read straight from SQLite."""
    con = sqlite3.connect(root / "sweepq.db")
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def pytest_sessionstart(session: pytest.Session) -> None:
    """Compile sweepq once: every CLI, worker and training process of the suite imports it afresh, and
    where PYTHONDONTWRITEBYTECODE is set (as on CI machines) each would compile it again (~0.3 s each)."""
    compileall.compile_dir(REPO_ROOT / "sweepq", quiet=1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests under tests/process/ drive real sweepq processes: `make test-fast` leaves them out."""
    process_dir = HERE / "process"
    for item in items:
        if process_dir in item.path.parents:
            item.add_marker(pytest.mark.process)


@pytest.fixture
def sweep_dir(tmp_path: Path) -> Path:
    """A folder holding the test training module (the sweep file's folder goes on sys.path)."""
    shutil.copy(HERE / "trainers.py", tmp_path / "trainers.py")
    return tmp_path


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.fixture(autouse=True)
def _no_stray_processes():
    """Each test must leave no sweepq process behind."""
    yield
    me = psutil.Process()
    for child in me.children(recursive=True):
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass


def env_with(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    return env


def make_run(root: Path, cell: str = "1.1", **policy: Any) -> Any:
    """A Run as a training process gets it, on `root`: every step due unless `policy` says otherwise."""
    from sweepq.run.run import Run
    from sweepq.spec.sweep import CheckpointPolicy, Settings
    from sweepq.wire.attempt_spec import AttemptSpec

    policy = {"every_steps": 1, "auto": False, "keep_last": 100, "keep_best": False, **policy}
    settings = Settings(name="s", form="grouped", spec_dir=".", train="m:f", checkpoint=CheckpointPolicy(**policy))
    return Run(AttemptSpec(root=str(root), cell=cell, attempt=1, cfg={}, cfg_hash="h", settings=settings.to_json()))
