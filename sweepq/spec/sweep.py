"""The sweep file: parse, validate and expand a YAML sweep into ordered cells.

Two forms (docs/sweep-format.md): sweepq's grouped form
(`groups:` or `grid:`) and Weights & Biases grid sweep files (`method:`), read
unchanged. Everything here is pure: nothing touches the disk except reading the
sweep file, nothing imports training code.

This module loads the file, tells the forms apart and selects cells; the work
is split by concept:

    sweepq.spec.types        the dataclasses, defaults and cfg_hash (re-exported here)
    sweepq.spec.read         reading helpers shared by both forms (SpecContext, checks)
    sweepq.spec.grouped          the grouped form; its run settings in sweepq.spec.grouped_settings
    sweepq.spec.wandb            the W&B form
    sweepq.spec.yamlload         YAML 1.1 loading, duplicate keys refused
    sweepq.spec.limits           how much of a file is read (size, values, depth, numbers)
    sweepq.spec.preflight        what the machine must allow: root, program, command lines

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
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from sweepq.errors import SpecError, UsageError
from sweepq.spec.grouped import parse_grouped
from sweepq.spec.limits import max_bytes
from sweepq.spec.read import SpecContext, describe
from sweepq.spec.types import (
    DEFAULT_BACKOFF_MAX_SECONDS,
    DEFAULT_BACKOFF_SECONDS,
    DEFAULT_MAX_CELLS,
    DEFAULT_RETRIES,
    CellSpec,
    CheckpointPolicy,
    GroupSpec,
    Metric,
    RetryPolicy,
    Settings,
    Sweep,
    cfg_hash,
)
from sweepq.spec.wandb import parse_wandb
from sweepq.spec.yamlload import check_size, load_yaml

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


def load_sweep(path: str | os.PathLike[str]) -> Sweep:
    """Read, validate and expand the sweep file at `path` (raises SpecError)."""
    try:
        text = _read_bounded(Path(path), str(path)).decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not a text file (it is not UTF-8). Save the sweep file as UTF-8 YAML.") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot read the sweep file ({exc.strerror or exc}). Check the path.") from None
    return parse_sweep(text, path)


def _read_bounded(path: Path, name: str) -> bytes:
    """The file's bytes, refused by its size before it is read (and read no further than the limit,
    for a file whose size says nothing, like a pipe or /dev/zero)."""
    limit = max_bytes()
    with path.open("rb") as file:
        check_size(name, os.fstat(file.fileno()).st_size)
        data = file.read(limit + 1)
    check_size(name, len(data), at_least=True)
    return data


def parse_sweep(text: str, path: str | os.PathLike[str]) -> Sweep:
    """Validate and expand sweep-file `text` as if it were read from `path`.

    `path` names the file in messages (as given) and anchors `root:`, `data:`
    and `program:`; the file itself is not read.
    """
    document = load_yaml(text, str(path))
    ctx = SpecContext(str(path), document.numeric_looking_strings)
    data = document.data
    sweep = parse_wandb(ctx, data) if _detect_form(ctx, data) == "wandb" else parse_grouped(ctx, data)
    return dataclasses.replace(sweep, source_sha256=hashlib.sha256(text.encode("utf-8")).hexdigest())


_CELL_ID = re.compile(r"^([0-9]+)\.([0-9]+)$")


def cell_sort_key(cell_id: str) -> tuple[int, int]:
    """(group, index) of a cell id, for numeric order: "1.10" sorts after "1.9"."""
    match = _CELL_ID.match(cell_id.strip())
    if match is None:
        raise UsageError(f"{cell_id!r} is not a cell id: cell ids are GROUP.INDEX, like 2.3.")
    return int(match.group(1)), int(match.group(2))


class Selectable(Protocol):
    """What selecting needs of a cell: a planned CellSpec and a stored CellRecord both have it."""

    @property
    def id(self) -> str: ...
    @property
    def group(self) -> int: ...
    @property
    def index(self) -> int: ...
    @property
    def group_name(self) -> str: ...


C = TypeVar("C", bound=Selectable)


def select_cells(cells: Iterable[C], selectors: Iterable[str]) -> list[C]:
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


def _cells_matching(cells: list[C], selector: str) -> list[C]:
    selector = selector.strip()
    if _CELL_ID.match(selector):
        wanted = cell_sort_key(selector)
        return [cell for cell in cells if (cell.group, cell.index) == wanted]
    if any(char in selector for char in "*?["):
        return [cell for cell in cells if fnmatch.fnmatchcase(cell.id, selector)]
    return [cell for cell in cells if cell.group_name == selector]


def _no_match_message(cells: Sequence[Selectable], selector: str) -> str:
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
