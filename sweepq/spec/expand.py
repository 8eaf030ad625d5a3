"""A grid into cells: each cell's cfg from templates of its mappings, its cfg_hash from text laid out once.

A cell's cfg is the grid's paths nested into one mapping (constants, and one value
of each axis), and its cfg_hash is the sha256 of that mapping's canonical JSON
(types.cfg_hash: sorted keys, no spaces). Every cell of a grid has the same shape,
so both are prepared once per grid: each mapping of the cfg as a template holding
its constants in the file's key order, and the canonical JSON as text with a gap
per axis, each axis's values encoded once. A cell copies the templates, puts its
values in, and hashes the text with its values' JSON filled in. Lists and mappings
are copied for every cell (no two cells share one); numbers and strings, which
nothing can change, are shared. That is the cfg and the hash that nesting with a
deep copy per value and encoding each cfg gave, in a fraction of the time: what
lets `plan` and `launch` expand 100,000 cells in about a second. The cfg as
json.dumps writes it (what the queue stores, what `plan --json` prints) is laid out
the same way, and a cell's mapping is made only when something asks for it.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from operator import itemgetter
from typing import Any, NamedTuple

from sweepq.spec.read import Path_, SpecContext, lazy_product
from sweepq.spec.types import CellSpec, GroupSpec

#: Repeated cfgs named one pair a line; past this many, one line counts the rest.
LISTED_REPEATS = 10


@dataclass(frozen=True)
class Slot:
    """Where a grid's axis (by its position in `Grid.axes`) puts its value."""

    axis: int


@dataclass(frozen=True)
class Grid:
    """One group's cells: paths in cfg order, each a constant or a Slot; the product of the axes, last fastest."""

    group: GroupSpec
    paths: Mapping[Path_, Any]
    axes: Sequence[Sequence[Any]]
    limit: int | None = None  # keep only the first cells (W&B's run_cap)


def expand(ctx: SpecContext, grids: Iterable[Grid]) -> list[CellSpec]:
    """Cells "G.I" in run order, and a warning for cfgs that repeat an earlier cell's."""
    cells: list[CellSpec] = []
    first_with_hash: dict[str, str] = {}
    repeats: list[tuple[str, str]] = []
    for grid in grids:
        layout = _Layout(grid)
        number, name = grid.group.number, grid.group.name
        for index, (texts, plain, values) in enumerate(_combinations(grid), start=1):
            digest = layout.digest(texts)
            cfg_json = layout.stored.format(*plain)
            cell = CellSpec(f"{number}.{index}", number, index, name, partial(layout.cfg, values), digest, cfg_json)
            earlier = first_with_hash.setdefault(digest, cell.id)
            if earlier != cell.id:
                repeats.append((earlier, cell.id))
            cells.append(cell)
    _warn_repeats(ctx, repeats)
    return cells


def _warn_repeats(ctx: SpecContext, repeats: list[tuple[str, str]]) -> None:
    for earlier, later in repeats[:LISTED_REPEATS]:
        ctx.warn("", f"cells {earlier} and {later} have identical cfgs, so the same training runs twice")
    if len(repeats) > LISTED_REPEATS:
        ctx.warn(
            "",
            f"{len(repeats) - LISTED_REPEATS:,} more cells repeat an earlier cell's cfg "
            f"({len(repeats):,} in all): their training runs twice too",
        )


Texts = tuple[str, ...]


def _combinations(grid: Grid) -> Iterator[tuple[Texts, Texts, tuple[Any, ...]]]:
    """Each cell's value of every axis as canonical JSON, as json.dumps writes it, and as it is, in run order."""
    lengths = [len(axis) for axis in grid.axes]
    if grid.limit is None or grid.limit >= math.prod(lengths):
        # Every axis is at most as long as the grid is large: each value is encoded once, up front.
        canonical = itertools.product(*([_canonical(value) for value in axis] for axis in grid.axes))
        plain = itertools.product(*([json.dumps(value) for value in axis] for axis in grid.axes))
        return zip(canonical, plain, itertools.product(*grid.axes), strict=True)
    # A prefix of a grid that may be far larger than the cells kept (a huge int_uniform range).
    texts = lazy_product([_Encoded(axis, _canonical) for axis in grid.axes])
    plains = lazy_product([_Encoded(axis, json.dumps) for axis in grid.axes])
    return itertools.islice(zip(texts, plains, lazy_product(grid.axes), strict=True), grid.limit)


class _Encoded(Sequence[str]):
    """An axis's values as JSON, each encoded when asked for."""

    def __init__(self, values: Sequence[Any], encode: Callable[[Any], str]) -> None:
        self.values = values
        self.encode = encode

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, index: Any) -> Any:
        return self.encode(self.values[index])


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _mutable(value: Any) -> bool:
    return isinstance(value, (dict, list))


@dataclass(frozen=True)
class _Const:
    value: Any


class _Node(NamedTuple):
    """One mapping of the cfg: its template, where its axes' values go, and where it goes itself."""

    template: dict[str, Any]
    keys: tuple[str, ...]  # the keys its axes fill,
    pick: Callable[[tuple[Any, ...]], tuple[Any, ...]]  # their values, out of a cell's values
    parent: int | None  # the node it belongs in (an index of an earlier node), None for the cfg itself
    key: str


class _Layout:
    """A grid's cfg, built from templates, and its canonical JSON as a str.format text with a field per axis."""

    def __init__(self, grid: Grid) -> None:
        tree = _nest(grid.paths)
        self.canonical = "".join(_parts(tree))
        self.stored = "".join(_stored_parts(tree))  # json.dumps's text of the cfg: key order kept, its spaces
        self.nodes: list[_Node] = []
        self.copied: list[tuple[int, str, Any]] = []  # lists and mappings: (node, key, a constant or an axis)
        self._lay_out(tree, None, "", grid)

    def _lay_out(self, tree: dict[str, Any], parent: int | None, key: str, grid: Grid) -> None:
        number = len(self.nodes)
        template: dict[str, Any] = {}
        filled: list[tuple[str, int]] = []
        self.nodes.append(_Node(template, (), _none, parent, key))
        for name, node in tree.items():
            template[name] = None  # in its place: the file's key order
            if isinstance(node, Slot) and _may_change(grid.axes[node.axis]):
                self.copied.append((number, name, node))
            elif isinstance(node, Slot):
                filled.append((name, node.axis))
            elif isinstance(node, _Const) and _mutable(node.value):
                self.copied.append((number, name, node.value))
            elif isinstance(node, _Const):
                template[name] = node.value
            else:
                self._lay_out(node, number, name, grid)
        names = tuple(name for name, _ in filled)
        self.nodes[number] = _Node(template, names, _picker([axis for _, axis in filled]), parent, key)

    def cfg(self, values: tuple[Any, ...]) -> dict[str, Any]:
        made: list[dict[str, Any]] = []
        for template, keys, pick, parent, key in self.nodes:
            mapping = template.copy()
            if keys:
                mapping.update(zip(keys, pick(values), strict=True))
            if parent is not None:
                made[parent][key] = mapping
            made.append(mapping)
        for number, name, value in self.copied:
            made[number][name] = copy.deepcopy(values[value.axis] if isinstance(value, Slot) else value)
        return made[0]

    def digest(self, texts: tuple[str, ...]) -> str:
        return hashlib.sha256(self.canonical.format(*texts).encode("ascii")).hexdigest()


def _may_change(axis: Sequence[Any]) -> bool:
    """Whether an axis holds a list or a mapping (a range of a W&B file holds numbers only)."""
    return isinstance(axis, list) and any(_mutable(value) for value in axis)


def _none(values: tuple[Any, ...]) -> tuple[Any, ...]:
    return ()


def _picker(axes: list[int]) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    if len(axes) == 1:
        (axis,) = axes
        return lambda values: (values[axis],)
    return itemgetter(*axes) if axes else _none


def _nest(paths: Mapping[Path_, Any]) -> dict[str, Any]:
    """The cfg's shape: nested mappings down to the leaves, each a Slot or a _Const (nothing copied)."""
    tree: dict[str, Any] = {}
    for path, value in paths.items():
        node = tree
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value if isinstance(value, Slot) else _Const(value)
    return tree


def _parts(node: Any) -> Iterator[str]:
    """The canonical JSON of `node` as a str.format text: each Slot a field numbered by its axis, braces doubled."""
    if isinstance(node, Slot):
        yield f"{{{node.axis}}}"
    elif isinstance(node, _Const):
        yield _braced(_canonical(node.value))
    else:
        yield "{{"
        for position, key in enumerate(sorted(node)):
            yield ("," if position else "") + _braced(json.dumps(key)) + ":"
            yield from _parts(node[key])
        yield "}}"


def _stored_parts(node: Any) -> Iterator[str]:
    """The cfg as `json.dumps(cfg)` writes it (its key order, ", " and ": "), as _parts lays it out."""
    if isinstance(node, Slot):
        yield f"{{{node.axis}}}"
    elif isinstance(node, _Const):
        yield _braced(json.dumps(node.value))
    else:
        yield "{{"
        for position, (key, value) in enumerate(node.items()):
            yield (", " if position else "") + _braced(json.dumps(key)) + ": "
            yield from _stored_parts(value)
        yield "}}"


def _braced(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")
