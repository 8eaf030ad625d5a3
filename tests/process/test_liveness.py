"""Liveness with real SIGKILLs: the lock is the proof of life, never two writers."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest
from conftest import cli, cli_json, cmdline, start, tree, wait_for, write

SPEC = """
name: live
train: trainers:train
root: runs/live
params: {steps: 200, delay: 0.02, stop_delay: 3.0}
checkpoint: {every_steps: 10}
groups:
  - name: a
    grid: {seed: [1]}
"""


def attempt_process(launch_pid: int) -> tuple[psutil.Process, psutil.Process]:
    """(worker, training process) under a launch."""
    procs = tree(launch_pid)
    runner = next(p for p in procs if "sweepq.attempt" in cmdline(p))
    worker = runner.parent()
    assert worker is not None
    return worker, runner


def test_killed_worker_leaves_training_process_to_finish_and_no_second_writer(sweep_dir: Path) -> None:
    spec = write(sweep_dir / "live.yaml", SPEC)
    root = sweep_dir / "runs" / "live"
    a = start("launch", str(spec), "--workers", "1", cwd=sweep_dir)
    wait_for(
        lambda: len(tree(a.pid)) >= 3 and any("sweepq.attempt" in cmdline(p) for p in tree(a.pid)),
        what="training process started",
    )
    wait_for(
        lambda: (root / "cells/1.1/checkpoints").exists() and any((root / "cells/1.1/checkpoints").iterdir()),
        what="a first checkpoint",
    )
    worker, runner = attempt_process(a.pid)
    worker.send_signal(signal.SIGKILL)
    a.send_signal(signal.SIGKILL)
    # A second launch arrives while the orphaned training process is still writing
    # its emergency checkpoint (it takes 3 s to stop): it must wait for the lock.
    b = start("launch", str(spec), "--workers", "1", cwd=sweep_dir)
    assert runner.is_running()
    out, _ = b.communicate(timeout=300)
    assert b.returncode == 0, out
    assert not runner.is_running()

    first, second = cli_json("show", "1.1", "--root", str(root))["attempts"]
    assert first["reason"] == "preempted"  # closed by the orphan itself, receipt before it exited
    assert "SIGTERM" in (first["note"] or "")
    assert second["reason"] == "completed"
    assert second["started_at"] >= first["ended_at"]
    assert second["start_step"] == first["end_step"] > 0  # nothing lost on a graceful stop


def test_killed_training_process_is_lost_and_resumes_from_checkpoint(sweep_dir: Path) -> None:
    spec = write(sweep_dir / "live.yaml", SPEC.replace("stop_delay: 3.0", "stop_delay: 0"))
    root = sweep_dir / "runs" / "live"
    a = start("launch", str(spec), "--workers", "1", cwd=sweep_dir)
    wait_for(
        lambda: (
            (root / "cells/1.1/checkpoints").exists()
            and len(list((root / "cells/1.1/checkpoints").glob("step-*"))) >= 2
        ),
        what="two checkpoints",
    )
    _, runner = attempt_process(a.pid)
    runner.send_signal(signal.SIGKILL)
    out, _ = a.communicate(timeout=300)
    assert a.returncode == 0, out
    first, second = cli_json("show", "1.1", "--root", str(root))["attempts"]
    assert first["reason"] == "lost" and first["exit_signal"] == signal.SIGKILL
    assert "SIGKILL" in first["note"]
    assert 0 < second["start_step"] <= first["end_step"]
    assert second["reason"] == "completed"
    report = {r["reason"]: r for r in cli_json("report", "--root", str(root))}
    assert report["lost"]["steps_lost"] == first["end_step"] - second["start_step"]


def test_sigterm_to_every_process_preempts_with_receipts_and_zero_lost_steps(sweep_dir: Path) -> None:
    spec = write(
        sweep_dir / "live.yaml", SPEC.replace("stop_delay: 3.0", "stop_delay: 0").replace("seed: [1]", "seed: [1, 2]")
    )
    root = sweep_dir / "runs" / "live"
    a = start("launch", str(spec), "--workers", "2", cwd=sweep_dir)
    wait_for(
        lambda: sum("sweepq.attempt" in cmdline(p) for p in tree(a.pid)) == 2,
        what="two cells running",
    )
    time.sleep(1.0)
    for p in tree(a.pid):  # like `pkill -TERM -f sweepq`
        p.send_signal(signal.SIGTERM)
    out, _ = a.communicate(timeout=120)
    assert a.returncode == 130, out
    status = {c["cell"]: c for c in cli_json("status", "--root", str(root))}
    assert {c["state"] for c in status.values()} == {"interrupted"}
    for cell in status:
        (att,) = cli_json("show", cell, "--root", str(root))["attempts"]
        assert att["reason"] == "preempted" and att["ended_at"]
        steps = sorted(int(p.name.split("-")[1]) for p in (root / "cells" / cell / "checkpoints").glob("step-*"))
        assert steps[-1] == att["end_step"]  # the emergency checkpoint is the last step trained
    again = cli("launch", str(spec), cwd=sweep_dir)
    assert again.returncode == 0, again.stdout + again.stderr
    report = {r["reason"]: r for r in cli_json("report", "--root", str(root))}
    assert report["preempted"]["steps_lost"] == 0


def test_resume_under_changed_code_or_data_warns_and_records_it(sweep_dir: Path) -> None:
    write(sweep_dir / "data.txt", "shard 1\n")
    spec = write(sweep_dir / "live.yaml", SPEC.replace("stop_delay: 3.0", "stop_delay: 0") + "data: [data.txt]\n")
    root = sweep_dir / "runs" / "live"
    a = start("launch", str(spec), "--workers", "1", cwd=sweep_dir)
    wait_for(
        lambda: (
            len(list((root / "cells/1.1/checkpoints").glob("step-*"))) >= 1
            if (root / "cells/1.1/checkpoints").exists()
            else False
        ),
        what="a checkpoint",
    )
    a.send_signal(signal.SIGTERM)
    a.communicate(timeout=120)
    trainers = sweep_dir / "trainers.py"
    trainers.write_text(trainers.read_text() + "\n# edited after the checkpoint\n")
    write(sweep_dir / "data.txt", "shard 1, regenerated\n")
    r = cli("launch", str(spec), cwd=sweep_dir)
    assert r.returncode == 0, r.stdout + r.stderr
    show = cli_json("show", "1.1", "--root", str(root))
    resumed = show["attempts"][1]
    assert resumed["start_step"] > 0
    assert "training code" in resumed["note"] and "data" in resumed["note"]
    (event,) = [e for e in show["history"] if e["kind"] == "resumed_under_changes"]
    assert event["detail"]["step"] == resumed["start_step"] and len(event["detail"]["notes"]) == 2
    assert resumed["code_fingerprint"]["sha256"] != show["attempts"][0]["code_fingerprint"]["sha256"]
    stderr = (root / "cells/1.1/attempts/2/stderr.log").read_text()
    assert "sweepq warning: resuming 1.1" in stderr


def test_cancel_of_a_running_cell_preempts_it_first(sweep_dir: Path) -> None:
    # A cell far longer than any wait here: only the cancel can end it, however slow the machine.
    text = SPEC.replace("stop_delay: 3.0", "stop_delay: 0").replace("steps: 200,", "steps: 1000000,")
    spec = write(sweep_dir / "live.yaml", text)
    root = sweep_dir / "runs" / "live"
    a = start("launch", str(spec), "--workers", "1", cwd=sweep_dir)
    wait_for(
        lambda: (root / "cells/1.1/checkpoints").exists() and any((root / "cells/1.1/checkpoints").glob("step-*")),
        what="a checkpoint",
    )
    r = cli("cancel", "1.1", "--root", str(root))
    assert r.returncode == 0 and "asked the workers of 1.1" in r.stdout
    out, _ = a.communicate(timeout=120)
    assert a.returncode == 0, out  # every cell done or cancelled
    show = cli_json("show", "1.1", "--root", str(root))
    (att,) = show["attempts"]
    assert show["state"] == "cancelled" and att["reason"] == "cancelled"
    steps = sorted(int(p.name.split("-")[1]) for p in (root / "cells/1.1/checkpoints").glob("step-*"))
    assert steps[-1] == att["end_step"]  # it checkpointed before it stopped
    assert cli("retry", "1.1", "--root", str(root)).returncode == 0
    assert cli_json("show", "1.1", "--root", str(root))["state"] == "queued"


def test_first_ctrl_c_is_graceful_second_stops_at_once(sweep_dir: Path) -> None:
    slow_stop_s = 30  # the training code takes this long to stop after the first Ctrl-C
    spec = write(sweep_dir / "live.yaml", SPEC.replace("stop_delay: 3.0", f"stop_delay: {slow_stop_s}"))
    root = sweep_dir / "runs" / "live"
    a = start("launch", str(spec), "--workers", "1", cwd=sweep_dir)
    wait_for(lambda: any((root / "cells/1.1/checkpoints").glob("step-*")), what="a checkpoint")
    a.send_signal(signal.SIGINT)  # the training code now takes slow_stop_s to stop
    time.sleep(1.0)
    assert a.poll() is None
    t0 = time.monotonic()
    a.send_signal(signal.SIGINT)
    out, _ = a.communicate(timeout=60)
    # Stopped by the second Ctrl-C, well before the training code's own stop (the bound is its configured delay).
    assert a.returncode == 130 and time.monotonic() - t0 < slow_stop_s / 2, out
    (att,) = cli_json("show", "1.1", "--root", str(root))["attempts"]
    assert att["reason"] == "preempted" and "hard stop" in att["note"]
    assert cli_json("show", "1.1", "--root", str(root))["state"] == "interrupted"


def test_a_sigkill_from_outside_while_stopping_is_not_blamed_on_sweepq(sweep_dir: Path) -> None:
    """SIGTERM, then SIGKILL before sweepq's grace period ends (docker stop, systemd, a spot VM going
    down): the attempt is preempted, and its receipt does not say that sweepq killed it."""
    stopping = sweep_dir / "stopping"
    params = f"stop_delay: 30, stopping_file: '{stopping}'"
    spec = write(sweep_dir / "live.yaml", SPEC.replace("stop_delay: 3.0", params))
    root = sweep_dir / "runs" / "live"
    a = start("launch", str(spec), "--workers", "1", cwd=sweep_dir)
    wait_for(lambda: any((root / "cells/1.1/checkpoints").glob("step-*")), what="a checkpoint")
    _, runner = attempt_process(a.pid)
    a.send_signal(signal.SIGTERM)  # passed on to the worker and by it to the training process
    wait_for(stopping.exists, what="the training process told to stop")
    runner.send_signal(signal.SIGKILL)  # long before the grace period (60 s) ends
    out, _ = a.communicate(timeout=120)
    (att,) = cli_json("show", "1.1", "--root", str(root))["attempts"]
    assert att["reason"] == "preempted", out
    assert "from outside sweepq" in att["note"] and "killed by sweepq" not in att["note"], att["note"]
    assert cli_json("show", "1.1", "--root", str(root))["state"] == "interrupted"


def test_file_lock_liveness_in_one_process(tmp_path: Path) -> None:
    """The seam's contract without processes: take before claim, hand over, ask without creating."""
    from sweepq.layout import CellPaths
    from sweepq.queue import liveness

    owners = liveness.for_root(tmp_path)
    assert owners.owner_alive("1.1") is False
    assert not CellPaths(tmp_path, "1.1").lock.exists()  # a read-only question creates nothing

    owner = owners.take("1.1")
    assert owner is not None and owner.cell == "1.1"
    assert owners.take("1.1") is None  # flock is per open file description: a second owner is refused
    assert owners.owner_alive("1.1") is True
    handoff = owner.handoff()
    (fd,) = handoff.fds
    assert handoff.env == {liveness.ENV_LOCK_FD: str(fd)}

    inherited = owners.inherit("1.1", handoff.env)  # the same description: it holds the lock
    assert inherited is not None and owners.inherit("1.1", handoff.env) is inherited
    assert owners.inherit("1.1", {}) is None  # not started by a worker
    other = owners.take("1.2")
    assert other is not None
    stranger = os.open(CellPaths(tmp_path, "1.2").lock, os.O_RDONLY)
    try:
        with pytest.raises(liveness.OwnershipLost):
            owners.inherit("1.2", {liveness.ENV_LOCK_FD: str(stranger)})
    finally:
        os.close(stranger)
        other.release()

    owner.release()
    owner.release()  # idempotent
    assert owners.owner_alive("1.1") is False
    again = owners.take("1.1")
    assert again is not None
    again.release()
