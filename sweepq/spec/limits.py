"""How much of a sweep file sweepq reads: the bounds that keep a hostile file from hanging it.

A sweep file is a few kilobytes written by hand. A file far larger, a "billion
laughs" of nested YAML aliases, values nested a thousand deep or whole numbers
of thousands of digits would otherwise hang or crash `plan` and `launch`
(Python recursion, quadratic int parsing, gigabytes of expanded aliases). Each
bound is refused with one paragraph naming the limit; the size limits can be
raised through the environment:

    SWEEPQ_MAX_SWEEP_BYTES   the file's size                         (10 MiB)
    SWEEPQ_MAX_YAML_NODES    values in the file, aliases expanded    (100,000)
    SWEEPQ_MAX_SWEEP_VALUES  values in all cells' cfgs together      (5,000,000)

Nesting depth (100) and the integer range (64-bit, what SQLite and most
programs store) are fixed: deeper values would overflow Python's recursion.
"""

from __future__ import annotations

import os
from typing import Any

from sweepq.errors import UsageError

ENV_MAX_BYTES = "SWEEPQ_MAX_SWEEP_BYTES"
ENV_MAX_NODES = "SWEEPQ_MAX_YAML_NODES"
ENV_MAX_VALUES = "SWEEPQ_MAX_SWEEP_VALUES"
DEFAULT_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_NODES = 100_000
DEFAULT_MAX_VALUES = 5_000_000

#: Lists and mappings inside each other, the file's top-level mapping counting as 1.
MAX_DEPTH = 100
INT_MIN = -(2**63)
INT_MAX = 2**63 - 1
# No 64-bit integer takes more characters than this in YAML 1.1 (0b and 64 binary
# digits, a sign); longer text is refused before Python converts it (which is
# quadratic in the digits, and refused by Python past 4300 of them).
MAX_INT_TEXT = 70


def max_bytes() -> int:
    return _from_environment(ENV_MAX_BYTES, DEFAULT_MAX_BYTES)


def max_nodes() -> int:
    return _from_environment(ENV_MAX_NODES, DEFAULT_MAX_NODES)


def max_values() -> int:
    return _from_environment(ENV_MAX_VALUES, DEFAULT_MAX_VALUES)


def _from_environment(name: str, default: int) -> int:
    written = os.environ.get(name, "").strip()
    if not written:
        return default
    try:
        value = int(written.replace("_", ""))
    except ValueError:
        value = 0
    if value < 1:
        raise UsageError(f"{name}={written!r} is not a whole number of at least 1. Set it like {name}={default}.")
    return value


def raise_hint(name: str, limit: int) -> str:
    """How to raise the limit `name`, for the end of a message."""
    return (
        f"If the file is meant to be this large, raise the limit for the command, e.g. "
        f"{name}={limit * 10} sweepq plan FILE (the limit is now {limit:,})"
    )


def count_values(value: Any) -> int:
    """How many values `value` holds: 1 for a scalar, 1 more than its items for a list or mapping."""
    if isinstance(value, list):
        return 1 + sum(count_values(item) for item in value)
    if isinstance(value, dict):
        return 1 + sum(count_values(item) for item in value.values())
    return 1


def expansion_problem(cells: int, total: int, most: int) -> tuple[str, str] | None:
    """(problem, fix) when building `cells` cfgs holding `total` values (at most `most` in one) is too much.

    Shared values are copied into every cell's cfg, so a small file can ask for
    billions of values: a large list under `params:` times a large grid.
    """
    limit = max_values()
    if total <= limit:
        return None
    problem = (
        f"the sweep's {cells:,} cells would hold {total:,} values in all (up to {most:,} in one cell's cfg), more "
        f"than the {limit:,} sweepq builds ({ENV_MAX_VALUES}), which would take minutes and gigabytes"
    )
    fix = "Move large shared values into a file the training reads, or shrink the grid. " + raise_hint(
        ENV_MAX_VALUES, limit
    )
    return problem, fix
