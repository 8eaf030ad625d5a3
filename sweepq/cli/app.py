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


def root_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """--root, and --storage with it: every command that reads a root may be told where its storage is."""
    return _root_only(storage_option(command))


json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output (stable fields).")


@contextmanager
def reading(spec: str | None, root: str | None) -> Iterator[Store]:
    """The store of the root named by SPEC, --root or the current folder, never written."""
    from sweepq.cli.roots import resolve_root
    from sweepq.queue.store import Store

    store = Store.open_readonly(resolve_root(spec, root))
    try:
        yield store
    finally:
        store.close()


@contextmanager
def sqlite_reading(spec: str | None, root: str | None) -> Iterator[Reader]:
    """`reading`'s root through the standard library's sqlite3 alone (queue/opening.py): what `status`,
    `show`, `attempts`, `logs`, `best` and `report` read, without importing SQLAlchemy."""
    from sweepq.cli.roots import resolve_root
    from sweepq.queue.database_url import read_record
    from sweepq.queue.opening import Reader

    where = resolve_root(spec, root)
    if read_record(where) is not None:  # the queue is on a server: read through the Store
        with reading(spec, root) as store:
            yield store  # type: ignore[misc]
        return
    reader = Reader.open(where)
    try:
        yield reader
    finally:
        reader.close()


@contextmanager
def steering(root: str | None) -> Iterator[Store]:
    """The store for a steering command (migrated if needed, short writes)."""
    from sweepq.cli.roots import resolve_root
    from sweepq.queue.store import Store

    store = Store.open(resolve_root(None, root))
    try:
        yield store
    finally:
        store.close()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="sweepq")
def main() -> None:  # its commands: sweepq/cli/main.py
    """Run hyperparameter sweeps of PyTorch training that survive disconnects, preemptions and reboots."""
