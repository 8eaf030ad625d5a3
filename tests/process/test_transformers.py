"""A Hugging Face Trainer script with sweepq's callback, through the real CLI: kill -9 and SIGTERM mid-fit.

One story on one cell (the Trainer's import alone costs seconds, so it starts
few programs), in one launch: the program is killed (SIGKILL) mid-fit after a
checkpoint was kept; the next attempt resumes from that verified checkpoint; a
SIGTERM sent to the program alone stops it with a checkpoint and is recorded as
preempted, never done (else no third attempt would run); the third attempt
resumes again and completes with the final metrics in DONE.json. The same
command run on its own (no sweepq: the callback does nothing) is the
uninterrupted reference: the cell ends with bit-identical weights and
evaluation loss."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import torch
from conftest import HERE, cli_json, db_rows, start, trainer_of, wait_for, write
from safetensors.torch import load_file

from sweepq.checkpoint import files, storage
from sweepq.layout import CellPaths
from sweepq.spec.preflight import preflight
from sweepq.spec.sweep import load_sweep

# The Trainer uses the CPU everywhere (bit-identity is a CPU promise); no report_to integration; logs every
# step; 4 steps an epoch for 4 epochs; no saves of its own (save_strategy: "no"): sweepq's cadence drives them.
SWEEP = """
name: hf
program: hf_script.py
params:
  output_dir: out
  num_train_epochs: 4
  per_device_train_batch_size: 8
  learning_rate: 0.01
  logging_steps: 1
  eval_strategy: epoch
  save_strategy: "no"
  report_to: none
  use_cpu: true
  disable_tqdm: true
  hold_file: {hold}
checkpoint: {{every_steps: 4, keep_last: 10}}
grid: {{seed: [0]}}
"""
HOLD_AT = 6  # attempts 1 and 2 wait at step 6; step 4 is kept by then
# One CPU thread in every process (launch sets it too, from the cores per worker): float sums are reduced
# in the same order by the cell and by its reference.
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
VENV_FIRST = {**ENV, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}


def holding(cell: CellPaths, attempt: int) -> bool:
    log = cell.dir / "attempts" / str(attempt) / "stdout.log"
    return log.exists() and f"holding at step {HOLD_AT}" in log.read_text()


def program_of(launch_pid: int) -> psutil.Process:
    """The user's program: the child of the cell's attempt process (beside it, the attempt's log keeper)."""
    attempt = trainer_of(launch_pid, "1.1")
    assert attempt is not None
    (program,) = [p for p in attempt.children() if "logkeeper" not in " ".join(p.cmdline())]
    assert "hf_script.py" in " ".join(program.cmdline())
    return program


def logged_epochs(text: str) -> list[float]:
    """The epochs of the training logs the Trainer printed (its own account of where it was)."""
    return [float(e) for e in re.findall(r"\{'loss': .*'epoch': '?([0-9.]+)'?\}", text)]


def test_a_trainer_script_resumes_from_verified_checkpoints_and_is_never_falsely_done(tmp_path: Path) -> None:
    folder, alone, hold = tmp_path / "project", tmp_path / "alone", tmp_path / "hold"
    folder.mkdir()
    alone.mkdir()
    for where in (folder, alone):
        shutil.copy(HERE / "programs" / "hf_script.py", where)
    hold.write_text(str(HOLD_AT))
    spec = write(folder / "hf.yaml", SWEEP.format(hold=hold))
    root = folder / "runs" / "hf"
    cell = CellPaths(root, "1.1")

    # The uninterrupted reference: the cell's own command, run on its own (no sweepq, no hold).
    (command,) = preflight(load_sweep(spec), "hf.yaml").commands.values()
    direct_command = [arg for arg in command if not arg.startswith("--hold_file")]
    direct = subprocess.Popen(
        direct_command, cwd=alone, env=VENV_FIRST, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )

    # 1. kill -9 of the program mid-fit, once step 4 is kept: the launch starts attempt 2 at once.
    launch = start("launch", str(spec), "--no-live", cwd=folder, env=ENV)
    wait_for(lambda: cell.committed_steps() == [4] and holding(cell, 1), what="step 4 kept, training at step 6")
    unkept = cell.output / "out" / "checkpoint-6"  # as if the Trainer had saved step 6 before sweepq could keep it
    shutil.copytree(cell.output / "out" / "checkpoint-4", unkept)
    program_of(launch.pid).send_signal(signal.SIGKILL)

    # 2. It resumes from step 4; a SIGTERM to the program alone (not via sweepq) stops it at step 7.
    wait_for(lambda: holding(cell, 2), what="attempt 2 at step 6")
    (status,) = wait_for(lambda: [c for c in cli_json("status", str(spec)) if c["step"] >= 5], what="progress shown")
    assert status["total_steps"] == 16 and status["step"] <= HOLD_AT and "loss" in status["metrics"]
    program_of(launch.pid).send_signal(signal.SIGTERM)
    hold.unlink()  # training goes on to step 7, where the callback sees the stop

    # 3. The preempted cell runs again (attempt 3) and completes.
    out, _ = launch.communicate(timeout=300)
    assert launch.returncode == 0, out
    attempts = db_rows(root, "select reason, start_step, end_step, note from attempts order by number")
    assert [a[0] for a in attempts] == ["lost", "preempted", "completed"]
    assert [a[1:3] for a in attempts[1:]] == [(4, 7), (7, 16)]  # started from the verified checkpoints
    assert "SIGTERM" in attempts[1][3]
    logs = [(cell.dir / "attempts" / str(n) / "stdout.log").read_text() for n in (2, 3)]
    assert logged_epochs(logs[0])[0] == 1.25 and logged_epochs(logs[1])[0] == 2.0  # the Trainer's own steps 5 and 8
    told = (cell.dir / "attempts" / "2" / "stderr.log").read_text()
    assert f"sweepq: removing {Path('out', 'checkpoint-6')}: saved after step 4, where this attempt starts" in told
    assert "sweepq: a stop signal arrived: training stopped at step 7 of 16 (step 7 is kept)" in told
    assert not unkept.exists()  # never taken for a newer checkpoint than the one resumed

    # The reference finished as a plain script: sweepq's callback did nothing there.
    reference_out, _ = direct.communicate(timeout=300)
    assert direct.returncode == 0, reference_out
    assert "sweepq" not in reference_out and not (alone / "out" / "checkpoint-4").exists()
    reference_eval = json.loads((alone / "out" / "eval_results.json").read_text())

    done = json.loads(cell.done.read_text())
    assert done["attempt"] == 3 and done["step"] == 16
    assert done["metrics"]["eval_loss"] == reference_eval["eval_loss"]
    # train_loss is the whole run's mean (the Trainer's own covers the last train() call, steps 7..16).
    # The same per-step float32 losses are summed in float64 in another grouping: only rounding differs.
    reference_train = json.loads((alone / "out" / "train_results.json").read_text())
    assert done["metrics"]["train_loss"] == pytest.approx(reference_train["train_loss"], rel=1e-9, abs=0)
    assert "train_runtime" not in done["metrics"] and done["metrics"]["attempt_train_runtime"] > 0
    kept = storage.for_cell(cell, None)
    assert sorted(kept.steps()) == [4, 7, 11, 15, 16]  # every 4 steps from where each attempt started
    for step in (4, 7):  # the folders the Trainer resumed from: every byte still as committed
        assert files.verified(kept, step).step == step
    final = load_file(files.verified(kept, 16).path / "model.safetensors")
    reference = load_file(alone / "out" / "model.safetensors")
    assert final.keys() == reference.keys()
    assert all(torch.equal(final[k], reference[k]) for k in reference)


def test_cells_given_one_output_dir_are_refused_before_training_and_never_touch_each_other(tmp_path: Path) -> None:
    folder, shared = tmp_path / "project", tmp_path / "one_out"  # one absolute output_dir, as HF's docs write it
    folder.mkdir()
    shutil.copy(HERE / "programs" / "hf_script.py", folder)
    sweep = SWEEP.format(hold=tmp_path / "no-hold").replace("output_dir: out", f"output_dir: {shared}")
    sweep = sweep.replace("num_train_epochs: 4", "num_train_epochs: 1").replace("seed: [0]", "seed: [0, 1]")
    spec = write(folder / "hf.yaml", sweep)
    root = folder / "runs" / "hf"
    launch = start("launch", str(spec), "--no-live", cwd=folder, env=ENV)
    out, _ = launch.communicate(timeout=300)
    cells = [CellPaths(root, c) for c in ("1.1", "1.2")]
    done = [c for c in cells if c.done.exists()]
    assert len(done) == 1, out  # the first to claim the folder trains; the other never starts training
    (refused,) = [c for c in cells if not c.done.exists()]
    told = "\n".join(p.read_text() for p in (refused.dir / "attempts").glob("*/stderr.log"))
    assert f"output_dir {shared.resolve()} is already the output folder of cell {done[0].cell_id}" in told
    assert "training starts" not in told and "{'loss'" not in "\n".join(
        p.read_text() for p in (refused.dir / "attempts").glob("*/stdout.log")
    )
    assert sorted(p.name for p in shared.glob("checkpoint-*")) == ["checkpoint-4"]  # the winner's, untouched
    assert files.verified(storage.for_cell(done[0], None), 4).step == 4
