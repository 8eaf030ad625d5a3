"""What a program cell starts with: its files, its command line, its environment, its launcher.

The attempt process (program.py) starts the user's program as its child:

* The program gets its cfg from the command's macros (`${args}` and friends,
  see spec/command.py) and from a JSON file, and its cell from the environment
  (ENV below, documented in docs/byo.md).
* It inherits the cell's ownership (so it lives exactly as long as the
  program), the channel to the worker (so `Run.from_env()` reports progress
  and checkpoints like in-process training), and the attempt's stdout.log and
  stderr.log.
* It dies at once (SIGKILL) if the attempt process dies, like in-process
  training would (the launcher, _EXEC).
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from sweepq.atomic import atomic_write_bytes, atomic_write_json
from sweepq.checkpoint import retention, storage
from sweepq.checkpoint.manifest import CheckpointCorrupt
from sweepq.execution.attempt_spec import ENV_ATTEMPT_FILE, AttemptSpec
from sweepq.execution.channel import ENV_FD as ENV_CHANNEL_FD
from sweepq.layout import CellPaths
from sweepq.queue import liveness
from sweepq.spec.command import args_json, render_command
from sweepq.spec.sweep import Settings

#: The environment a program sees (documented in docs/byo.md; names are a contract).
ENV = {
    "root": "SWEEPQ_ROOT",  # the sweep root
    "cell": "SWEEPQ_CELL",  # the cell id, "2.3"
    "attempt": "SWEEPQ_ATTEMPT",  # the attempt number, 1 for the first
    "previous_reason": "SWEEPQ_PREVIOUS_REASON",  # how the previous attempt ended ("" on the first)
    "cfg_file": "SWEEPQ_CFG_FILE",  # the cell's cfg as JSON
    "cell_dir": "SWEEPQ_CELL_DIR",  # cells/<cell>/
    "output_dir": "SWEEPQ_OUTPUT_DIR",  # cells/<cell>/output/: the program's own files, kept across attempts
    "checkpoint_dir": "SWEEPQ_CHECKPOINT_DIR",  # cells/<cell>/checkpoints/: sweepq's committed checkpoints
    "resume": "SWEEPQ_RESUME_CHECKPOINT",  # the checkpoint Run.restore() would load, "" when none
    "attempt_dir": "SWEEPQ_ATTEMPT_DIR",  # cells/<cell>/attempts/<n>/: stdout.log, stderr.log, receipt.json
    "outcome_file": "SWEEPQ_OUTCOME_FILE",  # where a program may say how it ended (program.OUTCOME_KEYS)
}

# The program is started through this tiny launcher, which asks Linux to kill it
# when the attempt process dies and then execs the command (same pid, same
# environment). A preexec_fn would do the same between fork and exec, which is not
# safe in a process with threads (the attempt's hashing and torch threads).
_EXEC = """
import ctypes, os, signal, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
except (OSError, AttributeError):
    pass
if os.getppid() != int(sys.argv[1]):
    os._exit(137)  # the attempt died before prctl took effect
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as e:
    print(f"sweepq: cannot run {sys.argv[2]!r}: {e}", file=sys.stderr, flush=True)
    os._exit(127)
"""


def resume_checkpoint(spec: AttemptSpec, paths: CellPaths) -> str:
    """The checkpoint `Run.restore()` would load for this attempt, "" when it starts fresh.

    The newest committed checkpoint whose manifest verifies; after a `nan`
    attempt, the newest before the one the bad interval started from (as Run does).
    """
    checkpoints = storage.for_cell(paths)
    steps = checkpoints.steps()
    limit = retention.rollback_limit(steps, spec.nan_step)
    if limit is not None:
        steps = [s for s in steps if s <= limit]
    for step in steps:
        try:
            storage.verify(checkpoints, step)
        except (CheckpointCorrupt, OSError, ValueError):  # CheckpointTooNew goes up: never skipped
            continue
        return str(checkpoints.location(step))
    return ""


def program_env(spec: AttemptSpec, paths: CellPaths) -> dict[str, str]:
    """The SWEEPQ_* variables of one attempt (see ENV)."""
    return {
        ENV["root"]: str(spec.root),
        ENV["cell"]: spec.cell,
        ENV["attempt"]: str(spec.attempt),
        ENV["previous_reason"]: spec.previous_reason or "",
        ENV["cfg_file"]: str(paths.cfg),
        ENV["cell_dir"]: str(paths.dir),
        ENV["output_dir"]: str(paths.output),
        ENV["checkpoint_dir"]: str(paths.checkpoints),
        ENV["resume"]: resume_checkpoint(spec, paths),
        ENV["attempt_dir"]: str(paths.attempt_dir(spec.attempt)),
        ENV["outcome_file"]: str(paths.outcome(spec.attempt)),
    }


@dataclass(frozen=True)
class Launch:
    """How to start the program of one attempt.

    `argv` is the command as sweepq prints it (stdout.log, messages): every
    `${envvar:NAME}` value is `***`. The real values live only in memory, in
    `exec_argv`, on their way to the program.
    """

    argv: list[str]  # the command as shown (for people: shell_join)
    env: dict[str, str]
    fds: tuple[int, ...]  # the descriptors it inherits
    exec_argv: list[str] = field(repr=False, default_factory=list)  # the command as the program gets it

    def popen_argv(self) -> list[str]:
        return launcher_argv(self.exec_argv)


def prepare(spec: AttemptSpec, settings: Settings, paths: CellPaths) -> Launch:
    """Write the program's files and build its command and environment.

    Raises SpecError (the command cannot be rendered) and CheckpointTooNew (a
    checkpoint of the cell is from a newer sweepq): the program cannot start.
    """
    paths.attempt_dir(spec.attempt).mkdir(parents=True, exist_ok=True)
    paths.output.mkdir(exist_ok=True)
    atomic_write_json(paths.cfg, spec.cfg)
    args_file = paths.args  # what ${args_json_file} stands for (as `sweepq plan` shows)
    atomic_write_bytes(args_file, args_json(spec.cfg).encode())
    paths.outcome(spec.attempt).unlink(missing_ok=True)
    argv = render_command(settings, spec.cfg, args_json_file=str(args_file), environ=os.environ)
    shown = render_command(settings, spec.cfg, args_json_file=str(args_file), environ=os.environ, shown=True)
    env = dict(os.environ)
    env.update(program_env(spec, paths))
    # `python` in a command is the interpreter sweepq runs under (as in an activated venv).
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    attempt_file = paths.attempt_file(spec.attempt)
    spec.save(attempt_file)  # now with fingerprints, for Run.from_env()
    env[ENV_ATTEMPT_FILE] = str(attempt_file)
    # The cell's ownership (held while the program lives) and the channel (for Run.from_env()).
    owner = liveness.for_root(Path(spec.root)).inherit(spec.cell)
    handoff = owner.handoff() if owner is not None else liveness.Handoff()
    env.update(handoff.env)
    fds = handoff.fds + tuple(int(env[k]) for k in (ENV_CHANNEL_FD,) if env.get(k))
    return Launch(shown, env, fds, exec_argv=argv)


def launcher_argv(argv: list[str]) -> list[str]:
    """`argv` behind the launcher that ties the program's life to this process (see _EXEC)."""
    return [sys.executable, "-I", "-S", "-c", _EXEC, str(os.getpid()), *argv]


_SHELL_SAFE = re.compile(r"[\w@%+=:,./-]+", re.ASCII)


def shell_join(argv: list[str]) -> str:
    """A command line to copy into a shell, quoted for people: double quotes around a token
    with single quotes (W&B prints nested values as Python dicts), shlex elsewhere."""
    out = []
    for token in argv:
        if _SHELL_SAFE.fullmatch(token):
            out.append(token)
        elif "'" in token and not any(c in token for c in '"$`\\!'):
            out.append(f'"{token}"')
        else:
            out.append(shlex.quote(token))
    return " ".join(out)
