"""`sweepq logs`: what an attempt's program printed, its stdout.log and stderr.log (read-only, as the read commands).

Printed as bytes, as written: a log is the program's, in whatever encoding it chose.
`--follow` polls the files and the queue until the attempt ends, so that it also works
on a root another machine writes (no inotify across a network file system).
"""

from __future__ import annotations

import io
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, cast

import click

from sweepq.cli.app import friendly, main, root_option, sqlite_reading
from sweepq.cli.read_commands import cell_and_place, one_cell, place_argument
from sweepq.cli.visible import VisibleWriter, visible
from sweepq.durable import cache
from sweepq.errors import UsageError
from sweepq.host.logkeeper import ENV_KEEP
from sweepq.host.tails import tail_file
from sweepq.layout import CellPaths
from sweepq.queue.records import AttemptRecord
from sweepq.queue.states import CellState
from sweepq.results import spelling

ATTEMPT_MAX = 2**63 - 1  # attempt numbers are SQLite INTEGERs: a larger N names no attempt (nor can be asked)

if TYPE_CHECKING:
    from sweepq.queue.opening import Reader
    from sweepq.queue.store import Store

    CellReads = Store | Reader  # a Store, or a Reader

POLL_SECONDS = 0.5
_CHUNK = 1 << 16


@main.command()
@click.argument("cell", required=False, metavar="CELL")
@place_argument
@root_option
@click.option(
    "--attempt",
    "number",
    type=click.IntRange(min=1),
    metavar="N",
    help="Attempt N (default: the latest).",
)
@click.option("--stdout", "only", flag_value="stdout", help="Only stdout.log, without a header.")
@click.option("--stderr", "only", flag_value="stderr", help="Only stderr.log, without a header.")
@click.option("--follow", "-f", is_flag=True, help="Print what the attempt writes until it ends (or Ctrl-C).")
@friendly
def logs(
    cell: str | None, spec: str | None, root: str | None, number: int | None, only: str | None, follow: bool
) -> None:
    """What an attempt of CELL printed: its stdout.log and stderr.log, each under a header.

    CELL is a cell id like 2.3. SPEC_OR_ROOT is the sweep file or its root folder
    (default: --root, else the current folder): `sweepq logs 2.3 sweep.yaml`. The
    latest attempt unless --attempt N; the files are `cells/<cell>/attempts/<n>/`.
    """
    cell, spec = cell_and_place(cell, spec, "logs")
    with sqlite_reading(spec, root) as store:
        rec = store.cell(one_cell(store, cell, "logs"))
        attempt = _attempt(store, rec.id, number or rec.attempts, rec.state)
        cache.fill(store, [rec.id])  # its logs, when only the sweep's storage has them (its machine gone)
        paths = CellPaths(store.root, rec.id)
        names = [only] if only else ["stdout", "stderr"]
        files = [_Log(name, paths.attempt_dir(attempt.number) / f"{name}.log") for name in names]
        out = cast(BinaryIO, VisibleWriter(sys.stdout.buffer))  # a log's escapes shown, never run
        try:
            if follow:
                _follow(store, attempt, files, out, headers=only is None)
            else:
                _print_whole(files, out, headers=only is None)
                if only is None:
                    _receipt_tail(attempt, files[1], out)
        except BrokenPipeError:  # `sweepq logs 2.3 | head`: the reader has seen enough
            _quiet_stdout()


def _quiet_stdout() -> None:
    """Send what is left of stdout nowhere, so that exiting does not complain of the closed pipe again."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):
        pass


def _attempt(store: CellReads, cell: str, number: int, state: CellState) -> AttemptRecord:
    if number == 0:
        raise UsageError(f"cell {cell} is {state} and has not run yet, so it has no logs: ask again once it runs")
    attempt = store.attempt(cell, number) if number <= ATTEMPT_MAX else None
    if attempt is None:
        known = ", ".join(str(a.number) for a in store.attempts(cell)) or "none"
        beyond = f" (attempt numbers end at {ATTEMPT_MAX}, SQLite's largest integer)" if number > ATTEMPT_MAX else ""
        raise UsageError(
            f"cell {cell} has no attempt {number}{beyond} (its attempts: {known}); leave out --attempt for the latest"
        )
    return attempt


@dataclass
class _Log:
    name: str
    path: Path
    offset: int = field(default=0)

    @property
    def header(self) -> bytes:
        return f"==> {spelling.shown_path(self.path)} <==\n".encode()

    def has_new(self) -> bool:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return False
        return size != self.offset  # shorter: its keeper dropped its middle (host/logkeeper.py)

    def copy_new(self, out: BinaryIO) -> bytes:
        """Write what was added since the last call; returns its last byte (b"" when nothing).

        A log that got shorter was compacted by its keeper (its middle dropped to keep it bounded):
        that is said in one line, and following goes on from its end as it is now.
        """
        last = b""
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < self.offset:
                    out.write(f"\n[sweepq logs: {self.name} dropped its middle while followed ({ENV_KEEP})]\n".encode())
                    self.offset = size
                    return b"\n"
                f.seek(self.offset)
                while chunk := f.read(_CHUNK):
                    out.write(chunk)
                    self.offset += len(chunk)
                    last = chunk[-1:]
        except FileNotFoundError:
            pass
        return last


def _print_whole(logs: list[_Log], out: BinaryIO, headers: bool) -> None:
    for i, log in enumerate(logs):
        if headers:
            out.write((b"\n" if i else b"") + log.header)
        if not log.path.exists():
            if headers:
                out.write(b"(no such file: the attempt did not get as far as writing it)\n")
            else:
                click.echo(f"no {log.path.name} in {spelling.shown_path(log.path.parent)}", err=True)
            continue
        last = log.copy_new(out)
        if headers and not last:
            out.write(b"(empty)\n")
        elif last != b"\n":
            out.write(b"\n")  # the next header starts on a line of its own
    out.flush()


def _receipt_tail(attempt: AttemptRecord, stderr: _Log, out: BinaryIO) -> None:
    """A traceback that only the receipt holds (in-process training records it there, not in stderr.log)."""
    tail = (attempt.error_tail or "").strip()
    if not tail or attempt.reason in (None, "completed", "preempted"):
        return
    if tail.splitlines()[-1].strip() in (tail_file(stderr.path) or ""):
        return  # the log ends with it already
    where = spelling.shown_path(stderr.path.parent / "receipt.json")
    out.write(f"\n==> the error tail recorded in {where} <==\n{tail}\n".encode())
    out.flush()


def _follow(store: CellReads, attempt: AttemptRecord, logs: list[_Log], out: BinaryIO, headers: bool) -> None:
    """Print the logs as they grow until the attempt ends (or Ctrl-C), a header whenever the file changes.

    The end is read before the files, so the last read after it sees all the attempt wrote.
    """
    shown: _Log | None = None
    last = b"\n"
    try:
        while True:
            ended = _ended(store, attempt)
            for log in logs:
                if headers and log is not shown and log.has_new():
                    out.write((b"" if shown is None else b"\n" if last == b"\n" else b"\n\n") + log.header)
                    shown = log
                last = log.copy_new(out) or last
            out.flush()
            if ended is not None:
                if ended:
                    click.echo(visible(ended), err=True)
                return
            time.sleep(POLL_SECONDS)
    except KeyboardInterrupt:
        pass  # how a follow ends early: not an error


def _ended(store: CellReads, attempt: AttemptRecord) -> str | None:
    """None while the attempt runs; "" once it ended, or what to tell when it will never end by itself."""
    from sweepq.queue import liveness

    def closed() -> bool:
        now = store.attempt(attempt.cell, attempt.number)
        return now is None or now.ended_at is not None

    if closed():
        return ""
    if liveness.for_root(store.root).owner_alive(attempt.cell):
        return None
    if closed():  # its worker closed it between the two questions
        return ""
    return (
        f"no live process owns cell {attempt.cell}: attempt {attempt.number} ended without being recorded "
        "(killed with its worker); the next launch records it"
    )
