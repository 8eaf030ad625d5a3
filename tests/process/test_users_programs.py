"""Programs nobody on the project wrote the sweepq way, through the real CLI, killed with real SIGKILLs.

* a nanoGPT-style script (tests/programs/nanogpt_like/) that opens `configurator.py` and `data/` by
  relative names and resumes from its own `ckpt.pt` only when told `--init_from=resume`: `inputs:`
  links them into each cell's folder, `resume_args:` tells the retry to resume;
* a Hydra app (tests/programs/hydra_app/) swept over a config group choice and a key inside it
  (`db: [mysql, postgresql]` with `db.user`), whose retry finds the files of the attempt before it;
* a program run as a module (`python -m ${program}`).
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
from pathlib import Path

import numpy as np
import psutil
from conftest import HERE, cli, cli_json, cmdline, start, tree, wait_for, write

PROGRAMS = HERE / "programs"


def program_of(launch_pid: int, word: str) -> psutil.Process | None:
    """The user's program (a child of a `sweepq.attempt` process) whose command line holds `word`."""
    for p in tree(launch_pid):
        parent = p.parent() if p.is_running() else None
        if parent is not None and word in cmdline(p) and "sweepq.attempt" in cmdline(parent):
            return p
    return None


def log(root: Path, cell: str, attempt: int) -> str:
    path = root / "cells" / cell / "attempts" / str(attempt) / "stdout.log"
    return path.read_text() if path.exists() else ""


def finish(launch: subprocess.Popen[str]) -> str:
    out, _ = launch.communicate(timeout=600)
    assert launch.returncode == 0, out
    return out


# ------------------------------------------------------------------ nanoGPT style

NANO = """
name: nano
program: train.py
command: ["${env}", "${interpreter}", "${program}", config/tiny.py, "${args}"]
inputs: [configurator.py, data]
resume_args: [--init_from=resume]
params: {max_iters: 30, eval_interval: 5, iter_delay: 0.2}
grid: {learning_rate: [0.01]}
"""


def test_a_classic_script_resumes_from_its_own_checkpoint_after_kill_9(tmp_path: Path) -> None:
    for name in ("train.py", "configurator.py", "config"):
        source = PROGRAMS / "nanogpt_like" / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, tmp_path / name)
    data = tmp_path / "data" / "tiny"
    data.mkdir(parents=True)
    tokens = np.random.default_rng(0).integers(0, 256, 5000)
    tokens[:4000].astype(np.uint16).tofile(data / "train.bin")  # as nanoGPT's prepare.py writes them
    tokens[4000:].astype(np.uint16).tofile(data / "val.bin")
    spec = write(tmp_path / "nano.yaml", NANO)
    root = tmp_path / "runs" / "nano"
    ckpt = root / "cells" / "1.1" / "output" / "out" / "ckpt.pt"

    launch = start("launch", str(spec), "--no-live", cwd=tmp_path)
    # Killed once it saved a checkpoint and trained past it: a restart from 0 would redo that work.
    wait_for(lambda: ckpt.exists() and re.search(r"^iter (7|8|9):", log(root, "1.1", 1), re.M), what="iter 7")
    victim = program_of(launch.pid, "train.py")
    assert victim is not None
    victim.send_signal(signal.SIGKILL)
    finish(launch)

    first, second = cli_json("show", "1.1", "--root", str(root))["attempts"]
    assert first["reason"] == "lost" and first["exit_signal"] == signal.SIGKILL
    assert second["reason"] == "completed"
    first_log, second_log = log(root, "1.1", 1), log(root, "1.1", 2)
    # The first attempt ran the command as written, the retry with the resume argument at its end.
    assert "--init_from=resume" not in first_log.splitlines()[0]
    assert second_log.splitlines()[0].endswith("--max_iters=30 --init_from=resume")
    resumed = re.search(r"^Resuming training from out at iter (\d+)$", second_log, re.M)
    assert resumed is not None, second_log
    resumed_at = int(resumed.group(1))
    last_before_kill = max(int(n) for n in re.findall(r"^iter (\d+):", first_log, re.M))
    assert 0 < resumed_at <= last_before_kill  # its own checkpoint, saved by the first attempt
    assert f"iter {resumed_at}:" in second_log and "iter 0:" not in second_log  # never from 0 again
    # It found configurator.py and data/ by their relative names in its own folder (linked there).
    assert "Overriding: learning_rate = 0.01" in first_log
    assert (root / "cells" / "1.1" / "output" / "configurator.py").is_symlink()
    import torch

    assert torch.load(ckpt, weights_only=False)["iter_num"] == 30


# ------------------------------------------------------------------------- Hydra

HYDRA = """
name: hydra
program: my_app.py
params: {steps: 24, delay: 0.15}
grid: {db: [mysql, postgresql], db.user: [alice, bob]}
"""


def test_a_hydra_app_sweeps_a_group_choice_with_a_key_inside_it_and_resumes_its_files(tmp_path: Path) -> None:
    shutil.copy(PROGRAMS / "hydra_app" / "my_app.py", tmp_path / "my_app.py")
    shutil.copytree(PROGRAMS / "hydra_app" / "conf", tmp_path / "conf")
    spec = write(tmp_path / "hydra.yaml", HYDRA)
    root = tmp_path / "runs" / "hydra"
    planned = cli("plan", str(spec), "--json", cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    command = json.loads(planned.stdout)[2]["command"]
    assert command[3:] == [
        "db=postgresql",
        "db.user=alice",
        "delay=0.15",
        "steps=24",
        f"hydra.run.dir={root.resolve()}/cells/1.3/output",
    ]

    launch = start("launch", str(spec), "--workers", "2", "--no-live", cwd=tmp_path)
    wait_for(lambda: re.search(r"^step (8|9|10)$", log(root, "1.1", 1), re.M), what="cell 1.1 at step 8")
    victim = program_of(launch.pid, "db.user=alice")
    assert victim is not None and "db=mysql" in cmdline(victim)
    victim.send_signal(signal.SIGKILL)
    finish(launch)

    reasons = [a["reason"] for a in cli_json("show", "1.1", "--root", str(root))["attempts"]]
    assert reasons == ["lost", "completed"]
    killed_at = max(int(n) for n in re.findall(r"^step (\d+)$", log(root, "1.1", 1), re.M))
    resumed = re.search(r"^resumed at step (\d+) in (.*)$", log(root, "1.1", 2), re.M)
    assert resumed is not None, log(root, "1.1", 2)
    # Its own state file, in the cell's folder where the first attempt left it (not a new outputs/<time>/).
    assert killed_at - 1 <= int(resumed.group(1)) <= killed_at
    assert Path(resumed.group(2)) == (root / "cells" / "1.1" / "output").resolve()
    expected = {
        "1.1": ("mysql", "alice"),
        "1.2": ("mysql", "bob"),
        "1.3": ("postgresql", "alice"),
        "1.4": ("postgresql", "bob"),
    }
    for cell, (driver, user) in expected.items():
        result = json.loads((root / "cells" / cell / "output" / "result.json").read_text())
        assert result == {"driver": driver, "user": user, "steps": 24}
    assert not (tmp_path / "outputs").exists()  # Hydra's per-run folders are never made


# ---------------------------------------------------------------------- -m module

MODULE = """
name: mod
program: tools.train
command: ["${env}", "${interpreter}", -m, "${program}", "${args}"]
grid: {lr: [0.1, 0.2]}
"""


def test_a_module_program_runs_and_a_missing_module_is_refused(tmp_path: Path) -> None:
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "__init__.py").write_text("")
    write(
        tmp_path / "tools" / "train.py",
        "import json, sys\n"
        "lr = float(sys.argv[1].split('=')[1])\n"
        "json.dump({'lr': lr, 'module': __spec__.name}, open('result.json', 'w'))\n",
    )
    spec = write(tmp_path / "mod.yaml", MODULE)
    launched = cli("launch", str(spec), "--no-live", cwd=tmp_path)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    for cell, lr in (("1.1", 0.1), ("1.2", 0.2)):
        result = tmp_path / "runs" / "mod" / "cells" / cell / "output" / "result.json"
        assert json.loads(result.read_text()) == {"lr": lr, "module": "tools.train"}

    missing = write(tmp_path / "missing.yaml", MODULE.replace("tools.train", "tools.trian").replace("mod\n", "m2\n"))
    refused = cli("launch", str(missing), "--no-live", cwd=tmp_path)
    assert refused.returncode == 2
    assert "program: 'tools.trian' is run as a module (python -m) but cannot be found" in refused.stderr
    assert not (tmp_path / "runs" / "m2").exists()
