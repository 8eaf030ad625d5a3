"""sweepq's grouped sweep form (`groups:` or `grid:`): parse, validate, expand.

`parse_grouped` reads the top level, the shared `params`, the groups and their
grids, and expands them into cells; the run settings (`train:`/`program:`,
`checkpoint:`, `metric:`, `retries:`, ...) are read by sweepq.spec.grouped_settings.

Where the sweep-file specification (docs/sweep-format.md) leaves it open:
* every key in `params` and `grid` is a dotted path (`optim.lr` and
  `optim: {lr: ...}` are the same path), so a key can't contain a literal dot;
* in a `train:` sweep a path can't be both a value and a mapping (`optim: sgd`
  with `optim.lr`); a `program:` sweep may have both, as Hydra's everyday
  `db=mysql db.user=alice` does (a group choice and a key inside it): the cfg
  then holds the value under its key and each path below it as one dotted key
  beside it (`{"db": "mysql", "db.user": "alice"}`), which every args macro
  prints as `db=mysql db.user=alice` (`_beside_values`);
* a path written in both the top-level `params` and a top-level `grid` is an
  error, like the same path in a group's `params` and `grid` (the grid always wins);
* a grid is a mapping of paths to non-empty lists; `grid: {}` is an error (leave
  `grid:` out for a single cell); two values of one list that W&B would count as
  the same (`1` and `1.0`) are a repeated value;
* a top-level `grid:` is one group named after the sweep's `name:` when that is a
  valid group name, else "default".
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweepq.errors import SpecError
from sweepq.spec.expand import Grid, Slot, expand
from sweepq.spec.grouped_settings import grouped_settings, read_processes, read_resume_args
from sweepq.spec.limits import count_values, expansion_problem
from sweepq.spec.read import (
    GROUP_NAME,
    Path_,
    SpecContext,
    check_json_value,
    check_keys,
    check_name,
    check_no_nul,
    describe,
    group_name_for,
    optional_str,
    read_int,
    require_mapping,
    show_value,
    sweep_name,
    value_identity,
)
from sweepq.spec.server import read_database, read_lease, read_storage
from sweepq.spec.slurm import read_slurm
from sweepq.spec.types import DEFAULT_MAX_CELLS, GroupSpec, Sweep

GROUPED_KEYS = (
    "name",
    "description",
    "root",
    "params",
    "checkpoint",
    "metric",
    "retries",
    "max_cells",
    "train",
    "program",
    "command",
    "interpreter",
    "workdir",
    "done_when",
    "start",
    "groups",
    "grid",
    "max_attempt_seconds",
    "data",
    "resume_args",
    "inputs",
    "database",
    "storage",
    "lease",
    "processes",
    "slurm",
)
GROUP_KEYS = ("name", "description", "params", "grid", "resume_args", "processes")
_GROUP_NAME_RULE = (
    "Use a name like q2 or adamw: letters, digits, '_' and '-', starting with a letter or '_' "
    "(so it can't be mistaken for a cell id or a pattern)"
)


@dataclass(frozen=True)
class _Leaf:
    value: Any
    where: str


@dataclass(frozen=True)
class _Axis:
    path: Path_
    values: list[Any]
    where: str


@dataclass
class _Group:
    spec: GroupSpec
    params: dict[Path_, _Leaf]
    axes: list[_Axis]
    resume_args: list[str] = dataclasses.field(default_factory=list)
    processes: int | None = None  # `processes:` of the group; None: the sweep's

    @property
    def size(self) -> int:
        return math.prod(len(axis.values) for axis in self.axes)

    def values_per_cell(self) -> int:
        """The most values one cell's cfg takes from this group (its params, its largest grid values)."""
        params = sum(count_values(leaf.value) for leaf in self.params.values())
        return params + sum(max(count_values(value) for value in axis.values) for axis in self.axes)

    def grid(self, sweep_params: Mapping[Path_, _Leaf]) -> Grid:
        """Sweep params, then group params, then the grid's axes, per path (a later one wins)."""
        paths: dict[Path_, Any] = {path: leaf.value for path, leaf in sweep_params.items()}
        paths.update((path, leaf.value) for path, leaf in self.params.items())
        paths.update((axis.path, Slot(number)) for number, axis in enumerate(self.axes))
        return Grid(self.spec, _beside_values(paths), [axis.values for axis in self.axes])


def _beside_values(paths: dict[Path_, Any]) -> dict[Path_, Any]:
    """The paths with each one below a value (`db.user` below `db: mysql`) made one dotted key beside it.

    Only a `program:` sweep has such paths (the parse refuses them elsewhere). The
    shortest path that is a value wins: `db`, `db.user` and `db.user.x` give the
    keys `db`, `db.user` and `db.user.x` of one mapping.
    """
    if len(paths) < 2:
        return paths
    moved: dict[Path_, Any] = {}
    for path, value in paths.items():
        for end in range(1, len(path)):
            if path[:end] in paths:
                path = (*path[: end - 1], ".".join(path[end - 1 :]))
                break
        moved[path] = value
    return moved


def parse_grouped(ctx: SpecContext, data: dict) -> Sweep:
    check_keys(ctx, data, GROUPED_KEYS, "", hint="; parameters shared by every cell go under params:")
    if "groups" in data and "grid" in data:
        raise ctx.error(
            "grid",
            "a top-level `grid:` and `groups:` can't be used together",
            "Move the grid into a group (groups: [{name: main, grid: {...}}]) or remove `groups:`",
        )
    written_name = sweep_name(ctx, data)
    settings = grouped_settings(ctx, data, written_name or ctx.path.stem)
    ctx.keys_inside_values = settings.program is not None
    max_cells = read_int(ctx, data.get("max_cells", DEFAULT_MAX_CELLS), "max_cells", minimum=1)
    sweep_params = _read_params(ctx, data.get("params"), "params")
    groups = _read_groups(ctx, data, written_name, sweep_params)
    group_resume_args = {str(group.spec.number): group.resume_args for group in groups if group.resume_args}
    if group_resume_args:
        if settings.program is None:
            first = next(group for group in groups if group.resume_args)
            raise ctx.error(
                f"groups[{first.spec.number}].resume_args",
                "`resume_args:` only applies to `program:` sweeps (a train function resumes with run.restore)",
                "Remove it, or use `program:` instead of `train:`",
            )
        settings = dataclasses.replace(settings, group_resume_args=group_resume_args)
    group_processes = {str(g.spec.number): g.processes for g in groups if g.processes is not None}
    if group_processes:
        settings = dataclasses.replace(settings, group_processes=group_processes)
    if data.get("storage") is not None:
        settings = dataclasses.replace(settings, storage=read_storage(ctx, data))
    lease = read_lease(ctx, data.get("lease"))
    settings = dataclasses.replace(settings, lease=lease)
    _check_cell_count(ctx, groups, max_cells)
    _check_values(ctx, groups, sweep_params)
    grids = [group.grid(sweep_params) for group in groups]
    root = optional_str(ctx, data, "root")
    check_no_nul(ctx, root, "root")
    return Sweep(
        path=ctx.path,
        settings=settings,
        root=Path(ctx.resolve(root)) if root else None,
        description=optional_str(ctx, data, "description"),
        groups=[group.spec for group in groups],
        expand=lambda: expand(ctx, grids),
        notes=ctx.warnings,
        database=read_database(ctx, data),
        lease=lease,
        slurm=read_slurm(ctx, data.get("slurm")),
    )


def _check_cell_count(ctx: SpecContext, groups: list[_Group], max_cells: int) -> None:
    total = sum(group.size for group in groups)
    if total > max_cells:
        sizes = ""
        if len(groups) > 1:
            sizes = " (" + ", ".join(f"{group.spec.name}: {group.size:,}" for group in groups) + ")"
        raise ctx.error(
            "max_cells",
            f"the sweep expands to {total:,} cells{sizes}, more than max_cells ({max_cells:,})",
            f"Shrink the grids, or raise the limit if you mean it: max_cells: {total}",
        )


def _check_values(ctx: SpecContext, groups: list[_Group], sweep_params: Mapping[Path_, _Leaf]) -> None:
    """Refuse cfgs too large to build (shared values are copied into every cell)."""
    shared = sum(count_values(leaf.value) for leaf in sweep_params.values())
    per_cell = [shared + group.values_per_cell() for group in groups]
    total = sum(group.size * size for group, size in zip(groups, per_cell, strict=True))
    problem = expansion_problem(sum(group.size for group in groups), total, max(per_cell, default=0))
    if problem is not None:
        raise ctx.error("", *problem)


class _PathTable:
    """Paths written so far, to find a path written twice or under its own prefix."""

    def __init__(self, leaves: Mapping[Path_, _Leaf] = {}) -> None:
        self.leaves: dict[Path_, str] = {path: leaf.where for path, leaf in leaves.items()}
        self.below: dict[Path_, str] = {}
        for path, where in self.leaves.items():
            self._note_prefixes(path, where)

    def same(self, path: Path_) -> str | None:
        return self.leaves.get(path)

    def prefix_clash(self, path: Path_) -> str | None:
        """Where a path clashes with this one as its prefix or as its extension."""
        if path in self.below:
            return self.below[path]
        for end in range(1, len(path)):
            if path[:end] in self.leaves:
                return self.leaves[path[:end]]
        return None

    def add(self, path: Path_, where: str) -> None:
        self.leaves[path] = where
        self._note_prefixes(path, where)

    def _note_prefixes(self, path: Path_, where: str) -> None:
        for end in range(1, len(path)):
            self.below.setdefault(path[:end], where)


def _prefix_error(ctx: SpecContext, where: str, other: str) -> SpecError:
    return ctx.error(
        where,
        f"conflicts with {other}: one path can't be both a value and a mapping of values "
        "(like `optim: sgd` together with `optim.lr`)",
        "Rename one of them, or turn the value into a mapping with its own key (optim.name: sgd). "
        "(A `program:` sweep may have both, as Hydra's db=mysql db.user=alice: its program gets each as written)",
    )


def _key_path(ctx: SpecContext, key: Any, where: str) -> Path_:
    if not isinstance(key, str) or not key.strip():
        raise ctx.error(
            where,
            f"the key {key!r} is not a parameter name",
            "Parameter names are strings: quote it or rename it",
        )
    parts = tuple(key.split("."))
    check_name(ctx, key, where, "parameter name")
    if any(not part.strip() for part in parts):
        raise ctx.error(
            f"{where}.{key}",
            "has an empty part in its dotted path",
            "Write names like optim.lr (no leading, trailing or double dots)",
        )
    return parts


def _read_params(ctx: SpecContext, value: Any, where: str) -> dict[Path_, _Leaf]:
    if value is None:
        return {}
    require_mapping(ctx, value, where, f"{where.rsplit('.', 1)[-1]}: {{epochs: 10, optim: {{lr: 0.1}}}}")
    leaves: dict[Path_, _Leaf] = {}
    _collect_params(ctx, value, (), where, _PathTable(), leaves)
    return leaves


def _collect_params(
    ctx: SpecContext, mapping: dict, prefix: Path_, where: str, table: _PathTable, leaves: dict[Path_, _Leaf]
) -> None:
    for key, value in mapping.items():
        path = prefix + _key_path(ctx, key, where)
        place = f"{where}.{key}"
        if isinstance(value, dict) and value:
            _collect_params(ctx, value, path, place, table, leaves)
            continue
        other = table.same(path)
        if other is not None:
            raise ctx.error(place, f"sets the same parameter as {other}", "Write it once")
        other = table.prefix_clash(path)
        if other is not None and not ctx.keys_inside_values:
            raise _prefix_error(ctx, place, other)
        check_json_value(ctx, value, place)
        ctx.warn_numeric_strings(value, place)
        table.add(path, place)
        leaves[path] = _Leaf(value, place)


def _read_grid(ctx: SpecContext, value: Any, where: str) -> list[_Axis]:
    if not isinstance(value, dict) or not value:
        raise ctx.error(
            where,
            f"expected a mapping of parameters to lists of values, got {describe(value)}",
            f"Write {where.rsplit('.', 1)[-1]}: {{lr: [0.1, 0.01]}}, or leave `grid:` out for a single cell",
        )
    axes = []
    table = _PathTable()
    for key, values in value.items():
        path = _key_path(ctx, key, where)
        place = f"{where}.{key}"
        _check_axis_values(ctx, values, place, key)
        other = table.prefix_clash(path)
        if other is not None and not ctx.keys_inside_values:
            raise _prefix_error(ctx, place, other)
        table.add(path, place)
        axes.append(_Axis(path, values, place))
    return axes


def _check_axis_values(ctx: SpecContext, values: Any, where: str, key: str) -> None:
    if isinstance(values, dict):
        raise ctx.error(
            where,
            "a grid value list is needed here, not a mapping",
            f"To vary a nested parameter, write its dotted path: {key}.name: [a, b]; "
            f"to try whole mappings, list them: {key}: [{{...}}, {{...}}]",
        )
    if not isinstance(values, list):
        raise ctx.error(
            where,
            f"expected a list of values, got {describe(values)}",
            f"Write a list, even for one value: {key}: [{show_value(values)}]",
        )
    if not values:
        raise ctx.error(
            where,
            "is an empty list, which gives no cells",
            f"Give at least one value ({key}: [...]) or remove {key}",
        )
    seen: dict[str, int] = {}
    for position, item in enumerate(values, start=1):
        check_json_value(ctx, item, where)
        first = seen.setdefault(value_identity(item), position)
        if first != position:
            raise ctx.error(
                where,
                f"value {position} ({show_value(item)}) repeats value {first} "
                f"({show_value(values[first - 1])}), so two cells would be the same",
                "Remove the repeat",
            )
    ctx.warn_numeric_strings(values, where)


def _read_groups(
    ctx: SpecContext, data: dict, sweep_name: str | None, sweep_params: dict[Path_, _Leaf]
) -> list[_Group]:
    if "grid" in data:
        axes = _read_grid(ctx, data["grid"], "grid")
        _check_grid_against_params(ctx, axes, sweep_params, same_is_error=True)
        return [_Group(GroupSpec(1, group_name_for(sweep_name)), {}, axes)]
    items = data["groups"]
    if not isinstance(items, list) or not items:
        raise ctx.error(
            "groups",
            f"expected a non-empty list of groups, got {describe(items)}",
            "Write groups: [{name: baseline, grid: {lr: [0.1, 0.01]}}]",
        )
    groups: list[_Group] = []
    names: dict[str, int] = {}
    for number, item in enumerate(items, start=1):
        groups.append(_read_group(ctx, item, number, names, sweep_params))
    return groups


def _read_group(
    ctx: SpecContext, item: Any, number: int, names: dict[str, int], sweep_params: dict[Path_, _Leaf]
) -> _Group:
    where = f"groups[{number}]"
    require_mapping(ctx, item, where, "- {name: adamw, grid: {lr: [0.1, 0.01]}}")
    check_keys(ctx, item, GROUP_KEYS, where)
    name = _read_group_name(ctx, item, where, names)
    names[name] = number
    params = _read_params(ctx, item.get("params"), f"{where}.params")
    base = _PathTable(sweep_params)
    for path, leaf in params.items():
        other = base.prefix_clash(path)
        if other is not None and not ctx.keys_inside_values:
            raise _prefix_error(ctx, leaf.where, other)
    axes = _read_grid(ctx, item["grid"], f"{where}.grid") if "grid" in item else []
    _check_grid_against_params(ctx, axes, params, same_is_error=True)
    _check_grid_against_params(ctx, axes, sweep_params, same_is_error=False)
    resume_args = read_resume_args(ctx, item.get("resume_args"), f"{where}.resume_args")
    processes = read_processes(ctx, item["processes"], f"{where}.processes") if "processes" in item else None
    spec = GroupSpec(number, name, optional_str(ctx, item, "description", where))
    return _Group(spec, params, axes, resume_args, processes)


def _read_group_name(ctx: SpecContext, item: dict, where: str, names: dict[str, int]) -> str:
    if "name" not in item:
        raise ctx.error(where, "has no `name:`", "Name every group, e.g. name: adamw")
    name = item["name"]
    if not isinstance(name, str):
        raise ctx.error(f"{where}.name", f"expected a string, got {describe(name)}", _GROUP_NAME_RULE)
    if not GROUP_NAME.match(name):
        raise ctx.error(
            f"{where}.name",
            f"{name!r} is not a valid group name",
            _GROUP_NAME_RULE,
        )
    if name in names:
        raise ctx.error(
            f"{where}.name",
            f"the group name {name!r} is already used by groups[{names[name]}]",
            "Give each group its own name",
        )
    return name


def _check_grid_against_params(
    ctx: SpecContext, axes: list[_Axis], params: Mapping[Path_, _Leaf], *, same_is_error: bool
) -> None:
    table = _PathTable(params)
    for axis in axes:
        other = table.same(axis.path)
        if other is not None and same_is_error:
            raise ctx.error(
                axis.where,
                f"is also set in {other}, where the grid value would always override it",
                f"Remove it from {other}",
            )
        other = table.prefix_clash(axis.path)
        if other is not None and not ctx.keys_inside_values:
            raise _prefix_error(ctx, axis.where, other)
