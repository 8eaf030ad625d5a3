"""The `sweepq` click group and what every command shares: errors, output, opening the store.

Exit codes: 0 success, 1 some cell failed (launch) or an internal error,
2 bad input (nothing was written), 3 the launch ran out of workers (they died faster than they
were replaced), 74 a worker stopped by a full disk, 130 interrupted.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from sweepq.cli.lazy import LazyGroup
from sweepq.cli.visible import visible
from sweepq.errors import SweepqError, UsageError

if TYPE_CHECKING:
    from rich.console import Console

    from sweepq.queue.opening import Reader
    from sweepq.queue.store import Store

F = TypeVar("F", bound=Callable[..., Any])


def friendly(fn: F) -> F:
    """Turn sweepq's errors into one paragraph on stderr and their exit code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SweepqError as e:
            click.echo(f"error: {visible(str(e))}", err=True)  # a cell's words may hold escapes
            sys.exit(e.exit_code)
        except Exception as e:
            words = _disk_words(e, kwargs.get("spec"), kwargs.get("root"))
            if words is None:
                raise
            click.echo(
                f"error: {words}: sweepq could not write what this command needs. Free some space (or "
                "remount the file system read-write), then run the same command again: nothing committed "
                "was lost.",
                err=True,
            )
            sys.exit(2)

    return wrapper  # type: ignore[return-value]


def _disk_words(e: BaseException, spec: Any, root: Any) -> str | None:
    """'disk full on ...' when `e` is the machine's disk refusing a write (a file, or the queue)."""
    from sweepq.host import diskfull  # only on this path: the CLI starts without it

    found = diskfull.disk_error(e)
    if found is not None:
        return diskfull.describe(*found)
    try:  # SQLite says "disk I/O error" as often as "full": ask the disk that holds the queue
        from sweepq.cli.roots import resolve_root
        from sweepq.queue.database import Database

        db = Database.for_root(resolve_root(spec, root)).path
    except Exception:
        return None
    return diskfull.database_full(e, db)


def out() -> Console:
    """Wide when piped (tables keep every column in files and CI logs), unless COLUMNS says how wide."""
    from sweepq.cli.plain import SafeConsole  # here: `sweepq --help` never loads rich

    console = SafeConsole(soft_wrap=False)  # no markup, control characters shown (cli/plain.py)
    if not console.is_terminal and not os.environ.get("COLUMNS", "").isdigit():
        console = SafeConsole(soft_wrap=False, width=1000)
    return console


def print_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, default=str, allow_nan=False))


def take_storage(raw: str | None) -> None:
    """`--storage URL`: checked as written, then put in SWEEPQ_STORAGE_URL (a relative folder made the
    current one's), where this process and every process it starts find it before the sweep's own
    (checkpoint/storage_url.py: the command line first, then the environment, then the file)."""
    if raw is None:
        return
    from sweepq.checkpoint import storage_url

    os.environ[storage_url.ENV_STORAGE] = storage_url.anchored(storage_url.check(raw, "--storage").raw, Path.cwd())


def _storage_given(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    try:
        take_storage(value)
    except UsageError as e:
        raise click.BadParameter(str(e).removeprefix("--storage: "), ctx, param) from None


storage_option = click.option(
    "--storage",
    default=None,
    metavar="URL",
    expose_value=False,
    is_eager=True,
    callback=_storage_given,
    help="Where the cells' checkpoints are (s3://bucket/prefix, or a folder every machine mounts); before "
    "SWEEPQ_STORAGE_URL and the sweep's storage:.",
)
_root_only = click.option(
    "--root", "root", metavar="DIR", help="The sweep root (or a sweep file); default: from SPEC or the current folder."
)


def _server_given(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.meta[f"sweepq.{param.name}"] = value


_database_only = click.option(
    "--database",
    default=None,
    metavar="URL",
    expose_value=False,
    is_eager=True,
    callback=_server_given,
    help="With --sweep, instead of SPEC or --root: the sweep's PostgreSQL server (a SQLAlchemy URL), read "
    "from any folder of any machine.",
)
_sweep_only = click.option(
    "--sweep",
    "sweep",
    default=None,
    metavar="NAME",
    expose_value=False,
    is_eager=True,
    callback=_server_given,
    help="With --database: the sweep's name (the sweep file's name:) on that server.",
)


def root_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """--root, and --storage with it: every command that reads a root may be told where its storage is.
    And --database URL --sweep NAME in place of a root: the sweep on a server, from any folder."""
    return _root_only(storage_option(_database_only(_sweep_only(command))))


@contextmanager
def root_of(spec: str | None, root: str | None) -> Iterator[Path]:
    """The root a command works on: SPEC's, --root's or the current folder's (roots.resolve_root); with
    --database URL --sweep NAME, a folder of the command's own (removed after it) that holds only the
    record naming that sweep on that server, as a root joined with `sweepq worker --database` holds it:
    every reader (the queue, the leases that tell a live owner) then finds the server, and no file of
    another machine is needed. Nothing of the sweep is written."""
    from sweepq.cli.roots import resolve_root

    ctx = click.get_current_context(silent=True)
    meta = ctx.meta if ctx is not None else {}
    url, sweep = meta.get("sweepq.database"), meta.get("sweepq.sweep")
    if url is None and sweep is None:
        yield resolve_root(spec, root)
        return
    import tempfile

    from sweepq.queue import database_url
    from sweepq.spec.types import LeaseTerms

    if url is None or not sweep:
        raise UsageError("--database and --sweep go together: the server's URL and the sweep's name on it")
    if spec or root:
        raise UsageError("--database and --sweep name the sweep by themselves: leave out SPEC and --root")
    if database_url.dialect(url, "--database") != "postgresql":
        raise UsageError("--database: a sweep is read by name on a PostgreSQL server (a SQLite queue is its root's)")
    _check_sweep(url, sweep)
    before = os.environ.get(database_url.ENV_DATABASE)
    # The command line first (and a literal password reaches the connection only this way: the record
    # keeps the URL as shown), for this command alone.
    os.environ[database_url.ENV_DATABASE] = url
    try:
        with tempfile.TemporaryDirectory(prefix="sweepq-read-") as folder:
            terms = LeaseTerms()
            chosen = database_url.Chosen(url, "--database")
            database_url.write_record(Path(folder), chosen, sweep, terms.renew_seconds, terms.expire_seconds)
            yield Path(folder)
    finally:
        if before is None:
            os.environ.pop(database_url.ENV_DATABASE, None)
        else:
            os.environ[database_url.ENV_DATABASE] = before


def _check_sweep(url: str, sweep: str) -> None:
    """Refuse a sweep name the server does not hold, by name (not as a root without a database)."""
    from sweepq.queue import database_url, pg_schema
    from sweepq.queue.server_text import ServerReader, conninfo

    where = conninfo(database_url.expanded(url, os.environ, "--database"))
    server = ServerReader(Path(), where, pg_schema.sweep_schema(sweep), shown=database_url.redacted(url))
    try:
        if server.revision() is None:
            shown = database_url.redacted(url)
            raise UsageError(f"the server {shown} holds no sweep named {sweep!r} (--sweep)")
    finally:
        server.close()


json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output (stable fields).")


@contextmanager
def reading(spec: str | None, root: str | None) -> Iterator[Store]:
    """The store of the root named by SPEC, --root or the current folder, never written."""
    from sweepq.queue.store import Store

    with root_of(spec, root) as where:
        store = Store.open_readonly(where)
        try:
            yield store
        finally:
            store.close()


@contextmanager
def sqlite_reading(spec: str | None, root: str | None) -> Iterator[Reader]:
    """`reading`'s root through the standard library's sqlite3 alone (queue/opening.py): what `status`,
    `show`, `attempts`, `logs`, `best` and `report` read, without importing SQLAlchemy."""
    from sweepq.queue.database_url import read_record
    from sweepq.queue.opening import Reader

    with root_of(spec, root) as where:
        record = read_record(where)
        if record is not None:  # the queue is on a server: psycopg alone, as sqlite3 alone reads a file
            from sweepq.queue.server_text import ServerReader

            server = ServerReader.open(where, record.connect_url(os.environ), record.sweep, record.url)
            try:
                yield server  # type: ignore[misc]
            finally:
                server.close()
            return
        reader = Reader.open(where)
        try:
            yield reader
        finally:
            reader.close()


@contextmanager
def steering(root: str | None) -> Iterator[Store]:
    """The store for a steering command (migrated if needed, short writes)."""
    from sweepq.queue.store import Store

    with root_of(None, root) as where:
        store = Store.open(where)
        try:
            yield store
        finally:
            store.close()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="sweepq")
def main() -> None:  # its commands: sweepq/cli/main.py
    """Run hyperparameter sweeps of PyTorch training that survive disconnects, preemptions and reboots."""
