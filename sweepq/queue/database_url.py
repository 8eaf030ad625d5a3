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

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from sweepq.atomic import atomic_write_json
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


# -- the root's record of its server database -------------------------------------------------------
# A root whose queue is on a server says so in RECORD_NAME, written by the launch that chose it: every
# process that opens the root (its workers, their attempts, read commands, a relaunch without the
# option) then finds the same database. The URL is kept as `shown` (placeholders, never a password);
# a password written literally reaches the launch's own processes through SWEEPQ_DATABASE_URL.

RECORD_NAME = "database.json"


@dataclass(frozen=True)
class Record:
    url: str  # as shown: `${envvar:NAME}` kept, a literal password as ***
    sweep: str
    renew_seconds: float
    expire_seconds: float

    def connect_url(self, environ: Mapping[str, str]) -> str:
        """The URL to connect with: SWEEPQ_DATABASE_URL where set (a literal password travels there), else
        the recorded one, placeholders filled in."""
        given = environ.get(ENV_DATABASE)
        if given:
            return expanded(given, environ, ENV_DATABASE)
        if f":{REDACTED}@" in self.url:
            raise UsageError(
                f"the sweep's database {self.url} needs its password: set {ENV_DATABASE} to its URL on this "
                "machine, or write the password as ${envvar:NAME} in the sweep file's database:"
            )
        return expanded(self.url, environ, "the root's database record")


def record_path(root: Path) -> Path:
    return root / RECORD_NAME


def read_record(root: Path) -> Record | None:
    path = record_path(root)
    try:
        data = json.loads(path.read_text())
        return Record(str(data["url"]), str(data["sweep"]), float(data["renew_seconds"]), float(data["expire_seconds"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UsageError(f"{path} cannot be read ({e}): launch the sweep file again to write it") from None


def write_record(root: Path, chosen: Chosen, sweep: str, renew_seconds: float, expire_seconds: float) -> Record:
    record = Record(chosen.shown, sweep, renew_seconds, expire_seconds)
    root.mkdir(parents=True, exist_ok=True)
    atomic_write_json(record_path(root), dataclasses.asdict(record))
    return record
