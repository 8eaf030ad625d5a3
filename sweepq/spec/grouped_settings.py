"""Run settings of the grouped sweep form: what to run and how.

`grouped_settings` reads the entry point (`train:`, or `program:` with
`command:`, `interpreter:`, `workdir:`, `done_when:`, `resume_args:` and
`inputs:`), `checkpoint:`,
`metric:`, `retries:`, `max_attempt_seconds:` and `data:` into the `Settings`
a worker runs cells with.
"""

from __future__ import annotations

import os
import re
from typing import Any, cast

from sweepq.spec.command import ARGS_MACROS, CommandProblem, check_command, runs_as_module
from sweepq.spec.hydra import HYDRA_COMMAND, is_hydra_app, module_file
from sweepq.spec.read import (
    SpecContext,
    check_keys,
    check_no_nul,
    describe,
    is_int,
    optional_str,
    read_command,
    read_goal,
    read_int,
    read_number,
    require_mapping,
)
from sweepq.spec.types import (
    DEFAULT_BACKOFF_MAX_SECONDS,
    DEFAULT_BACKOFF_SECONDS,
    DEFAULT_RETRIES,
    DONE_WHEN,
    STARTS,
    WORKDIRS,
    CheckpointPolicy,
    DoneWhen,
    Metric,
    RetryPolicy,
    Settings,
    Start,
    Workdir,
)

#: Keys that only a `program:` sweep may have.
PROGRAM_KEYS = ("command", "interpreter", "workdir", "done_when", "resume_args", "inputs")
#: Args macros whose flags start with hyphens (`--db=mysql`), which a Hydra app refuses.
_HYPHEN_ARGS = ARGS_MACROS - {
    "args_no_hyphens",
    "args_append_hydra",
    "args_override_hydra",
    "args_hydra",
    "args_json",
    "args_json_file",
}
CHECKPOINT_KEYS = ("every_steps", "every_seconds", "keep_last", "keep_best", "overlap")
METRIC_KEYS = ("name", "goal")
GOALS = {"max": "max", "min": "min", "maximize": "max", "minimize": "min"}
_TRAIN_TARGET = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
_NEVER_BUDGETED = {
    "preempted": "a preemption is never the cell's fault, so it never spends a retry",
    "cancelled": "a cancelled cell stays cancelled, so it never spends a retry",
    "completed": "a completed cell is done, so it never spends a retry",
}


def grouped_settings(ctx: SpecContext, data: dict, name: str) -> Settings:
    train, program, command, interpreter = _read_entry_point(ctx, data)
    workdir = cast(Workdir, _read_choice(ctx, data, "workdir", WORKDIRS))
    if workdir == "sweep":
        ctx.warn(
            "workdir",
            "sweep: every cell runs in the sweep file's folder, so with more than one worker cells running at once "
            "share it and their relative outputs (model.pt, ./lightning_logs) may collide. Leave workdir out (each "
            "cell runs in its own output folder) or launch with --workers 1",
        )
    inputs = _read_inputs(ctx, data.get("inputs"))
    if inputs and workdir == "sweep":
        ctx.warn(
            "inputs",
            "with workdir: sweep every program runs in the sweep file's folder, where it finds these already: "
            "`inputs:` only links them into each cell's output folder under the default workdir: output",
        )
    if program is not None:
        command = _hydra_command(ctx, program, command)
    return Settings(
        name=name,
        form="grouped",
        spec_dir=str(ctx.spec_dir),
        train=train,
        program=program,
        command=command,
        interpreter=interpreter,
        checkpoint=_read_checkpoint(ctx, data.get("checkpoint")),
        metric=_read_metric(ctx, data.get("metric")),
        retries=_read_retries(ctx, data.get("retries")),
        max_attempt_seconds=read_number(ctx, data.get("max_attempt_seconds"), "max_attempt_seconds", above=0),
        data=_read_data(ctx, data.get("data")),
        workdir=workdir,
        done_when=cast(DoneWhen, _read_choice(ctx, data, "done_when", DONE_WHEN)),
        start=cast(Start, _read_choice(ctx, data, "start", STARTS)),
        resume_args=read_resume_args(ctx, data.get("resume_args"), "resume_args"),
        inputs=inputs,
        processes=read_processes(ctx, data.get("processes"), "processes"),
    )


def read_processes(ctx: SpecContext, value: Any, where: str) -> int:
    """`processes:` (of the sweep, or of a group at `where`): ranks per attempt, a positive whole number."""
    if value is None:
        return 1
    if not is_int(value) or value < 1:
        raise ctx.error(
            where,
            f"expected a positive whole number of ranks per attempt, got {describe(value)}",
            "Write e.g. processes: 2 (each attempt then runs 2 ranks with torchrun's environment), or leave it out "
            "for one process",
        )
    return int(value)


def read_resume_args(ctx: SpecContext, value: Any, where: str) -> list[str]:
    """`resume_args:` (of the sweep, or of a group at `where`): a list of command tokens."""
    if value is None:
        return []
    if not isinstance(value, list) or not value or not all(isinstance(item, str) and item for item in value):
        raise ctx.error(
            where,
            f"expected a non-empty list of arguments, got {describe(value)}",
            "Write the arguments a resuming attempt adds to the command, e.g. resume_args: [--resume] or "
            "resume_args: [--init_from=resume]",
        )
    for item in value:
        check_no_nul(ctx, item, where)
    problems = check_command(value) + [
        _not_here(position, token)
        for position, token in enumerate(value, start=1)
        if token.startswith("${args") or token in ("${program}", "${env}", "${interpreter}", "${resume_args}")
    ]
    if problems:
        first = problems[0]
        raise ctx.error(where, f"argument {first.position}: {first.problem}", first.fix)
    return list(value)


def _not_here(position: int, token: str) -> CommandProblem:
    return CommandProblem(
        position,
        token,
        f"{token} belongs in `command:`, not in the arguments a resume adds",
        "Keep plain arguments here (macros ${output_dir}, ${cell_dir}, ${sweep_dir} and ${envvar:NAME} work)",
    )


def _read_inputs(ctx: SpecContext, value: Any) -> list[str]:
    """`inputs:`: relative paths inside the sweep file's folder (they are linked under those names)."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(item, str) and item.strip() for item in items):
        raise ctx.error(
            "inputs",
            f"expected a path or a list of paths, got {describe(value)}",
            "Write the files and folders the program opens by a relative name, e.g. inputs: [configurator.py, data]",
        )
    seen: set[str] = set()
    for item in items:
        check_no_nul(ctx, item, "inputs")
        name = os.path.normpath(item)
        if os.path.isabs(os.path.expanduser(item)) or name == "." or name.split(os.sep)[0] == "..":
            raise ctx.error(
                "inputs",
                f"{item!r} is not a path inside the sweep file's folder, so it has no name to be linked under in a "
                "cell's working folder",
                "List paths relative to the sweep file's folder (data, configurator.py); a program can open an "
                "absolute path from any folder as it is",
            )
        if name in seen:
            raise ctx.error("inputs", f"{item!r} is listed twice", "List it once")
        seen.add(name)
    return [os.path.normpath(item) for item in items]


def _hydra_command(ctx: SpecContext, program: str, command: list[str] | None) -> list[str] | None:
    """The command of a Hydra app: HYDRA_COMMAND unless one is written; a written one that hands the app
    `--key=value` flags (which Hydra refuses) is an error. Other programs' commands are kept as they are."""
    as_module = command is not None and runs_as_module(command)
    source = module_file(program, [str(ctx.spec_dir)]) if as_module else ctx.resolve(program)
    if source is None or not is_hydra_app(source):
        return command
    if command is None:
        return list(HYDRA_COMMAND)
    for token in command:
        if token.startswith("${") and token[2:-1] in _HYPHEN_ARGS:
            raise ctx.error(
                "command",
                f"{program} is a Hydra app (it has @hydra.main), which refuses --key=value arguments, but "
                f"{token} hands it --key=value flags, so every cell would fail",
                "Write ${args_hydra} instead (db=mysql db.user=alice, in Hydra's grammar), and "
                "hydra.run.dir=${output_dir} so that every attempt of a cell finds its files; or leave "
                "`command:` out for that default",
            )
    if not any(token.startswith(("hydra.run.dir=", "++hydra.run.dir=")) for token in command):
        ctx.warn(
            "command",
            f"{program} is a Hydra app, and without hydra.run.dir every attempt writes into a new "
            "outputs/<date>/<time>/ folder, where a retry never finds the files of the attempt before it (and "
            "cells started in the same second share one). Add hydra.run.dir=${output_dir} to the command",
        )
    return command


def _read_entry_point(ctx: SpecContext, data: dict) -> tuple[str | None, str | None, list[str] | None, str]:
    if "train" in data and "program" in data:
        raise ctx.error(
            "train",
            "both `train:` and `program:` are given, but a sweep runs one of them",
            "Keep `train: module:function` to call Python in process, or `program: script.py` to run a subprocess",
        )
    if "train" not in data and "program" not in data:
        raise ctx.error(
            "",
            "neither `train:` nor `program:` says what to run",
            "Add `train: mypackage.module:train` (called as train(cfg, run)) or `program: train.py`",
        )
    if "train" in data:
        for key in PROGRAM_KEYS:
            if key in data:
                raise ctx.error(
                    key,
                    f"`{key}:` only applies to `program:` sweeps",
                    f"Remove `{key}:` or use `program:` instead of `train:`",
                )
        return _read_train(ctx, data["train"]), None, None, "python"
    program = optional_str(ctx, data, "program")
    if program is None:
        raise ctx.error("program", "is empty", "Write the script to run, e.g. program: train.py")
    command = read_command(ctx, data["command"], numbers_as_text=False) if "command" in data else None
    interpreter = optional_str(ctx, data, "interpreter") or "python"
    check_no_nul(ctx, program, "program")
    check_no_nul(ctx, interpreter, "interpreter")
    return None, program, command, interpreter


def _read_choice(ctx: SpecContext, data: dict, key: str, choices: dict[str, str]) -> str:
    """A key that takes one of a few words (`choices`: each word's meaning); absent means the first."""
    value = data.get(key)
    if value is None:
        return next(iter(choices))
    if not isinstance(value, str) or value not in choices:
        meanings = "; ".join(f"{key}: {word} ({meaning})" for word, meaning in choices.items())
        raise ctx.error(key, f"{value!r} is not one of " + ", ".join(choices), f"Write {meanings}")
    return value


def _read_train(ctx: SpecContext, value: Any) -> str:
    if not isinstance(value, str):
        raise ctx.error(
            "train",
            f"expected a string, got {describe(value)}",
            "Write it as train: mypackage.module:function",
        )
    if not _TRAIN_TARGET.match(value.strip()):
        raise ctx.error(
            "train",
            f"{value!r} is not an entry point",
            "Write the module and the function separated by one colon: train: mypackage.module:function",
        )
    return value.strip()


def _read_checkpoint(ctx: SpecContext, value: Any) -> CheckpointPolicy:
    if value is None:
        return CheckpointPolicy()
    require_mapping(ctx, value, "checkpoint", "checkpoint: {every_steps: 200, keep_last: 3}")
    check_keys(ctx, value, CHECKPOINT_KEYS, "checkpoint")
    every_steps = value.get("every_steps")
    if every_steps is not None:
        every_steps = read_int(ctx, every_steps, "checkpoint.every_steps", minimum=1)
    every_seconds = read_number(ctx, value.get("every_seconds"), "checkpoint.every_seconds", above=0)
    return CheckpointPolicy(
        every_steps=every_steps,
        every_seconds=every_seconds,
        auto=every_steps is None and every_seconds is None,
        keep_last=read_int(ctx, value.get("keep_last", 3), "checkpoint.keep_last", minimum=1),
        keep_best=_read_flag(ctx, value, "keep_best"),
        overlap=_read_flag(ctx, value, "overlap"),
    )


def _read_flag(ctx: SpecContext, value: dict[str, Any], name: str) -> bool:
    """A true/false key of `checkpoint:` (both default to true)."""
    flag = value.get(name, True)
    if not isinstance(flag, bool):
        raise ctx.error(
            f"checkpoint.{name}",
            f"expected true or false, got {describe(flag)}",
            f"Write {name}: true or {name}: false",
        )
    return flag


def _read_metric(ctx: SpecContext, value: Any) -> Metric | None:
    if value is None:
        return None
    require_mapping(ctx, value, "metric", "metric: {name: val_acc, goal: max}")
    check_keys(ctx, value, METRIC_KEYS, "metric")
    name = optional_str(ctx, value, "name", "metric")
    if name is None:
        raise ctx.error(
            "metric",
            "has no `name:`",
            "Name the metric train returns or logs: metric: {name: val_acc, goal: max}",
        )
    return Metric(name, read_goal(ctx, value.get("goal", "max"), "metric.goal", GOALS))


def _read_retries(ctx: SpecContext, value: Any) -> RetryPolicy:
    if value is None:
        return RetryPolicy()
    require_mapping(ctx, value, "retries", "retries: {lost: 3, oom: 1, nan: 2, error: 0}")
    budgets = dict(DEFAULT_RETRIES)
    backoff = {"backoff_seconds": DEFAULT_BACKOFF_SECONDS, "backoff_max_seconds": DEFAULT_BACKOFF_MAX_SECONDS}
    for key, number in value.items():
        where = f"retries.{key}"
        if key in _NEVER_BUDGETED:
            raise ctx.error(where, f"{key} has no retry budget: {_NEVER_BUDGETED[key]}", f"Remove `{key}:`")
        if key in budgets:
            budgets[key] = read_int(ctx, number, where, minimum=0)
        elif key in backoff:
            seconds = read_number(ctx, number, where, above=None, at_least=0)
            if seconds is not None:  # `key:` with no value keeps the default
                backoff[key] = seconds
        else:
            raise ctx.error(
                where,
                f"unknown key {key!r} in retries",
                "Known keys: " + ", ".join([*DEFAULT_RETRIES, *backoff]) + ". Check the spelling or remove it",
            )
    return RetryPolicy(budgets=budgets, **backoff)


def _read_data(ctx: SpecContext, value: Any) -> list[str]:
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(item, str) and item.strip() for item in items):
        raise ctx.error(
            "data",
            f"expected a path or a list of paths, got {describe(value)}",
            "Write data: [data/train, data/val]",
        )
    for item in items:
        check_no_nul(ctx, item, "data")
    return [ctx.resolve(item) for item in items]
