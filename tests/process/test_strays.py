"""What an attempt leaves running never holds its cell; a worker survives whatever its children send.

Real training code and real programs fork real helpers (a `multiprocessing` fork child, and a daemon
made by fork, setsid, fork that leaves the attempt's session), then the training process is killed
with a real SIGKILL, or a program exits leaving its daemon; other programs write bytes that are not
messages to the channel they inherit.
"""

from __future__ import annotations

import json
import os
import signal
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import cli, cli_json, start, wait_for, write

from sweepq.worker.loop import POLL_S
from sweepq.worker.strays import STRAY_GRACE_S

pytestmark = pytest.mark.process

# Forks the helpers: a multiprocessing fork child that sleeps on, and a daemon (fork, setsid, fork)
# that leaves the session; each writes its pid to <dir>/<name>.pid. Then sleeps until killed.
LEAVE = """
import multiprocessing, os, time
from pathlib import Path


def _sleep_on(where):
    Path(where).write_text(str(os.getpid()))
    time.sleep(3600)


def leave_helpers(d, daemon_only=False):
    d = Path(d)
    if not daemon_only:
        helper = multiprocessing.get_context("fork").Process(target=_sleep_on, args=(str(d / "helper.pid"),))
        helper.start()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            _sleep_on(str(d / "daemon.pid"))
        os._exit(0)
    for name in (["daemon"] if daemon_only else ["helper", "daemon"]):
        while not (d / f"{name}.pid").exists():
            time.sleep(0.01)
"""

TRAIN = (
    LEAVE
    + """

def train(cfg, run):
    state = {"step": 0}
    run.restore(state)
    run.set_total(3)
    if cfg["seed"] == 1 and run.attempt == 1:
        leave_helpers(cfg["dir"])
        Path(cfg["dir"], "trainer.pid").write_text(str(os.getpid()))
        time.sleep(3600)  # until the test's SIGKILL
    while state["step"] < 3:
        state["step"] += 1
        run.log(state["step"], loss=1.0 / state["step"])
        run.checkpoint(state, state["step"])
"""
)

PROGRAM = (
    LEAVE
    + """

import argparse, sys
p = argparse.ArgumentParser()
p.add_argument("--dir")
p.add_argument("--seed", type=int)
p.add_argument("--mode")
a = p.parse_args()
attempt = int(os.environ["SWEEPQ_ATTEMPT"])
if a.seed == 1 and a.mode == "killed" and attempt == 1:
    leave_helpers(a.dir)
    Path(a.dir, "trainer.pid").write_text(str(os.getpid()))
    time.sleep(3600)
if a.seed == 1 and a.mode == "daemon":
    leave_helpers(a.dir, daemon_only=True)
if a.seed == 1 and a.mode.startswith("send:"):
    fd = int(os.environ["SWEEPQ_CHANNEL_FD"])
    what = a.mode[5:]
    if what == "brackets":
        data = b"[" * 100_000
    elif what == "random":
        data = os.urandom(65_536).translate(None, b'[]{}"')  # for the parser (brackets: the case above)
    else:  # huge: a JSON object as large as the socket takes, its kind 150,000 characters long
        data = json.dumps({"t": "x" * 150_000, "step": 1}).encode()
    import socket
    s = socket.socket(fileno=fd)
    s.send(data)
    s.detach()
print("done", flush=True)
"""
).replace("import argparse, sys", "import argparse, json, sys")


def _spec(sweep_dir: Path, kind: str, mode: str = "") -> Path:
    what = "train: strays:train" if kind == "train" else "program: leaver.py"
    extra = f", mode: '{mode}'" if mode else ""
    return write(
        sweep_dir / "strays.yaml",
        f"name: strays\n{what}\nroot: runs/strays\nparams: {{dir: '{sweep_dir}'{extra}}}\n"
        "grid: {seed: [1, 2]}\nretries: {lost: 2, backoff_seconds: 0}\n",
    )


@pytest.fixture
def leaver_dir(tmp_path: Path) -> Path:
    write(tmp_path / "strays.py", TRAIN)
    write(tmp_path / "leaver.py", PROGRAM)
    return tmp_path


def _pid(d: Path, name: str) -> int:
    return int(wait_for(lambda: (d / f"{name}.pid").exists() and (d / f"{name}.pid").read_text(), what=name))


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _command(pid: int) -> str:
    return " ".join(psutil.Process(pid).cmdline()).rstrip()


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text)


@pytest.mark.parametrize("kind", ["train", "program"])
def test_helpers_of_a_killed_training_process_are_ended_and_the_cell_resumes(leaver_dir: Path, kind: str) -> None:
    spec = _spec(leaver_dir, kind, "killed" if kind == "program" else "")
    root = leaver_dir / "runs" / "strays"
    launch = start("launch", str(spec), "--workers", "1", "--no-live", cwd=leaver_dir)
    trainer, helper, daemon = (_pid(leaver_dir, n) for n in ("trainer", "helper", "daemon"))
    commands = {helper: _command(helper), daemon: _command(daemon)}
    os.kill(trainer, signal.SIGKILL)
    # Before: they held the cell's lock for their life, and the launch never ended.
    wait_for(lambda: not _alive(helper) and not _alive(daemon), what="the helpers ended by the worker")
    out, _ = launch.communicate(timeout=300)
    assert launch.returncode == 0, out

    assert not _alive(helper) and not _alive(daemon)
    shown = cli_json("show", "1.1", "--root", str(root))
    first, second = shown["attempts"]
    assert shown["state"] == "done" and first["reason"] == "lost" and second["reason"] == "completed"
    ended = [e for e in shown["history"] if e["kind"] == "leftovers_ended"]
    assert len(ended) == 1
    detail = ended[0]["detail"]
    assert detail["attempt"] == 1
    # A fork of the training process keeps sweepq's SIGTERM handler (it only sets the preemption flag):
    # it outlives the SIGTERM and is SIGKILLed after STRAY_GRACE_S. A program's helpers die of the SIGTERM.
    signal_name = "SIGKILL" if kind == "train" else "SIGTERM"
    assert sorted((p["pid"], p["command"], p["signal"]) for p in detail["processes"]) == sorted(
        (pid, cmd, signal_name) for pid, cmd in commands.items()
    )
    named = ", ".join(f"pid {p['pid']} ({p['command']})" for p in detail["processes"])
    assert f"sweepq ended 2 processes the attempt left running: {named}" in first["note"]
    # Resumed by the same worker as soon as the strays were gone: they went at the SIGTERM (well
    # inside STRAY_GRACE_S), the retry has no back-off, and the worker claims again within its poll.
    waited = (_when(second["started_at"]) - _when(first["ended_at"])).total_seconds()
    assert waited < STRAY_GRACE_S + POLL_S
    assert cli_json("show", "1.2", "--root", str(root))["state"] == "done"


def test_helpers_outliving_their_whole_launch_are_ended_by_the_next_one(leaver_dir: Path) -> None:
    """kill -9 of the launch, its worker and the training process at once: nobody is left to end the
    helpers, which hold the cell's lock. The next launch sees that the attempt's processes are dead,
    ends the holders, names them, and resumes the cell."""
    spec = _spec(leaver_dir, "train")
    root = leaver_dir / "runs" / "strays"
    launch = start("launch", str(spec), "--workers", "1", "--no-live", cwd=leaver_dir)
    trainer, helper, daemon = (_pid(leaver_dir, n) for n in ("trainer", "helper", "daemon"))
    commands = {helper: _command(helper), daemon: _command(daemon)}
    wait_for(
        lambda: cli_json("show", "1.1", "--root", str(root))["attempts"][0].get("seen_at"),
        what="the attempt's first flush",
    )
    sweep = [launch.pid, *(p.pid for p in psutil.Process(launch.pid).children(recursive=True))]
    for pid in sweep:
        if pid not in commands:
            os.kill(pid, signal.SIGKILL)
    launch.wait()
    assert trainer in sweep and _alive(helper) and _alive(daemon)

    r = cli("launch", str(spec), "--workers", "1", "--no-live", cwd=leaver_dir)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not _alive(helper) and not _alive(daemon)
    shown = cli_json("show", "1.1", "--root", str(root))
    first, second = shown["attempts"]
    assert shown["state"] == "done" and first["reason"] == "lost" and second["reason"] == "completed"
    (detail,) = [e["detail"] for e in shown["history"] if e["kind"] == "leftovers_ended"]
    assert detail["attempt"] == 1 and detail["after"] == "its processes died"
    assert sorted((p["pid"], p["command"]) for p in detail["processes"]) == sorted(commands.items())
    worker_log = "".join(p.read_text() for p in (root / ".sweepq").rglob("*.log"))
    named = ", ".join(f"pid {p['pid']} ({p['command']})" for p in detail["processes"])
    assert (
        f"sweepq: attempt 1 of 1.1 (its processes dead): sweepq ended 2 processes the attempt left running: {named}"
        in (worker_log)
    )


def test_a_daemon_left_by_a_done_cell_is_ended_with_its_attempt(leaver_dir: Path) -> None:
    spec = _spec(leaver_dir, "program", "daemon")
    root = leaver_dir / "runs" / "strays"
    r = cli("launch", str(spec), "--workers", "1", "--no-live", cwd=leaver_dir)
    assert r.returncode == 0, r.stdout + r.stderr
    daemon = int((leaver_dir / "daemon.pid").read_text())
    assert not _alive(daemon)
    shown = cli_json("show", "1.1", "--root", str(root))
    (only,) = shown["attempts"]
    assert shown["state"] == "done" and only["reason"] == "completed"
    (event,) = [e["detail"] for e in shown["history"] if e["kind"] == "leftovers_ended"]
    assert [p["pid"] for p in event["processes"]] == [daemon]
    receipt = json.loads((root / "cells/1.1/attempts/1/receipt.json").read_text())
    assert [p["pid"] for p in receipt["leftovers_ended"]] == [daemon]
    # Nothing holds the cell now: reset takes it at once.
    reset = cli("reset", "1.1", "--root", str(root))
    assert reset.returncode == 0 and reset.stdout == "reset: 1.1\n", reset.stdout + reset.stderr


def test_reset_and_repair_name_a_process_outside_sweepq_that_holds_a_cell(leaver_dir: Path) -> None:
    """A done cell's lock held by a process no worker can end (it took the cell's folder descriptor
    and lock after the launch ended, as a daemon whose worker was killed would hold it)."""
    spec = _spec(leaver_dir, "program", "plain")
    root = leaver_dir / "runs" / "strays"
    r = cli("launch", str(spec), "--workers", "1", "--no-live", cwd=leaver_dir)
    assert r.returncode == 0, r.stdout + r.stderr
    holder = start_holder(root / "cells" / "1.1")
    try:
        command = _command(holder.pid)
        reset = cli("reset", "1.1", "--root", str(root))
        assert reset.returncode == 1 and reset.stdout == ""
        assert reset.stderr == (
            f"1.1 not reset: its lock is held by pid {holder.pid} ({command}), a process that is not a "
            "running attempt of this sweep (a daemon or helper an attempt left, holding the cell folder's "
            f"descriptor). End it (kill {holder.pid}), then run the reset again.\n"
        )
        repair = cli("repair", str(spec), "--force", cwd=leaver_dir)
        assert repair.returncode == 2 and repair.stdout == ""
        assert (
            f"cell 1.1 of {root} is owned by a live process: its lock is held by pid {holder.pid} ({command}). "
            in " ".join(repair.stderr.split())
        )
        assert cli_json("show", "1.1", "--root", str(root))["state"] == "done"  # nothing moved
    finally:
        holder.kill()
        holder.wait()
    assert cli("reset", "1.1", "--root", str(root)).stdout == "reset: 1.1\n"


def start_holder(folder: Path) -> Any:
    """A process of its own holding the folder's flock (its command line short: named whole)."""
    import subprocess
    import sys

    code = (
        "import fcntl, os, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "time.sleep(3600)\n"
    )
    write(folder.parent / "holder.py", code)
    p = subprocess.Popen(
        [sys.executable, "holder.py", folder.name], cwd=folder.parent, stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None and p.stdout.readline() == "held\n"
    return p


@pytest.mark.parametrize(
    ("what", "why"),
    [
        ("brackets", "not a message: JSON nested deeper than 32 levels"),
        ("random", "not JSON: "),
        ("huge", "unknown message kind 'xxxxxxxx"),
    ],
)
def test_a_worker_survives_bytes_that_are_not_messages(leaver_dir: Path, what: str, why: str) -> None:
    spec = _spec(leaver_dir, "program", f"send:{what}")
    root = leaver_dir / "runs" / "strays"
    r = cli("launch", str(spec), "--workers", "1", "--no-live", cwd=leaver_dir)
    assert r.returncode == 0, r.stdout + r.stderr
    for cell in ("1.1", "1.2"):
        assert cli_json("show", cell, "--root", str(root))["state"] == "done"
    shown = cli_json("show", "1.1", "--root", str(root))
    (only,) = shown["attempts"]
    assert only["reason"] == "completed"
    (event,) = [e["detail"] for e in shown["history"] if e["kind"] == "message_rejected"]
    assert event["why"].startswith(why) and len(event["why"]) < 300
    assert 0 < len(event["excerpt"]) <= 120
    assert f"1 message on the channel was rejected: {event['why']}" in only["note"]
