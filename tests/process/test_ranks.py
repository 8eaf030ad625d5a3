"""Cells of several processes (`processes: 2`): a torchrun script on gloo through the real CLI.

One attempt, one fate: a rank killed with SIGKILL, or one that raises while its peer is blocked,
ends the attempt for every rank within the configured RANK_GRACE_SECONDS; the receipt names the
rank; the retry resumes from the program's own checkpoint. A launch sent SIGTERM stops every rank.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest
from conftest import HERE, cli_json, start, wait_for, wait_gone, write

from sweepq.program.ranks import POLL_S, RANK_GRACE_SECONDS

# What the attempt may add to the grace after seeing a rank end: polls to notice it and to reap the others,
# and on a loaded machine their delays and a torch process's teardown after SIGKILL. Without the watchdog
# the peer would wait for its collective (or sleep) for an hour: the bound tells the two apart either way.
SLACK_S = 200 * POLL_S


@pytest.fixture
def ddp_dir(tmp_path: Path) -> Path:
    for name in ("ddp.py", "ddp_run.py"):
        shutil.copy(HERE / "programs" / name, tmp_path / name)
    return tmp_path


def sweep(params: str, retries: str = "{backoff_seconds: 1}") -> str:
    return f"""
name: ddp
program: ddp.py
processes: 2
params: {{{params}}}
retries: {retries}
grid: {{save_every: [5]}}
"""


def attempt_dir(root: Path, attempt: int) -> Path:
    return root / "cells" / "1.1" / "attempts" / str(attempt)


def said(root: Path, attempt: int, text: str) -> bool:
    f = attempt_dir(root, attempt) / "stdout.log"
    return f.exists() and text in f.read_text()


def receipt(root: Path, attempt: int) -> dict[str, Any]:
    return json.loads((attempt_dir(root, attempt) / "receipt.json").read_text())


def rank_pids(root: Path) -> list[int]:
    return [int((root / "cells" / "1.1" / "output" / f"pid-{r}").read_text()) for r in (0, 1)]


def test_a_rank_killed_ends_the_attempt_for_both_and_the_retry_resumes(ddp_dir: Path) -> None:
    spec = write(ddp_dir / "ddp.yaml", sweep("steps: 30, delay: 0.1"))
    root = ddp_dir / "runs" / "ddp"
    launch = start("launch", str(spec), "--no-live", cwd=ddp_dir)
    wait_for(lambda: said(root, 1, "rank 1: saved step 10"), what="both ranks past their second checkpoint")
    pids = rank_pids(root)
    os.kill(pids[1], signal.SIGKILL)  # one rank dies mid-run, its peer in DDP's allreduce
    wait_gone(pids)
    out, _ = launch.communicate(timeout=300)
    assert launch.returncode == 0, out

    first = receipt(root, 1)
    assert first["reason"] == "lost", first
    assert f"rank 1 (pid {pids[1]}) was killed by SIGKILL first" in first["note"]
    ends = {r["rank"]: r for r in first["ranks"]}
    assert ends[1]["exit_signal"] == signal.SIGKILL and not ends[1]["ended_by_sweepq"]
    assert ends[0]["seconds"] - ends[1]["seconds"] <= RANK_GRACE_SECONDS + SLACK_S
    shown = cli_json("show", "1.1", "--root", str(root))
    assert [a["reason"] for a in shown["attempts"]] == ["lost", "completed"]

    log = (attempt_dir(root, 1) / "stdout.log").read_text()
    for rank in (0, 1):  # torchrun's environment, one rank each
        assert f"'RANK': '{rank}', 'LOCAL_RANK': '{rank}', 'WORLD_SIZE': '2', 'LOCAL_WORLD_SIZE': '2'" in log
    assert "'MASTER_ADDR': '127.0.0.1'" in log
    resumed = (attempt_dir(root, 2) / "stdout.log").read_text()
    said_by_ranks = [line for line in resumed.splitlines() if re.search(r"rank \d: ", line)]
    # Each rank's lines whole and marked, though both print unbuffered into the one log at once.
    assert len(said_by_ranks) > 10 and all(re.match(r"\[rank(\d)\]:rank \1: ", x) for x in said_by_ranks), resumed
    for rank in (0, 1):
        (step,) = map(int, re.findall(rf"^\[rank{rank}\]:rank {rank}: run 2, starting at step (\d+)$", resumed, re.M))
        assert step >= 10  # from the program's own checkpoint, on every rank
        assert f"rank {rank}: finished 30 steps" in resumed


def test_a_rank_that_raises_ends_its_blocked_peer(ddp_dir: Path) -> None:
    """Rank 0 sleeps for an hour where rank 1 fails: only the attempt's watchdog can end it."""
    spec = write(ddp_dir / "ddp.yaml", sweep("steps: 30, delay: 0.05, fail_rank1_at: 3", "{error: 0}"))
    root = ddp_dir / "runs" / "ddp"
    launch = start("launch", str(spec), "--no-live", cwd=ddp_dir)
    out, _ = launch.communicate(timeout=300)
    assert launch.returncode != 0, out  # the cell failed
    first = receipt(root, 1)
    assert first["reason"] == "error", first
    pids = rank_pids(root)
    assert f"rank 1 (pid {pids[1]}) exited 1 first; sweepq then ended rank(s) 0" in first["note"]
    assert "rank 1 fails on purpose" in first["error_tail"]
    ends = {r["rank"]: r for r in first["ranks"]}
    assert ends[1]["exit_code"] == 1 and ends[0]["ended_by_sweepq"] and ends[0]["exit_signal"] == signal.SIGTERM
    assert ends[0]["seconds"] - ends[1]["seconds"] <= RANK_GRACE_SECONDS + SLACK_S


def test_the_launch_sent_sigterm_stops_every_rank(ddp_dir: Path) -> None:
    spec = write(ddp_dir / "ddp.yaml", sweep("steps: 1000, delay: 0.1"))
    root = ddp_dir / "runs" / "ddp"
    launch = start("launch", str(spec), "--no-live", cwd=ddp_dir)
    wait_for(lambda: said(root, 1, "rank 1: saved step 5"), what="both ranks past their first checkpoint")
    pids = rank_pids(root)
    launch.send_signal(signal.SIGTERM)
    out, _ = launch.communicate(timeout=120)
    assert launch.returncode == 130, out
    wait_gone(pids)
    first = receipt(root, 1)
    assert first["reason"] == "preempted", first
    assert all(r["ended_by_sweepq"] and r["exit_signal"] == signal.SIGTERM for r in first["ranks"])


def test_a_torchrun_program_with_runs_on_rank_0_resumes_from_its_committed_checkpoint(ddp_dir: Path) -> None:
    spec = write(
        ddp_dir / "ddp.yaml",
        sweep("steps: 30, delay: 0.1").replace("ddp.py", "ddp_run.py") + "checkpoint: {every_steps: 5}\n",
    )
    root = ddp_dir / "runs" / "ddp"
    launch = start("launch", str(spec), "--no-live", cwd=ddp_dir)
    wait_for(lambda: (root / "cells" / "1.1" / "checkpoints" / "step-10" / "manifest.json").exists(), what="step 10")
    pids = rank_pids(root)
    os.kill(pids[1], signal.SIGKILL)
    wait_gone(pids)
    out, _ = launch.communicate(timeout=300)
    assert launch.returncode == 0, out
    first, second = receipt(root, 1), receipt(root, 2)
    assert first["reason"] == "lost" and "rank 1" in first["note"], first
    assert second["reason"] == "completed" and second["start_step"] >= 10 and second["end_step"] == 30, second
    resumed = (attempt_dir(root, 2) / "stdout.log").read_text()
    assert f"rank 1: starting at step {second['start_step']}" in resumed  # the step rank 0 restored, on rank 1
