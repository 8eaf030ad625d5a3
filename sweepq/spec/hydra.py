"""Hydra apps (`@hydra.main`) as `program:`: how they are recognised and how they get their cfg.

A Hydra app reads its command line as overrides (`db=mysql db.user=alice`) and
refuses `--db=mysql`, and by default writes every run into a new
`outputs/<date>/<time>/` folder, where a retry never finds the files of the
attempt before it (and two cells started in the same second share one). So a
`program:` sweep whose program is a Hydra app gets HYDRA_COMMAND by default:
`${args_hydra}` prints each leaf of the cfg as an override in Hydra's grammar,
and `hydra.run.dir=${output_dir}` gives every attempt of a cell the cell's own
output folder. The app is recognised by reading its source (never importing it):
a `hydra.main` decorator.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any

#: The default command of a `program:` sweep whose program is a Hydra app.
HYDRA_COMMAND: tuple[str, ...] = (
    "${env}",
    "${interpreter}",
    "${program}",
    "${args_hydra}",
    "hydra.run.dir=${output_dir}",
)

# `@hydra.main(`, `@main(` after `from hydra import main`: what makes a script a Hydra app.
_DECORATOR = re.compile(r"^\s*@\s*hydra\s*\.\s*main\b", re.MULTILINE)
_IMPORTED_MAIN = re.compile(r"^\s*from\s+hydra\s+import\s+[^\n#]*\bmain\b", re.MULTILINE)
_BARE_DECORATOR = re.compile(r"^\s*@\s*main\s*\(", re.MULTILINE)
#: Larger sources are not read (a program is a script, not a data file).
_MOST_BYTES = 4 * 1024 * 1024


def is_hydra_app(path: str) -> bool:
    """Whether the Python source at `path` is a Hydra app (False when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            text = f.read(_MOST_BYTES).decode("utf-8", "replace")
    except OSError:
        return False
    return bool(_DECORATOR.search(text) or (_IMPORTED_MAIN.search(text) and _BARE_DECORATOR.search(text)))


def module_file(module: str, folders: list[str]) -> str | None:
    """The source of `python -m module` found in `folders` (its .py, or a package's __main__.py), or None.

    Read, not imported: a package's `__init__` would run the user's code.
    """
    parts = module.split(".")
    for folder in folders:
        base = os.path.join(folder or ".", *parts)
        for candidate in (base + ".py", os.path.join(base, "__main__.py")):
            if os.path.isfile(candidate):
                return candidate
    return None


# Characters an unquoted Hydra value may hold (its grammar's ID, and the other characters of a primitive).
_UNQUOTED = re.compile(r"[A-Za-z0-9_/\\:+.$*%@?|-]+")
# Words Hydra reads as something other than a string: they are quoted to stay strings.
_NOT_A_STRING = re.compile(
    r"(?i)(true|false|null|[+-]?(inf|nan)"
    r"|[+-]?[0-9][0-9_]*(\.[0-9_]*)?(e[+-]?[0-9_]+)?|[+-]?\.[0-9_]+(e[+-]?[0-9_]+)?)"
)


def hydra_value(value: Any) -> str:
    """`value` as Hydra's override grammar reads it back: null, true, 0.1, 'a b', [1,2], {k:v}."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, list):
        return "[" + ",".join(hydra_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{_key(k)}:{hydra_value(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if _UNQUOTED.fullmatch(text) and not _NOT_A_STRING.fullmatch(text) and not text.startswith(("+", "~")):
        return text
    return _quoted(text)


def _key(key: Any) -> str:
    # Hydra's grammar has no quoted keys; a key is a run of words (spaces and hyphens included).
    return str(key)


def _quoted(text: str) -> str:
    # Hydra's quoted strings: a backslash escapes only the quote character and the backslashes before it.
    quote = "'" if "'" not in text or '"' in text else '"'
    escaped = re.sub(r"(\\*)" + quote, lambda m: m.group(1) * 2 + "\\" + quote, text)
    escaped = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, escaped)
    return quote + escaped + quote


__all__ = ["HYDRA_COMMAND", "hydra_value", "is_hydra_app", "module_file"]
