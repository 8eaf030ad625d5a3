"""Command macros for subprocess cells (`program:` sweeps and W&B sweep files).

A command is a list of tokens. A token that is exactly a macro (`${args}`) expands
to zero or more argv tokens; `${envvar:NAME}` may also sit inside a longer token, as
in W&B, and so may sweepq's folder macros (`--save=${output_dir}/model.pt`). Any
other `${...}` inside a longer token is refused: W&B would pass it to the program
literally, which is never what the author meant.

The folder macros are sweepq's own: `${output_dir}` (the cell's output folder,
kept across attempts), `${cell_dir}` (the cell's folder) and `${sweep_dir}` (the
sweep file's folder).

Values print the way W&B's agent prints them (`f"--{key}={value}"`, so Python's
`str`: `True`, `None`, `1e-05`, `{'lr': 0.1}`); in a W&B file they are first
spelled as the agent receives them (`2.0` as `2`, mapping keys sorted: see
wandb_command.py). In a W&B file `${args}` gives one flag per top-level key; in
the grouped form it gives one flag per leaf path (`--optim.lr=0.1`), which W&B
files can ask for with sweepq's `${args_flat}`. `${args_append_hydra}` and
`${args_override_hydra}` are W&B's Hydra styles: `+key=value` and `++key=value`;
sweepq's `${args_hydra}` prints plain overrides in Hydra's grammar (`db=mysql
db.user=alice lr=0.1 name=null`), the default for a Hydra app (spec/hydra.py).

`${resume_args}` stands for the sweep's `resume_args:` on an attempt that
resumes a cell an earlier attempt of it ran, and for nothing otherwise; a
command without it gets them at its end.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sweepq.errors import SpecError
from sweepq.spec.hydra import hydra_value
from sweepq.spec.wandb_command import as_agent_gets

if TYPE_CHECKING:
    from sweepq.spec.types import Settings

#: W&B's default command, also sweepq's default for `program:` sweeps.
DEFAULT_COMMAND: tuple[str, ...] = ("${env}", "${interpreter}", "${program}", "${args}")

#: Macros that hand the cell's parameters to the program.
ARGS_MACROS = frozenset(
    {
        "args",
        "args_no_hyphens",
        "args_no_boolean_flags",
        "args_no_equals",  # W&B's agent has it too, though its docs do not list it
        "args_append_hydra",
        "args_override_hydra",
        "args_json",
        "args_json_file",
        "args_flat",
        "args_hydra",
    }
)
#: sweepq's macros naming a folder: they may sit inside a longer token too.
PLACE_MACROS = frozenset({"output_dir", "cell_dir", "sweep_dir"})
MACROS = ARGS_MACROS | PLACE_MACROS | {"env", "interpreter", "program", "resume_args"}

#: Variables sweepq sets per cell in the program's environment, and the macro a command uses instead.
PER_CELL_VARIABLES = {
    "SWEEPQ_OUTPUT_DIR": "output_dir",
    "SWEEPQ_CELL_DIR": "cell_dir",
    "SWEEPQ_SWEEP_DIR": "sweep_dir",
}

ENV_BINARY = "/usr/bin/env"

#: What an `${envvar:NAME}` value is shown as wherever sweepq prints or stores a command.
SECRET = "***"

_MACRO = re.compile(r"\$\{([^}]*)\}")
_ENVVAR = re.compile(r"envvar:([A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True)
class CommandProblem:
    """One invalid command token: its 1-based position, what is wrong, the fix."""

    position: int
    token: str
    problem: str
    fix: str


def check_command(tokens: Sequence[str]) -> list[CommandProblem]:
    """Every macro problem in a command template (empty when it is valid)."""
    problems = []
    for position, token in enumerate(tokens, start=1):
        problem = _token_problem(position, token)
        if problem is not None:
            problems.append(problem)
    return problems


def _token_problem(position: int, token: str) -> CommandProblem | None:
    whole = _whole_macro(token)
    if whole is not None and whole not in MACROS and not _ENVVAR.fullmatch(whole):
        return CommandProblem(
            position,
            token,
            f"unknown macro {token} (W&B would drop it silently)",
            "Use one of " + ", ".join(f"${{{m}}}" for m in sorted(MACROS)) + " or ${envvar:NAME}",
        )
    for match in _MACRO.finditer(token):
        envvar = _ENVVAR.fullmatch(match.group(1))
        if envvar is not None and envvar.group(1) in PER_CELL_VARIABLES:
            return CommandProblem(
                position,
                token,
                f"{match.group(0)} is set by sweepq in each program's environment, not where the command is "
                "rendered (every cell would get the launch's value, or none)",
                f"Write ${{{PER_CELL_VARIABLES[envvar.group(1)]}}} instead, which names each cell's own folder",
            )
        if whole is None and envvar is None and match.group(1) not in PLACE_MACROS:
            return CommandProblem(
                position,
                token,
                f"the macro {match.group(0)} is inside the longer token {token!r}, where it is not "
                "expanded (only ${envvar:NAME}, ${output_dir}, ${cell_dir} and ${sweep_dir} are)",
                f"Make {match.group(0)} a token of its own",
            )
    return None


def runs_as_module(tokens: Sequence[str]) -> bool:
    """Whether the command runs `${program}` as a module (`python -m ${program}`)."""
    return any(token == "-m" and after == "${program}" for token, after in itertools.pairwise(tokens))


def command_uses_args(tokens: Sequence[str]) -> bool:
    """True when some token hands the cell's parameters to the program."""
    return any(_whole_macro(token) in ARGS_MACROS for token in tokens)


def render_command(
    settings: Settings,
    cfg: Mapping[str, Any],
    *,
    args_json_file: str,
    environ: Mapping[str, str],
    shown: bool = False,
    cell_dir: str | None = None,
    output_dir: str | None = None,
    resume_args: Sequence[str] = (),
) -> list[str]:
    """The argv of one cell: the sweep's command template with its macros expanded.

    `args_json_file` is the path `${args_json_file}` stands for (the caller writes
    `args_json(cfg)` there); `cell_dir` and `output_dir` the folders `${cell_dir}`
    and `${output_dir}` stand for (a caller that leaves them out renders commands
    without them). `resume_args`: the tokens `${resume_args}` stands for (at the
    command's end when it has no such token), given only to an attempt that
    resumes (the caller decides). `shown`: the command as sweepq may print or store it, every
    `${envvar:NAME}` value replaced by SECRET (a token, a password): the real
    values go only to the program. Raises SpecError for an unset `${envvar:NAME}`,
    a `${program}` without a program, or an invalid template.
    """
    tokens = list(settings.command) if settings.command is not None else list(DEFAULT_COMMAND)
    problems = check_command(tokens)
    if problems:
        first = problems[0]
        raise SpecError(f"sweep {settings.name!r}: command token {first.position}: {first.problem}. {first.fix}.")
    places = {"output_dir": output_dir, "cell_dir": cell_dir, "sweep_dir": settings.spec_dir}
    if resume_args and "${resume_args}" not in tokens:
        tokens.append("${resume_args}")
    argv: list[str] = []
    for token in tokens:
        name = _whole_macro(token)
        if name == "resume_args":
            argv.extend(_substitute(arg, environ, places, settings.name, shown) for arg in resume_args)
        elif name is not None and name in MACROS and name not in PLACE_MACROS:
            argv.extend(_expand(name, settings, cfg, args_json_file))
        else:
            argv.append(_substitute(token, environ, places, settings.name, shown))
    return argv


def _whole_macro(token: str) -> str | None:
    match = _MACRO.fullmatch(token)
    return match.group(1) if match else None


def _expand(name: str, settings: Settings, cfg: Mapping[str, Any], args_json_file: str) -> list[str]:
    if name == "env":
        return [ENV_BINARY]
    if name == "interpreter":
        return [settings.interpreter]
    if name == "program":
        if settings.program is None:
            raise SpecError(
                f"sweep {settings.name!r}: the command uses ${{program}} but the sweep has no `program:`. "
                "Add `program: train.py` or remove ${program} from the command."
            )
        return [settings.program]
    if name == "args_json":
        return [args_json(cfg, settings.form)]
    if name == "args_json_file":
        return [args_json_file]
    if name == "args_flat":
        return _FLAG_STYLES[name](flat_items(as_agent_gets(cfg) if settings.form == "wandb" else cfg))
    return _FLAG_STYLES[name](args_items(cfg, settings.form))


def _substitute(
    token: str, environ: Mapping[str, str], places: Mapping[str, str | None], sweep_name: str, shown: bool
) -> str:
    """`token` with its `${envvar:NAME}` and folder macros replaced by their values."""

    def value_of(match: re.Match[str]) -> str:
        if match.group(1) in PLACE_MACROS:
            place = places[match.group(1)]
            if place is None:
                raise ValueError(f"render_command was given no {match.group(1)} for {match.group(0)}")
            return place
        variable = _ENVVAR.fullmatch(match.group(1)).group(1)  # type: ignore[union-attr]
        if variable not in environ:
            raise SpecError(
                f"sweep {sweep_name!r}: the command uses ${{envvar:{variable}}} but the environment "
                f"variable {variable} is not set. Set it where the sweep is launched (export "
                f"{variable}=...) or remove it from the command."
            )
        return SECRET if shown else environ[variable]

    return _MACRO.sub(value_of, token)


def args_items(cfg: Mapping[str, Any], form: str) -> list[tuple[str, Any]]:
    """The (name, value) pairs that `${args}` prints for this sweep form.

    W&B form: one pair per top-level key (a nested mapping is one value), each
    value as W&B's agent receives it; grouped form: one pair per leaf, named by
    its dotted path.
    """
    if form == "wandb":
        return list(as_agent_gets(cfg).items())
    return flat_items(cfg)


def flat_items(cfg: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """One (dotted.path, value) pair per leaf, keys sorted at every level.

    Lists are leaves; an empty mapping is a leaf too, so that no key disappears.
    """
    items: list[tuple[str, Any]] = []
    for key, value in sorted(cfg.items()):
        if isinstance(value, Mapping) and value:
            items.extend((f"{key}.{sub}", leaf) for sub, leaf in flat_items(value))
        else:
            items.append((key, value))
    return items


def args_json(cfg: Mapping[str, Any], form: str = "grouped") -> str:
    """The cfg as `${args_json}` passes it (and the args JSON file holds): one JSON text.

    In a W&B file, the values as W&B's agent receives them (`2.0` as `2`).
    """
    return json.dumps(as_agent_gets(cfg) if form == "wandb" else cfg, sort_keys=True)


def _flags(items: list[tuple[str, Any]]) -> list[str]:
    return [f"--{name}={value}" for name, value in items]


def _flags_no_hyphens(items: list[tuple[str, Any]]) -> list[str]:
    return [f"{name}={value}" for name, value in items]


def _flags_no_boolean(items: list[tuple[str, Any]]) -> list[str]:
    # W&B's rule: true booleans become bare flags, false ones disappear.
    flags = []
    for name, value in items:
        if isinstance(value, bool):
            if value:
                flags.append(f"--{name}")
        else:
            flags.append(f"--{name}={value}")
    return flags


def _flags_append_hydra(items: list[tuple[str, Any]]) -> list[str]:
    return [f"+{name}={value}" for name, value in items]


def _flags_hydra(items: list[tuple[str, Any]]) -> list[str]:
    return [f"{name}={hydra_value(value)}" for name, value in items]


def _flags_override_hydra(items: list[tuple[str, Any]]) -> list[str]:
    return [f"++{name}={value}" for name, value in items]


def _flags_no_equals(items: list[tuple[str, Any]]) -> list[str]:
    argv = []
    for name, value in items:
        argv += [f"--{name}", f"{value}"]
    return argv


_FLAG_STYLES = {
    "args": _flags,
    "args_flat": _flags,
    "args_no_hyphens": _flags_no_hyphens,
    "args_no_boolean_flags": _flags_no_boolean,
    "args_no_equals": _flags_no_equals,
    "args_append_hydra": _flags_append_hydra,
    "args_override_hydra": _flags_override_hydra,
    "args_hydra": _flags_hydra,
}

__all__ = [
    "ARGS_MACROS",
    "DEFAULT_COMMAND",
    "ENV_BINARY",
    "MACROS",
    "PER_CELL_VARIABLES",
    "PLACE_MACROS",
    "SECRET",
    "CommandProblem",
    "args_items",
    "args_json",
    "check_command",
    "command_uses_args",
    "flat_items",
    "render_command",
    "runs_as_module",
]
