"""Which cells a selector names: an id ("2.3"), a group name ("adamw"), a pattern on ids ("2.*").

Apart from the sweep file's module (sweep.py re-exports it) so that read commands that select a cell
(`show`, `attempts`) need no YAML parser.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

from sweepq.errors import UsageError

_CELL_ID = re.compile(r"^([0-9]{1,19})\.([0-9]{1,19})$")  # numbers a 64-bit integer holds: no int() of 5000 digits


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
        f"no cell matches {quoted(selector)}: the sweep's groups are {groups or 'none'}. Select cells by id "
        f"(2.3), group name or pattern (2.*).{hint}"
    )


QUOTED_MAX = 80  # a selector quoted whole in an error up to this long; a longer one (a pasted file?) is cut


def quoted(selector: str) -> str:
    """The selector as an error message quotes it: whole when short, else its start and its length."""
    if len(selector) <= QUOTED_MAX:
        return repr(selector)
    return f"{selector[:QUOTED_MAX]!r}... (a selector of {len(selector)} characters)"
