"""What a program leaves or prints that could stop a sweep, made for real beside a healthy cell.

* A `program:` cell, and a `train:` cell, that print without end (to stdout and stderr), on a
  sweep root that lives on a small file system of its own (a tmpfs smaller than what they print):
  each log keeps its head and its tail with one line between them saying what was dropped, the
  flooding attempt is stopped once past SWEEPQ_LOG_FLOOD and ends `log_flood` (the cell `failed`:
  no retry), the healthy cell beside it finishes, and the file system never fills.
* A program that takes every free inode of the root's file system: every message says the inode
  table is full, never "disk full ... MiB free", and the worker that then cannot make a file of
  the sweep stops; the launch says which worker and why.

* A program that leaves a FIFO, a symbolic link or a folder at `$SWEEPQ_OUTCOME_FILE` and exits 0:
  its supervisor opens the path without blocking and without following it, the attempt ends
  `error` naming the bad outcome file, and the launch finishes.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import cli, cli_json, write
from unit.smallfs import SmallDisk, small_disk

from sweepq.host.logkeeper import ENV_FLOOD, ENV_KEEP

pytestmark = pytest.mark.process

LEAVER = """
import json, os, sys
kind = sys.argv[-1].split("=")[-1]
target = os.environ["SWEEPQ_OUTCOME_FILE"]
if kind == "fifo":
    os.mkfifo(target)
elif kind == "link":
    secret = os.path.join(os.environ["SWEEPQ_CELL_DIR"], "secret.json")
    with open(secret, "w") as f:
        json.dump({"reason": "completed"}, f)
    os.symlink(secret, target)
elif kind == "folder":
    os.mkdir(target)
print("left", kind, flush=True)
"""
LEAVERS = """
name: leavers
program: leaver.py
grid: {kind: [fifo, link, folder, none]}
"""


def test_a_fifo_link_or_folder_at_the_outcome_file_never_blocks_the_supervisor(tmp_path: Path) -> None:
    write(tmp_path / "leaver.py", LEAVER)
    spec = write(tmp_path / "leavers.yaml", LEAVERS)
    root = tmp_path / "runs" / "leavers"
    # A supervisor blocked opening the FIFO would hold the launch until this timeout kills it.
    r = cli("launch", str(spec), "--workers", "2", "--no-live", cwd=tmp_path, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr  # cells failed
    assert "4 cells: 1 done, 3 failed" in r.stdout, r.stdout
    cells = {c["cfg"]["kind"]: c for c in cli_json("status", "--root", str(root))}
    assert {k: c["state"] for k, c in cells.items()} == {
        "fifo": "failed",
        "link": "failed",
        "folder": "failed",
        "none": "done",
    }
    for kind, what in (("fifo", "a FIFO"), ("link", "a symbolic link"), ("folder", "a folder")):
        cell = cells[kind]["cell"]
        path = root / "cells" / cell / "attempts" / "1" / "outcome.json"
        (attempt,) = cli_json("attempts", "--cell", cell, "--root", str(root))
        assert attempt["reason"] == "error"
        assert attempt["note"] == (
            f"the outcome file {path} ($SWEEPQ_OUTCOME_FILE) is {what}, not a regular file: sweepq ignored it. "
            "A program that reports its outcome writes a JSON file there (or uses Run.from_env()); "
            "leave nothing else at that path"
        )
        shown = cli("show", cell, "--root", str(root))
        assert f"is {what}, not a regular file: sweepq ignored it." in " ".join(shown.stdout.split()), shown.stdout
    # The link's target said "completed": it was never read (the cell is not done on its word).
    assert json.loads((root / "cells" / cells["link"]["cell"] / "secret.json").read_text()) == {"reason": "completed"}
    assert os.path.islink(root / "cells" / cells["link"]["cell"] / "attempts" / "1" / "outcome.json")


KEEP = 64 << 10  # SWEEPQ_LOG_KEEP: bytes kept at each end of a log
FLOOD = 24 << 20  # SWEEPQ_LOG_FLOOD: three times the file system below
DISK = "8m"
FLOODER = """
import sys
kind = sys.argv[-1].split("=")[-1]
print("first line of", kind, flush=True)
i = 0
while kind == "flood":
    i += 1
    print(f"line {i} " + "x" * 90)
    if i % 7 == 0:
        print(f"err {i}", file=sys.stderr)
print("healthy done")
"""
FLOOD_TRAIN = """
import sys

def train(cfg, run):
    print("first line of", cfg["kind"], flush=True)
    i = 0
    while cfg["kind"] == "flood":
        i += 1
        try:
            print(f"line {i} " + "x" * 90)
            if i % 7 == 0:
                print(f"err {i}", file=sys.stderr)
        except Exception:
            pass  # a loop that swallows what its prints raise is stopped all the same
    print("healthy done")
    return {"ok": 1.0}
"""
MARKER = re.compile(
    r"^\[sweepq: \S+ \S+ dropped here \((\d+) bytes, (\d+) lines\): this log keeps its first 64\.0 KiB "
    r"and its last 64\.0 KiB \(SWEEPQ_LOG_KEEP\)\]$",
    re.M,
)
FLOOD_NOTE = (
    "printed more than 24.0 MiB to stdout.log and stderr.log (SWEEPQ_LOG_FLOOD) and was stopped: a log flood "
    "(each log keeps its first and last 64.0 KiB; its middle was dropped)"
)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallDisk]:
    with small_disk(tmp_path / "disk", DISK) as d:
        yield d


@pytest.mark.parametrize("form", ["program", "train"])
def test_a_flood_of_output_is_bounded_and_stopped_and_the_healthy_cell_finishes(
    tmp_path: Path, disk: SmallDisk, form: str
) -> None:
    write(tmp_path / "flooder.py", FLOODER)
    write(tmp_path / "flood_train.py", FLOOD_TRAIN)
    entry = "program: flooder.py" if form == "program" else "train: flood_train:train"
    spec = write(tmp_path / "flood.yaml", f"name: flood\n{entry}\nroot: disk/root\ngrid: {{kind: [flood, healthy]}}\n")
    root = disk.path / "root"
    env = {**os.environ, ENV_KEEP: str(KEEP), ENV_FLOOD: str(FLOOD)}
    r = cli("launch", str(spec), "--workers", "2", "--no-live", cwd=tmp_path, env=env, timeout=240)
    assert r.returncode == 1, r.stdout + r.stderr  # a cell failed
    assert "2 cells: 1 done, 1 failed" in r.stdout, r.stdout
    assert "disk full" not in r.stdout + r.stderr
    cells = {c["cfg"]["kind"]: c for c in cli_json("status", "--root", str(root))}
    assert (cells["flood"]["state"], cells["healthy"]["state"]) == ("failed", "done")
    flood = cells["flood"]["cell"]
    (attempt,) = cli_json("attempts", "--cell", flood, "--root", str(root))
    assert (attempt["reason"], attempt["note"]) == ("log_flood", FLOOD_NOTE)
    for command in ("status", "show", "attempts"):
        shown = cli(command, *([flood] if command == "show" else []), "--root", str(root))
        assert "log_flood" in shown.stdout, (command, shown.stdout)
    report = cli("report", "--root", str(root))
    assert "log_flood" in report.stdout, report.stdout

    received = 0
    for stream in ("stdout", "stderr"):
        log = root / "cells" / flood / "attempts" / "1" / f"{stream}.log"
        text = log.read_bytes().decode()
        (marker,) = MARKER.finditer(text)  # one line in the middle says what was dropped
        head, tail = text[: marker.start()], text[marker.end() + 1 :]
        assert len(head.encode()) <= KEEP and len(tail.encode()) <= KEEP
        assert len(head.encode()) > KEEP // 2 and len(tail.encode()) > KEEP // 2
        dropped, lines = int(marker[1]), int(marker[2])
        received += len(head.encode()) + dropped + len(tail.encode())
        assert lines > 0 and head.endswith("\n")  # cut at line ends (the tail ends where the program was stopped)
        assert tail.startswith("line " if stream == "stdout" else "err "), tail[:200]
        if stream == "stdout":
            assert "first line of flood" in head and "line 1 " in head
            numbers = [int(n) for n in re.findall(r"^line (\d+) x+$", tail, re.M)]
            assert numbers == list(range(numbers[0], numbers[-1] + 1))  # the tail is whole, in order
            assert numbers[0] > 1000
    # More than the whole file system went through the logs, which never filled it.
    assert received > FLOOD >= 3 * disk_bytes(disk)
    assert disk.free_bytes > disk_bytes(disk) // 2

    logs = cli("logs", flood, "--root", str(root))
    assert logs.returncode == 0, logs.stderr
    out = logs.stdout
    assert len(MARKER.findall(out)) == 2, out[:2000]
    assert out.index("first line of flood") < MARKER.search(out).start()  # type: ignore[union-attr]
    healthy = root / "cells" / cells["healthy"]["cell"] / "attempts" / "1" / "stdout.log"
    assert "healthy done" in healthy.read_text() and "dropped here" not in healthy.read_text()


def disk_bytes(disk: SmallDisk) -> int:
    st = os.statvfs(disk.path)
    return st.f_blocks * st.f_frsize


INODE_TAKER = """
import os, sys
kind = sys.argv[-1].split("=")[-1]
if kind == "taker" and os.environ["SWEEPQ_ATTEMPT"] == "1":
    out = os.environ["SWEEPQ_OUTPUT_DIR"]
    i = 0
    try:
        while True:
            open(os.path.join(out, str(i)), "w").close()
            i += 1
    except OSError as e:
        print(f"made {i} files, then: {e}", flush=True)
print("done", kind, flush=True)
"""


def test_an_inode_table_that_fills_is_said_as_such_and_the_launch_names_the_worker_it_stopped(
    tmp_path: Path,
) -> None:
    write(tmp_path / "taker.py", INODE_TAKER)
    spec = write(
        tmp_path / "taker.yaml",
        "name: taker\nprogram: taker.py\nroot: disk/root\n"
        "retries: {backoff_seconds: 0.5, backoff_max_seconds: 1}\ngrid: {kind: [taker, next]}\n",
    )
    with small_disk(tmp_path / "disk", "64m", inodes=200) as disk:
        root = disk.path / "root"
        r = cli("launch", str(spec), "--workers", "1", "--no-live", cwd=tmp_path, timeout=240)
        out = r.stdout + r.stderr
        st = os.statvfs(disk.path)
        full = f"no free inodes on tmpfs ({disk.path}, {st.f_files} of {st.f_files} used)"  # when it stopped
        assert disk.free_bytes > 32 << 20  # megabytes free: only inodes are missing
        assert "disk full" not in out and "MiB free" not in out, out
        assert re.search(
            rf"{re.escape(full)}: worker \S+:\d+/w1 could not write the sweep's files and stopped\. Remove some "
            r"files there \(every file takes an inode, however small; its bytes are not the problem\), then run "
            r"the same command again: each cell resumes from its last committed checkpoint\.",
            out,
        ), out
        assert r.returncode != 0, out
        for attempt in cli_json("attempts", "--root", str(root)):
            assert "MiB free" not in (attempt["note"] or ""), attempt
        shown = cli("status", "--root", str(root))
        assert f"; {full}" in " ".join(shown.stdout.split()), shown.stdout
        # Files removed: the same command finishes the sweep.
        for taken in (root / "cells" / "1.1" / "output").iterdir():
            taken.unlink()
        again = cli("launch", str(spec), "--workers", "1", "--no-live", cwd=tmp_path, timeout=240)
        assert again.returncode == 0, again.stdout + again.stderr
        assert "2 cells: 2 done" in again.stdout, again.stdout
