"""Weights & Biases grid sweep files (`method: grid`), read unchanged.

Cells come in the order W&B's own grid code (wandb/sweeps, grid_search.py and
params.py) runs them, which its docs do not state:

* parameter names are sorted at every nesting level (nested `parameters:` are
  visited in place, depth first), and the product varies the last name fastest;
  constants (`value:`) take no part in the product;
* values keep their written order; `int_uniform` (explicit, or inferred from
  integer `min`/`max`) becomes min..max inclusive; `q_uniform` becomes
  `np.arange(min, max, q)`, max excluded (wandb_params.Steps);
* values W&B counts as the same (`1` and `1.0`, see `specread.value_identity`) make
  one cell, at the first one's position, holding the last one's spelling (W&B maps
  each value's hash to the last value with that hash);
* `run_cap` keeps a prefix of that order.

A cell's cfg is nested like the run config W&B gives the program:
`{"optim": {"lr": 0.1}}` for nested parameters, while a dotted name such as
`optim.lr` stays one flat key. Cells always run as subprocesses.
The file is one group, named after its `name:` when that is a valid group
name, else "default" (as a grouped file's top-level `grid:`).

Command lines are W&B's agent's (command.py, wandb_command.py): the same
macros, `${args_override_hydra}` and `${args_append_hydra}` included, and values
spelled as the agent receives them from W&B's server (`2.0` as `2`).

Where W&B silently ignores something (unknown keys, unknown macros, a goal it
does not know, an `${envvar:name}` its agent does not expand), sweepq refuses
the file, so that nothing written is lost.
`early_terminate` is accepted with a warning: W&B would stop some runs early,
sweepq runs every cell to its end.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from sweepq.errors import SpecError
from sweepq.spec.command import DEFAULT_COMMAND
from sweepq.spec.expand import Grid, Slot, expand
from sweepq.spec.limits import count_values, expansion_problem
from sweepq.spec.read import (
    SpecContext,
    check_keys,
    check_no_nul,
    describe,
    group_name_for,
    is_int,
    optional_str,
    read_command,
    read_goal,
    require_mapping,
    sweep_name,
)
from sweepq.spec.types import DEFAULT_MAX_CELLS, GroupSpec, Metric, Settings, Sweep
from sweepq.spec.wandb_command import envvar_problem
from sweepq.spec.wandb_params import Steps, WandbParameter, read_parameters

WANDB_KEYS = (
    "method",
    "parameters",
    "program",
    "command",
    "name",
    "description",
    "project",
    "entity",
    "metric",
    "run_cap",
    "apiVersion",
    "kind",
    "controller",
    "early_terminate",
)
_REFUSED_KEYS = {
    "scheduler": ("W&B Launch schedulers are not supported: sweepq runs the cells itself", "Remove scheduler"),
    "job": (
        "W&B Launch jobs are not supported: sweepq runs `program:` as a subprocess",
        "Replace job with program: train.py",
    ),
    "image_uri": (
        "W&B Launch images are not supported: sweepq runs `program:` as a subprocess",
        "Replace image_uri with program: train.py",
    ),
}
METRIC_KEYS = ("name", "goal", "impute", "impute_while_running")
WANDB_GOALS = {"maximize": "max", "minimize": "min"}


def parse_wandb(ctx: SpecContext, data: dict) -> Sweep:
    """Validate and expand a W&B sweep file already loaded as `data`."""
    _check_method(ctx, data["method"])  # first: a bayes file is refused for being bayes, whatever else it holds
    _check_top_level_keys(ctx, data)
    written_name = sweep_name(ctx, data)
    command = _read_wandb_command(ctx, data["command"]) if "command" in data else None
    program = optional_str(ctx, data, "program")
    check_no_nul(ctx, program, "program")
    if program is None and "${program}" in (command or DEFAULT_COMMAND):
        raise _missing_program(ctx, command)
    if "controller" in data:
        ctx.warn("controller", "ignored: sweepq runs the grid itself, with no W&B controller")
    if "early_terminate" in data:
        ctx.warn(
            "early_terminate",
            "ignored: sweepq never stops a cell early, it runs every cell to its end "
            "(W&B's agent would stop runs that fall behind)",
        )
    run_cap = _read_run_cap(ctx, data.get("run_cap"))
    parameters = read_parameters(ctx, data.get("parameters"))
    settings = Settings(
        name=written_name or ctx.path.stem,
        form="wandb",
        spec_dir=str(ctx.spec_dir),
        program=program,
        command=command,
        metric=_read_metric(ctx, data.get("metric")),
    )
    group = GroupSpec(1, group_name_for(written_name))
    grid = _grid(ctx, parameters, run_cap, group)
    return Sweep(
        path=ctx.path,
        settings=settings,
        root=None,
        description=optional_str(ctx, data, "description"),
        groups=[group],
        expand=lambda: expand(ctx, [grid]),
        notes=ctx.warnings,
        project=optional_str(ctx, data, "project"),
        entity=optional_str(ctx, data, "entity"),
    )


def _check_top_level_keys(ctx: SpecContext, data: dict) -> None:
    for key, (problem, fix) in _REFUSED_KEYS.items():
        if key in data:
            raise ctx.error(key, problem, fix)
    check_keys(ctx, data, WANDB_KEYS, "")
    if "parameters" not in data:
        raise ctx.error("", "a W&B grid sweep needs `parameters:`", "Add parameters: {lr: {values: [0.1, 0.01]}}")


def _read_wandb_command(ctx: SpecContext, value: Any) -> list[str]:
    tokens = read_command(ctx, value, numbers_as_text=True)
    problem = envvar_problem(tokens)
    if problem is not None:
        position, text, fix = problem
        raise ctx.error("command", f"token {position}: {text}", fix)
    return tokens


def _missing_program(ctx: SpecContext, command: list[str] | None) -> SpecError:
    # Such a file is usually written for wandb.agent(function=...): W&B calls the
    # function in-process, and sweepq needs a script or a function it can call.
    runs = "the command runs ${program}" if command else "W&B's default command runs ${program}"
    return ctx.error(
        "program",
        f"is missing, but {runs}: a W&B grid without program: is run by wandb.agent(function=...), "
        "which sweepq does not call",
        "Add one line, program: train.py, naming the script that calls your function (it gets the cell's values "
        "as flags, --lr=0.01: parse them and pass them to wandb.init(config=...)), or use sweepq's grouped form "
        "with train: module:function, where the function is called as train(cfg, run)",
    )


def _check_method(ctx: SpecContext, method: Any) -> None:
    if not isinstance(method, str):
        raise ctx.error("method", f"expected a string, got {describe(method)}", "Write method: grid")
    if method != "grid":
        raise ctx.error(
            "method",
            f"{method!r} is not supported: sweepq runs grid sweeps only, every cell known in advance",
            "Write method: grid and give each parameter a list of values, or run this sweep with W&B's agent",
        )


def _read_run_cap(ctx: SpecContext, value: Any) -> int | None:
    if value is None:
        return None
    if not is_int(value) or value < 1:
        raise ctx.error(
            "run_cap",
            f"expected a whole number of at least 1, got {describe(value)}",
            "Write e.g. run_cap: 20",
        )
    return value


def _read_metric(ctx: SpecContext, value: Any) -> Metric | None:
    if value is None:
        return None
    require_mapping(ctx, value, "metric", "metric: {name: val_loss, goal: minimize}")
    if "target" in value:
        raise ctx.error(
            "metric.target",
            "sweepq runs the whole grid and does not stop when a run reaches a target",
            "Remove target",
        )
    check_keys(ctx, value, METRIC_KEYS, "metric")
    name = optional_str(ctx, value, "name", "metric")
    if name is None:
        raise ctx.error("metric", "has no `name:`", "Write metric: {name: val_loss, goal: minimize}")
    # W&B's default goal is minimize; it silently replaces a goal it does not
    # know with that default, which is why anything else is refused here.
    return Metric(name, read_goal(ctx, value.get("goal", "minimize"), "metric.goal", WANDB_GOALS))


# ------------------------------------------------------------------- expansion


def _grid(ctx: SpecContext, parameters: list[WandbParameter], run_cap: int | None, group: GroupSpec) -> Grid:
    """The cells' grid in W&B's order (constants in place, the last varying parameter fastest), cut to `run_cap`;
    errors if too many."""
    varying = [parameter for parameter in parameters if parameter.varies]
    total = math.prod(len(parameter.values or ()) for parameter in varying)
    kept = total if run_cap is None else min(total, run_cap)
    if kept < total:
        ctx.warn("run_cap", f"{kept} of {total} cells kept (run_cap keeps the first {kept} in W&B's grid order)")
    if kept > DEFAULT_MAX_CELLS:
        raise ctx.error(
            "parameters",
            f"the grid has {kept:,} cells, more than sweepq's limit of {DEFAULT_MAX_CELLS:,}",
            f"Shrink the grid, or set run_cap: {DEFAULT_MAX_CELLS} to run its first cells",
        )
    constants = sum(count_values(parameter.constant) for parameter in parameters if not parameter.varies)
    most = constants + sum(_most_values(parameter.values or ()) for parameter in varying)
    problem = expansion_problem(kept, kept * most, most)
    if problem is not None:
        raise ctx.error("parameters", *problem)
    slots = {parameter.path: Slot(number) for number, parameter in enumerate(varying)}
    paths = {p.path: slots[p.path] if p.varies else p.constant for p in parameters}
    return Grid(group, paths, [parameter.values or () for parameter in varying], limit=kept)


def _most_values(values: Sequence[Any]) -> int:
    """The most values one of `values` holds (int_uniform and q_uniform ranges hold numbers only)."""
    return 1 if isinstance(values, (range, Steps)) else max(count_values(value) for value in values)
