"""A disk that fills up under a running sweep, and a training process that stops, on a real small disk.

The sweep root lives on a tmpfs of its own, which the test fills (a file fallocated over every
free byte) while a training process waits at step 5 for it (its checkpoint of step 5 committed),
so that the next write to need room is the first to meet the full disk. Once the room is given
back, the same command finishes the cell from its last good checkpoint, nothing lost. One story,
three launches (each start costs seconds):

1. The trainer reports progress each step; SIGSTOPped, `status` says it makes no progress once
   past the configured threshold. The disk fills: the worker's next flush of progress fails, so
   the worker stops its trainer (whose emergency checkpoint meets the full disk too: `disk_full`,
   in a receipt written into the room kept for it), exits, and the launch says why.
2. Room again, then full again: the relaunch records attempt 1 from its receipt (not `lost`), and
   attempt 2, which reports nothing, meets the full disk at its checkpoint: `disk_full`, the cell
   `interrupted`, never `failed`.
3. Room again: the cell resumes from step 5 and completes, every step trained once.
"""

from __future__ import annotations

import functools
import json
import re
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import cli, env_with, start, trainer_of, wait_for, write
from unit.smallfs import SmallDisk, small_disk

from sweepq.host.diskfull import RESERVE_BYTES
from sweepq.layout import CellPaths

STEPS = 60
SIZE = 2 * RESERVE_BYTES  # bytes of state: a checkpoint never fits in the room a receipt's reserve gives back
STALL_S = 2.0  # SWEEPQ_STALL_SECONDS for `status`: a stopped trainer is told after this
TRAINER = f"""
import os, time
import torch

def train(cfg, run):
    state = {{"w": torch.zeros({SIZE // 4}), "step": 0}}
    run.restore(state)
    run.set_total({STEPS})
    while state["step"] < {STEPS}:
        # Attempts 1 and 2 wait at step 5 until the test, having filled the disk, says go.
        while state["step"] == 5 and run.attempt < 3 and not os.path.exists(f"go{{run.attempt}}"):
            time.sleep(0.02)
            if run.should_stop:
                return None
        state["step"] += 1
        state["w"] += 1  # w == step everywhere: a lost or repeated step shows in the result
        if run.attempt == 1:  # progress each step, slowly: the worker's flush meets the full disk first
            run.log(state["step"], loss=float(state["step"]))
            time.sleep(0.2)
        if run.should_stop:
            run.checkpoint(state, state["step"], force=True)
            return None
        run.checkpoint(state, state["step"], force=state["step"] in ((5,) if run.attempt == 1 else (10, 15)))
    return {{"w": float(state["w"][0]), "w_min": float(state["w"].min())}}
"""
SPEC = """
name: full
train: filltrain:train
root: disk/root
checkpoint: {every_steps: 100000, keep_last: 100}
retries: {backoff_seconds: 0.5, backoff_max_seconds: 1}
grid: {x: [1]}
"""


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallDisk]:
    write(tmp_path / "filltrain.py", TRAINER)
    write(tmp_path / "full.yaml", SPEC)
    with small_disk(tmp_path / "disk", "24m") as d:
        yield d


def query(root: Path, sql: str) -> list[tuple]:
    if not (root / "sweepq.db").exists():
        return []
    con = sqlite3.connect(f"file:{root / 'sweepq.db'}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    except sqlite3.OperationalError:  # not migrated yet
        return []
    finally:
        con.close()


def attempts(root: Path) -> list[tuple]:
    return query(root, "select number, reason, note, start_step, end_step from attempts order by number")


def status_text(root: Path, env: dict[str, str]) -> str:
    r = cli("status", "--root", str(root), env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_a_full_disk_costs_only_the_time_until_there_is_room(disk: SmallDisk, tmp_path: Path) -> None:
    root = tmp_path / "disk" / "root"
    cell = CellPaths(root, "1.1")
    at_5 = "select step from checkpoints"
    first = start("launch", "full.yaml", "--workers", "1", cwd=tmp_path)
    wait_for(lambda: query(root, at_5) == [(5,)], what="attempt 1's checkpoint of step 5 in the database")

    # 1. A stopped trainer is told; then the database meets the full disk.
    (tmp_path / "go1").touch()
    wait_for(lambda: query(root, "select step from cells where step > 6"), what="progress past step 6")
    frozen = wait_for(functools.partial(trainer_of, first.pid), what="the training process")
    frozen.send_signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    reading = env_with(SWEEPQ_STALL_SECONDS=str(STALL_S), COLUMNS="250")
    time.sleep(STALL_S)  # the threshold is at least this: nothing to see before
    told = wait_for(lambda: re.search(r"running .* no progress for (\d+) s", status_text(root, reading)), what="told")
    assert int(told[1]) >= STALL_S and time.monotonic() - stopped_at > STALL_S
    disk.fill()
    frozen.send_signal(signal.SIGCONT)  # its next progress: the worker's flush fails
    out, _ = first.communicate(timeout=120)
    words = f"disk full on tmpfs ({disk.path}, "
    assert first.returncode == 1 and f"{words}" in out, out
    assert re.search(r"worker \S+:\d+/w1 could not write the sweep's files and stopped\. Free some space", out), out
    assert attempts(root)[0][1] is None  # the database never heard how attempt 1 ended...
    receipt = json.loads(cell.receipt(1).read_text())
    assert (receipt["reason"], receipt["note"]) == ("disk_full", f"{words}0 B free)")  # ...its receipt says it
    assert "No space left on device" in receipt["error_tail"]  # its emergency checkpoint's error

    # 2. Room, then full again while attempt 2 waits at step 5: its checkpoint meets the full disk.
    disk.free()
    second = start("launch", "full.yaml", "--workers", "1", cwd=tmp_path)
    wait_for(lambda: query(root, "select start_step from attempts where number = 2") == [(5,)], what="attempt 2")
    disk.fill()
    (tmp_path / "go2").touch()  # its checkpoint of step 10 fails
    wait_for(lambda: second.poll() is not None or attempts(root)[1][1] is not None, what="attempt 2's end")
    second.send_signal(signal.SIGINT)  # the disk is still full for a third attempt: stop, as a user would
    out, _ = second.communicate(timeout=120)
    assert "resuming first: 1.1 (from checkpoint step 5)" in out
    assert f"1.1 interrupted  (last: disk_full: {words}0 B free); closed from its receipt file)" in out, out
    receipt = json.loads(cell.receipt(2).read_text())
    # Step 10's write failed on the writer thread; its error surfaced at the next checkpoint, step 15.
    assert (receipt["reason"], receipt["note"], receipt["end_step"]) == ("disk_full", f"{words}0 B free)", 15)
    assert cell.committed_steps() == [5]

    # 3. Room: the same command finishes the cell from step 5.
    disk.free()
    third = cli("launch", "full.yaml", cwd=tmp_path, timeout=300)
    assert third.returncode == 0, third.stdout + third.stderr
    assert "resuming first: 1.1 (from checkpoint step 5)" in third.stdout
    assert f"(last: disk_full: {words}0 B free)" in third.stdout
    assert query(root, "select state from cells") == [("done",)]
    done = json.loads(cell.done.read_text())
    assert done["metrics"] == {"w": STEPS, "w_min": STEPS}  # every step once: nothing lost, nothing twice
    ended = [(a[1], a[3]) for a in attempts(root)]
    assert ended == [("disk_full", 0), ("disk_full", 5), ("completed", 5)]  # never `failed`, never `lost`
    assert attempts(root)[0][2] == f"{words}0 B free); closed from its receipt file"
    assert attempts(root)[1][2].startswith(f"{words}0 B free)")
