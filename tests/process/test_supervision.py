"""A launch supervises what it started, and `sweepq stop` finds a launch whatever became of its launch.json.

Real launches with real workers: workers killed with a real SIGKILL (one, then every one, again and again
up to the limit), a live launch whose `.sweepq/launch.json` is truncated, overwritten with garbage or
deleted and replaced, and `status --watch` watching a launch that is stopped. Each cell is held at its
first checkpoint (gated_sweep.py) until its gate file is removed, so that it surely is
mid-training when a worker dies, whatever the machine's speed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import psutil
import pytest
from conftest import SWEEPQ, cli, cmdline, env_with, kill_tree, wait_for
from gated_sweep import HANG_GUARD_S, gated_sweep, held

from sweepq.layout import RootPaths
from sweepq.queue.store import Store

pytestmark = pytest.mark.process


def sweep(sweep_dir: Path, cells: int) -> tuple[Path, Path]:
    return gated_sweep(sweep_dir, cells, "sup")


def launch(sweep_dir: Path, spec: Path, workers: int, **env: str) -> tuple[subprocess.Popen[bytes], Path]:
    """A launch printing lines into a file (read while it runs)."""
    out = sweep_dir / "launch.out"
    with open(out, "wb") as f:
        p = subprocess.Popen(
            [*SWEEPQ, "launch", str(spec), "--workers", str(workers), "--no-live"],
            cwd=sweep_dir,
            stdout=f,
            stderr=subprocess.STDOUT,
            env=env_with(**env),
        )
    return p, out


def states(root: Path) -> dict[str, str]:
    store = Store.open_readonly(root)
    try:
        return {c.id: str(c.state) for c in store.cells()}
    finally:
        store.close()


def reasons(root: Path) -> dict[str, list[str | None]]:
    store = Store.open_readonly(root)
    try:
        return {c.id: [a.reason for a in store.attempts(c.id)] for c in store.cells()}
    finally:
        store.close()


# -- `sweepq stop` and a damaged launch.json ---------------------------------------------------------


def truncate(info: Path) -> None:
    with open(info, "r+b") as f:
        f.truncate(7)  # '{"pid":' : JSON cut in the middle


def garbage(info: Path) -> None:
    info.write_bytes(b"\x00\xff\xfe not json \x00")


def replace(info: Path) -> None:
    info.unlink()
    info.write_text("pid = 1\n")  # a file of another format put in its place


@pytest.mark.parametrize("damage", [truncate, garbage, replace], ids=["truncated", "garbage", "replaced"])
def test_stop_finds_a_launch_whose_launch_json_is_damaged(sweep_dir: Path, damage: object) -> None:
    spec, root = sweep(sweep_dir, 1)
    # A grace period of its own: stop reads it from the launch's environment when launch.json cannot say it.
    p, out = launch(sweep_dir, spec, 1, SWEEPQ_GRACE_SECONDS="45")
    try:
        wait_for(lambda: held(root, "1.1"), HANG_GUARD_S, "1.1 mid-training")
        info = RootPaths(root).launch_info
        damage(info)  # type: ignore[operator]
        stop = cli("stop", "runs/sup", cwd=sweep_dir)
        assert stop.returncode == 0, stop.stdout + stop.stderr
        code = p.wait(timeout=HANG_GUARD_S)
    finally:
        kill_tree(p.pid)
    assert stop.stdout.startswith(
        "runs/sup/.sweepq/launch.json does not say which launch runs (it is damaged or not that launch's): "
        f"found it as the process holding runs/sup/.sweepq/launch.lock, pid {p.pid}\n"
        f"stopping the launch on runs/sup (pid {p.pid}): each running cell writes a checkpoint and stops "
        "(its workers wait up to 45 s for it)\n"
    ), stop.stdout
    assert stop.stdout.endswith("stopped: 1 cell: 1 interrupted\nresume with: sweepq launch sup.yaml\n")
    assert stop.stderr == ""
    assert code == 130
    said = out.read_text()
    assert "SIGTERM: stopping: running cells are writing a checkpoint" in said
    assert said.rstrip().endswith("interrupted: run the same command again to resume")
    assert reasons(root) == {"1.1": ["preempted"]}
    assert not info.exists()  # the launch took away what was left of its file


# -- workers that die ----------------------------------------------------------------------------------


def workers_of(launch_pid: int) -> list[psutil.Process]:
    """The launch's live workers (its training processes are its workers' children, not its own)."""
    return [c for c in psutil.Process(launch_pid).children() if " worker " in f" {cmdline(c)} "]


def died(p: psutil.Process, name: str) -> str:
    return f"worker {name} (pid {p.pid}) died: killed by SIGKILL"


def name_of(p: psutil.Process) -> str:
    args = p.cmdline()
    return args[args.index("--name") + 1]


def test_a_launch_replaces_workers_that_were_killed(sweep_dir: Path) -> None:
    spec, root = sweep(sweep_dir, 3)
    p, out = launch(sweep_dir, spec, 2)
    try:
        wait_for(lambda: held(root, "1.1", "1.2"), HANG_GUARD_S, "1.1 and 1.2 mid-training")
        first = workers_of(p.pid)
        assert len(first) == 2
        names = {w.pid: name_of(w) for w in first}
        for w in first:
            w.kill()  # as the OOM killer or an operator would
        for gate in sweep_dir.glob("gate-*"):
            gate.unlink()
        code = p.wait(timeout=HANG_GUARD_S)
    finally:
        kill_tree(p.pid)
    said = out.read_text()
    assert code == 0, said
    for w in first:
        # Each place's first replacement waits out the back-off's first step (1 s).
        assert f"{died(w, names[w.pid])}; a new worker replaces it in 1s (replacement 1 of 3 for this worker)" in said
    assert said.rstrip().endswith("3 cells: 3 done")
    # A killed worker's training process is stopped (it dies with its parent): preempted, then resumed.
    got = reasons(root)
    assert got["1.1"] == got["1.2"] == ["preempted", "completed"] and got["1.3"] == ["completed"], got


def test_a_launch_whose_workers_die_faster_than_they_are_replaced_ends_with_its_own_code(sweep_dir: Path) -> None:
    spec, root = sweep(sweep_dir, 2)
    p, out = launch(sweep_dir, spec, 1, SWEEPQ_WORKER_REPLACEMENTS="1")
    killed: list[psutil.Process] = []
    try:
        for _ in range(2):  # the worker, then its one replacement
            wait_for(
                lambda: [w for w in workers_of(p.pid) if w.pid not in {k.pid for k in killed}],
                HANG_GUARD_S,
                "a live worker",
            )
            (w,) = workers_of(p.pid)
            wait_for(lambda: held(root, "1.1") and states(root)["1.1"] == "running", HANG_GUARD_S, "1.1 running")
            name = name_of(w)
            w.kill()
            killed.append(w)
        code = p.wait(timeout=HANG_GUARD_S)
    finally:
        kill_tree(p.pid)
    said = out.read_text()
    assert code == 3, said
    first, second = killed
    assert f"{died(first, name)}; a new worker replaces it in 1s (replacement 1 of 1 for this worker)" in said
    assert f"{died(second, name)}; not replaced: it was replaced 1 times already" in said
    logs = RootPaths(root).logs
    assert said.rstrip().endswith(
        f"the launch ran out of workers: 2 died, each replaced at most 1 times ({died(first, name)}; "
        f"{died(second, name)}). No cell failed for it; 1 interrupted, 1 queued left. See the workers' logs in "
        f"{logs} and the system's log (an OOM kill is there), then run the same command again: each cell "
        "resumes from its last committed checkpoint."
    ), said
    assert "failed" not in states(root).values()


def test_status_watch_ends_once_the_launch_it_watched_stopped(sweep_dir: Path) -> None:
    spec, root = sweep(sweep_dir, 2)
    p, _ = launch(sweep_dir, spec, 1)
    try:
        wait_for(lambda: held(root, "1.1"), HANG_GUARD_S, "1.1 mid-training")
        watch = subprocess.Popen(
            [*SWEEPQ, "status", "--watch", "--every", "0.2", "--root", str(root)],
            cwd=sweep_dir,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        stop = cli("stop", "runs/sup", cwd=sweep_dir)
        assert stop.returncode == 0, stop.stdout + stop.stderr
        out, err = watch.communicate(timeout=HANG_GUARD_S)  # before: it went on refreshing until killed
    finally:
        kill_tree(p.pid)
    assert watch.returncode == 0 and err == ""
    assert out.splitlines()[-1] == (
        "nothing runs on this sweep any more, 2 cells left: the launch stopped (run the same launch command "
        "again to go on)"
    )
