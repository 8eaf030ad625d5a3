"""What a program cell starts with: its files, its command line, its environment, its launcher.

The attempt process (program/supervisor.py) starts the user's program as its child:

* The program gets its cfg from the command's macros (`${args}` and friends,
  see spec/command.py) and from a JSON file, and its cell from the environment
  (ENV below, documented in docs/byo.md).
* It inherits the cell's ownership (so it lives exactly as long as the
  program), the channel to the worker (so `Run.from_env()` reports progress
  and checkpoints like in-process training), and the attempt's stdout.log and
  stderr.log.
* It runs in its working directory (`workdir:`): by default the cell's own
  output folder, so that relative outputs of cells running at once never
  collide (`--save model.pt`, `./lightning_logs`), while what the command
  names relative to the sweep file's folder still resolves: such arguments
  are passed as absolute paths (`from_sweep_dir`), and that folder is on
  PYTHONPATH (`python -m pkg.train`). With `workdir: sweep` every cell runs
  in the sweep file's folder and the command is passed as rendered. The
  sweep's `inputs:` (files a program opens by a fixed relative name, such as
  nanoGPT's `configurator.py` and `data/`) are linked into the cell's output
  folder under the names written (`link_inputs`).
* An attempt that resumes a cell an earlier attempt of it ran in the same
  working folder gets the sweep's `resume_args:` (a classic script's
  `--resume`): each started program leaves a note of where it ran in its
  attempt's folder (`note_started`), which later attempts read.
* It dies at once (SIGKILL) if the attempt process dies, like in-process
  training would (the launcher, _EXEC).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from sweepq.atomic import atomic_write_bytes, atomic_write_json
from sweepq.checkpoint import retention, storage
from sweepq.checkpoint.manifest import CheckpointCorrupt
from sweepq.checkpoint.witnessed import Witnessed
from sweepq.errors import SpecError
from sweepq.layout import CellPaths
from sweepq.queue import liveness
from sweepq.spec.command import ENV_BINARY, args_json, render_command
from sweepq.spec.sweep import Settings
from sweepq.wire.attempt_spec import ENV_ATTEMPT_FILE, AttemptSpec
from sweepq.wire.channel import ENV_FD as ENV_CHANNEL_FD

#: The environment a program sees (documented in docs/byo.md; names are a contract).
ENV = {
    "root": "SWEEPQ_ROOT",  # the sweep root
    "cell": "SWEEPQ_CELL",  # the cell id, "2.3"
    "attempt": "SWEEPQ_ATTEMPT",  # the attempt number, 1 for the first
    "previous_reason": "SWEEPQ_PREVIOUS_REASON",  # how the previous attempt ended ("" on the first)
    "cfg_file": "SWEEPQ_CFG_FILE",  # the cell's cfg as JSON
    "sweep_dir": "SWEEPQ_SWEEP_DIR",  # the sweep file's folder: where relative paths of the sweep file start
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


def trusted_checkpoints(spec: AttemptSpec, paths: CellPaths) -> storage.CheckpointStorage:
    """The cell's checkpoints as this attempt may trust them: a superseded attempt's late commit is
    hidden (witnessed.py), so it is never the one resumed nor the one DONE.json names."""
    checkpoints: storage.CheckpointStorage = storage.for_cell(paths, Settings.from_json(spec.settings).storage)
    if spec.witnessed is not None:
        checkpoints = Witnessed(checkpoints, spec.attempt, spec.witnessed)
    return checkpoints


def resume_checkpoint(spec: AttemptSpec, paths: CellPaths) -> str:
    """The checkpoint `Run.restore()` would load for this attempt, "" when it starts fresh.

    The newest committed checkpoint whose manifest verifies; after a `nan`
    attempt, the newest before the one the bad interval started from (as Run does).
    """
    checkpoints = trusted_checkpoints(spec, paths)
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


def program_env(spec: AttemptSpec, paths: CellPaths, sweep_dir: str) -> dict[str, str]:
    """The SWEEPQ_* variables of one attempt (see ENV)."""
    return {
        ENV["root"]: str(spec.root),
        ENV["sweep_dir"]: sweep_dir,
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
    cwd: str  # its working directory (`workdir:`)
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
    atomic_write_bytes(args_file, args_json(spec.cfg, settings.form).encode())
    paths.outcome(spec.attempt).unlink(missing_ok=True)
    resume_args = settings.resume_args_of(spec.cell) if ran_here_before(spec, settings, paths) else []
    render = partial(
        render_command,
        settings,
        spec.cfg,
        args_json_file=str(args_file),
        environ=os.environ,
        resume_args=resume_args,
    )
    argv = render(cell_dir=str(paths.dir), output_dir=str(paths.output))
    shown = render(cell_dir=str(paths.dir), output_dir=str(paths.output), shown=True)
    env = dict(os.environ)
    env.update(program_env(spec, paths, settings.spec_dir))
    # `python` in a command is the interpreter sweepq runs under (as in an activated venv).
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    cwd = settings.spec_dir
    if settings.workdir == "output":
        cwd = str(paths.output)
        link_inputs(settings.inputs, settings.spec_dir, cwd)
        argv, shown = from_sweep_dir(argv, shown, settings.spec_dir, cwd)
        # `python -m pkg.train` imports from the working directory: the sweep folder's modules still import.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), settings.spec_dir) if p)
    attempt_file = paths.attempt_file(spec.attempt)
    spec.save(attempt_file)  # now with fingerprints, for Run.from_env()
    env[ENV_ATTEMPT_FILE] = str(attempt_file)
    # The cell's ownership (held while the program lives) and the channel (for Run.from_env()).
    owner = liveness.for_root(Path(spec.root)).inherit(spec.cell)
    handoff = owner.handoff() if owner is not None else liveness.Handoff()
    env.update(handoff.env)
    fds = handoff.fds + tuple(int(env[k]) for k in (ENV_CHANNEL_FD,) if env.get(k))
    return Launch(shown, env, fds, cwd, exec_argv=argv)


#: In an attempt's folder: where its program ran, written once it started (`note_started`).
STARTED_NAME = "program_started.json"


def _workplace(settings: Settings) -> dict[str, str]:
    """Where a cell's program runs, as a note compares it: its own output folder, or the sweep's folder."""
    return {"workdir": "output"} if settings.workdir == "output" else {"workdir": "sweep", "dir": settings.spec_dir}


def note_started(spec: AttemptSpec, settings: Settings, paths: CellPaths) -> None:
    """Say in the attempt's folder that its program started, and where: later attempts of the cell then
    know that they resume its work there (`ran_here_before`)."""
    atomic_write_json(paths.attempt_dir(spec.attempt) / STARTED_NAME, _workplace(settings))


def ran_here_before(spec: AttemptSpec, settings: Settings, paths: CellPaths) -> bool:
    """Whether an earlier attempt of the cell started its program where this one runs it.

    A note an attempt could not write or that cannot be read counts as not started: the resume
    arguments of a classic script (`--init_from=resume`) fail where it left nothing to resume.
    """
    here = _workplace(settings)
    for number in range(spec.attempt - 1, 0, -1):
        note = paths.attempt_dir(number) / STARTED_NAME
        try:
            with open(note, encoding="utf-8") as f:
                if json.load(f) == here:
                    return True
        except (OSError, ValueError):
            continue
    return False


def link_inputs(inputs: list[str], sweep_dir: str, workdir: str) -> None:
    """Link each of `inputs` (relative to `sweep_dir`) into `workdir` under the same relative name.

    A link already there is replaced (the sweep folder may have moved); anything else of that name is
    the program's own file, which sweepq never replaces: a SpecError says so, and the program does not start.
    """
    for name in inputs:
        target = os.path.join(sweep_dir, name)
        link = os.path.join(workdir, name)
        if os.path.islink(link):
            if os.readlink(link) == target:
                continue
        elif os.path.lexists(link):
            raise SpecError(
                f"inputs: {name!r} cannot be linked into the cell's working folder {workdir}: something of that "
                "name is there already (the program's own file, which sweepq never replaces). Remove it, or "
                f"take {name!r} out of `inputs:`"
            )
        os.makedirs(os.path.dirname(link), exist_ok=True)
        staged = f"{link}.sweepq-link"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staged)
        os.symlink(target, staged)
        os.replace(staged, link)  # atomic: the name always names the old link or the new one


def launcher_argv(argv: list[str]) -> list[str]:
    """`argv` behind the launcher that ties the program's life to this process (see _EXEC)."""
    return [sys.executable, "-I", "-S", "-c", _EXEC, str(os.getpid()), *argv]


# `--data=x`, `data=x`, `-d=x`, `NAME=x` (after /usr/bin/env): an option whose value may be a path.
_OPTION_VALUE = re.compile(r"^(-{0,2}[A-Za-z_][\w.-]*=)(.+)$", re.ASCII)
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def from_sweep_dir(argv: list[str], shown: list[str], sweep_dir: str, workdir: str) -> tuple[list[str], list[str]]:
    """The command for a program running in `workdir`, with what it names in `sweep_dir` made absolute.

    An argument (or the value of `--key=value`) that is a relative path naming
    something in the sweep file's folder, and nothing in the working directory,
    becomes that absolute path: the program, its data, its configs (see
    _in_sweep_dir). A bare name in the executable's place (`python`) is left to
    PATH, as exec does. `shown` (the same command with secrets as ***) changes
    where `argv` does, except in an argument holding a secret.
    """
    executable = _executable(argv)
    resolved = [_from(token, sweep_dir, workdir, i == executable) for i, token in enumerate(argv)]
    seen = [new if old == token else old for new, token, old in zip(resolved, argv, shown, strict=True)]
    return resolved, seen


def _executable(argv: list[str]) -> int:
    """Where the word that exec starts is in `argv` (after `/usr/bin/env` and its VAR=value words)."""
    if not argv or argv[0] != ENV_BINARY:
        return 0
    position = 1
    while position < len(argv) and _ASSIGNMENT.match(argv[position]):
        position += 1
    return position


def _from(token: str, sweep_dir: str, workdir: str, executable: bool) -> str:
    if _in_sweep_dir(token, sweep_dir, workdir, executable):
        return os.path.join(sweep_dir, token)
    option = _OPTION_VALUE.match(token)
    if option is not None and not executable and _in_sweep_dir(option.group(2), sweep_dir, workdir, False):
        return option.group(1) + os.path.join(sweep_dir, option.group(2))
    return token


def _in_sweep_dir(path: str, sweep_dir: str, workdir: str, executable: bool) -> bool:
    """Does `path` name something in the sweep folder (and nothing in the working directory)?

    A bare word names a file only (`config.yaml`, not a folder `data`), so that a
    value such as `--split=train` stays a word when a folder has its name; `./data`
    and `data/` name the folder.
    """
    if not path or path[0] in "/~-" or path in (".", "..") or (executable and "/" not in path):
        return False
    there = os.path.join(sweep_dir, path)
    named = os.path.isfile(there) if "/" not in path else os.path.lexists(there)
    return named and not os.path.lexists(os.path.join(workdir, path))


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
