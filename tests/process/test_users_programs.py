"""Programs nobody on the project wrote the sweepq way, through the real CLI, killed with real SIGKILLs.

* nanoGPT's own `train.py` (tests/programs/nanogpt/, vendored unchanged) that opens `configurator.py` and
  `data/` by relative names and resumes from its own `ckpt.pt` only when told `--init_from=resume`:
  `inputs:` links them into each cell's folder, `resume_args:` tells the retry to resume;
* a Hydra app (tests/programs/hydra_app/) swept over a config group choice and a key inside it
  (`db: [mysql, postgresql]` with `db.user`), whose retry finds the files of the attempt before it;
* a program run as a module (`python -m ${program}`).
"""

from __future__ import annotations

import hashlib
import json
import pickle
import re
import shutil
import signal
import subprocess
from pathlib import Path

import numpy as np
import psutil
import torch
from conftest import HERE, cli, cli_json, cmdline, env_with, start, tree, wait_for, write

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


# ------------------------------------------------------------------------ nanoGPT

NANOGPT = PROGRAMS / "nanogpt"  # nanoGPT's own train.py, model.py and configurator.py, unchanged
NANO = """
name: nano
program: train.py
command: ["${env}", "${interpreter}", "${program}", config/train_tiny_cpu.py, "${args}"]
inputs: [configurator.py, data]
resume_args: [--init_from=resume]
params: {max_iters: 20}
grid: {learning_rate: [0.01]}
"""


def git_blob(path: Path) -> str:
    """The id git gives the file's content (`git hash-object`), as the README beside it records it."""
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_the_vendored_nanogpt_files_are_nanogpts_own() -> None:
    recorded = dict(re.findall(r"^\| (\S+) \| ([0-9a-f]{40}) \|$", (NANOGPT / "README.md").read_text(), re.M))
    assert sorted(recorded) == ["LICENSE", "configurator.py", "model.py", "train.py"]
    for name, blob in recorded.items():
        assert git_blob(NANOGPT / name) == blob, f"{name} differs from nanoGPT's (tests/programs/nanogpt/README.md)"


def test_nanogpts_train_py_resumes_from_its_own_checkpoint_after_kill_9(tmp_path: Path) -> None:
    for name in ("train.py", "model.py", "configurator.py", "config"):
        source = NANOGPT / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, tmp_path / name)
    # The data nanoGPT's prepare.py scripts write: uint16 token ids, and meta.pkl with the vocabulary size.
    data = tmp_path / "data" / "tiny"
    data.mkdir(parents=True)
    tokens = np.random.default_rng(0).integers(0, 64, 5000)
    tokens[:4000].astype(np.uint16).tofile(data / "train.bin")
    tokens[4000:].astype(np.uint16).tofile(data / "val.bin")
    (data / "meta.pkl").write_bytes(pickle.dumps({"vocab_size": 64}))
    spec = write(tmp_path / "nano.yaml", NANO)
    root = tmp_path / "runs" / "nano"
    ckpt = root / "cells" / "1.1" / "output" / "out" / "ckpt.pt"
    hold = tmp_path / "hold"  # while it exists, train.py waits after each checkpoint (config/train_tiny_cpu.py)
    hold.touch()

    launch = start("launch", str(spec), "--no-live", cwd=tmp_path, env=env_with(NANOGPT_HOLD=str(hold)))
    # (the line train.py's config prints once torch.save has returned; the config's own text is echoed too)
    held = re.compile(r"^held after saving out/ckpt\.pt$", re.M)
    wait_for(lambda: held.search(log(root, "1.1", 1)), what="the first checkpoint")
    saved_at = torch.load(ckpt, map_location="cpu")["iter_num"]
    assert saved_at > 0
    victim = program_of(launch.pid, "train.py")
    assert victim is not None
    victim.send_signal(signal.SIGKILL)
    victim.wait(30)
    hold.unlink()
    finish(launch)

    first, second = cli_json("show", "1.1", "--root", str(root))["attempts"]
    assert first["reason"] == "lost" and first["exit_signal"] == signal.SIGKILL
    assert second["reason"] == "completed"
    first_log, second_log = log(root, "1.1", 1), log(root, "1.1", 2)
    # The first attempt ran the command as written, the retry with the resume argument at its end.
    assert "--init_from=resume" not in first_log.splitlines()[0]
    assert second_log.splitlines()[0].endswith("--max_iters=20 --init_from=resume")
    assert "Initializing a new model from scratch" in first_log and "Overriding: learning_rate = 0.01" in first_log
    # The retry loaded the checkpoint the first attempt saved and went on from its iteration, never from 0.
    assert "Resuming training from out" in second_log and "from scratch" not in second_log
    evals = [int(n) for n in re.findall(r"^step (\d+): train loss", second_log, re.M)]
    iters = [int(n) for n in re.findall(r"^iter (\d+): loss", second_log, re.M)]
    assert evals[0] == saved_at and iters[0] == saved_at, second_log
    assert iters == list(range(saved_at, 21))  # to max_iters (nanoGPT trains iteration max_iters too)
    assert max(int(n) for n in re.findall(r"^iter (\d+): loss", first_log, re.M)) == saved_at - 1
    # It found configurator.py and data/ by their relative names in its own folder (linked there).
    assert (root / "cells" / "1.1" / "output" / "configurator.py").is_symlink()
    assert torch.load(ckpt, map_location="cpu")["iter_num"] == 20


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
