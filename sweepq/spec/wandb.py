"""Weights & Biases grid sweep files (`method: grid`), read unchanged.

Cells come in the order W&B's own grid code (wandb/sweeps, grid_search.py and
params.py) runs them, which its docs do not state:

* parameter names are sorted at every nesting level (nested `parameters:` are
  visited in place, depth first), and the product varies the last name fastest;
  constants (`value:`) take no part in the product;
* values keep their written order; `int_uniform` (explicit, or inferred from
  integer `min`/`max`) becomes min..max inclusive;
* values W&B counts as the same (`1` and `1.0`, see `specread.value_identity`) make
  one cell, at the first one's position, holding the last one's spelling (W&B maps
  each value's hash to the last value with that hash);
* `run_cap` keeps a prefix of that order.

A cell's cfg is nested like the run config W&B gives the program:
`{"optim": {"lr": 0.1}}` for nested parameters, while a dotted name such as
`optim.lr` stays one flat key. Cells always run as subprocesses.
The file is one group, named after its `name:` when that is a valid group
name, else "default" (as a grouped file's top-level `grid:`).

Where W&B silently ignores something (unknown keys, unknown macros, a goal it
does not know), sweepq refuses the file, so that nothing written is lost.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sweepq.spec.command import DEFAULT_COMMAND
from sweepq.spec.read import (
    Path_,
    SpecContext,
    build_cells,
    check_json_value,
    check_keys,
    describe,
    group_name_for,
    is_int,
    lazy_product,
    nest,
    optional_str,
    read_command,
    read_goal,
    require_mapping,
    show_value,
    value_identity,
)
from sweepq.spec.types import DEFAULT_MAX_CELLS, GroupSpec, Metric, Settings, Sweep

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
)
_REFUSED_KEYS = {
    "early_terminate": (
        "sweepq runs every cell of the grid to its end and never stops one early",
        "Remove early_terminate",
    ),
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

GRID_DISTRIBUTIONS = ("categorical", "constant", "int_uniform")
NON_GRID_DISTRIBUTIONS = (
    "categorical_w_probabilities",
    "uniform",
    "q_uniform",
    "log_uniform",
    "log_uniform_values",
    "q_log_uniform",
    "q_log_uniform_values",
    "inv_log_uniform",
    "inv_log_uniform_values",
    "normal",
    "q_normal",
    "log_normal",
    "q_log_normal",
    "beta",
    "q_beta",
)
_SAMPLING_KEYS = ("probabilities", "mu", "sigma", "q", "a", "b")
_PARAMETER_KEYS = ("distribution", "values", "value", "min", "max")
# W&B's schema for parameter names (propertyNames in its sweep config schema).
PARAMETER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class WandbParameter:
    """One leaf parameter: a constant, or the values the grid tries in order."""

    path: Path_
    where: str
    values: Sequence[Any] | None = None  # None: a constant
    constant: Any = None

    @property
    def varies(self) -> bool:
        return self.values is not None


def parse_wandb(ctx: SpecContext, data: dict) -> Sweep:
    """Validate and expand a W&B sweep file already loaded as `data`."""
    _check_top_level_keys(ctx, data)
    _check_method(ctx, data["method"])
    written_name = optional_str(ctx, data, "name")
    command = read_command(ctx, data["command"], numbers_as_text=True) if "command" in data else None
    program = optional_str(ctx, data, "program")
    if program is None and "${program}" in (command or DEFAULT_COMMAND):
        raise ctx.error(
            "program",
            "is missing, but the command runs ${program}",
            "Add program: train.py (relative to the sweep file's folder)",
        )
    if "controller" in data:
        ctx.warn("controller", "ignored: sweepq runs the grid itself, with no W&B controller")
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
    cells = build_cells(ctx, [(group, expand(ctx, parameters, run_cap))])
    return Sweep(
        path=ctx.path,
        settings=settings,
        root=None,
        description=optional_str(ctx, data, "description"),
        groups=[group],
        cells=cells,
        warnings=ctx.warnings,
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


# ------------------------------------------------------------------ parameters


def read_parameters(
    ctx: SpecContext, value: Any, prefix: Path_ = (), where: str = "parameters"
) -> list[WandbParameter]:
    """Leaf parameters in W&B's order: names sorted per level, nesting depth first."""
    if not isinstance(value, dict) or not value:
        raise ctx.error(
            where,
            f"expected a non-empty mapping of parameters, got {describe(value)}",
            "Write parameters: {lr: {values: [0.1, 0.01]}, epochs: {value: 10}}",
        )
    for name in value:
        if not isinstance(name, str) or not PARAMETER_NAME.match(name):
            raise ctx.error(
                f"{where}.{name}",
                f"{name!r} is not a parameter name W&B accepts",
                "Use letters, digits, '_', '.' and '-', starting with a letter or '_'",
            )
    parameters: list[WandbParameter] = []
    for name in sorted(value):
        parameters.extend(_read_parameter(ctx, value[name], prefix + (name,), f"{where}.{name}"))
    return parameters


def _read_parameter(ctx: SpecContext, spec: Any, path: Path_, where: str) -> list[WandbParameter]:
    if not isinstance(spec, dict):
        raise ctx.error(
            where,
            f"a parameter is a mapping, got {describe(spec)}",
            f"Write {path[-1]}: {{value: ...}} for a constant or {path[-1]}: {{values: [...]}} to vary it",
        )
    if "parameters" in spec:
        extra = [key for key in spec if key != "parameters"]
        if extra:
            raise ctx.error(
                where,
                f"a nested parameter holds only `parameters:`, but it also has {', '.join(map(str, extra))}",
                "Move those into its parameters",
            )
        return read_parameters(ctx, spec["parameters"], path, f"{where}.parameters")
    distribution = _read_distribution(ctx, spec, where)
    if "values" in spec:
        return [WandbParameter(path, where, values=_read_values(ctx, spec, distribution, where))]
    if "value" in spec:
        return [_read_constant(ctx, spec, distribution, where, path)]
    if "min" in spec or "max" in spec:
        return [WandbParameter(path, where, values=_read_int_range(ctx, spec, distribution, where))]
    raise ctx.error(
        where,
        "gives no values",
        "Write values: [...] to vary it, value: ... for a constant, or integer min and max",
    )


def _read_distribution(ctx: SpecContext, spec: dict, where: str) -> str | None:
    distribution = spec.get("distribution")
    if distribution is not None and not isinstance(distribution, str):
        raise ctx.error(
            f"{where}.distribution",
            f"expected a name, got {describe(distribution)}",
            "Write one of " + ", ".join(GRID_DISTRIBUTIONS),
        )
    if distribution in NON_GRID_DISTRIBUTIONS:
        raise ctx.error(
            f"{where}.distribution",
            f"{distribution} samples values at random, and a grid can only enumerate values",
            "List the values to try: values: [...] (or use int_uniform with integer min and max)",
        )
    if distribution is not None and distribution not in GRID_DISTRIBUTIONS:
        raise ctx.error(
            f"{where}.distribution",
            f"unknown distribution {distribution!r}",
            "A grid accepts " + ", ".join(GRID_DISTRIBUTIONS),
        )
    for key in _SAMPLING_KEYS:
        if key in spec:
            raise ctx.error(
                f"{where}.{key}",
                f"`{key}` shapes random sampling, which a grid does not do: every value runs once",
                f"Remove {key}",
            )
    check_keys(ctx, spec, _PARAMETER_KEYS, where)
    if "value" in spec and "values" in spec:
        raise ctx.error(
            where,
            "has both `value` and `values`",
            "Keep value: for a constant or values: [...] to vary it",
        )
    return distribution


def _read_values(ctx: SpecContext, spec: dict, distribution: str | None, where: str) -> list[Any]:
    _expect_distribution(ctx, distribution, "categorical", where, "values")
    _refuse_range_keys(ctx, spec, where, "values")
    values = spec["values"]
    if not isinstance(values, list):
        raise ctx.error(
            f"{where}.values",
            f"expected a list, got {describe(values)}",
            f"Write a list, even for one value: values: [{show_value(values)}]",
        )
    if not values:
        raise ctx.error(
            f"{where}.values",
            "is an empty list, which gives no cells",
            "Give at least one value, or use value: ... for a constant",
        )
    for item in values:
        check_json_value(ctx, item, f"{where}.values")
    ctx.warn_numeric_strings(values, f"{where}.values")
    return _distinct(ctx, values, f"{where}.values")


def _read_constant(ctx: SpecContext, spec: dict, distribution: str | None, where: str, path: Path_) -> WandbParameter:
    _expect_distribution(ctx, distribution, "constant", where, "value")
    _refuse_range_keys(ctx, spec, where, "value")
    check_json_value(ctx, spec["value"], f"{where}.value")
    ctx.warn_numeric_strings(spec["value"], f"{where}.value")
    return WandbParameter(path, where, constant=spec["value"])


def _read_int_range(ctx: SpecContext, spec: dict, distribution: str | None, where: str) -> range:
    _expect_distribution(ctx, distribution, "int_uniform", where, "min and max")
    low, high = spec.get("min"), spec.get("max")
    if low is None or high is None:
        raise ctx.error(where, "needs both min and max", "Write min: 1 and max: 4 (both included)")
    if not (is_int(low) and is_int(high)):
        if distribution == "int_uniform":
            raise ctx.error(
                where,
                f"int_uniform needs whole numbers, got min {low!r} and max {high!r}",
                "Write integer bounds, e.g. min: 1, max: 4",
            )
        raise ctx.error(
            where,
            f"min {low!r} and max {high!r} are not both integers, so W&B reads a continuous uniform distribution, "
            "which a grid can't enumerate",
            "List the values to try: values: [...], or give integer min and max",
        )
    if low >= high:
        raise ctx.error(
            where,
            f"min {low} is not less than max {high}",
            "Make min smaller than max (both are included)",
        )
    return range(low, high + 1)


def _expect_distribution(ctx: SpecContext, distribution: str | None, expected: str, where: str, given: str) -> None:
    if distribution not in (None, expected):
        raise ctx.error(
            f"{where}.distribution",
            f"{distribution} does not go with {given}",
            f"Write distribution: {expected}, or remove it",
        )


def _refuse_range_keys(ctx: SpecContext, spec: dict, where: str, given: str) -> None:
    for key in ("min", "max"):
        if key in spec:
            raise ctx.error(f"{where}.{key}", f"`{key}` does not go with `{given}`", f"Remove {key}")


def _distinct(ctx: SpecContext, values: list[Any], where: str) -> list[Any]:
    kept: list[Any] = []
    position: dict[str, int] = {}
    for value in values:
        identity = value_identity(value)
        if identity not in position:
            position[identity] = len(kept)
            kept.append(value)
            continue
        index = position[identity]
        ctx.warn(
            where,
            f"{show_value(value)} repeats {show_value(kept[index])}; W&B runs them as one cell, "
            "and so does sweepq "
            f"(in the first one's place, with the value {show_value(value)} as W&B does). Remove the repeat",
        )
        kept[index] = value  # W&B's grid code keeps the last spelling of a repeated value
    return kept


# ------------------------------------------------------------------- expansion


def expand(ctx: SpecContext, parameters: list[WandbParameter], run_cap: int | None) -> Iterator[dict[str, Any]]:
    """The cells' cfgs in W&B's grid order, cut to `run_cap`; errors if too many."""
    varying = [parameter for parameter in parameters if parameter.varies]
    total = math.prod(len(parameter.values) for parameter in varying)  # type: ignore[arg-type]
    kept = total if run_cap is None else min(total, run_cap)
    if kept < total:
        ctx.warn("run_cap", f"{kept} of {total} cells kept (run_cap keeps the first {kept} in W&B's grid order)")
    if kept > DEFAULT_MAX_CELLS:
        raise ctx.error(
            "parameters",
            f"the grid has {kept:,} cells, more than sweepq's limit of {DEFAULT_MAX_CELLS:,}",
            f"Shrink the grid, or set run_cap: {DEFAULT_MAX_CELLS} to run its first cells",
        )
    return itertools.islice(_combinations(parameters, varying), kept)


def _combinations(parameters: list[WandbParameter], varying: list[WandbParameter]) -> Iterator[dict[str, Any]]:
    for combo in lazy_product([parameter.values for parameter in varying]):  # type: ignore[misc]
        chosen = dict(zip((parameter.path for parameter in varying), combo))
        yield nest({p.path: chosen[p.path] if p.varies else p.constant for p in parameters})
