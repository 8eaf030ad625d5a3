"""Where a sweep's tables live on a PostgreSQL server: one schema per sweep, named from the sweep's name.

Several sweeps share one database without seeing each other: each sweep's tables (and alembic's
version table) are in a PostgreSQL schema of its own, `sweep_<name>`. Statements name their tables
without a schema and run on a connection whose execution options map that empty schema to the
sweep's (SQLAlchemy's `schema_translate_map`, `execution_options(name)` here), so nothing is kept in
the server's session: no `SET search_path`, no session advisory lock, nothing that PgBouncer in
transaction mode would hand to the next client. Only the migrations, which alembic partly writes as
text without a schema, set `search_path` with `SET LOCAL`, which ends with their transaction
(migrations/env.py).

The name is safe to put in SQL as it is (lower-case letters, digits and `_`, at most 63 bytes,
PostgreSQL's limit) and still quoted wherever it is written. A sweep name that is not already such
a name (upper case, `-`, `.`, other letters, too long) keeps its readable part and gains a short
digest of the exact name, so that two different sweep names never share a schema.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

PREFIX = "sweep_"
MAX_IDENTIFIER = 63  # PostgreSQL's NAMEDATALEN - 1: a longer name is silently cut by the server
_DIGEST = 10
_PLAIN = re.compile(r"[a-z0-9_]+")


def sweep_schema(name: str) -> str:
    """The schema of the sweep named `name`; the same name gives the same schema on every machine."""
    if not name or not name.strip():
        raise ValueError("a sweep on a server database needs a name (the sweep file's `name:`)")
    plain = _PLAIN.fullmatch(name) is not None and len(PREFIX) + len(name) <= MAX_IDENTIFIER
    if plain:
        return PREFIX + name
    readable = re.sub(r"[^a-z0-9_]+", "_", name.lower()).strip("_")
    digest = hashlib.sha256(name.encode()).hexdigest()[:_DIGEST]
    room = MAX_IDENTIFIER - len(PREFIX) - len(digest) - 1
    return f"{PREFIX}{readable[:room]}_{digest}" if readable else f"{PREFIX}{digest}"


def quoted(schema: str) -> str:
    """The schema as an SQL identifier (it holds no quote; quoted all the same)."""
    if _PLAIN.fullmatch(schema) is None or len(schema) > MAX_IDENTIFIER:
        raise ValueError(f"not a sweep schema: {schema!r}")
    return f'"{schema}"'


def execution_options(name: str) -> dict[str, Any]:
    """Connection options that put the sweep's tables in its schema (`engine.execution_options(**...)`)."""
    return {"schema_translate_map": {None: sweep_schema(name)}}
