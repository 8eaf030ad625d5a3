"""The `parameters:` of a W&B grid sweep file: each leaf parameter and the values the grid tries.

W&B's order (see wandb.py): names sorted at every nesting level, nested
`parameters:` visited in place, depth first. Distributions W&B samples from
(random and bayes methods) have no grid and are refused with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sweepq.spec.read import (
    Path_,
    SpecContext,
    check_json_value,
    check_keys,
    describe,
    is_int,
    show_value,
    value_identity,
)

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
PARAMETER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*\Z")  # \Z: `$` would allow a final newline


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
        parameters.extend(_read_parameter(ctx, value[name], (*prefix, name), f"{where}.{name}"))
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
