"""The sweep file: parse, validate and expand a YAML sweep into ordered cells.

Two forms (see SWEEP_FORMAT.md in the product docs): sweepq's grouped form
(`groups:` or `grid:`) and Weights & Biases grid sweep files (`method:`), read
unchanged. Everything here is pure: nothing touches the disk except reading the
sweep file, nothing imports training code.

Public surface (other modules rely on exactly these names):

    load_sweep(path) -> Sweep          read + parse + expand; raises SpecError
    parse_sweep(text, path) -> Sweep   same, from text (path used for messages and
                                       for resolving `root:` / `data:` / `program:`)
    cfg_hash(cfg) -> str               sha256 hex of canonical JSON (sorted keys)
    select_cells(cells, selectors)     ids ("2.3"), group names ("adamw"), patterns ("2.*")
    cell_sort_key(cell_id) -> (g, i)   numeric order: 1.10 after 1.9

Error messages are one paragraph: the file name as given, the key path
(`groups[2].grid.lr`; groups count from 1 like the G of cell ids), what is wrong
and what to write instead.

Grouped form, where SWEEP_FORMAT.md leaves it open:
* every key in `params` and `grid` is a dotted path (`optim.lr` and
  `optim: {lr: ...}` are the same path), so a key can't contain a literal dot;
* a path written in both the top-level `params` and a top-level `grid` is an
  error, like the same path in a group's `params` and `grid` (the grid always wins);
* a grid is a mapping of paths to non-empty lists; `grid: {}` is an error (leave
  `grid:` out for a single cell); two values of one list that W&B would count as
  the same (`1` and `1.0`) are a repeated value;
* a top-level `grid:` is one group named after the sweep's `name:` when that is a
  valid group name, else "default"; a W&B file is one group named the same way.
"""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
import hashlib
import json
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from .command import check_command, command_uses_args
from .errors import SpecError, UsageError
from .yamlload import load_yaml

__all__ = [
    "DEFAULT_BACKOFF_MAX_SECONDS",
    "DEFAULT_BACKOFF_SECONDS",
    "DEFAULT_MAX_CELLS",
    "DEFAULT_RETRIES",
    "CellSpec",
    "CheckpointPolicy",
    "GroupSpec",
    "Metric",
    "RetryPolicy",
    "Settings",
    "SpecError",
    "Sweep",
    "cell_sort_key",
    "cfg_hash",
    "load_sweep",
    "parse_sweep",
    "select_cells",
]

#: Termination reasons that may carry a retry budget, with their defaults.
#: `preempted` never spends a budget; `completed` and `cancelled` end the cell.
DEFAULT_RETRIES: dict[str, int] = {
    "lost": 3,
    "oom": 1,
    "nan": 2,
    "error": 0,
    "data_error": 0,
    "timeout": 1,
}
DEFAULT_BACKOFF_SECONDS = 30.0
DEFAULT_BACKOFF_MAX_SECONDS = 1800.0
DEFAULT_MAX_CELLS = 10_000


@dataclass(frozen=True)
class CheckpointPolicy:
    """`checkpoint:` in the grouped form.

    every_steps: commit when this many steps passed since the last commit (None: off).
    every_seconds: commit when this many seconds passed (None: off).
    auto: True when neither cadence was written; the runtime then derives the
        cadence from the measured cost of a checkpoint.
    keep_last: committed checkpoints kept besides the best and the final one.
    keep_best: also keep the best checkpoint by the sweep's metric.
    """

    every_steps: int | None = None
    every_seconds: float | None = None
    auto: bool = True
    keep_last: int = 3
    keep_best: bool = True


@dataclass(frozen=True)
class Metric:
    name: str
    goal: Literal["max", "min"] = "max"


@dataclass(frozen=True)
class RetryPolicy:
    """Retries allowed per termination reason, and the back-off between them."""

    budgets: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_RETRIES))
    backoff_seconds: float = DEFAULT_BACKOFF_SECONDS
    backoff_max_seconds: float = DEFAULT_BACKOFF_MAX_SECONDS


@dataclass(frozen=True)
class Settings:
    """What a worker needs to run cells, JSON round-trippable (stored in the database)."""

    name: str
    form: Literal["grouped", "wandb"]
    spec_dir: str  # absolute folder of the sweep file: put on sys.path for `train:`
    train: str | None = None  # "module:function"
    program: str | None = None  # path as written (relative to spec_dir) for subprocess cells
    command: list[str] | None = None  # command template tokens (macros unrendered); None = default
    interpreter: str = "python"
    checkpoint: CheckpointPolicy = field(default_factory=CheckpointPolicy)
    metric: Metric | None = None
    retries: RetryPolicy = field(default_factory=RetryPolicy)
    max_attempt_seconds: float | None = None
    data: list[str] = field(default_factory=list)  # absolute paths of declared data

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Settings":
        d = dict(d)
        d["checkpoint"] = CheckpointPolicy(**d.get("checkpoint") or {})
        d["metric"] = Metric(**d["metric"]) if d.get("metric") else None
        d["retries"] = RetryPolicy(**d.get("retries") or {})
        return cls(**d)


@dataclass(frozen=True)
class GroupSpec:
    number: int  # 1-based position in the file
    name: str
    description: str | None = None


@dataclass(frozen=True)
class CellSpec:
    id: str  # "G.I"
    group: int  # G
    index: int  # I
    group_name: str
    cfg: dict[str, Any]
    cfg_hash: str


@dataclass(frozen=True)
class Sweep:
    path: Path  # the sweep file, absolute
    settings: Settings
    root: Path | None  # `root:` resolved against the file's folder; None if absent
    description: str | None
    groups: list[GroupSpec]
    cells: list[CellSpec]  # in run order
    warnings: list[str] = field(default_factory=list)
    project: str | None = None  # W&B metadata, kept as is
    entity: str | None = None


# --------------------------------------------------------------------------- public


def load_sweep(path: str | os.PathLike[str]) -> Sweep:
    """Read, validate and expand the sweep file at `path` (raises SpecError)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not a text file (it is not UTF-8). Save the sweep file as UTF-8 YAML.") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot read the sweep file ({exc.strerror or exc}). Check the path.") from None
    return parse_sweep(text, path)


def parse_sweep(text: str, path: str | os.PathLike[str]) -> Sweep:
    """Validate and expand sweep-file `text` as if it were read from `path`.

    `path` names the file in messages (as given) and anchors `root:`, `data:`
    and `program:`; the file itself is not read.
    """
    document = load_yaml(text, str(path))
    ctx = SpecContext(str(path), document.numeric_looking_strings)
    data = document.data
    if _detect_form(ctx, data) == "wandb":
        from .wandb import parse_wandb  # imported here: sweepq.wandb builds on this module

        return parse_wandb(ctx, data)
    return _parse_grouped(ctx, data)


def cfg_hash(cfg: Mapping[str, Any]) -> str:
    """sha256 hex of the cfg's canonical JSON: sorted keys, no spaces, ASCII.

    Two cfgs hash alike exactly when their JSON texts are equal, so `1` and `1.0`
    (JSON `1` and `1.0`) or `true` and `1` hash differently, while key order
    does not matter.
    """
    text = json.dumps(cfg, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("ascii")).hexdigest()


_CELL_ID = re.compile(r"^([0-9]+)\.([0-9]+)$")


def cell_sort_key(cell_id: str) -> tuple[int, int]:
    """(group, index) of a cell id, for numeric order: "1.10" sorts after "1.9"."""
    match = _CELL_ID.match(cell_id.strip())
    if match is None:
        raise UsageError(f"{cell_id!r} is not a cell id: cell ids are GROUP.INDEX, like 2.3.")
    return int(match.group(1)), int(match.group(2))


def select_cells(cells: Iterable[CellSpec], selectors: Iterable[str]) -> list[CellSpec]:
    """The cells that any selector names, in run order, each once.

    A selector is a cell id ("2.3"), a group name ("adamw") or a glob pattern
    on ids ("2.*", "*.1"). No selectors select every cell. A selector that
    matches nothing raises UsageError naming it and listing the groups.
    """
    ordered = sorted(cells, key=lambda cell: (cell.group, cell.index))
    selectors = list(selectors)
    if not selectors:
        return ordered
    chosen: set[str] = set()
    for selector in selectors:
        matched = _cells_matching(ordered, selector)
        if not matched:
            raise UsageError(_no_match_message(ordered, selector))
        chosen.update(cell.id for cell in matched)
    return [cell for cell in ordered if cell.id in chosen]


def _cells_matching(cells: list[CellSpec], selector: str) -> list[CellSpec]:
    selector = selector.strip()
    if _CELL_ID.match(selector):
        wanted = cell_sort_key(selector)
        return [cell for cell in cells if (cell.group, cell.index) == wanted]
    if any(char in selector for char in "*?["):
        return [cell for cell in cells if fnmatch.fnmatchcase(cell.id, selector)]
    return [cell for cell in cells if cell.group_name == selector]


def _no_match_message(cells: list[CellSpec], selector: str) -> str:
    spans: dict[tuple[int, str], list[int]] = {}
    for cell in cells:
        spans.setdefault((cell.group, cell.group_name), []).append(cell.index)
    groups = ", ".join(
        f"{number} {name} ({number}.{min(indexes)}–{number}.{max(indexes)})"
        for (number, name), indexes in spans.items()
    )
    hint = f" For every cell of group {selector}, write {selector}.*." if selector.strip().isdigit() else ""
    return (
        f"no cell matches {selector!r}: the sweep's groups are {groups or 'none'}. Select cells by id "
        f"(2.3), group name or pattern (2.*).{hint}"
    )


# --------------------------------------------------- shared with sweepq.wandb

Path_ = tuple[str, ...]  # a parameter's path in the nested cfg: ("optim", "lr")

GROUP_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
_GROUP_NAME_RULE = (
    "Use a name like q2 or adamw: letters, digits, '_' and '-', starting with a letter or '_' "
    "(so it can't be mistaken for a cell id or a pattern)"
)


class SpecContext:
    """What parsing one file needs everywhere: where it is, and its warnings."""

    def __init__(self, filename: str, numeric_looking_strings: frozenset[str] = frozenset()) -> None:
        self.filename = filename
        self.path = Path(os.path.abspath(filename))
        self.spec_dir = self.path.parent
        self.numeric_looking_strings = numeric_looking_strings
        self.warnings: list[str] = []

    def error(self, where: str, problem: str, fix: str) -> SpecError:
        """A SpecError worded `file: key.path: problem. Fix.`"""
        location = f"{self.filename}: {where}" if where else self.filename
        return SpecError(f"{location}: {problem}. {_sentence(fix)}")

    def warn(self, where: str, text: str) -> None:
        location = f"{self.filename}: {where}" if where else self.filename
        self.warnings.append(f"{location}: {_sentence(text)}")

    def resolve(self, written: str) -> str:
        """An absolute path for a path written in the file (relative to its folder)."""
        return os.path.normpath(os.path.join(self.spec_dir, os.path.expanduser(written)))

    def warn_numeric_strings(self, value: Any, where: str) -> None:
        """Warn about plain scalars like `1e-3` that YAML 1.1 keeps as strings."""
        for text in dict.fromkeys(_strings_in(value)):
            if text in self.numeric_looking_strings:
                self.warn(
                    where,
                    f"{text!r} is a string, not a number: YAML 1.1 (which sweepq and W&B read) needs "
                    f"a dot and a signed exponent in a float. Write {_as_number(text)} for a number, "
                    f"or quote it ('{text}') to keep the string",
                )


def _sentence(text: str) -> str:
    return text if text.endswith((".", "?", "!")) else text + "."


def _strings_in(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings_in(item)


def _as_number(text: str) -> str:
    number = float(text)
    if number.is_integer() and not any(char in text for char in ".eE"):
        return str(int(number))  # "09": the int YAML 1.2 would read
    return repr(number)


def describe(value: Any) -> str:
    """A short rendering of a YAML value for messages: kind and value."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {_clip(repr(value))}"
    if isinstance(value, list):
        return f"the list {_clip(show_value(value))}"
    if isinstance(value, dict):
        return f"the mapping {_clip(show_value(value))}"
    return f"{_clip(repr(value))} (a {type(value).__name__})"


def show_value(value: Any) -> str:
    """A value as it could be written in the file: 'text', 1.0, true, [1, 2]."""
    if isinstance(value, str):
        return repr(value)
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError):
        return repr(value)


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def check_keys(
    ctx: SpecContext, mapping: Mapping[Any, Any], known: Sequence[str], where: str, hint: str = ""
) -> None:
    """Refuse any key of `mapping` outside `known`, listing the known ones."""
    for key in mapping:
        if key not in known:
            place = f"{where}.{key}" if where else str(key)
            raise ctx.error(
                place,
                f"unknown key {key!r}" + (f" in {where}" if where else ""),
                "Known keys: " + ", ".join(known) + ". Check the spelling or remove it" + hint,
            )


def require_mapping(ctx: SpecContext, value: Any, where: str, example: str) -> dict:
    if not isinstance(value, dict):
        raise ctx.error(where, f"expected a mapping, got {describe(value)}", f"Write it like `{example}`")
    return value


def optional_str(ctx: SpecContext, data: Mapping[str, Any], key: str, where: str = "") -> str | None:
    """data[key] when it is a non-empty string, None when absent; an error otherwise."""
    if key not in data or data[key] is None:
        return None
    value = data[key]
    place = f"{where}.{key}" if where else key
    if not isinstance(value, str):
        raise ctx.error(place, f"expected a string, got {describe(value)}", f"Quote it: {key}: \"{value}\"")
    if not value.strip():
        raise ctx.error(place, "is empty", f"Give {key} a value or remove the key")
    return value


def check_json_value(ctx: SpecContext, value: Any, where: str) -> None:
    """Refuse values a cfg can't hold: cfgs are JSON (stored, hashed, passed on)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return
    if isinstance(value, list):
        for item in value:
            check_json_value(ctx, item, where)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ctx.error(
                    where,
                    f"the key {key!r} inside {describe(value)} is not a string, and cfgs are JSON",
                    f"Quote the key: '{key}'",
                )
            check_json_value(ctx, item, where)
        return
    raise ctx.error(
        where,
        f"YAML read {value!r} as a {type(value).__name__}, which a cfg can't hold (cfgs are JSON)",
        f"Quote it to keep it as text: '{value}'",
    )


def value_identity(value: Any) -> str:
    """When two values count as the same, following W&B's grid code (yaml_hash).

    An integral float counts as its int (1.0 is 1), at the top level only;
    `true` and `1`, `"1"` and `1`, or `[1.0]` and `[1]` stay different.
    """
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return yaml.safe_dump(value, default_flow_style=True, sort_keys=True)


def read_command(ctx: SpecContext, value: Any, *, numbers_as_text: bool) -> list[str]:
    """The `command:` token list, unrendered; its macros are checked here.

    W&B's agent passes a number token through `str()`; `numbers_as_text` does so too.
    """
    if not isinstance(value, list):
        raise ctx.error(
            "command",
            f"expected a list of tokens, got {describe(value)}",
            "Write it as a list: command: [\"${env}\", \"${interpreter}\", \"${program}\", \"${args}\"]",
        )
    if not value:
        raise ctx.error(
            "command",
            "is an empty list",
            "Remove `command:` to use the default ${env} ${interpreter} ${program} ${args}",
        )
    tokens = []
    for position, token in enumerate(value, start=1):
        if numbers_as_text and isinstance(token, (int, float)) and not isinstance(token, bool):
            token = str(token)
        if not isinstance(token, str):
            raise ctx.error(
                "command",
                f"token {position} is {describe(token)}, not a string",
                f"Quote it: \"{token}\"",
            )
        tokens.append(token)
    problems = check_command(tokens)
    if problems:
        first = problems[0]
        raise ctx.error("command", f"token {first.position}: {first.problem}", first.fix)
    if not command_uses_args(tokens):
        ctx.warn(
            "command",
            "no args macro (${args}, ${args_flat}, ${args_json}, ${args_json_file}, …): the program gets "
            "its parameters only from the cfg file whose path is in its environment",
        )
    return tokens


def group_name_for(sweep_name: str | None) -> str:
    """Name of the single group of a top-level `grid:` or a W&B file."""
    if sweep_name and GROUP_NAME.match(sweep_name):
        return sweep_name
    return "default"


def build_cells(ctx: SpecContext, groups: Iterable[tuple[GroupSpec, Iterable[dict[str, Any]]]]) -> list[CellSpec]:
    """Cells "G.I" in run order, and a warning for each cfg that repeats an earlier cell's."""
    cells = []
    first_with_hash: dict[str, str] = {}
    for group, cfgs in groups:
        for index, cfg in enumerate(cfgs, start=1):
            cell = CellSpec(f"{group.number}.{index}", group.number, index, group.name, cfg, cfg_hash(cfg))
            earlier = first_with_hash.setdefault(cell.cfg_hash, cell.id)
            if earlier != cell.id:
                ctx.warn("", f"cells {earlier} and {cell.id} have identical cfgs, so the same training runs twice")
            cells.append(cell)
    return cells


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


def lazy_product(axes: Sequence[Sequence[Any]]) -> Iterator[tuple[Any, ...]]:
    """itertools.product, the last axis fastest, without materialising the axes.

    W&B expands `int_uniform` ranges; keeping them as ranges lets `run_cap`
    take a prefix of a huge grid cheaply.
    """
    total = math.prod(len(axis) for axis in axes)
    for number in range(total):
        combo = []
        for axis in reversed(axes):
            number, digit = divmod(number, len(axis))
            combo.append(axis[digit])
        yield tuple(reversed(combo))


def nest(flat: Mapping[Path_, Any]) -> dict[str, Any]:
    """A nested cfg from path -> value pairs (paths never clash, checked before)."""
    cfg: dict[str, Any] = {}
    for path, value in flat.items():
        node = cfg
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = copy.deepcopy(value)
    return cfg


# --------------------------------------------------------------- form detection


def _detect_form(ctx: SpecContext, data: Any) -> Literal["grouped", "wandb"]:
    if data is None:
        raise ctx.error("", "the file is empty", "Write a sweep: `train:` or `program:` and `groups:` or `grid:`")
    if not isinstance(data, dict):
        raise ctx.error(
            "",
            f"a sweep file is a mapping of keys, got {describe(data)}",
            "Start with `name: ...` and `groups:`",
        )
    wandb = "method" in data
    grouped = "groups" in data or "grid" in data
    if wandb and grouped:
        raise ctx.error(
            "",
            "has both `method:` (a W&B sweep file) and `groups:`/`grid:` (sweepq's grouped form)",
            "Keep one form: remove `method:` for the grouped form, or `groups:`/`grid:` for a W&B file",
        )
    if not wandb and not grouped:
        fix = (
            "Add `method: grid`"
            if "parameters" in data
            else "Add `groups:` (or `grid:`) for the grouped form, or `method: grid` for a W&B file"
        )
        raise ctx.error("", "not a sweep file: it has neither `groups:`/`grid:` nor `method:`", fix)
    return "wandb" if wandb else "grouped"


# ----------------------------------------------------------------- grouped form

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
    "groups",
    "grid",
    "max_attempt_seconds",
    "data",
)
GROUP_KEYS = ("name", "description", "params", "grid")
CHECKPOINT_KEYS = ("every_steps", "every_seconds", "keep_last", "keep_best")
METRIC_KEYS = ("name", "goal")
GOALS = {"max": "max", "min": "min", "maximize": "max", "minimize": "min"}
_TRAIN_TARGET = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
_NEVER_BUDGETED = {
    "preempted": "a preemption is never the cell's fault, so it never spends a retry",
    "cancelled": "a cancelled cell stays cancelled, so it never spends a retry",
    "completed": "a completed cell is done, so it never spends a retry",
}


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

    @property
    def size(self) -> int:
        return math.prod(len(axis.values) for axis in self.axes)

    def cfgs(self, sweep_params: Mapping[Path_, _Leaf]) -> Iterator[dict[str, Any]]:
        """Sweep params, then group params, then each grid combination, per path."""
        base = {path: leaf.value for path, leaf in sweep_params.items()}
        base.update((path, leaf.value) for path, leaf in self.params.items())
        paths = [axis.path for axis in self.axes]
        for combo in lazy_product([axis.values for axis in self.axes]):
            yield nest({**base, **dict(zip(paths, combo))})


def _parse_grouped(ctx: SpecContext, data: dict) -> Sweep:
    check_keys(ctx, data, GROUPED_KEYS, "", hint="; parameters shared by every cell go under params:")
    if "groups" in data and "grid" in data:
        raise ctx.error(
            "grid",
            "a top-level `grid:` and `groups:` can't be used together",
            "Move the grid into a group (groups: [{name: main, grid: {...}}]) or remove `groups:`",
        )
    written_name = optional_str(ctx, data, "name")
    settings = _grouped_settings(ctx, data, written_name or ctx.path.stem)
    max_cells = _read_int(ctx, data.get("max_cells", DEFAULT_MAX_CELLS), "max_cells", minimum=1)
    sweep_params = _read_params(ctx, data.get("params"), "params")
    groups = _read_groups(ctx, data, written_name, sweep_params)
    _check_cell_count(ctx, groups, max_cells)
    cells = build_cells(ctx, [(group.spec, group.cfgs(sweep_params)) for group in groups])
    root = optional_str(ctx, data, "root")
    return Sweep(
        path=ctx.path,
        settings=settings,
        root=Path(ctx.resolve(root)) if root else None,
        description=optional_str(ctx, data, "description"),
        groups=[group.spec for group in groups],
        cells=cells,
        warnings=ctx.warnings,
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


# --- settings


def _grouped_settings(ctx: SpecContext, data: dict, name: str) -> Settings:
    train, program, command, interpreter = _read_entry_point(ctx, data)
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
        max_attempt_seconds=_read_number(ctx, data.get("max_attempt_seconds"), "max_attempt_seconds", above=0),
        data=_read_data(ctx, data.get("data")),
    )


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
        for key in ("command", "interpreter"):
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
    return None, program, command, interpreter


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
        every_steps = _read_int(ctx, every_steps, "checkpoint.every_steps", minimum=1)
    every_seconds = _read_number(ctx, value.get("every_seconds"), "checkpoint.every_seconds", above=0)
    keep_best = value.get("keep_best", True)
    if not isinstance(keep_best, bool):
        raise ctx.error(
            "checkpoint.keep_best",
            f"expected true or false, got {describe(keep_best)}",
            "Write keep_best: true",
        )
    return CheckpointPolicy(
        every_steps=every_steps,
        every_seconds=every_seconds,
        auto=every_steps is None and every_seconds is None,
        keep_last=_read_int(ctx, value.get("keep_last", 3), "checkpoint.keep_last", minimum=1),
        keep_best=keep_best,
    )


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


def read_goal(ctx: SpecContext, goal: Any, where: str, accepted: Mapping[str, str]) -> Literal["max", "min"]:
    if not isinstance(goal, str) or goal not in accepted:
        raise ctx.error(where, f"{describe(goal)} is not a goal", "Write one of " + ", ".join(accepted))
    return accepted[goal]  # type: ignore[return-value]


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
            budgets[key] = _read_int(ctx, number, where, minimum=0)
        elif key in backoff:
            backoff[key] = _read_number(ctx, number, where, above=None, at_least=0)
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
    return [ctx.resolve(item) for item in items]


def _read_int(ctx: SpecContext, value: Any, where: str, *, minimum: int) -> int:
    if not is_int(value) or value < minimum:
        raise ctx.error(
            where,
            f"expected a whole number of at least {minimum}, got {describe(value)}",
            f"Write e.g. {where.rsplit('.', 1)[-1]}: {max(minimum, 1)}",
        )
    return value


def _read_number(
    ctx: SpecContext, value: Any, where: str, *, above: float | None, at_least: float | None = None
) -> float | None:
    """None stays None (key absent); otherwise a number above/at least the bound."""
    if value is None:
        return None
    ok = is_number(value) and (above is None or value > above) and (at_least is None or value >= at_least)
    if not ok:
        bound = f"above {above}" if above is not None else f"of at least {at_least}"
        raise ctx.error(
            where,
            f"expected a number {bound}, got {describe(value)}",
            f"Write e.g. {where.rsplit('.', 1)[-1]}: 60",
        )
    return value


# --- params and grids


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
        "Rename one of them, or turn the value into a mapping with its own key (optim.name: sgd)",
    )


def _key_path(ctx: SpecContext, key: Any, where: str) -> Path_:
    if not isinstance(key, str) or not key.strip():
        raise ctx.error(
            where,
            f"the key {key!r} is not a parameter name",
            "Parameter names are strings: quote it or rename it",
        )
    parts = tuple(key.split("."))
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
        if other is not None:
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
        if other is not None:
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
        if other is not None:
            raise _prefix_error(ctx, leaf.where, other)
    axes = _read_grid(ctx, item["grid"], f"{where}.grid") if "grid" in item else []
    _check_grid_against_params(ctx, axes, params, same_is_error=True)
    _check_grid_against_params(ctx, axes, sweep_params, same_is_error=False)
    return _Group(GroupSpec(number, name, optional_str(ctx, item, "description", where)), params, axes)


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
        if other is not None:
            raise _prefix_error(ctx, axis.where, other)
