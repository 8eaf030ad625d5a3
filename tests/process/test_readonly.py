"""Read commands on read-only roots: they answer (exit 0, the right words) and write nothing.

One finished sweep (tiny_sweep.py) is copied where it cannot be written: a
tmpfs remounted read-only, and a folder made read-only by permissions (run as
an unprivileged user, since permissions do not restrict root). Each place gets
the database as a clean shutdown leaves it (no -wal/-shm, and none can be
created there) and as a killed launch leaves it (-wal/-shm holding a committed
transaction the file does not have yet, which every command must see). After
the commands, no file appeared, vanished or changed: no lock file, no log, no
journal, whatever the cell lock's mechanism.
"""

from __future__ import annotations

import json
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from tiny_sweep import Ran, die_with_a_write_open, finished, is_root, sweepq_many

# The killed launch's last transaction: cell 1.2 running (its attempt's process is gone).
RUNNING = "update cells set state = 'running' where id = '1.2'"

COMMANDS = {
    "status": ["status"],
    "status --json": ["status", "--json"],
    "show": ["show", "1.2", "--json"],
    "attempts": ["attempts", "--json"],
    "report": ["report"],
    "best": ["best"],
    "logs": ["logs", "1.2"],
}


@pytest.fixture(scope="module")
def finished_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return finished(tmp_path_factory) / "runs" / "tiny"


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under root with its size (-1 for folders) and mtime: what `find -newer` compares."""
    return {
        str(p.relative_to(root)): (p.stat().st_size if p.is_file() else -1, p.stat().st_mtime_ns)
        for p in [root, *root.rglob("*")]
    }


def changes(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> list[str]:
    return sorted(
        [f"new {p}" for p in after.keys() - before.keys()]
        + [f"gone {p}" for p in before.keys() - after.keys()]
        + [f"changed {p}" for p in before.keys() & after.keys() if before[p] != after[p]]
    )


def run_all(root: Path, user: list[str], names: list[str]) -> dict[str, Ran]:
    return sweepq_many({n: [*COMMANDS[n], "--root", str(root)] for n in names}, user)


def check_answers(results: dict[str, Ran], killed: bool) -> None:
    for name, r in results.items():
        assert r.code == 0, f"{name}: {r.stderr}"
        assert r.stderr == "", f"{name}: {r.stderr}"
    state = "running" if killed else "done"
    if "status --json" in results:
        cells = {c["cell"]: c for c in json.loads(results["status --json"].stdout)}
        assert cells["1.1"]["state"] == "done" and cells["1.2"]["state"] == state
        assert cells["1.2"]["alive"] is (False if killed else None)  # the lock asked, on a read-only root
    if "status" in results:
        summary = "2 cells: 1 running, 1 done" if killed else "2 cells: 2 done"
        assert summary in results["status"].stdout
    if "show" in results:
        show = json.loads(results["show"].stdout)
        assert show["state"] == state and [a["reason"] for a in show["attempts"]] == ["completed"]
        assert show["done"]["cell"] == "1.2"  # DONE.json read from the read-only folder
    if "attempts" in results:
        assert sorted(a["cell"] for a in json.loads(results["attempts"].stdout)) == ["1.1", "1.2"]
    if "report" in results:
        assert "completed" in results["report"].stdout
    if "best" in results:
        assert "1.1" in results["best"].stdout and "checkpoints/step-10" in results["best"].stdout


@contextmanager
def scratch() -> Iterator[Path]:
    """A folder an unprivileged user can reach (pytest's own tmp folders are private to this user)."""
    d = Path(tempfile.mkdtemp(prefix="sweepq-ro-"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(d)], check=False)
        shutil.rmtree(d, ignore_errors=True)


@contextmanager
def read_only_mount(finished_root: Path, killed: bool) -> Iterator[tuple[Path, list[str]]]:
    if not is_root():
        pytest.skip("a read-only mount needs root (mount -t tmpfs); the permissions case covers this user")
    with scratch() as d:
        mnt = d / "mnt"
        mnt.mkdir()
        made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)], capture_output=True)
        if made.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
        try:
            root = mnt / "tiny"
            shutil.copytree(finished_root, root)
            if killed:
                die_with_a_write_open(root / "sweepq.db", RUNNING)
            subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
            yield root, []
        finally:
            subprocess.run(["umount", str(mnt)], check=True)


@contextmanager
def read_only_permissions(finished_root: Path, killed: bool) -> Iterator[tuple[Path, list[str]]]:
    user: list[str] = []
    if is_root():  # permissions do not restrict root: run the commands as an unprivileged user
        try:
            nobody = pwd.getpwnam("nobody")
        except KeyError:
            pytest.skip("no unprivileged user `nobody` to run as (chmod does not restrict root)")
        if shutil.which("setpriv") is None:
            pytest.skip("no setpriv to run as `nobody` (chmod does not restrict root)")
        user = ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups"]
    with scratch() as d:
        root = d / "tiny"
        shutil.copytree(finished_root, root)
        if killed:
            die_with_a_write_open(root / "sweepq.db", RUNNING)
        subprocess.run(["chmod", "-R", "a-w", str(root)], check=True)
        yield root, user


PLACES = {"mount": read_only_mount, "permissions": read_only_permissions}


@pytest.mark.parametrize("killed", [False, True], ids=["clean", "killed-launch"])
@pytest.mark.parametrize("place", list(PLACES))
def test_read_commands_on_a_read_only_root(finished_root: Path, place: str, killed: bool) -> None:
    names = list(COMMANDS)
    with PLACES[place](finished_root, killed) as (root, user):
        before = snapshot(root)
        assert (root / "sweepq.db-wal").exists() is killed and (root / "sweepq.db-shm").exists() is killed
        results = run_all(root, user, names)
        check_answers(results, killed)
        assert changes(before, snapshot(root)) == []


def test_read_commands_on_a_writable_root_beside_a_killed_launch(finished_root: Path, tmp_path: Path) -> None:
    """Where everything may be written: still no lock file, no new file; only SQLite's shared index moves."""
    root = tmp_path / "tiny"
    shutil.copytree(finished_root, root)
    die_with_a_write_open(root / "sweepq.db", RUNNING)
    before = snapshot(root)
    results = run_all(root, [], list(COMMANDS))
    check_answers(results, killed=True)
    # The -shm is shared memory that every reader of a WAL database updates (read marks), not data.
    assert [c for c in changes(before, snapshot(root)) if c != "changed sweepq.db-shm"] == []
