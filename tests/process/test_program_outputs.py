"""Program cells: each cell writes in its own folder, and a cell is done only on evidence that it finished.

In-process: the `workdir:` and `done_when:` settings, the folder macros, how a
command is prepared for a program running in its cell's output folder. Through
the real CLI: a classic argparse script saving `model.pt` relative to its working
directory, two cells at once; and a cooperating program that gets a SIGTERM sent
to it alone and exits 0 without finishing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import HERE, cli, start, tree, wait_for, write

from sweepq.errors import SpecError
from sweepq.layout import CellPaths
from sweepq.program.launch import from_sweep_dir, prepare
from sweepq.spec.command import ENV_BINARY, render_command
from sweepq.spec.preflight import preflight
from sweepq.spec.sweep import load_sweep
from sweepq.wire.attempt_spec import AttemptSpec

PROGRAMS = HERE / "programs"
# `python` in a command is the interpreter running sweepq (sweepq puts its folder first on PATH).
VENV_FIRST = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}


def sweep_file(folder: Path, body: str) -> Path:
    (folder / "t.py").write_text("print('hi')\n")
    return write(folder / "s.yaml", body)


# ------------------------------------------------------------------ settings


def test_workdir_and_done_when_default_to_the_safe_choices(tmp_path: Path) -> None:
    grouped = load_sweep(sweep_file(tmp_path, "program: t.py\ngrid: {s: [1]}\n"))
    wandb = load_sweep(write(tmp_path / "w.yaml", "method: grid\nprogram: t.py\nparameters: {s: {values: [1]}}\n"))
    for sweep in (grouped, wandb):  # a W&B file has no such keys: the defaults apply
        assert (sweep.settings.workdir, sweep.settings.done_when) == ("output", "exit_zero")
        assert sweep.warnings == []


def test_workdir_sweep_warns_that_concurrent_cells_share_it(tmp_path: Path) -> None:
    sweep = load_sweep(sweep_file(tmp_path, "program: t.py\nworkdir: sweep\ndone_when: reported\ngrid: {s: [1]}\n"))
    assert (sweep.settings.workdir, sweep.settings.done_when) == ("sweep", "reported")
    (warning,) = sweep.warnings
    assert "s.yaml: workdir: sweep: every cell runs in the sweep file's folder" in warning
    assert "more than one worker" in warning and "--workers 1" in warning


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("program: t.py\nworkdir: cell\n", "workdir: 'cell' is not one of output, sweep. Write workdir: output ("),
        ("program: t.py\ndone_when: [x]\n", "done_when: ['x'] is not one of exit_zero, reported"),
        ("train: t:main\nworkdir: sweep\n", "`workdir:` only applies to `program:` sweeps"),
        ("train: t:main\ndone_when: reported\n", "`done_when:` only applies to `program:` sweeps"),
    ],
)
def test_bad_settings_are_refused(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(SpecError) as e:
        load_sweep(sweep_file(tmp_path, body + "grid: {s: [1]}\n"))
    assert message in str(e.value)


# ------------------------------------------------------------------ macros


def test_folder_macros_expand_whole_and_inside_a_token(tmp_path: Path) -> None:
    command = "['${program}', '--save=${output_dir}/model.pt', '${cell_dir}', '--data=${sweep_dir}/d', '${args}']"
    sweep = load_sweep(sweep_file(tmp_path, f"program: ./t.py\ncommand: {command}\ngrid: {{s: [1]}}\n"))
    argv = render_command(
        sweep.settings, {"s": 1}, args_json_file="/r/a.json", environ={}, cell_dir="/r/c", output_dir="/r/c/output"
    )
    assert argv == ["./t.py", "--save=/r/c/output/model.pt", "/r/c", f"--data={tmp_path}/d", "--s=1"]


@pytest.mark.parametrize("variable", ["SWEEPQ_OUTPUT_DIR", "SWEEPQ_CELL_DIR", "SWEEPQ_SWEEP_DIR"])
def test_per_cell_variables_point_to_their_macro(tmp_path: Path, variable: str) -> None:
    body = f"program: t.py\ncommand: [python, t.py, '--save=${{envvar:{variable}}}/m.pt']\ngrid: {{s: [1]}}\n"
    with pytest.raises(SpecError) as e:
        load_sweep(sweep_file(tmp_path, body))
    macro = variable.removeprefix("SWEEPQ_").lower()
    assert "is set by sweepq in each program's environment" in str(e.value)
    assert f"Write ${{{macro}}} instead" in str(e.value)


# ------------------------------------------------------- the program's command


def test_what_the_command_names_in_the_sweep_folder_is_passed_as_an_absolute_path(tmp_path: Path) -> None:
    sweep, work = tmp_path / "sweep", tmp_path / "work"
    for folder in (sweep / "data", sweep / "bin", work):
        folder.mkdir(parents=True)
    for name in ("train.py", "conf.yaml", "bin/run.sh", "python", "mine.txt"):
        (sweep / name).write_text("")
    (work / "mine.txt").write_text("")  # the program's own file wins over the sweep folder's
    argv = [ENV_BINARY, "A=conf.yaml", "python", "train.py", "--config=conf.yaml", "--data=data/", "--split=data",
            "./data", "--out=new.pt", "-c", "conf.yaml", "mine.txt", "--lr=0.1", "--t=conf.yaml"]  # fmt: skip
    shown = [*argv[:-1], "--t=***"]  # the last one holds an ${envvar:NAME} value
    got, seen = from_sweep_dir(argv, shown, str(sweep), str(work))
    assert got == [
        ENV_BINARY,
        f"A={sweep}/conf.yaml",
        "python",  # the executable's bare name: PATH decides, as exec does
        f"{sweep}/train.py",
        f"--config={sweep}/conf.yaml",
        f"--data={sweep}/data/",
        "--split=data",  # a bare word naming a folder stays a word
        f"{sweep}/./data",
        "--out=new.pt",
        "-c",
        f"{sweep}/conf.yaml",
        "mine.txt",
        "--lr=0.1",
        f"--t={sweep}/conf.yaml",
    ]
    assert seen == [*got[:-1], "--t=***"]
    assert from_sweep_dir(["bin/run.sh", "x"], ["bin/run.sh", "x"], str(sweep), str(work))[0] == [
        f"{sweep}/bin/run.sh",
        "x",
    ]


def prepared(tmp_path: Path, body: str) -> tuple[Any, CellPaths]:
    sweep = load_sweep(sweep_file(tmp_path, body))
    cell = sweep.cells[0]
    root = tmp_path / "root"
    spec = AttemptSpec(str(root), cell.id, 1, cell.cfg, cell.cfg_hash, sweep.settings.to_json())
    paths = CellPaths(root, cell.id)
    return prepare(spec, sweep.settings, paths), paths


def test_a_program_runs_in_its_cell_output_folder_by_default(tmp_path: Path) -> None:
    launch, paths = prepared(tmp_path, "program: t.py\ngrid: {s: [1]}\n")
    assert launch.cwd == str(paths.output) and paths.output.is_dir()
    assert launch.argv == [ENV_BINARY, "python", f"{tmp_path}/t.py", "--s=1"]
    env = launch.env
    assert env["SWEEPQ_SWEEP_DIR"] == str(tmp_path) and env["SWEEPQ_OUTPUT_DIR"] == str(paths.output)
    assert env["SWEEPQ_CELL_DIR"] == str(paths.dir)
    assert env["PYTHONPATH"].split(os.pathsep)[-1] == str(tmp_path)  # `python -m pkg.train` still imports


def test_workdir_sweep_runs_the_command_as_written_in_the_sweep_folder(tmp_path: Path) -> None:
    launch, _ = prepared(tmp_path, "program: t.py\nworkdir: sweep\ngrid: {s: [1]}\n")
    assert launch.cwd == str(tmp_path)
    assert launch.argv == [ENV_BINARY, "python", "t.py", "--s=1"]
    assert launch.env["SWEEPQ_SWEEP_DIR"] == str(tmp_path)
    assert launch.env.get("PYTHONPATH") == os.environ.get("PYTHONPATH")


# ------------------------------------------------- a classic script, two at once


CLASSIC = """
name: classic
program: classic.py
params: {data: data.json, lr: 0.1, steps: 30}
grid: {seed: [1, 2]}
"""


def write_data(path: Path) -> None:
    import random

    r = random.Random(0)
    x = [[r.uniform(-1, 1) for _ in range(4)] for _ in range(64)]
    path.write_text(json.dumps({"x": x, "y": [[sum(v) * 0.5 + 0.1 * r.uniform(-1, 1)] for v in x]}))


def score(text: str) -> str:
    found = re.findall(r"^test_mse (\S+)$", text, re.MULTILINE)
    assert len(found) == 1, text
    return found[0]


def test_a_classic_script_saving_relative_to_its_folder_scores_as_a_direct_run(tmp_path: Path) -> None:
    """Two cells at once, each saving and reloading ./model.pt: each cell's score is its own."""
    folder = tmp_path / "project"
    folder.mkdir()
    shutil.copy(PROGRAMS / "classic.py", folder)
    write_data(folder / "data.json")
    spec = write(folder / "classic.yaml", CLASSIC)
    commands = preflight(load_sweep(spec), "classic.yaml").commands  # what `sweepq plan` shows
    direct = {}
    for cell, command in commands.items():  # each cell's command, run by hand in a folder of its own
        alone = tmp_path / f"alone-{cell}"
        alone.mkdir()
        for name in ("classic.py", "data.json"):
            shutil.copy(folder / name, alone)
        direct[cell] = subprocess.Popen(command, cwd=alone, stdout=subprocess.PIPE, text=True, env=VENV_FIRST)

    r = cli("launch", str(spec), "--workers", "2", "--no-live", cwd=folder)
    assert r.returncode == 0, r.stdout + r.stderr

    root = folder / "runs" / "classic"
    scores = {}
    for cell, proc in direct.items():
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        cell_dir = root / "cells" / cell
        logged = (cell_dir / "attempts" / "1" / "stdout.log").read_text()
        scores[cell] = score(logged)
        assert scores[cell] == score(out), cell
        assert (cell_dir / "output" / "model.pt").is_file()  # written where the cell ran
        first = logged.splitlines()[0]  # the command sweepq ran: what the cell names in the project, absolute
        assert f" {folder}/classic.py --data={folder}/data.json --lr=0.1 " in first, first
        receipt = json.loads((cell_dir / "attempts" / "1" / "receipt.json").read_text())
        assert receipt["reason"] == "completed"
        assert receipt["note"] == "completed: exit status 0 (the program does not report to sweepq)"
    assert scores["1.1"] != scores["1.2"]  # different seeds: a shared model.pt would show
    assert not (folder / "model.pt").exists()

    # A reset takes the program's own files with it: the next run starts from nothing of the old one's.
    old_model = (root / "cells" / "1.1" / "output" / "model.pt").read_bytes()
    (root / "cells" / "1.1" / "output" / "stale.txt").write_text("left by the first run")
    assert cli("reset", "1.1", str(spec), cwd=folder).returncode == 0
    (moved,) = (root / "attic" / "1.1").glob("*/output/model.pt")
    assert moved.read_bytes() == old_model and (moved.parent / "stale.txt").is_file()
    again = cli("launch", str(spec), "--no-live", cwd=folder)
    assert again.returncode == 0 and "skipping (done): 1.2" in again.stdout, again.stdout + again.stderr
    output = root / "cells" / "1.1" / "output"
    assert sorted(p.name for p in output.iterdir()) == ["model.pt"]  # nothing of the first run's
    rerun = (root / "cells" / "1.1" / "attempts" / "2" / "stdout.log").read_text()
    assert score(rerun) == scores["1.1"]  # the same cell, run afresh, scores the same


# ------------------------------------- SIGTERM to a cooperating program alone


GRACEFUL = '''
"""Stops gracefully on SIGTERM and exits 0 without run.finish(), as Lightning does.

--handler=sweepq: the Run's own handler sees the signal (run.should_stop);
--handler=own: the program's handler replaces sweepq's, so its Run sees nothing.
Its first attempt waits at --wait_at for the signal, so that a test can send it there.
"""
import argparse, os, signal, sys, time

import sweepq

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=60)
p.add_argument("--wait_at", type=int, default=5)
p.add_argument("--handler", default="sweepq")
args = p.parse_args()
run = sweepq.Run.from_env()
stop = []
if args.handler == "own":
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
state = {"step": 0}
print(f"resumed from step {state['step']}" if run.restore(state) else "fresh start", flush=True)
run.set_total(args.steps)
while state["step"] < args.steps:
    state["step"] += 1
    run.log(state["step"], loss=1.0 / state["step"])
    if state["step"] == args.wait_at and os.environ["SWEEPQ_ATTEMPT"] == "1":
        print("waiting for a signal", flush=True)
        while not (run.should_stop or stop):
            time.sleep(0.01)
    if run.should_stop or stop:
        run.checkpoint(state, state["step"], force=True)
        print(f"stopping gracefully at step {state['step']}", flush=True)
        sys.exit(0)
    run.checkpoint(state, state["step"])
run.finish({"steps": state["step"]})
'''

SIGTERMED = """
name: graceful
program: graceful.py
params: {steps: 60, wait_at: 12}
checkpoint: {every_steps: 5}
retries: {error: 1, backoff_seconds: 0}
grid: {handler: [sweepq, own]}
"""


def receipts(root: Path, cell: str) -> list[dict[str, Any]]:
    folder = root / "cells" / cell / "attempts"
    return [json.loads((folder / str(n) / "receipt.json").read_text()) for n in (1, 2)]


def test_a_sigterm_to_the_program_alone_never_makes_a_false_done(tmp_path: Path) -> None:
    """A SIGTERM sent to the program alone (not by sweepq), which then exits 0 without finishing: its Run saw
    the signal (preempted) or not (its own handler: not done, an error), and the next attempt resumes from the
    checkpoint it left and completes the cell."""
    write(tmp_path / "graceful.py", GRACEFUL)
    spec = write(tmp_path / "graceful.yaml", SIGTERMED)
    root = tmp_path / "runs" / "graceful"
    a = start("launch", str(spec), "--workers", "2", "--no-live", cwd=tmp_path)

    def waiting(cell: str) -> bool:
        log = root / "cells" / cell / "attempts" / "1" / "stdout.log"
        return log.exists() and "waiting for a signal" in log.read_text()

    wait_for(lambda: waiting("1.1") and waiting("1.2"), what="both programs waiting at step 12")
    for handler in ("sweepq", "own"):
        (program,) = [p for p, cmdline in programs(a.pid) if f"--handler={handler}" in cmdline]
        program.send_signal(signal.SIGTERM)
    out, _ = a.communicate(timeout=300)
    assert a.returncode == 0, out

    seen, own = receipts(root, "1.1"), receipts(root, "1.2")
    assert [r["reason"] for r in seen] == ["preempted", "completed"]
    assert [r["reason"] for r in own] == ["error", "completed"]
    for first, second in (seen, own):
        assert first["exit_code"] == 0 and first["end_step"] == 12
        assert second["start_step"] == 12  # the checkpoint it forced as it stopped
        assert second["note"] == "completed: the program reported completion"
    assert "SIGTERM received; the program stopped at step 12" in seen[0]["note"]
    assert "not done: the program exited 0 at step 12 of 60 without calling run.finish()" in own[0]["note"]
    for cell in ("1.1", "1.2"):
        log = (root / "cells" / cell / "attempts" / "2" / "stdout.log").read_text()
        assert "resumed from step 12" in log
        done = json.loads((root / "cells" / cell / "DONE.json").read_text())
        assert done["attempt"] == 2 and done["step"] == 60 and done["metrics"] == {"steps": 60}


def programs(launch_pid: int) -> list[tuple[psutil.Process, list[str]]]:
    """The users' programs under a launch (children of `sweepq.attempt` processes), with their
    command lines."""
    found = []
    for p in tree(launch_pid):
        try:
            parent = p.parent()
            if parent is not None and "sweepq.attempt" in " ".join(parent.cmdline()):
                found.append((p, p.cmdline()))
        except psutil.Error:
            continue
    return found
