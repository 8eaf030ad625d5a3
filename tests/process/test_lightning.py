"""A Lightning script with SweepqCallback, run by the real CLI: kill -9, SIGTERM, resume, completion.

One cell of tests/programs/lightning_script.py (a LightningModule, a DataModule,
argparse, ModelCheckpoint and CSV logs, plus the callback) goes through a kill -9
mid-fit and a SIGTERM to the program alone, each followed by the launch's own
retry, and completes. Its final weights equal those of the same script run on
its own, outside sweepq, at the same time. (Importing Lightning costs seconds a
process here: one cell, three attempts.)

Lightning's own examples/pytorch/basics/transformer.py, vendored with the callback
added (tests/programs/lightning_examples/), goes through a kill -9 and the launch's
retry: a mid-epoch resume its plain DataLoader cannot make exact, flagged.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
from conftest import HERE, cli, cli_json, cmdline, db_rows, start, tree, wait_for, write

SCRIPT = HERE / "programs" / "lightning_script.py"
# Attempt 1 waits after step 12 (killed -9 there), attempt 2 after step 13 (SIGTERM); 8 batches an
# epoch, 32 steps in all.
SWEEP = """
name: lit
program: lightning_script.py
params: {max_epochs: 4, hold: "12:train,13:train"}
checkpoint: {every_steps: 5}
grid: {lr: [0.05]}
"""


def final_sha(text: str) -> str:
    (found,) = re.findall(r"^final global_step 32 weights_sha (\w+)$", text, re.MULTILINE)
    return found


def test_a_lightning_script_resumes_from_verified_checkpoints_and_never_completes_falsely(tmp_path: Path) -> None:
    shutil.copy(SCRIPT, tmp_path)
    alone = tmp_path / "alone"
    alone.mkdir()
    outside = {k: v for k, v in os.environ.items() if not k.startswith("SWEEPQ_")}
    direct = subprocess.Popen(  # the same script, unchanged, on its own: the uninterrupted reference
        [sys.executable, str(tmp_path / SCRIPT.name), "--max_epochs=4", "--lr=0.05"],
        cwd=alone, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=outside,
    )  # fmt: skip
    spec = write(tmp_path / "lit.yaml", SWEEP)
    launch = start("launch", str(spec), "--workers", "1", "--no-live", cwd=tmp_path)
    root = tmp_path / "runs" / "lit"
    cell = root / "cells" / "1.1"

    def stdout(n: int) -> str:
        log = cell / "attempts" / str(n) / "stdout.log"
        return log.read_text() if log.exists() else ""

    def held(n: int, where: str) -> psutil.Process:
        wait_for(lambda: f"holding at step {where}" in stdout(n), what=f"attempt {n} holding at {where}")
        return program(launch.pid)

    # kill -9 after step 12: steps 5 and 10 were kept, status shows the progress and the metrics.
    first = held(1, "12 (train)")
    assert steps(cell) == [5, 10]

    def progress() -> tuple[float, int, float] | None:  # the worker writes what the program reported once a second
        (row,) = cli_json("status", str(root))
        if (row["step"] or 0) < 10 or "train_loss" not in row["metrics"]:
            return None
        assert row["total_steps"] == 32 and "train_loss" in cli("status", str(root)).stdout  # the table shows it too
        return row["epoch"], row["step"], row["metrics"]["train_loss"]

    epochs, done, loss = wait_for(progress, what="status showing the progress up to the checkpoint of step 10")
    assert done <= 12 and 1.2 <= epochs <= 1.5 and loss > 0  # held steps' logs may be on the way
    kept_10 = manifest_sha(cell, 10)
    first.kill()

    # Resumed from step 10 (its verified manifest), a SIGTERM after step 13: step 13 kept, preempted.
    held(2, "13 (train)").send_signal(signal.SIGTERM)
    out, _ = launch.communicate(timeout=300)
    assert launch.returncode == 0, out

    r = [receipt(cell, n) for n in (1, 2, 3)]
    assert [x["reason"] for x in r] == ["lost", "preempted", "completed"]
    assert [x["start_step"] for x in r[1:]] == [10, 13]
    assert r[1]["start_checkpoint_sha"] == kept_10  # resumed from the verified checkpoint of step 10
    assert r[1]["end_step"] == 13 and r[1]["exit_code"] == 0  # Lightning exits 0 on SIGTERM: not done
    assert "SIGTERM received; the program stopped at step 13" in r[1]["note"]
    assert r[2]["note"] == "completed: the program reported completion"
    rows = db_rows(root, "SELECT number, start_step, reason FROM attempts WHERE cell_id = '1.1' ORDER BY number")
    assert rows == [(1, 0, "lost"), (2, 10, "preempted"), (3, 13, "completed")]
    for n, step in ((2, 10), (3, 13)):  # the program's own word on where it started
        assert f"training starts at global step {step}\n" in stdout(n)
        # Its datamodule's hyperparameters hold a Path, which torch.load's default (weights_only) refuses.
        assert "weights_only" not in (cell / "attempts" / str(n) / "stderr.log").read_text()

    done_marker = json.loads((cell / "DONE.json").read_text())
    assert (done_marker["step"], done_marker["attempt"], done_marker["epoch"]) == (32, 3, 4.0)
    assert set(done_marker["metrics"]) == {"train_loss", "val_loss"}  # trainer.callback_metrics at the end
    assert 32 in steps(cell) and not (cell / "output" / ".sweepq-lightning.ckpt").exists()
    assert (cell / "output" / "data" / "regression.pt").is_file()  # the script's relative paths: the cell's own
    logs = cell / "output" / "logs" / "lightning_logs"  # Lightning's own logs and checkpoints, one folder an attempt
    assert sorted(p.name for p in logs.iterdir()) == ["version_0", "version_1", "version_2"]
    assert (logs / "version_2" / "checkpoints" / "last.ckpt").is_file()

    reference, _ = direct.communicate(timeout=300)
    assert direct.returncode == 0, reference
    assert final_sha(stdout(3)) == final_sha(reference)  # bit-identical through both interruptions
    assert sorted(p.name for p in alone.iterdir()) == ["data", "logs"]  # outside sweepq the callback wrote nothing


# Both cells use torch's DataLoader, which cannot resume mid-epoch; 8 batches an epoch, 16 steps in all, a
# checkpoint every 4 steps. Cell 1.1 is killed after step 14 and resumes from 12 (mid-epoch: other batches);
# cell 1.2 is killed after step 10 and resumes from 8 (an epoch's end: exact). Both run trainer.test() after.
INEXACT = """
name: inexact
program: lightning_script.py
command: ["${env}", "${interpreter}", "${program}", "${args_no_boolean_flags}"]  # --plain_loader --test
params: {max_epochs: 2, plain_loader: true, test: true}
checkpoint: {every_steps: 4}
grid: {hold: ["14:train", "10:train"]}
"""
LIGHTNING_WARNS = "You're resuming from a checkpoint that ended before the epoch ended"


def test_a_mid_epoch_resume_with_a_loader_that_cannot_resume_is_flagged_and_test_metrics_reach_done(
    tmp_path: Path,
) -> None:
    shutil.copy(SCRIPT, tmp_path)
    spec = write(tmp_path / "inexact.yaml", INEXACT)
    launch = start("launch", str(spec), "--workers", "2", "--no-live", cwd=tmp_path)
    root = tmp_path / "runs" / "inexact"
    mid, boundary = root / "cells" / "1.1", root / "cells" / "1.2"

    def held(cell: Path, hold: str, kept: list[int]) -> psutil.Process:
        log = cell / "attempts" / "1" / "stdout.log"
        wait_for(lambda: log.exists() and "holding at step" in log.read_text(), 600, f"{cell.name} holding")
        wait_for(lambda: steps(cell) == kept, what=f"{cell.name} keeping steps {kept}")
        return program(launch.pid, f"--hold={hold}")

    for p in (held(mid, "14:train", [4, 8, 12]), held(boundary, "10:train", [4, 8])):
        p.kill()
    out, _ = launch.communicate(timeout=300)
    assert launch.returncode == 0, out

    flagged, exact = receipt(mid, 2), receipt(boundary, 2)
    assert (flagged["reason"], flagged["start_step"], exact["reason"], exact["start_step"]) == (
        "completed", 12, "completed", 8
    )  # fmt: skip
    assert "inexact resume from step 12: the checkpoint ended mid-epoch (step 12, 8 steps an epoch)" in flagged["note"]
    assert "DataLoader" in flagged["note"] and "inexact" not in exact["note"]
    # The callback's test is Lightning's own: Lightning warned on the flagged resume only.
    assert LIGHTNING_WARNS in (mid / "attempts" / "2" / "stderr.log").read_text()
    assert LIGHTNING_WARNS not in (boundary / "attempts" / "2" / "stderr.log").read_text()

    table = " ".join(cli("status", str(root)).stdout.split())  # the note column may wrap
    assert table.count("inexact resume from step 12: data order restarted") == 1, table
    assert table.count("inexact resume") == 1
    best = {r["cell"]: r for r in cli_json("best", str(root))}
    assert (best["1.1"]["inexact_resume"], best["1.2"]["inexact_resume"]) == ([12], None)

    for cell in (mid, boundary):  # trainer.test() after the fit: its metric joins the fit's in DONE.json
        done = json.loads((cell / "DONE.json").read_text())
        assert set(done["metrics"]) == {"train_loss", "val_loss", "test_loss"}
        shown = re.search(r"'test_loss': ([0-9.e-]+)", (cell / "attempts" / "2" / "stdout.log").read_text())
        assert shown and done["metrics"]["test_loss"] == float(shown.group(1))

    # A reset starts the cell over: the flag of the resume it no longer comes from goes.
    assert cli("reset", "1.1", "--root", str(root)).returncode == 0
    assert "inexact resume" not in cli("status", str(root)).stdout
    assert [r["inexact_resume"] for r in cli_json("best", str(root))] == [None, None]


# Lightning's own examples/pytorch/basics/transformer.py (tests/programs/lightning_examples/, its changes in
# tests/programs/README.md) takes no options: Lightning reads Trainer defaults from PL_TRAINER_* variables, so
# the cell's params, passed through `env` as NAME=value, make it tiny (8 steps, 8 batches an epoch, one
# validation and one test batch). Its WikiText2 downloads data/wikitext-2.txt unless the file exists: the
# command copies the generated one there first. A checkpoint every 3 steps: all kept steps are mid-epoch.
EXAMPLE = """
name: example
program: transformer.py
command: ["sh", "-c", "mkdir -p data && cp ${sweep_dir}/wikitext-2.txt data/ && exec \\"$@\\"", "sh",
          "${env}", "${args_no_hyphens}", "${interpreter}", "${program}"]
params: {PL_TRAINER_LIMIT_VAL_BATCHES: 1, PL_TRAINER_LIMIT_TEST_BATCHES: 1, PL_TRAINER_NUM_SANITY_VAL_STEPS: 0,
         PL_TRAINER_ENABLE_PROGRESS_BAR: false}
checkpoint: {every_steps: 3}
grid: {PL_TRAINER_MAX_STEPS: [8]}
"""
EXAMPLE_SCRIPT = HERE / "programs" / "lightning_examples" / "transformer.py"


def wikitext_like(path: Path) -> None:
    """Random words in lines of 35 tokens (34 words and `<eos>`): 4160 blocks, 160 for training after
    the example's split of 2000 validation and 2000 test blocks, 8 batches of 20 an epoch."""
    rng = random.Random(0)
    path.write_text(
        "".join(" ".join(rng.choice("abcdefghijklmnopqrstuvwx") for _ in range(34)) + "\n" for _ in range(4161))
    )


# The vendored example's changes, as (Lightning's text, the vendored text): tests/programs/lightning_examples/README.md.
SWEEPQ_CHANGES = [
    (
        "WikiText2\n",
        "WikiText2\n\nfrom sweepq.integrations.lightning import SweepqCallback  # sweepq\n",
    ),
    (
        "    trainer = L.Trainer(gradient_clip_val=0.25, max_epochs=20)\n"
        "    trainer.fit(model, train_dataloader, val_dataloader)\n",
        "    sq = SweepqCallback()  # sweepq\n"
        "    trainer = L.Trainer(gradient_clip_val=0.25, max_epochs=20, callbacks=[sq])  # sweepq: callbacks\n"
        "    trainer.fit(model, train_dataloader, val_dataloader, ckpt_path=sq.ckpt_path)  # sweepq: ckpt_path\n",
    ),
]


def git_blob(data: bytes) -> str:
    """The id git gives a file's content (`git hash-object`), as the README records it."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_the_vendored_example_is_lightnings_own_but_for_the_recorded_changes() -> None:
    folder = EXAMPLE_SCRIPT.parent
    recorded = dict(re.findall(r"^\| (\S+) \| ([0-9a-f]{40}) \|$", (folder / "README.md").read_text(), re.M))
    assert sorted(recorded) == ["LICENSE", "transformer.py"]
    assert git_blob((folder / "LICENSE").read_bytes()) == recorded["LICENSE"]
    text = EXAMPLE_SCRIPT.read_text()
    assert text.count("# sweepq") == 4  # every changed line is marked, and undone below
    for theirs, ours in SWEEPQ_CHANGES:
        assert text.count(ours) == 1, ours
        text = text.replace(ours, theirs)
    assert "sweepq" not in text.lower()
    assert git_blob(text.encode()) == recorded["transformer.py"], (
        "transformer.py differs from Lightning's beyond its recorded changes"
    )


def test_lightnings_own_transformer_example_resumes_after_kill_9_flagged_inexact_and_test_metrics_reach_done(
    tmp_path: Path,
) -> None:
    shutil.copy(EXAMPLE_SCRIPT, tmp_path)
    wikitext_like(tmp_path / "wikitext-2.txt")
    spec = write(tmp_path / "example.yaml", EXAMPLE)
    launch = start("launch", str(spec), "--workers", "1", "--no-live", cwd=tmp_path)
    cell = tmp_path / "runs" / "example" / "cells" / "1.1"

    wait_for(lambda: steps(cell), 600, "the example keeping its first checkpoint")
    (running,) = [
        p for p in tree(launch.pid) if EXAMPLE_SCRIPT.name in cmdline(p) and "sweepq.attempt" not in cmdline(p)
    ]
    running.kill()
    out, _ = launch.communicate(timeout=600)
    assert launch.returncode == 0, out

    first, second = receipt(cell, 1), receipt(cell, 2)
    assert (first["reason"], second["reason"]) == ("lost", "completed")
    resumed = second["start_step"]
    assert resumed in (3, 6) and resumed in steps(cell)
    # torch's DataLoader (shuffle=True) cannot resume mid-epoch: the resume is flagged, and Lightning warned.
    assert (
        f"inexact resume from step {resumed}: the checkpoint ended mid-epoch (step {resumed}, 8 steps an epoch)"
        in (second["note"])
    )
    assert LIGHTNING_WARNS in (cell / "attempts" / "2" / "stderr.log").read_text()
    done = json.loads((cell / "DONE.json").read_text())
    assert (done["step"], done["attempt"]) == (8, 2)
    assert set(done["metrics"]) == {"train_loss", "val_loss", "test_loss"}  # trainer.test() after the fit
    shown = re.search(r"test_loss\W+([0-9.]+)", (cell / "attempts" / "2" / "stdout.log").read_text())
    assert shown and done["metrics"]["test_loss"] == float(shown.group(1))  # Lightning's own table
    # The generated file, not a download, is what the example read.
    assert (cell / "output" / "data" / "wikitext-2.txt").read_bytes() == (tmp_path / "wikitext-2.txt").read_bytes()


def program(launch_pid: int, marker: str = "") -> psutil.Process:
    """The user's program under the launch (the child of the `sweepq.attempt` process) whose command holds marker."""
    for p in tree(launch_pid):
        try:
            line = " ".join(p.cmdline())
            if SCRIPT.name in line and marker in line and "sweepq.attempt" not in line:
                return p
        except psutil.NoSuchProcess:
            continue
    raise AssertionError("no program under the launch")


def steps(cell: Path) -> list[int]:
    return sorted(int(p.name.removeprefix("step-")) for p in (cell / "checkpoints").glob("step-*"))


def receipt(cell: Path, n: int) -> dict[str, Any]:
    return json.loads((cell / "attempts" / str(n) / "receipt.json").read_text())


def manifest_sha(cell: Path, step: int) -> str:
    return hashlib.sha256((cell / "checkpoints" / f"step-{step}" / "manifest.json").read_bytes()).hexdigest()
