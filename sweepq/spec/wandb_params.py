"""The `parameters:` of a W&B grid sweep file: each leaf parameter and the values the grid tries.

W&B's order (see wandb.py): names sorted at every nesting level, nested
`parameters:` visited in place, depth first. W&B's grid (wandb/sweeps,
grid_search.py, grid_search_next_runs) enumerates categorical, constant,
int_uniform and q_uniform parameters only; it refuses every other distribution,
and so does sweepq, with the reason.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sweepq.spec.limits import INT_MAX
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
from sweepq.spec.types import DEFAULT_MAX_CELLS

GRID_DISTRIBUTIONS = ("categorical", "constant", "int_uniform", "q_uniform")
# Every other distribution W&B knows: each samples at random, and W&B's grid refuses it.
# fmt: off
NON_GRID_DISTRIBUTIONS = (
    "categorical_w_probabilities", "uniform", "log_uniform", "log_uniform_values", "q_log_uniform",
    "q_log_uniform_values", "inv_log_uniform", "inv_log_uniform_values", "normal", "q_normal", "log_normal",
    "q_log_normal", "beta", "q_beta",
)
# fmt: on
_SAMPLING_KEYS = ("probabilities", "mu", "sigma", "a", "b")
_PARAMETER_KEYS = ("distribution", "values", "value", "min", "max")
_Q_UNIFORM_KEYS = ("distribution", "min", "max", "q")
_NOT_ENUMERABLE = (
    "List the values to try: values: [...] (or int_uniform with integer min and max, or q_uniform with min, max and q)"
)
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
    if distribution == "q_uniform":
        return [WandbParameter(path, where, values=_read_q_uniform(ctx, spec, where))]
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
            f"{distribution} samples values at random, and W&B's grid refuses it too: a grid enumerates "
            "categorical, constant, int_uniform and q_uniform parameters only",
            _NOT_ENUMERABLE,
        )
    if distribution is not None and distribution not in GRID_DISTRIBUTIONS:
        raise ctx.error(
            f"{where}.distribution",
            f"unknown distribution {distribution!r}",
            "A grid accepts " + ", ".join(GRID_DISTRIBUTIONS),
        )
    if distribution == "q_uniform":
        check_keys(ctx, spec, _Q_UNIFORM_KEYS, where)
        return distribution
    for key in _SAMPLING_KEYS:
        if key in spec:
            raise ctx.error(
                f"{where}.{key}",
                f"`{key}` shapes random sampling, which a grid does not do: every value runs once",
                f"Remove {key}",
            )
    if "q" in spec:
        raise ctx.error(
            f"{where}.q",
            "`q` goes with distribution: q_uniform only (W&B refuses it here)",
            "Add distribution: q_uniform to step from min by q (max excluded), or remove q",
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
            f"min {low!r} and max {high!r} are not both integers: W&B reads two floats as a continuous uniform "
            "distribution, which a grid can't enumerate, and refuses a float with an integer as ambiguous",
            "List the values to try: values: [...], give integer min and max, or add distribution: q_uniform "
            "and q to step from min by q",
        )
    if low >= high:
        raise ctx.error(
            where,
            f"min {low} is not less than max {high}",
            "Make min smaller than max (both are included)",
        )
    if high - low + 1 > sys.maxsize:  # a range longer than this has no len(): nothing could count its cells
        raise ctx.error(
            where,
            f"int_uniform from min {low} to max {high} holds {high - low + 1} values, more than a grid can count "
            f"(at most {sys.maxsize}, 2**63 - 1, values a parameter)",
            "Narrow min and max (a grid runs each value: list the values to try with values: [...])",
        )
    return range(low, high + 1)


class Steps(Sequence[Any]):
    """`np.arange(low, high, q).tolist()`, W&B's grid values of a q_uniform parameter, computed lazily.

    numpy puts low and low + q first, then fills value i as low + i * delta, where
    delta is (low + q) - low computed in floats, not q itself: -1 to 1 by 0.3
    holds -0.3999999999999999 (-1 + 2 * 0.30000000000000004), not -0.4, and W&B's
    runs get exactly these floats. Whole numbers stay whole; a float among low,
    high and q makes every value a float.
    """

    def __init__(self, low: int | float, high: int | float, q: int | float, length: int) -> None:
        self.floats = any(isinstance(bound, float) for bound in (low, high, q))
        cast = float if self.floats else int
        self.first, self.second = cast(low), cast(low + q)
        self.delta = self.second - self.first
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.length))]
        if index < 0:
            index += self.length
        if not 0 <= index < self.length:
            raise IndexError(index)
        return (self.first, self.second)[index] if index < 2 else self.first + index * self.delta

    def may_repeat(self) -> bool:
        """Whether two values may round to the same float (q below the precision at this magnitude).

        Consecutive sums differ by delta minus rounding errors of at most one ulp of
        the largest magnitude involved; more than two ulps apart, they never meet.
        """
        if not self.floats:
            return False
        largest = 2 * (abs(self.first) + self.length * abs(self.delta))
        return not self.delta > 2 * math.ulp(largest)


def _read_q_uniform(ctx: SpecContext, spec: dict, where: str) -> Sequence[Any]:
    """The values W&B's grid gives a q_uniform parameter: from min by q, below max (max excluded)."""
    if "min" not in spec or "max" not in spec:
        raise ctx.error(
            where,
            "q_uniform needs both min and max",
            "Write min: 0, max: 1, q: 0.25 (W&B's grid tries min, min + q, ... below max)",
        )
    low, high = _number(ctx, spec, "min", where), _number(ctx, spec, "max", where)
    q = _number(ctx, spec, "q", where) if "q" in spec else 1.0  # W&B's schema's default
    if low >= high:
        raise ctx.error(where, f"min {low} is not less than max {high}", "Make min smaller than max (max is excluded)")
    if q <= 0:
        raise ctx.error(f"{where}.q", f"q {q} is not above 0", "Write the step between values, e.g. q: 0.1")
    if "q" not in spec:
        ctx.warn(
            f"{where}.q",
            "not given, so W&B's default q: 1.0 applies and every value is a float "
            f"({show_value(float(low))}, {show_value(float(low) + 1.0)}, ...), as in W&B. "
            "Write q: 1 for whole numbers",
        )
    steps = _steps(ctx, low, high, q, where)
    if not steps.may_repeat():
        return steps
    if len(steps) > DEFAULT_MAX_CELLS:
        raise ctx.error(
            where,
            f"min {low} to max {high} by q {q} gives {len(steps):,} values, more than sweepq's limit of "
            f"{DEFAULT_MAX_CELLS:,} cells, so near the float precision that some may repeat",
            "Use a larger q or a narrower range",
        )
    kept, repeats = _dedupe(list(steps))
    if repeats:
        ctx.warn(
            where,
            f"{len(repeats)} of the {len(steps)} values from min {low} by q {q} repeat (q is below the float "
            "precision there); W&B runs each value once, and so does sweepq. Use a larger q",
        )
    return kept


def _number(ctx: SpecContext, spec: dict, key: str, where: str) -> int | float:
    value = spec[key]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    hint = ""
    if isinstance(value, str) and value in ctx.numeric_looking_strings:
        hint = " (YAML 1.1, which sweepq and W&B read, needs a dot and a signed exponent in a float: 1.0e-3)"
    raise ctx.error(f"{where}.{key}", f"expected a number, got {describe(value)}", f"Write a number{hint}")


def _steps(ctx: SpecContext, low: int | float, high: int | float, q: int | float, where: str) -> Steps:
    span = high - low
    if math.isinf(span):
        raise ctx.error(
            where,
            f"max - min ({high} - {low}) is beyond the largest float, so W&B's grid (numpy.arange) cannot count "
            "its values",
            "Use a narrower range",
        )
    quotient = span / q  # numpy's length: this quotient rounded up, or 1 where it underflows to 0
    if quotient > INT_MAX:
        raise ctx.error(
            where,
            f"min {low} to max {high} by q {q} gives about {quotient:.3g} values, more than a grid can count",
            "Use a larger q or a narrower range",
        )
    length = max(1, math.ceil(quotient))
    steps = Steps(low, high, q, length)
    if not (math.isfinite(steps[0]) and math.isfinite(steps[-1])):  # values only grow: the ends tell
        raise ctx.error(
            where,
            f"min {low} to max {high} by q {q} reaches infinity in W&B's arithmetic (numpy.arange), "
            "and a cfg holds finite numbers only",
            "Use a smaller max",
        )
    return steps


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
    kept, repeats = _dedupe(values)
    for value, earlier in repeats:
        ctx.warn(
            where,
            f"{show_value(value)} repeats {show_value(earlier)}; W&B runs them as one cell, "
            "and so does sweepq "
            f"(in the first one's place, with the value {show_value(value)} as W&B does). Remove the repeat",
        )
    return kept


def _dedupe(values: list[Any]) -> tuple[list[Any], list[tuple[Any, Any]]]:
    """W&B's rule for values counted as the same: one, in the first one's place, with the last one's value.

    Also returns each repeat with the value it repeats (as kept so far).
    """
    kept: list[Any] = []
    repeats: list[tuple[Any, Any]] = []
    position: dict[str, int] = {}
    for value in values:
        identity = value_identity(value)
        if identity not in position:
            position[identity] = len(kept)
            kept.append(value)
            continue
        index = position[identity]
        repeats.append((value, kept[index]))
        kept[index] = value  # W&B's grid code keeps the last spelling of a repeated value
    return kept, repeats
