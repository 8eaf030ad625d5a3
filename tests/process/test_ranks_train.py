"""`train:` cells of several processes (`processes: 2`): every rank calls train(cfg, run), DDP on gloo.

Each rank has its own Run: rank 0 decides the cadence and the stop and commits one checkpoint holding
the replicated state and every rank's RNG streams; `run.restore` gives each rank its own streams back.
A rank killed with SIGKILL ends the attempt for both (`lost`) and the retry resumes; a launch sent
SIGTERM stops both ranks at the same step (`preempted`) and the relaunch loses no step; either way the
final weights equal those of a two-rank run never interrupted, bit for bit (ddp_train.py draws each
rank's batches from its own torch, numpy and python streams, so a rank resumed with another's streams,
or with fresh ones, trains to other weights).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import HERE, cli_json, start, tree, wait_for, wait_gone, write

from sweepq.program.ranks import POLL_S, RANK_GRACE_SECONDS

# What the attempt may add to the grace after seeing a rank end: polls to notice it and to reap the others,
# and on a loaded machine their delays and a torch process's teardown after SIGKILL. Without the watchdog
# the peer would wait for its collective (or sleep) for an hour: the bound tells the two apart either way.
SLACK_S = 200 * POLL_S
STEPS = 40
# How long a test waits for progress, a launch or processes to end: each wait returns as soon as what it
# waits for happens, so this only bounds a hang (two ranks each import torch: slow on a busy machine).
WAIT_S = 900


def sweep(delay: float) -> str:
    return f"""
name: ddp
train: ddp_train:train
processes: 2
params: {{steps: {STEPS}, delay: {delay}}}
checkpoint: {{every_steps: 5}}
retries: {{backoff_seconds: 1}}
grid: {{lr: [0.05]}}
"""


def make_dir(where: Path) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "programs" / "ddp_train.py", where / "ddp_train.py")
    return where


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The final weights of the same cell run by two ranks from start to end in one attempt."""
    d = make_dir(tmp_path_factory.mktemp("reference"))
    spec = write(d / "ddp.yaml", sweep(0.0))
    launch = start("launch", str(spec), "--no-live", cwd=d)
    out, _ = launch.communicate(timeout=WAIT_S)
    assert launch.returncode == 0, out
    done = json.loads((d / "runs" / "ddp" / "cells" / "1.1" / "DONE.json").read_text())
    assert receipt(d / "runs" / "ddp", 1)["reason"] == "completed"
    return str(done["metrics"]["weights"])


def attempt_dir(root: Path, attempt: int) -> Path:
    return root / "cells" / "1.1" / "attempts" / str(attempt)


def log(root: Path, attempt: int) -> str:
    f = attempt_dir(root, attempt) / "stdout.log"
    return f.read_text() if f.exists() else ""


def receipt(root: Path, attempt: int) -> dict[str, Any]:
    return json.loads((attempt_dir(root, attempt) / "receipt.json").read_text())


def rank_pids(root: Path) -> list[int]:
    return [int((root / "cells" / "1.1" / "output" / f"pid-{r}").read_text()) for r in (0, 1)]


def starts(text: str) -> dict[int, int]:
    """The step each rank started at, as it printed it."""
    return {int(r): int(s) for r, s in re.findall(r"rank (\d) of 2: attempt \d+, starting at step (\d+)", text)}


def final_weights(root: Path) -> str:
    done = json.loads((root / "cells" / "1.1" / "DONE.json").read_text())
    return str(done["metrics"]["weights"])


def test_a_rank_killed_ends_the_attempt_for_both_and_the_retry_resumes_exactly(
    tmp_path: Path, uninterrupted: str
) -> None:
    d = make_dir(tmp_path)
    spec = write(d / "ddp.yaml", sweep(0.1))
    root = d / "runs" / "ddp"
    launch = start("launch", str(spec), "--no-live", cwd=d)
    wait_for(
        lambda: (root / "cells" / "1.1" / "checkpoints" / "step-10" / "manifest.json").exists(),
        timeout=WAIT_S,
        what="step 10",
    )
    pids = rank_pids(root)
    os.kill(pids[1], signal.SIGKILL)  # one rank dies mid-run, its peer in DDP's allreduce or at a meeting
    wait_gone(pids, timeout=WAIT_S)
    out, _ = launch.communicate(timeout=WAIT_S)
    assert launch.returncode == 0, out

    first, second = receipt(root, 1), receipt(root, 2)
    assert first["reason"] == "lost", first
    assert f"rank 1 (pid {pids[1]}) was killed by SIGKILL first" in first["note"]
    ends = {r["rank"]: r for r in first["ranks"]}
    assert ends[1]["exit_signal"] == signal.SIGKILL and not ends[1]["ended_by_sweepq"]
    assert ends[0]["seconds"] - ends[1]["seconds"] <= RANK_GRACE_SECONDS + SLACK_S
    assert second["reason"] == "completed" and second["start_step"] >= 10 and second["end_step"] == STEPS, second
    assert starts(log(root, 2)) == {0: second["start_step"], 1: second["start_step"]}  # every rank, one step
    assert final_weights(root) == uninterrupted
    shown = cli_json("show", "1.1", "--root", str(root))
    assert [a["reason"] for a in shown["attempts"]] == ["lost", "completed"]


def test_the_launch_sent_sigterm_stops_every_rank_at_one_step_and_the_relaunch_loses_none(
    tmp_path: Path, uninterrupted: str
) -> None:
    d = make_dir(tmp_path)
    spec = write(d / "ddp.yaml", sweep(0.1))
    root = d / "runs" / "ddp"
    launch = start("launch", str(spec), "--no-live", cwd=d)
    wait_for(lambda: "rank 1: step 12 done" in log(root, 1), timeout=WAIT_S, what="rank 1 at step 12")
    pids = rank_pids(root)
    launch.send_signal(signal.SIGTERM)
    out, _ = launch.communicate(timeout=WAIT_S)
    assert launch.returncode == 130, out
    wait_gone(pids, timeout=WAIT_S)

    first = receipt(root, 1)
    assert first["reason"] == "preempted", first
    stopped = {int(r): int(s) for r, s in re.findall(r"rank (\d): stopped at step (\d+)", log(root, 1))}
    assert set(stopped) == {0, 1} and stopped[0] == stopped[1], stopped  # the same step on every rank
    assert 12 <= first["end_step"] == stopped[0] < STEPS
    assert (root / "cells" / "1.1" / "checkpoints" / f"step-{stopped[0]}" / "manifest.json").exists()

    relaunch = start("launch", str(spec), "--no-live", cwd=d)
    out, _ = relaunch.communicate(timeout=WAIT_S)
    assert relaunch.returncode == 0, out
    second = receipt(root, 2)
    assert second["reason"] == "completed" and second["start_step"] == first["end_step"], second  # none lost
    assert starts(log(root, 2)) == {0: stopped[0], 1: stopped[0]}
    assert final_weights(root) == uninterrupted


def test_a_stop_signal_that_reaches_one_rank_stops_both_at_the_same_step(tmp_path: Path, uninterrupted: str) -> None:
    """SIGTERM to rank 1 alone (a job scheduler signalling one process): rank 0 hears of it at the next
    `run.should_stop`, both stop there, and the attempt is `preempted` with nothing lost."""
    d = make_dir(tmp_path)
    spec = write(d / "ddp.yaml", sweep(0.1))
    root = d / "runs" / "ddp"
    launch = start("launch", str(spec), "--no-live", cwd=d)
    wait_for(lambda: "rank 1: step 12 done" in log(root, 1), timeout=WAIT_S, what="rank 1 at step 12")
    os.kill(rank_pids(root)[1], signal.SIGTERM)
    out, _ = launch.communicate(timeout=WAIT_S)
    assert launch.returncode == 0, out  # the launch's own retry finished the cell

    first, second = receipt(root, 1), receipt(root, 2)
    assert first["reason"] == "preempted", first
    assert all(not r["ended_by_sweepq"] and r["exit_code"] == 0 for r in first["ranks"]), first["ranks"]
    stopped = {int(r): int(s) for r, s in re.findall(r"rank (\d): stopped at step (\d+)", log(root, 1))}
    assert set(stopped) == {0, 1} and stopped[0] == stopped[1] == first["end_step"], stopped
    assert second["reason"] == "completed" and second["start_step"] == first["end_step"], second
    assert final_weights(root) == uninterrupted


# Lightning's strategy="ddp" under `processes: 2`: 8 batches an epoch split over two ranks, 4 steps an
# epoch, 16 in all; attempt 1 holds both ranks after step 7 (steps 3 and 6 kept) and rank 1 is killed -9.
LIGHTNING = """
name: litddp
program: lightning_script.py
processes: 2
params: {max_epochs: 4, devices: 2, strategy: ddp, hold: "7:train"}
checkpoint: {every_steps: 3}
grid: {lr: [0.05]}
"""


def rank_of(launch_pid: int, rank: int) -> int | None:
    """The pid of the program's rank `rank` under the launch (by torchrun's RANK in its environment)."""
    for p in tree(launch_pid):
        try:
            if "lightning_script.py" in " ".join(p.cmdline()) and p.environ().get("RANK") == str(rank):
                return p.pid
        except psutil.Error:
            continue
    return None


def test_a_lightning_ddp_script_with_the_callback_through_kill_9_and_relaunch(tmp_path: Path) -> None:
    shutil.copy(HERE / "programs" / "lightning_script.py", tmp_path)
    spec = write(tmp_path / "lit.yaml", LIGHTNING)
    root = tmp_path / "runs" / "litddp"
    launch = start("launch", str(spec), "--no-live", cwd=tmp_path)
    wait_for(
        lambda: log(root, 1).count("holding at step 7 (train)") == 2,
        timeout=WAIT_S,
        what="both ranks holding after step 7",
    )
    victim = wait_for(lambda: rank_of(launch.pid, 1), timeout=WAIT_S, what="rank 1's pid")
    os.kill(victim, signal.SIGKILL)
    out, _ = launch.communicate(timeout=WAIT_S)
    assert launch.returncode == 0, out

    first, second = receipt(root, 1), receipt(root, 2)
    assert first["reason"] == "lost" and f"rank 1 (pid {victim}) was killed by SIGKILL first" in first["note"], first
    assert second["reason"] == "completed" and second["start_step"] == 6, second  # the newest kept, mid-epoch
    assert log(root, 2).count("training starts at global step 6") == 2  # both ranks resumed from it
    done = json.loads((root / "cells" / "1.1" / "DONE.json").read_text())
    assert (done["step"], done["attempt"]) == (16, 2)
    shas = re.findall(r"final global_step 16 weights_sha ([0-9a-f]{64})", log(root, 2))  # ranks' lines may interleave
    assert len(shas) == 2 and shas[0] == shas[1]  # DDP kept the ranks' weights equal through the resume


def test_the_guides_train_function_runs_on_two_ranks(tmp_path: Path) -> None:
    """docs/guide/processes.md's sweep file and loop, as printed (fewer steps), through the real CLI."""
    page = (HERE.parent / "docs" / "guide" / "processes.md").read_text()
    section = page.split("## A `train:` function on several ranks", 1)[1]
    (yaml_text,) = re.findall(r"^```yaml\n(.*?)^```", section, re.MULTILINE | re.DOTALL)[:1]
    (code,) = re.findall(r"^```python\n(.*?)^```", section, re.MULTILINE | re.DOTALL)[:1]
    (tmp_path / "train_ddp.py").write_text(code)
    shorter = yaml_text.replace("steps: 200", "steps: 20").replace("every_steps: 50", "every_steps: 5")
    spec = write(tmp_path / "ddp.yaml", shorter)
    launch = start("launch", str(spec), "--no-live", cwd=tmp_path)
    out, _ = launch.communicate(timeout=WAIT_S)
    assert launch.returncode == 0, out
    rows = cli_json("status", str(spec))
    assert [(r["cell"], r["state"], r["step"]) for r in rows] == [("1.1", "done", 20), ("1.2", "done", 20)]
    root = tmp_path / "runs" / "ddp-train"
    for cell in ("1.1", "1.2"):
        r = json.loads((root / "cells" / cell / "attempts" / "1" / "receipt.json").read_text())
        assert r["reason"] == "completed" and [x["rank"] for x in r["ranks"]] == [0, 1], r
        assert (root / "cells" / cell / "checkpoints" / "step-20" / "manifest.json").is_file()
