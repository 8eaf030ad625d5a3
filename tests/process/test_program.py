"""Subprocess cells (`program:` and W&B files) through the real CLI, with real signals.

The programs are real scripts in tests/programs/: coop.py uses `Run.from_env()`,
plain.py knows nothing of sweepq.
"""

from __future__ import annotations

import ast
import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import (
    HERE,
    cli,
    cli_json,
    cmdline,
    env_with,
    kill_tree,
    start,
    tree,
    wait_for,
    wait_gone,
    write,
)

REPO = HERE.parent
PROGRAMS = HERE / "programs"


@pytest.fixture
def prog_dir(tmp_path: Path) -> Path:
    for name in ("coop.py", "plain.py"):
        shutil.copy(PROGRAMS / name, tmp_path / name)
    return tmp_path


def program_pid(launch_pid: int, script: str) -> psutil.Process | None:
    """The user's program (a child of a `sweepq.attempt` process) running `script`."""
    for p in tree(launch_pid):
        try:
            cmd = p.cmdline()
        except psutil.Error:
            continue
        parent = p.parent()
        if parent is not None and any(c.endswith(script) for c in cmd) and "sweepq.attempt" in cmdline(parent):
            return p
    return None


def committed_steps(cell_dir: Path) -> list[int]:
    return sorted(
        int(p.name.split("-")[1]) for p in (cell_dir / "checkpoints").glob("step-*") if (p / "manifest.json").exists()
    )


def log(root: Path, cell: str, attempt: int, stream: str = "stdout") -> str:
    """An attempt's log so far ("" before the attempt made it)."""
    path = root / "cells" / cell / "attempts" / str(attempt) / f"{stream}.log"
    return path.read_text() if path.exists() else ""


COOP = """
name: coop
program: coop.py
params: {steps: 150, lr: 0.05, hold: "1:25,2:65"}
checkpoint: {every_steps: 10}
grid: {seed: [7]}
"""


def test_cooperating_program_killed_twice_resumes_exactly(prog_dir: Path) -> None:
    """SIGKILL of the program, then of the whole process tree: each resume starts from the newest
    committed checkpoint, and the final weights equal an uninterrupted run's."""
    reference = subprocess.Popen(  # the same program on its own, never interrupted
        [sys.executable, "coop.py", "--steps=150", "--lr=0.05", "--seed=7"],
        cwd=prog_dir,
        stdout=subprocess.PIPE,
        text=True,
    )
    spec = write(prog_dir / "coop.yaml", COOP)
    root = prog_dir / "runs" / "coop"
    cell = root / "cells" / "1.1"
    a = start("launch", str(spec), "--workers", "1", "--no-live", cwd=prog_dir)

    # 1. SIGKILL the program alone: its attempt process records `lost`, the same launch resumes it.
    # (The program holds at step 25 of its first attempt and 65 of its second: no race with its end.)
    wait_for(lambda: "holding at step 25" in log(root, "1.1", 1), what="the first attempt at step 25")
    wait_for(lambda: committed_steps(cell)[-1:] == [20], what="step 20 committed")
    victim = program_pid(a.pid, "coop.py")
    assert victim is not None
    victim.send_signal(signal.SIGKILL)
    wait_gone([victim.pid])
    at_first_kill = committed_steps(cell)[-1]

    # 2. During the second attempt, SIGKILL every process of the launch at once (a reboot).
    # (The worker writes progress to the database once a second: wait until it knows where the
    # second attempt started, or a kill right after the resume leaves its start_step unknown.)
    wait_for(
        lambda: (cell / "attempts" / "2" / "stdout.log").exists() and "resumed from step" in log(root, "1.1", 2),
        what="second attempt resumed",
    )
    wait_for(
        lambda: cli_json("show", "1.1", "--root", str(root))["attempts"][1]["start_step"],
        what="the database knows the second attempt's start step",
    )
    wait_for(lambda: "holding at step 65" in log(root, "1.1", 2), what="the second attempt at step 65")
    wait_for(lambda: committed_steps(cell)[-1] == 60, what="step 60 committed")
    wait_gone(kill_tree(a.pid))
    at_second_kill = committed_steps(cell)[-1]
    a.communicate()

    again = cli("launch", str(spec), "--no-live", cwd=prog_dir)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"resuming first: 1.1 (from checkpoint step {at_second_kill})" in again.stdout

    first, second, third = cli_json("show", "1.1", "--root", str(root))["attempts"]
    assert first["reason"] == "lost" and first["exit_signal"] == signal.SIGKILL
    assert "program was killed by SIGKILL" in first["note"]
    assert second["reason"] == "lost"  # closed by the reaper of the second launch
    assert second["start_step"] == at_first_kill > 0
    assert third["start_step"] == at_second_kill > at_first_kill
    assert third["reason"] == "completed" and third["exit_code"] == 0 and third["end_step"] == 150
    assert f"resumed from step {at_first_kill}" in log(root, "1.1", 2)
    assert f"resumed from step {at_second_kill}" in log(root, "1.1", 3)

    ref_out, _ = reference.communicate(timeout=120)
    ref = ast.literal_eval(ref_out.strip().splitlines()[-1])  # the dict the program printed
    done = json.loads((cell / "DONE.json").read_text())
    assert done["metrics"]["weights_sha"] == ref["weights_sha"]
    assert done["metrics"]["loss"] == ref["loss"]
    assert done["attempt"] == 3 and done["step"] == 150 and done["checkpoint"] == "checkpoints/step-150"
    status = cli_json("status", "--root", str(root))
    assert status[0]["state"] == "done" and status[0]["metrics"]["weights_sha"] == ref["weights_sha"]


CLASSIFY = """
name: classify
program: coop.py
params: {steps: 30, fail_at: 12}
checkpoint: {every_steps: 5}
retries: {error: 0, data_error: 0, oom: 0, nan: 0}
grid: {fail: [data, memory, nan]}
"""


def test_cooperating_program_failures_classify_like_in_process_training(prog_dir: Path) -> None:
    spec = write(prog_dir / "classify.yaml", CLASSIFY)
    root = prog_dir / "runs" / "classify"
    r = cli("launch", str(spec), "--no-live", cwd=prog_dir)
    assert r.returncode == 1, r.stdout + r.stderr  # every cell failed
    receipts = cli_json("attempts", "--root", str(root))
    atts = {c: [a for a in receipts if a["cell"] == c] for c in ("1.1", "1.2", "1.3")}
    got = {c: a[0]["reason"] for c, a in atts.items()}
    assert got == {"1.1": "data_error", "1.2": "oom", "1.3": "nan"}
    assert "DataError: corrupt shard at step 12" in atts["1.1"][0]["error_tail"]
    assert "MemoryError" in atts["1.2"][0]["error_tail"]
    assert "non-finite loss at step 12" in atts["1.3"][0]["note"]
    for c, (att,) in atts.items():
        assert att["exit_code"] == 1, c  # the program's own exit status
        assert att["end_step"] >= 10, c  # the last step the program reached, from its Run
    assert {c["state"] for c in cli_json("status", "--root", str(root))} == {"failed"}


PLAIN = """
name: plain
program: plain.py
params: {steps: 100, delay: 0.01}
retries: {error: 1, backoff_seconds: 0}
groups:
  - name: handled
    params: {on_term: exit75, name: handled}
  - name: flaky
    params: {fail_first: true, steps: 3, name: flaky}
  - name: default
    params: {on_term: die, name: default}
"""


def test_plain_program_preempted_retried_and_resumed_by_its_own_files(prog_dir: Path) -> None:
    spec = write(prog_dir / "plain.yaml", PLAIN)
    root = prog_dir / "runs" / "plain"
    a = start("launch", str(spec), "--workers", "2", "--no-live", cwd=prog_dir, env=env_with(STEP_DELAY="0.5"))

    def states() -> dict[str, str]:
        return {c["cell"]: c["state"] for c in cli_json("status", "--root", str(root))}

    def said(cell: str, attempt: int, text: str) -> bool:
        f = root / "cells" / cell / "attempts" / str(attempt) / "stdout.log"
        return f.exists() and text in f.read_text()

    # Files only while waiting (a CLI call per poll would slow everything down on two cores).
    wait_for(
        lambda: (
            (root / "cells" / "2.1" / "DONE.json").exists()
            and said("1.1", 1, "starting at step")
            and said("3.1", 1, "starting at step")
        ),
        what="the flaky cell done and the other two running",
    )
    a.send_signal(signal.SIGTERM)  # preemption: the launch passes it on, down to the programs
    out, _ = a.communicate(timeout=120)
    assert a.returncode == 130, out
    assert states() == {"1.1": "interrupted", "2.1": "done", "3.1": "interrupted"}

    handled = cli_json("show", "1.1", "--root", str(root))["attempts"][0]
    assert handled["reason"] == "preempted" and handled["exit_code"] == 75 and handled["exit_signal"] is None
    handled_log = log(root, "1.1", 1)
    assert "handled: SIGTERM at step" in handled_log  # the program got SIGTERM and saved
    saved_at = int(handled_log.split("SIGTERM at step ")[1].split(",")[0])
    default = cli_json("show", "3.1", "--root", str(root))["attempts"][0]
    assert default["reason"] == "preempted" and default["exit_signal"] == signal.SIGTERM
    assert "killed by SIGTERM" in default["note"]

    flaky_fail, flaky_ok = cli_json("show", "2.1", "--root", str(root))["attempts"]
    assert flaky_fail["reason"] == "error" and flaky_fail["exit_code"] == 1
    assert "RuntimeError: flaky first run" in flaky_fail["error_tail"]  # the stderr tail
    assert "Traceback" in log(root, "2.1", 1, "stderr") and "about to fail" in log(root, "2.1", 1)
    assert flaky_ok["reason"] == "completed" and "flaky: finished 3 steps" in log(root, "2.1", 2)
    done = json.loads((root / "cells" / "2.1" / "DONE.json").read_text())
    assert done["attempt"] == 2 and done["metrics"] == {"steps": 3} and done["checkpoint"] is None

    again = cli("launch", str(spec), "--no-live", cwd=prog_dir, env=env_with(STEP_DELAY="0"))
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"handled: run 2, starting at step {saved_at}" in log(root, "1.1", 2)  # via $SWEEPQ_OUTPUT_DIR
    assert "default: run 2, starting at step" in log(root, "3.1", 2)
    for cell in ("1.1", "3.1"):
        shown = cli_json("show", cell, "--root", str(root))
        assert [x["reason"] for x in shown["attempts"]] == ["preempted", "completed"]
        assert shown["metrics"] == {"steps": 100}  # from $SWEEPQ_OUTCOME_FILE
    env = (root / "cells" / "1.1" / "cfg.json").read_text()
    assert json.loads(env) == {"delay": 0.01, "name": "handled", "on_term": "exit75", "steps": 100}
    report = {r["reason"]: r for r in cli_json("report", "--root", str(root))}
    assert report["preempted"]["attempts"] == 2 and report["error"]["attempts"] == 1


def test_bundled_wandb_grid_plans_and_launches(tmp_path: Path) -> None:
    spec = REPO / "sweeps" / "wandb-grid.yaml"
    planned = cli_json("plan", str(spec))
    assert [c["cell"] for c in planned] == ["1.1", "1.2", "1.3", "1.4"]
    assert planned[1]["cfg"] == {"epochs": 20, "hidden": 32, "lr": 0.03, "optimizer": {"momentum": 0.9, "name": "sgd"}}
    assert planned[1]["command"] == [
        "/usr/bin/env",
        "python",
        "wandb_train.py",
        "--epochs=20",
        "--hidden=32",
        "--lr=0.03",
        "--optimizer={'momentum': 0.9, 'name': 'sgd'}",
    ]
    root = tmp_path / "wandb-grid"
    # The same script on its own (no sweepq at run time) must give the same result as its cell.
    alone = subprocess.Popen(
        [
            sys.executable,
            "wandb_train.py",
            "--epochs=20",
            "--hidden=32",
            "--lr=0.03",
            "--optimizer={'momentum': 0.9, 'name': 'sgd'}",
        ],
        cwd=REPO / "sweeps",
        stdout=subprocess.PIPE,
        text=True,
    )
    r = cli("launch", str(spec), "--root", str(root), "--no-live")
    assert r.returncode == 0, r.stdout + r.stderr
    status = cli_json("status", "--root", str(root))
    assert [c["state"] for c in status] == ["done"] * 4
    for c in status:
        assert 0 < c["metrics"]["val_loss"] < 0.1, c  # finish() metrics, in the database and DONE.json
        assert c["best"] is not None and c["best"] <= c["metrics"]["val_loss"] + 1e-9  # metric: val_loss, minimize
        done = json.loads((root / "cells" / c["cell"] / "DONE.json").read_text())
        assert done["metrics"] == {"val_loss": c["metrics"]["val_loss"]} and done["step"] == 320
        assert done["checkpoint"] == "checkpoints/step-320"  # finish() commits the final state
        assert "final val_loss" in log(root, c["cell"], 1)
    out, _ = alone.communicate(timeout=120)
    assert alone.returncode == 0
    assert out.strip().splitlines()[-1] == f"final val_loss {status[1]['metrics']['val_loss']:.4f}"


@pytest.mark.parametrize(
    ("code", "report", "stopped", "reason", "note"),
    [
        (0, None, False, "completed", None),
        (0, {"reason": "completed", "metrics": {"acc": 0.7}}, True, "completed", None),
        (0, {"written_by": "sweepq.Run", "end_step": 5}, False, "error", "without calling run.finish()"),
        (0, {"written_by": "sweepq.Run", "end_step": 5, "total_steps": 5}, False, "completed", "declared last step 5"),
        (0, None, True, "preempted", "exited 0 after"),
        (0, {"reason": "preempted"}, False, "preempted", None),
        (0, {"reason": "data_error"}, False, "data_error", "reported by the program"),
        (0, {"reason": "no-such-reason"}, False, "completed", None),
        (75, None, False, "preempted", "exited with code 75"),
        (143, None, False, "preempted", "exited with code 143"),
        (-15, None, False, "preempted", "killed by SIGTERM"),
        (1, None, True, "preempted", "after"),
        (1, None, False, "error", "exited with code 1"),
        (1, {"reason": "completed"}, False, "error", "after calling run.finish()"),
        (1, {"reason": "nan", "nan_step": 12}, False, "nan", None),
        (-11, None, False, "error", "killed by SIGSEGV"),
        (-9, None, False, "lost", "killed by SIGKILL"),
    ],
)
def test_exit_status_and_outcome_file_classification(
    code: int, report: dict[str, Any] | None, stopped: bool, reason: str, note: str | None
) -> None:
    from sweepq.program.supervisor import classify_exit

    o = classify_exit(code, report, stopped=stopped)
    assert o.reason == reason
    assert (o.exit_code, o.exit_signal) == ((code, None) if code >= 0 else (None, -code))
    if note is not None:
        assert note in (o.note or "")
    if reason == "completed" and report and "metrics" in report:
        assert o.metrics == report["metrics"]
    if reason == "nan":
        assert o.nan_step == 12


def test_sigkill_sent_by_sweepq_after_the_grace_period_is_a_preemption() -> None:
    from sweepq.program.supervisor import classify_exit

    o = classify_exit(-9, {"reason": "completed"}, stopped=True, killed_by_us=True)
    assert o.reason == "preempted" and "did not stop within" in (o.note or "")


def test_commands_are_printed_for_people_and_split_back_by_a_shell() -> None:
    import shlex

    from sweepq.program.supervisor import shell_join

    argv = [
        "/usr/bin/env",
        "python",
        "train.py",
        "--optimizer={'momentum': 0.9, 'name': 'sgd'}",
        "--s=a b",
        "--q=it's $HOME",
        "",
    ]
    line = shell_join(argv)
    assert "\"--optimizer={'momentum': 0.9, 'name': 'sgd'}\"" in line
    assert shlex.split(line) == argv
