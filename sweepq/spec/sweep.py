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
import hashlib
import os
from pathlib import Path
from typing import Any, Literal

from sweepq.errors import SpecError
from sweepq.spec.grouped import parse_grouped
from sweepq.spec.limits import max_bytes
from sweepq.spec.read import SpecContext, describe
from sweepq.spec.select import cell_sort_key, select_cells
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
