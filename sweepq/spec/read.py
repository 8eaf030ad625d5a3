"""Reading helpers shared by both sweep-file forms (sweepq.grouped, sweepq.wandb).

`SpecContext` carries one file's name, folder and warnings and words every
error (`file: key.path: problem. Fix.`). Around it: rendering values for
messages (`describe`, `show_value`), key and value checks (`check_keys`,
`require_mapping`, `optional_str`, `check_json_value`, `read_int`,
`read_number`, `read_goal`), `value_identity` (when W&B counts two values as
the same), the `command:` reader, and cell building (`build_cells`, `nest`,
`lazy_product`, `group_name_for`). Everything is pure: nothing reads the disk.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml

from sweepq.errors import SpecError
from sweepq.spec.command import check_command, command_uses_args
from sweepq.spec.types import CellSpec, GroupSpec, cfg_hash

Path_ = tuple[str, ...]  # a parameter's path in the nested cfg: ("optim", "lr")

# \Z, not $: `$` also matches before a final newline, which would let "q1\n" through.
GROUP_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*\Z")


class SpecContext:
    """What parsing one file needs everywhere: where it is, and its warnings."""

    def __init__(self, filename: str, numeric_looking_strings: frozenset[str] = frozenset()) -> None:
        self.filename = filename
        self.path = Path(os.path.abspath(filename))
        self.spec_dir = self.path.parent
        self.numeric_looking_strings = numeric_looking_strings
        self.warnings: list[str] = []
        # A `program:` sweep's path may be a value and a prefix of other paths at once (Hydra's
        # `db=mysql db.user=alice`: a group choice and a key inside it); grouped.py reads it so.
        self.keys_inside_values = False

    def error(self, where: str, problem: str, fix: str) -> SpecError:
        """A SpecError worded `file: key.path: problem. Fix.` (one line: a key's control characters escaped)."""
        location = f"{self.filename}: {_escaped(where)}" if where else self.filename
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


def _escaped(text: str) -> str:
    return "".join(repr(char)[1:-1] if unicodedata.category(char) in _UNPRINTABLE else char for char in text)


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


def check_keys(ctx: SpecContext, mapping: Mapping[Any, Any], known: Sequence[str], where: str, hint: str = "") -> None:
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
        raise ctx.error(place, f"expected a string, got {describe(value)}", f'Quote it: {key}: "{value}"')
    if not value.strip():
        raise ctx.error(place, "is empty", f"Give {key} a value or remove the key")
    return value


# Control characters and line or paragraph separators: a name holding one breaks
# every line it is printed on (tables, logs, messages) and can fake other lines.
_UNPRINTABLE = frozenset({"Cc", "Zl", "Zp"})


def control_character(text: str) -> str | None:
    """The first control character (or line separator) in `text`, None when there is none."""
    return next((char for char in text if unicodedata.category(char) in _UNPRINTABLE), None)


def check_name(ctx: SpecContext, name: str, where: str, what: str) -> None:
    """Refuse a name (of the sweep, a group, a parameter) holding a control character or a newline."""
    char = control_character(name)
    if char is not None:
        raise ctx.error(
            where,
            f"the {what} {_clip(repr(name))} contains the control character {char!r}, which would break every "
            "line it is printed on",
            "Remove it (a name is letters, digits and punctuation on one line)",
        )


def sweep_name(ctx: SpecContext, data: Mapping[str, Any]) -> str | None:
    """`name:` as written (None when absent), refused when it holds a control character."""
    name = optional_str(ctx, data, "name")
    if name is not None:
        check_name(ctx, name, "name", "sweep name")
    return name


def check_no_nul(ctx: SpecContext, text: str | None, where: str) -> None:
    """Refuse a path or command word holding a NUL byte, which no file name or argument can hold."""
    if text is not None and "\0" in text:
        raise ctx.error(where, f"{_clip(repr(text))} contains a NUL byte, which no file name can hold", "Remove it")


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
            check_name(ctx, key, where, "key")
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
    kind = type(value)
    if kind in _SCALARS:  # two scalars dump alike exactly when type and value are the same: 1,000 dumps cost 0.7 s
        return f"{kind.__name__}:{value!r}"
    return yaml.safe_dump(value, default_flow_style=True, sort_keys=True)


_SCALARS = frozenset((bool, int, float, str, type(None)))  # exact types: bool is not int here


def read_command(ctx: SpecContext, value: Any, *, numbers_as_text: bool) -> list[str]:
    """The `command:` token list, unrendered; its macros are checked here.

    W&B's agent passes a number token through `str()`; `numbers_as_text` does so too.
    """
    if not isinstance(value, list):
        raise ctx.error(
            "command",
            f"expected a list of tokens, got {describe(value)}",
            'Write it as a list: command: ["${env}", "${interpreter}", "${program}", "${args}"]',
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
                f'Quote it: "{token}"',
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


def read_goal(ctx: SpecContext, goal: Any, where: str, accepted: Mapping[str, str]) -> Literal["max", "min"]:
    if not isinstance(goal, str) or goal not in accepted:
        raise ctx.error(where, f"{describe(goal)} is not a goal", "Write one of " + ", ".join(accepted))
    return accepted[goal]  # type: ignore[return-value]


def read_int(ctx: SpecContext, value: Any, where: str, *, minimum: int) -> int:
    if not is_int(value) or value < minimum:
        raise ctx.error(
            where,
            f"expected a whole number of at least {minimum}, got {describe(value)}",
            f"Write e.g. {where.rsplit('.', 1)[-1]}: {max(minimum, 1)}",
        )
    return value


def read_number(
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
