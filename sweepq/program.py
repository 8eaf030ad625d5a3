"""Subprocess cells: run the user's own program for a cell (`program:` or a W&B sweep file).

The program learns its cell from environment variables and its cfg from the
command's macros (and a cfg file). A program that imports sweepq calls
`sweepq.Run.from_env()` and gets the same Run API as in-process training; one
that does not still gets queueing, done markers (exit 0 is completion),
retries by reason, receipts and its output kept per attempt. SIGTERM reaches
it on preemption, with a grace period before SIGKILL (sent by the worker).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from . import manifest
from .atomic import atomic_write_json, read_json
from .channel import Channel
from .command import args_json, render_command
from .errors import SpecError
from .layout import CellPaths
from .records import Outcome
from . import signals
from .run import ENV_ATTEMPT_FILE, AttemptSpec, Run
from .spec import Settings
from .states import Reason

# Environment a program sees (documented in the README).
ENV = {
    "root": "SWEEPQ_ROOT",
    "cell": "SWEEPQ_CELL",
    "attempt": "SWEEPQ_ATTEMPT",
    "cfg_file": "SWEEPQ_CFG_FILE",
    "cell_dir": "SWEEPQ_CELL_DIR",
    "checkpoint_dir": "SWEEPQ_CHECKPOINT_DIR",
    "resume": "SWEEPQ_RESUME_CHECKPOINT",
}
EXIT_PREEMPTED = 75


def _preexec() -> None:
    # The program dies (gracefully) with the training process that watches it.
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def program_env(spec: AttemptSpec, paths: CellPaths) -> dict[str, str]:
    steps = paths.committed_steps()
    resume = ""
    for step in steps:  # the newest that verifies: what Run.restore() would load
        try:
            manifest.verify(paths.checkpoint(step))
            resume = str(paths.checkpoint(step))
            break
        except manifest.CheckpointCorrupt:
            continue
    return {
        ENV["root"]: spec.root,
        ENV["cell"]: spec.cell,
        ENV["attempt"]: str(spec.attempt),
        ENV["cfg_file"]: str(paths.cfg),
        ENV["cell_dir"]: str(paths.dir),
        ENV["checkpoint_dir"]: str(paths.checkpoints),
        ENV["resume"]: resume,
    }


def run_program(spec: AttemptSpec, settings: Settings, channel: Channel) -> tuple[Outcome, Run | None]:
    paths = CellPaths(Path(spec.root), spec.cell)
    atomic_write_json(paths.cfg, spec.cfg)
    args_file = paths.dir / "args.json"
    args_file.write_text(args_json(spec.cfg))
    try:
        argv = render_command(settings, spec.cfg, args_json_file=str(args_file), environ=os.environ)
    except SpecError as e:
        return Outcome(Reason.ERROR, note=f"command could not be rendered: {e}"), None
    env = dict(os.environ)
    env.update(program_env(spec, paths))
    # `python` in a command means the interpreter sweepq runs under (as in an activated venv).
    env["PATH"] = os.path.dirname(os.sys.executable) + os.pathsep + env.get("PATH", "")
    attempt_file = paths.attempt_dir(spec.attempt) / "attempt.json"
    spec.save(attempt_file)  # with fingerprints, for Run.from_env()
    env[ENV_ATTEMPT_FILE] = str(attempt_file)
    fds = tuple(int(env[k]) for k in ("SWEEPQ_LOCK_FD", "SWEEPQ_CHANNEL_FD") if env.get(k))
    try:
        proc = subprocess.Popen(argv, cwd=settings.spec_dir, env=env, pass_fds=fds, preexec_fn=_preexec)
    except OSError as e:
        return Outcome(Reason.ERROR, note=f"could not start {argv[0]!r}: {e}"), None
    forwarded = False
    while True:
        pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if signals.requested() and not forwarded:
            proc.send_signal(signal.SIGTERM)
            forwarded = True
        time.sleep(0.1)
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code
    return classify_exit(code, paths, spec, forwarded, rusage.ru_maxrss * 1024), None


def classify_exit(code: int, paths: CellPaths, spec: AttemptSpec, stopped: bool, peak: int) -> Outcome:
    result_file = paths.attempt_dir(spec.attempt) / "result.json"
    result: dict[str, Any] | None = None
    if result_file.exists():
        try:
            result = read_json(result_file)
        except (OSError, ValueError):
            result = None
    o: Outcome
    if code == 0 and (result is not None or not stopped):
        o = Outcome(Reason.COMPLETED, metrics=(result or {}).get("metrics"))
    elif stopped or code == EXIT_PREEMPTED:
        o = Outcome(Reason.PREEMPTED, note=f"program stopped after {signals.describe()}")
    elif code < 0:
        o = Outcome(Reason.ERROR, note=f"program killed by {signal.Signals(-code).name}")
        if -code == signal.SIGKILL:
            o = Outcome(Reason.LOST, note="program killed by SIGKILL from outside sweepq")
    else:
        o = Outcome(Reason.ERROR, note=f"program exited with code {code}")
    o.exit_code = code if code >= 0 else None
    o.exit_signal = -code if code < 0 else None
    o.peak_memory_bytes = peak
    return o


__all__ = ["ENV", "run_program", "program_env", "json"]
