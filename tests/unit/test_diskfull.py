"""A full disk is the machine's fault: told apart, named, and recorded, on a real small file system."""

from __future__ import annotations

import errno
import io
import os
import re
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy.exc import OperationalError

from sweepq.checkpoint.commit import AsyncWriter
from sweepq.evidence import Kind
from sweepq.host import diskfull
from sweepq.layout import CellPaths
from sweepq.queue.reaper import reap
from sweepq.queue.states import CellState
from sweepq.queue.store import Store
from sweepq.run.errors import raised
from sweepq.spec.sweep import Sweep
from sweepq.wire.attempt_spec import ENV_ATTEMPT_FILE
from unit.smallfs import SmallDisk, small_disk
from unit.support import T0, WORKER, Launch


@pytest.fixture
def disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SmallDisk]:
    with small_disk(tmp_path / "fs", "1m") as d:
        # As in a training process: a write's error names no file, so the words name the disk of the
        # attempt's folder (found through its attempt file).
        monkeypatch.setenv(ENV_ATTEMPT_FILE, str(d.path / "cells" / "1.1" / "attempts" / "1" / "attempt.json"))
        yield d


def full_write(path: Path) -> OSError:
    """What writing a file on a full disk raises."""
    try:
        with open(path, "wb", buffering=0) as f:
            f.write(b"x" * 8192)
    except OSError as e:
        return e
    raise AssertionError("the write succeeded: the disk is not full")


def test_a_write_on_a_full_disk_is_disk_full_and_names_the_disk(disk: SmallDisk) -> None:
    disk.fill()
    e = full_write(disk.path / "state.bin")
    assert e.errno == errno.ENOSPC
    r = raised(e)
    assert r.kind is Kind.DISK_FULL
    assert r.disk == f"disk full on tmpfs ({disk.path}, 0 B free)"
    assert "No space left on device" in r.tail


def test_wrapped_errors_are_disk_full_too(disk: SmallDisk) -> None:
    disk.fill()
    e = full_write(disk.path / "state.bin")
    try:
        raise RuntimeError("safetensors: failed to write") from e  # a library's error with it as the cause
    except RuntimeError as wrapped:
        assert raised(wrapped).kind is Kind.DISK_FULL
    try:
        try:
            raise e
        except OSError:
            raise ValueError("while saving") from None  # suppressed but kept as __context__
    except ValueError as later:
        assert later.__context__ is e and raised(later).kind is Kind.DISK_FULL
    # A library that kept only the words: Rust's io::Error, as safetensors says it.
    said = raised(RuntimeError("Error while serializing: IoError(No space left on device (os error 28))"))
    assert said.kind is Kind.DISK_FULL and (said.disk or "").startswith("disk full on ")


def test_an_error_of_the_checkpoint_writer_thread_surfaces_as_disk_full(disk: SmallDisk) -> None:
    disk.fill()
    writer = AsyncWriter()
    writer.submit(lambda: _write_tensors(disk.path / "tensors.safetensors"))
    with pytest.raises(OSError) as info:
        writer.flush()  # the thread's error, raised in the training loop
    r = raised(info.value)
    assert (r.kind, r.disk) == (Kind.DISK_FULL, f"disk full on tmpfs ({disk.path}, 0 B free)")


def _write_tensors(path: Path) -> None:
    fd = os.open(path, os.O_CREAT | os.O_WRONLY)
    try:
        os.write(fd, b"\0" * 8192)
    finally:
        os.close(fd)


def test_other_os_errors_are_not_disk_full(tmp_path: Path) -> None:
    assert raised(PermissionError(errno.EACCES, "Permission denied", str(tmp_path))).kind is Kind.OTHER
    assert raised(FileNotFoundError(errno.ENOENT, "No such file")).kind is Kind.OTHER
    assert raised(ValueError("bug")).kind is Kind.OTHER


def test_a_read_only_remount_is_disk_full_in_its_own_words(disk: SmallDisk) -> None:
    disk.remount("ro")
    try:
        e = full_write(disk.path / "x")
    finally:
        disk.remount("rw")
    assert e.errno == errno.EROFS
    r = raised(e)
    assert r.kind is Kind.DISK_FULL and re.fullmatch(
        rf"disk read-only on tmpfs \({disk.path}, 1\.0 MiB free\)", r.disk or ""
    )


def test_a_full_database_is_told_apart(disk: SmallDisk, sweep: Sweep, launch: Launch) -> None:
    store = launch(disk.path / "root", sweep)
    disk.fill()
    with pytest.raises(OperationalError) as info:
        store.claim("1.1", WORKER)  # SQLite: database or disk is full
    path = store.database.path
    assert diskfull.database_full(info.value, path) == f"disk full on tmpfs ({disk.path}, 0 B free)"
    assert diskfull.database_full(ValueError("database or disk is full"), path) is None  # not SQLite's
    disk.free()
    assert store.claim("1.1", WORKER) is not None  # nothing was half-written


def test_the_reserve_makes_room_for_the_receipt(disk: SmallDisk, capsys: pytest.CaptureFixture[str]) -> None:
    kept = diskfull.Reserve.beside(disk.path / "receipt.json")
    disk.fill()
    assert diskfull.write_receipt(disk.path / "receipt.json", {"reason": "disk_full"}, kept)
    assert (disk.path / "receipt.json").read_text().startswith("{")
    assert not kept.path.exists() and disk.free_bytes > 0  # what is left is the worker's, for the database
    disk.fill()
    none = diskfull.Reserve.beside(disk.path / "other.json")  # no room to reserve: nothing held
    assert not none.path.exists()
    assert not diskfull.write_receipt(disk.path / "other.json", {"reason": "disk_full"}, none)  # said, not raised
    assert f"could not be written: disk full on tmpfs ({disk.path}, 0 B free)" in capsys.readouterr().err


def test_guarded_streams_drop_what_a_full_disk_refuses(disk: SmallDisk, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open(disk.path / "stderr.log", "w", buffering=1)  # noqa: SIM115 (closed below)
    monkeypatch.setattr(sys, "stderr", log)
    disk.fill()
    with pytest.raises(OSError):
        print("x" * 8192, file=sys.stderr)  # unguarded: a print on the way out raises
    diskfull.guard_streams()
    print("y" * 8192, file=sys.stderr)  # dropped
    sys.stderr.flush()
    buffer = io.StringIO()
    monkeypatch.setattr(sys, "stderr", buffer)
    diskfull.guard_streams()
    print("kept", file=sys.stderr)
    assert buffer.getvalue() == "kept\n"  # other writes pass through
    try:
        log.close()
    except OSError:
        pass


def test_the_reaper_reads_a_receipt_that_says_disk_full(store: Store) -> None:
    """A worker whose database filled up leaves the receipt as the account: recorded, never `lost`."""
    store.claim("1.1", WORKER)
    paths = CellPaths(store.root, "1.1")
    paths.attempt_dir(1).mkdir(parents=True, exist_ok=True)
    paths.receipt(1).write_text(
        '{"reason": "disk_full", "note": "disk full on tmpfs (/mnt/x, 0 B free)", "end_step": 5}'
    )
    assert reap(store) == [("1.1", "disk_full")]
    cell, attempt = store.cell("1.1"), store.attempt("1.1", 1)
    assert cell.state is CellState.INTERRUPTED and cell.retry_after == T0 + timedelta(seconds=30)
    assert attempt is not None and attempt.note == "disk full on tmpfs (/mnt/x, 0 B free); closed from its receipt file"
    assert store.fault_notes() == {"1.1": attempt.note}


def test_a_command_that_meets_a_full_disk_says_so_in_one_paragraph_and_exits_2(
    disk: SmallDisk, sweep: Sweep, launch: Launch
) -> None:
    """A steering command (a short write to the queue) on a root whose disk is full: no traceback."""
    from click.testing import CliRunner

    from sweepq.cli.main import main

    root = disk.path / "root"
    launch(root, sweep).close()
    disk.fill()
    result = CliRunner().invoke(main, ["reset", "1.*", "--root", str(root)])
    assert result.exit_code == 2, result.output
    assert "disk full on tmpfs" in result.output and "run the same command again" in result.output
    assert "Traceback" not in result.output


# -- an inode table that is full: bytes free, no file can be made ------------------------------------------


@pytest.fixture
def few_inodes(tmp_path: Path) -> Iterator[SmallDisk]:
    with small_disk(tmp_path / "fs", "8m", inodes=64) as d:
        yield d


def test_an_inode_table_that_is_full_is_said_as_such_never_as_a_full_disk(few_inodes: SmallDisk) -> None:
    made = few_inodes.fill_inodes()
    assert made > 0 and few_inodes.free_bytes > 4 << 20  # megabytes free: bytes are not what is missing
    try:
        open(few_inodes.path / "one-more", "w").close()
    except OSError as e:
        error = e
    else:
        raise AssertionError("a file was made: the inode table is not full")
    assert error.errno == errno.ENOSPC
    st = os.statvfs(few_inodes.path)
    words = f"no free inodes on tmpfs ({few_inodes.path}, {st.f_files - st.f_ffree} of {st.f_files} used)"
    assert st.f_files == 64 and st.f_files - st.f_ffree == 64
    assert raised(error).disk == words  # what a receipt, status, show and attempts say
    assert diskfull.describe(errno.ENOSPC, few_inodes.path) == words
    assert diskfull.disk_state(few_inodes.path) == errno.ENOSPC
    assert diskfull.worker_disk_error(error, few_inodes.path) == (words, f"{error.filename} could not be written")
    assert diskfull.workers_stopped(few_inodes.path / "sweepq.db", ["vm:1/w2"]) == (
        f"{words}: worker vm:1/w2 could not write the sweep's files and stopped. Remove some files there (every "
        "file takes an inode, however small; its bytes are not the problem), then run the same command again: "
        "each cell resumes from its last committed checkpoint."
    )
    few_inodes.free_inodes_back()
    assert diskfull.disk_state(few_inodes.path) is None
