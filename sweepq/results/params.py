"""The cfg beside the results: nested keys flattened (`optim.lr`), the keys that vary, values and key names.

Tables and the HTML page show only the keys whose values differ between the
cells shown (a key missing from some cells differs too), as "show only differing
params" does in experiment trackers. A value's full form is what the sweep file
would spell (a float's shortest exact spelling); a key is named by its shortest
trailing path that no other key ends with. The terminal's short forms and its
columns are the CLI's (`sweepq.cli.param_columns`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sweepq.analysis.grid import flatten  # the one flattening of a cfg: the grid analysis shares it

_MISSING = object()


def split_keys(cfgs: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[str]]:
    """(the keys that vary, those the same in every cell), each in the order the cells first name them."""
    flat = [flatten(c) for c in cfgs]
    keys = list(dict.fromkeys(k for f in flat for k in f))
    varies = {k for k in keys if len({_identity(f.get(k, _MISSING)) for f in flat}) > 1}
    return [k for k in keys if k in varies], [k for k in keys if k not in varies]


def _identity(v: Any) -> str:
    return "\0missing" if v is _MISSING else json.dumps(v, sort_keys=True, default=str)


def full(v: Any) -> str:
    """A cfg value as the sweep file would spell it (floats exactly, in their shortest form)."""
    if isinstance(v, str):
        return v
    if isinstance(v, float):
        return repr(v)
    return json.dumps(v, separators=(",", ":"), sort_keys=True, default=str)


def headers(keys: Sequence[str]) -> dict[str, str]:
    """Each key's shortest trailing path that no other key ends with: `optim.lr` -> `lr` when unambiguous."""
    parts = {k: k.split(".") for k in keys}
    named: dict[str, str] = {}
    for k, p in parts.items():
        for n in range(1, len(p) + 1):
            tail = ".".join(p[-n:])
            if not any(o != k and (o == tail or o.endswith("." + tail)) for o in keys):
                named[k] = tail
                break
        else:
            named[k] = k
    return named


def lines(cfg: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(key, value) of every flattened key, for one cell's page (`show`)."""
    return [(k, full(v)) for k, v in flatten(cfg).items()]
