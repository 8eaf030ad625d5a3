"""What a sweep needs of this machine, checked before anything is written.

`sweepq plan` and `sweepq launch` both call `preflight`, so that a sweep that
cannot run is refused with one paragraph and exit 2 instead of being queued
and failing in every cell:

* its root resolves (no loop of symbolic links) and is a new or empty folder,
  or a sweep root already (one with sweepq.db): never `/`, a home or a project
  folder, whose files sweepq would mix with its own;
* every cell's command line is one that Linux can start: no argument holding a
  NUL byte, none over MAX_ARG_STRLEN, the whole line well under ARG_MAX;
* `train: module:function` names a function its module defines (read, not imported: entry.py);
* the program it runs exists: `program:` relative to the sweep file's folder
  (or a command on PATH), and the executable of the command as `execvp` finds it.

Launch refuses a sweep whose function or program this machine lacks; plan, which previews
a sweep where its code may not be (written here, run on a cluster), lists them in the same
words (`Preflight.absent`) and goes on: the contract's plan needs no program file.

The command lines are rendered with the real `${envvar:NAME}` values for these
checks, then dropped: what `preflight` hands back (and `plan` prints) shows
every such value as `***`.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from sweepq.errors import SpecError, UsageError
from sweepq.layout import RootPaths, default_root_beside
from sweepq.spec.command import DEFAULT_COMMAND, ENV_BINARY, flat_items, render_command, runs_as_module
from sweepq.spec.entry import train_entry_problem
from sweepq.spec.hydra import module_file
from sweepq.spec.types import CellSpec, Sweep

#: Linux's MAX_ARG_STRLEN (32 pages of 4 KiB) holds one argument and its final NUL.
MAX_ARG_BYTES = 32 * 4096 - 1
#: Linux's ARG_MAX (usually 2 MiB) holds the command line and the environment together;
#: half of it is left to the environment.
MAX_COMMAND_BYTES = 1024 * 1024

_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# Errors of stat() that leave the root to the writability check, which words them.
_FOR_LATER = (errno.ENOENT, errno.ENOTDIR, errno.EACCES)


@dataclass(frozen=True)
class Preflight:
    root: Path  # absolute, symbolic links resolved
    commands: dict[str, list[str]] = field(default_factory=dict)  # cell id -> argv as shown (secrets as ***)
    #: With `preview`: what this machine lacks that launch refuses (the train: function, the program, its
    #: interpreter or command), each in launch's words.
    absent: list[str] = field(default_factory=list)


def preflight(
    sweep: Sweep,
    filename: str,
    root: str | None = None,
    environ: Mapping[str, str] = os.environ,
    *,
    check_entry: bool = False,
    preview: bool = False,
) -> Preflight:
    """Check that `sweep` can run here (raises UsageError or SpecError); its root and shown commands.

    `filename` names the sweep file in messages, as the user wrote it; `root`
    is a --root given on the command line. `check_entry` (launch) also reads the
    `train:` module for its function. `preview` (plan) checks it too, and the program, but lists what
    this machine lacks in `absent` instead of raising, so a sweep can be previewed where its code is not;
    a command line that no machine could start is refused all the same.
    """
    checked = Preflight(sweep_root(sweep, filename, root))
    settings = sweep.settings
    if check_entry or preview:
        problem = entry_problem(sweep, filename)
        if problem is not None:
            if not preview:
                raise SpecError(problem)
            checked.absent.append(problem)
    if settings.program is None and settings.form != "wandb":
        return checked
    cells = RootPaths(checked.root)
    for cell in sweep.cells:
        paths = cells.cell(cell.id)
        render = partial(render_command, settings, cell.cfg, args_json_file=str(paths.args), environ=environ)
        argv = render(cell_dir=str(paths.dir), output_dir=str(paths.output))
        shown = render(cell_dir=str(paths.dir), output_dir=str(paths.output), shown=True)
        _check_argv(filename, cell, argv, shown)
        if not checked.commands:  # every cell runs the same executable and program
            try:
                _check_program(sweep, filename, argv, environ)
            except SpecError as absent:
                if not preview:
                    raise
                checked.absent.append(str(absent))
        checked.commands[cell.id] = shown
    return checked


def entry_problem(sweep: Sweep, filename: str) -> str | None:
    """Why the `train: module:function` of `sweep` cannot start a cell here, in the words launch refuses
    it with (read from the module's source, never imported: entry.py); None when it looks right."""
    train = sweep.settings.train
    if not train:
        return None
    problem = train_entry_problem(train, sweep.settings.spec_dir)
    return None if problem is None else f"{filename}: train: {train}: {problem}, so no cell could start."


# ------------------------------------------------------------------------ root


def sweep_root(sweep: Sweep, filename: str, override: str | None = None) -> Path:
    """The root `sweep` runs in (--root, else `root:`, else runs/<name> beside the file), checked."""
    if override:
        path, where = Path(override), f"--root {override}"
    elif sweep.root is not None:
        path, where = sweep.root, f"{filename}: root"
    else:
        path = default_root_beside(Path(sweep.settings.spec_dir), sweep.settings.name)
        where = f"{filename}: the default root (runs/<name> beside the file)"
    try:
        real = Path(os.path.realpath(path))
        is_folder = stat.S_ISDIR(os.stat(real).st_mode)
    except ValueError:  # a NUL byte
        raise _root_error(where, path, "its path contains a NUL byte") from None
    except OSError as exc:
        if exc.errno in _FOR_LATER:
            return real
        problem = "it is a loop of symbolic links" if exc.errno == errno.ELOOP else exc.strerror or str(exc)
        raise _root_error(where, path, problem) from None
    if is_folder and not _empty_or_sweep_root(real):
        raise UsageError(
            f"{where}: the sweep root {path} is a folder that is neither empty nor a sweep root (it has no "
            f"{RootPaths(real).db.name}), and sweepq would mix its files with what is there. Point the root at a "
            "new or empty folder (root: in the sweep file, or --root), e.g. runs/<name> beside the sweep file."
        )
    return real


def _empty_or_sweep_root(folder: Path) -> bool:
    paths = RootPaths(folder)
    if paths.db.exists() or paths.private.is_dir():  # .sweepq/: a root whose database was moved aside
        return True
    try:
        with os.scandir(folder) as entries:
            return next(entries, None) is None
    except OSError:  # unreadable: the writability check words it
        return True


def _root_error(where: str, path: Path, problem: str) -> UsageError:
    return UsageError(
        f"{where}: the sweep root {path} cannot be used: {problem}. Point the root at a folder "
        "(root: in the sweep file, or --root)."
    )


# ---------------------------------------------------------------- command lines


def _check_argv(filename: str, cell: CellSpec, argv: list[str], shown: list[str]) -> None:
    total = 0
    for position, token in enumerate(argv, start=1):
        problem = _argument_problem(token)
        if problem is not None:
            raise SpecError(
                f"{filename}: cell {cell.id}: argument {position} of its command ({_clip(shown[position - 1])}) "
                f"{problem}, so the program could not start. {_source(cell, token)}"
            )
        total += len(os.fsencode(token)) + 1
    if total > MAX_COMMAND_BYTES:
        raise SpecError(
            f"{filename}: cell {cell.id}: its command line is {total:,} bytes, more than the {MAX_COMMAND_BYTES:,} "
            "sweepq allows (Linux refuses a command line and environment over ARG_MAX, usually 2 MiB), so the "
            f"program could not start. {_IN_A_FILE}."
        )


_IN_A_FILE = (
    "Pass large values in a file (${args_json_file} stands for a JSON file holding the cell's cfg), or shorten them"
)


def _argument_problem(token: str) -> str | None:
    if "\0" in token:
        return "contains a NUL byte, which no program argument can hold (the operating system ends it there)"
    try:
        size = len(os.fsencode(token))
    except UnicodeEncodeError as exc:
        return f"holds {token[exc.start : exc.end]!r}, which is not text an argument can carry ({exc.reason})"
    if size > MAX_ARG_BYTES:
        return f"is {size:,} bytes, more than the {MAX_ARG_BYTES:,} Linux passes in one argument (MAX_ARG_STRLEN)"
    return None


def _source(cell: CellSpec, token: str) -> str:
    """Where a bad argument comes from, for the end of the message."""
    for path, value in flat_items(cell.cfg):
        text = f"{value}"
        if text and text in token and _argument_problem(text) is not None:
            return f"It holds the cfg value {path}: change that value in the sweep file{_fix(token)}."
    return f"It comes from the command, the program, the interpreter or an ${{envvar:NAME}} value{_fix(token)}."


def _fix(token: str) -> str:
    return "" if "\0" in token else f". {_IN_A_FILE}"


def _clip(text: str, limit: int = 60) -> str:
    text = repr(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------- program


def _check_program(sweep: Sweep, filename: str, argv: list[str], environ: Mapping[str, str]) -> None:
    settings = sweep.settings
    tokens = settings.command if settings.command is not None else list(DEFAULT_COMMAND)
    # `python` in a command is the interpreter sweepq runs under (as the program's launch sets PATH).
    search = os.pathsep.join([os.path.dirname(sys.executable), environ.get("PATH", "")])
    program = settings.program
    _check_inputs(filename, settings.inputs, settings.spec_dir)
    if program is not None and runs_as_module(tokens):
        _check_module(filename, program, settings.spec_dir, environ)
    elif program is not None and "${program}" in tokens:
        executable = _executable(argv)
        as_command = executable is not None and argv[executable] == program
        if not _found(program, settings.spec_dir, search, as_command=as_command):
            raise SpecError(_missing(filename, "program", program, settings.spec_dir, as_command))
    for position in dict.fromkeys((0, _executable(argv))):
        if position is None or argv[position] == program:
            continue
        name = argv[position]
        if not _found(name, settings.spec_dir, search, as_command=True):
            key = "interpreter" if name == settings.interpreter and "${interpreter}" in tokens else "command"
            raise SpecError(_missing(filename, key, name, settings.spec_dir, as_command=True))


def _check_module(filename: str, module: str, spec_dir: str, environ: Mapping[str, str]) -> None:
    """`python -m module` finds `module` as the program will: from the sweep file's folder (its working
    folder, or on its PYTHONPATH under `workdir: output`), PYTHONPATH, and the interpreter's own paths.

    Read, not imported (a package's __init__ is the user's code); this interpreter's sys.path stands for
    the program's, which is the same Python unless `interpreter:` names another.
    """
    if module_file(module, _module_folders(spec_dir, environ)) is not None:
        return
    if module.endswith(".py") or "/" in module:
        hint = f"python -m takes a module name, dotted and without .py: write program: {_as_module(module)}"
    else:
        hint = "Fix the module name, or install its package where the sweep runs"
    dotted = os.path.join(*module.split("."))
    raise SpecError(
        f"{filename}: program: {module!r} is run as a module (python -m) but cannot be found (no {dotted}.py or "
        f"{dotted}/__main__.py in the sweep file's folder, on PYTHONPATH or on this Python's sys.path), so every "
        f"cell would fail to start. {hint}."
    )


def _module_folders(spec_dir: str, environ: Mapping[str, str]) -> list[str]:
    pythonpath = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return [spec_dir, *(os.path.join(spec_dir, p) for p in pythonpath), *(p for p in sys.path if p)]


def _as_module(name: str) -> str:
    return name.removesuffix(".py").strip("./").replace("/", ".")


def _check_inputs(filename: str, inputs: list[str], spec_dir: str) -> None:
    """Every `inputs:` entry is there to be linked into a cell's working folder."""
    for name in inputs:
        if not os.path.lexists(os.path.join(spec_dir, name)):
            raise SpecError(
                f"{filename}: inputs: {name!r} cannot be found (no {os.path.join(spec_dir, name)}), so no cell "
                "could open it. Fix the path (relative to the sweep file's folder) or create it."
            )


def _executable(argv: list[str]) -> int | None:
    """Where the program exec starts is in `argv`: its first word, or the word `/usr/bin/env` starts
    (None: env with options, which are not worth guessing)."""
    if argv[0] != ENV_BINARY:
        return 0
    position = 1
    while position < len(argv) and _ASSIGNMENT.match(argv[position]):
        position += 1
    if position == len(argv) or argv[position].startswith("-"):
        return None
    return position


def _found(name: str, spec_dir: str, search: str, *, as_command: bool) -> bool:
    """Whether `name` names a file as the program's exec would find it from `spec_dir` (its working folder).

    A command (what exec starts) without a '/' is looked up on PATH only; a script
    given to an interpreter is a path from the working folder (or, for shells, on PATH).
    """
    if "/" in name or name.startswith("~"):
        path = os.path.join(spec_dir, os.path.expanduser(name))
        return os.path.isfile(path) and os.access(path, os.X_OK) if as_command else os.path.exists(path)
    if shutil.which(name, path=search) is not None:
        return True
    return not as_command and os.path.exists(os.path.join(spec_dir, name))


def _missing(filename: str, key: str, name: str, spec_dir: str, as_command: bool) -> str:
    beside = os.path.join(spec_dir, os.path.expanduser(name))
    if as_command and "/" in name and os.path.isfile(beside):
        return (
            f"{filename}: {key}: {name!r} is a file, but not executable, so every cell would fail to start. "
            f"Make it executable (chmod +x {name}), or run it through an interpreter."
        )
    if as_command and "/" not in name and os.path.exists(beside):
        hint = f"It is a file beside the sweep file, but a command without a '/' is looked up on PATH: write ./{name}"
    elif "/" in name or name.startswith("~"):
        hint = "Fix the path (relative to the sweep file's folder) or create the file"
    else:
        hint = "Fix the name, or install it"
    where = f"no file {beside}" if "/" in name or not as_command else "no file of that name on PATH"
    if not as_command and "/" not in name:
        where += " and no command of that name on PATH"
    return f"{filename}: {key}: {name!r} cannot be found ({where}), so every cell would fail to start. {hint}."
