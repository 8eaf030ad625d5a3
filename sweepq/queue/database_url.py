"""Which database holds a sweep's queue, and its URL as it may be shown: the one place that says so.

A sweep's queue is named by a SQLAlchemy URL: `--database URL` on the command line, else
`SWEEPQ_DATABASE_URL` in the environment, else the sweep file's `database:`, else the SQLite file
sweepq.db in the root. `${envvar:NAME}` inside the URL is the value of the environment variable
NAME, filled in only when the URL is connected to (`expanded`); what is written to a file or printed
keeps the placeholder, and a password written literally is shown as `***` (`redacted`). So a
password is never written or printed in clear, whichever way it came.

Standard library only: read commands decide where their queue is before anything heavy is imported.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote

from sweepq.errors import UsageError

ENV_DATABASE = "SWEEPQ_DATABASE_URL"
#: `${envvar:NAME}`: the environment variable NAME, filled in at connection time only.
PLACEHOLDER = re.compile(r"\$\{envvar:([A-Za-z_][A-Za-z0-9_]*)\}")
_ANY_PLACEHOLDER = re.compile(r"\$\{[^}]*\}?")
#: The dialects sweepq's queue runs on (the part of a URL's scheme before `+driver`).
DIALECTS = ("sqlite", "postgresql")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9.-]*)(\+[A-Za-z0-9_.-]+)?://")
# `scheme://user:password@`: the password is what lies between the first `:` of the userinfo and its `@`.
_PASSWORD = re.compile(r"^(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^:/@?#\s]*:)(?P<password>[^/?#\s]*)(?=@)")
REDACTED = "***"


@dataclass(frozen=True)
class Chosen:
    """A database URL as written (placeholders unexpanded) and where it was written."""

    raw: str
    source: str  # "--database", "SWEEPQ_DATABASE_URL" or "database: in <file>"

    @property
    def shown(self) -> str:
        return redacted(self.raw)

    @property
    def dialect(self) -> str:
        return dialect(self.raw, self.source)

    def expanded(self, environ: Mapping[str, str]) -> str:
        return expanded(self.raw, environ, self.source)


def problem(raw: str) -> str | None:
    """What is wrong with a written database URL (its placeholders, its dialect); None when it is usable."""
    if not raw.strip():
        return "it is empty"
    if "\0" in raw:
        return "it contains a NUL character"
    for found in _ANY_PLACEHOLDER.finditer(raw):
        if PLACEHOLDER.fullmatch(found.group(0)) is None:
            return f"{found.group(0)!r} is not a placeholder sweepq knows: write ${{envvar:NAME}}"
    scheme = _SCHEME.match(raw)
    if scheme is None:
        return f"{redacted(raw)!r} is not a database URL (like postgresql+psycopg://user@host/db)"
    if scheme.group(1) not in DIALECTS:
        return f"sweepq's queue runs on SQLite and PostgreSQL, not {scheme.group(1)}"
    return None


def dialect(raw: str, source: str = "the database URL") -> str:
    why = problem(raw)
    if why is not None:
        raise UsageError(f"{source}: {why}")
    scheme = _SCHEME.match(raw)
    assert scheme is not None
    return scheme.group(1)


def redacted(raw: str) -> str:
    """The URL as it may be printed or written: placeholders kept, a literal password as `***`."""
    found = _PASSWORD.match(raw)
    if found is None or PLACEHOLDER.fullmatch(found.group("password")) or not found.group("password"):
        return raw
    return found.group("head") + REDACTED + raw[found.end() :]


def expanded(raw: str, environ: Mapping[str, str], source: str = "the database URL") -> str:
    """The URL to connect to: every `${envvar:NAME}` replaced by NAME's value (quoted inside user:password@)."""
    userinfo_end = raw.find("@", raw.find("://") + 3) if "://" in raw else -1
    out: list[str] = []
    last = 0
    for found in PLACEHOLDER.finditer(raw):
        name = found.group(1)
        value = environ.get(name)
        if value is None:
            raise UsageError(
                f"{source} names ${{envvar:{name}}}, but the environment variable {name} is not set: "
                f"export {name} on this machine before running sweepq"
            )
        in_userinfo = 0 <= found.start() < userinfo_end and "/" not in raw[raw.find("://") + 3 : found.start()]
        out.append(raw[last : found.start()])
        out.append(quote(value, safe="") if in_userinfo else value)
        last = found.end()
    out.append(raw[last:])
    return "".join(out)


def choose(
    command_line: str | None, environ: Mapping[str, str], from_file: str | None, file: str = ""
) -> Chosen | None:
    """The database a command means: the command line's, else the environment's, else the sweep file's;
    None for the default (the SQLite file in the root). Each is checked before it is used."""
    where = f"database: in {file}" if file else "database: in the sweep file"
    for raw, source in (
        (command_line, "--database"),
        (environ.get(ENV_DATABASE) or None, ENV_DATABASE),
        (from_file, where),
    ):
        if raw is not None:
            chosen = Chosen(raw, source)
            chosen.dialect  # noqa: B018 (refuses a URL sweepq cannot use, naming where it was written)
            return chosen
    return None
