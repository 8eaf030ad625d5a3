"""Where a sweep keeps its cells' durable files: the one place that reads a storage URL (`locate`;
checkpoint/storage.py and durable/opening.py open their backends from the Location it gives).

A sweep's storage is named by `--storage URL` on the command line, else `SWEEPQ_STORAGE_URL` in the
environment, else the sweep file's `storage:`, else the root folder itself (as before the key
existed). The launch records the one it chose with the sweep's settings in the queue, so that every
worker, attempt and read command, on any machine and from any root, opens the same storage; a
process's own `--storage` or `SWEEPQ_STORAGE_URL` still comes first for it (a cluster file system
mounted at another path on that machine).

  (none)            the root folder: `<root>/cells/<cell>/checkpoints/step-<step>/`
  /a/path, file://  a folder every machine mounts, holding the same layout:
                    `<folder>/cells/<cell>/checkpoints/step-<step>/` (a relative path is the
                    sweep file's folder's, resolved when the sweep file is read)
  s3://bucket/pfx   an S3-compatible bucket, the layout under the prefix (checkpoint/s3.py); endpoint
                    and credentials the standard AWS way (AWS_ENDPOINT_URL, profiles, roles)

`${envvar:NAME}` inside the URL is NAME's value, filled in only when the storage is opened
(`expanded`); what is stored, written or printed keeps the placeholder. Credentials never belong in
the URL (an s3:// URL with `user:password@` is refused): the AWS configuration carries them.

Standard library only until a storage is opened: read commands check the URL before anything heavy
is imported.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from sweepq.errors import UsageError
from sweepq.queue.database_url import _ANY_PLACEHOLDER, PLACEHOLDER, expanded, redacted

ENV_STORAGE = "SWEEPQ_STORAGE_URL"
SCHEMES = ("file", "s3")
# The AWS settings a client is made from: a client is kept per process for each combination seen.
_AWS_ENV = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_PROFILE",
)


@dataclass(frozen=True)
class Chosen:
    """A storage URL as written (placeholders unexpanded) and where it was written."""

    raw: str
    source: str  # "--storage", "SWEEPQ_STORAGE_URL" or "storage: in <file>"

    @property
    def shown(self) -> str:
        return redacted(self.raw)


def problem(raw: str) -> str | None:
    """What is wrong with a written storage URL; None when it is usable (checked as written, placeholders
    unexpanded: their values are only known on the machine that opens the storage)."""
    if not raw.strip():
        return "it is empty"
    if "\0" in raw:
        return "it contains a NUL character"
    for found in _ANY_PLACEHOLDER.finditer(raw):
        if PLACEHOLDER.fullmatch(found.group(0)) is None:
            return f"{found.group(0)!r} is not a placeholder sweepq knows: write ${{envvar:NAME}}"
    scheme = scheme_of(raw)
    if scheme is None:
        return None  # a path
    if scheme not in SCHEMES:
        return (
            f"sweepq keeps checkpoints in a folder (a path, or file:///path) or an S3-compatible bucket "
            f"(s3://bucket/prefix), not {scheme}://"
        )
    parsed = urlparse(raw)
    if scheme == "s3":
        if not parsed.netloc or "/" in parsed.netloc:
            return f"{redacted(raw)!r} names no bucket: write s3://bucket/prefix"
        if "@" in parsed.netloc:
            return (
                "credentials do not belong in the storage URL: give them the standard AWS way "
                "(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile, or an instance role)"
            )
        if parsed.query or parsed.fragment:
            return f"{redacted(raw)!r} has a query or fragment: write s3://bucket/prefix"
    if scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            return f"{raw!r} names a host: a folder is file:///absolute/path (every machine mounts it there)"
        if not parsed.path.startswith("/"):
            return f"{raw!r} is no absolute folder: write file:///absolute/path"
    return None


def scheme_of(raw: str) -> str | None:
    """The URL's scheme in lower case; None for a path (no `scheme://`)."""
    head, sep, _ = raw.partition("://")
    if not sep or not head or not head[0].isalpha() or not all(c.isalnum() or c in "+.-" for c in head):
        return None
    return head.lower()


def check(raw: str, source: str) -> Chosen:
    """`raw` as a Chosen, refused (UsageError naming `source`) when it cannot name a storage."""
    why = problem(raw)
    if why is not None:
        raise UsageError(f"{source}: {why}")
    return Chosen(raw, source)


def choose(
    command_line: str | None, environ: Mapping[str, str], from_file: str | None, file: str = ""
) -> Chosen | None:
    """The storage a command means: the command line's, else the environment's, else the sweep file's;
    None for the default (the root folder). Each is checked before it is used."""
    where = f"storage: in {file}" if file else "storage: in the sweep file"
    for raw, source in (
        (command_line, "--storage"),
        (environ.get(ENV_STORAGE) or None, ENV_STORAGE),
        (from_file, where),
    ):
        if raw is not None:
            return check(raw, source)
    return None


def settled(from_file: str | None, file: str = "", environ: Mapping[str, str] | None = None) -> str | None:
    """What a launch records as the sweep's storage: the environment's (where `--storage` put it) before
    the file's (already made absolute by the spec reader), a relative folder made the current one's."""
    chosen = choose(None, os.environ if environ is None else environ, from_file, file)
    if chosen is None:
        return None
    return anchored(chosen.raw, Path.cwd())


def in_effect(recorded: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The storage this process opens for a sweep whose settings record `recorded` (what its launch
    chose): this process's SWEEPQ_STORAGE_URL (its `--storage` put it there) first."""
    env = os.environ if environ is None else environ
    return env.get(ENV_STORAGE) or recorded


def shown(raw: str | None) -> str:
    """The storage as it may be printed: placeholders kept; the root folder when none is set."""
    return "the root folder" if raw is None else redacted(raw)


def anchored(raw: str, base: Path) -> str:
    """A relative path made absolute against `base` (the sweep file's folder, or the current one for the
    command line and the environment); URLs, absolute paths and a path starting with a placeholder as
    they are."""
    if scheme_of(raw) is not None or raw.startswith("${") or Path(raw).expanduser().is_absolute():
        return raw
    return str(base / raw)


def folder_of(raw: str) -> Path:
    """The folder a path or file:// URL names (placeholders already filled in)."""
    if scheme_of(raw) == "file":
        return Path(unquote(urlparse(raw).path))
    return Path(raw).expanduser()


@dataclass(frozen=True)
class Location:
    """Where a sweep's storage is once its URL is filled in: a folder every machine mounts, or a
    bucket's URL with the client that reaches it. The checkpoints (checkpoint/storage.py) and a cell's
    other durable files (durable/opening.py) each open their backend from it."""

    folder: Path | None = None
    s3_url: str | None = None
    client: Any = None


def locate(raw: str | None, environ: Mapping[str, str] | None = None) -> Location | None:
    """Where the storage `raw` is (as chosen, placeholders unexpanded); None: the root folder. This
    process's SWEEPQ_STORAGE_URL comes first (`in_effect`)."""
    env = os.environ if environ is None else environ
    chosen = in_effect(raw, env)
    if chosen is None:
        return None
    source = ENV_STORAGE if env.get(ENV_STORAGE) else "the sweep's storage"
    check(chosen, source)
    url = expanded(chosen, env, source)
    if scheme_of(url) == "s3":
        return Location(s3_url=url, client=_client(env))
    folder = folder_of(url)
    if not folder.is_absolute():
        raise UsageError(f"{source}: {redacted(chosen)!r} is a relative folder: give an absolute path")
    return Location(folder=folder)


_clients: dict[tuple[str | None, ...], Any] = {}
_clients_lock = threading.Lock()


def _client(env: Mapping[str, str]) -> Any:
    """One S3 client per process for each AWS configuration (making one costs tens of milliseconds, and
    the client is thread-safe); made the standard AWS way."""
    from sweepq.checkpoint import s3

    # Keyed by the process too: a forked attempt must not share its parent's pooled sockets.
    key = (str(os.getpid()), *(env.get(name) for name in _AWS_ENV))
    with _clients_lock:
        made = _clients.get(key)
        if made is None:
            made = _clients[key] = s3.client()
        return made
