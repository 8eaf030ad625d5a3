"""What a program leaves or prints that could stop a sweep, made for real beside a healthy cell.

* A program that leaves a FIFO, a symbolic link or a folder at `$SWEEPQ_OUTCOME_FILE` and exits 0:
  its supervisor opens the path without blocking and without following it, the attempt ends
  `error` naming the bad outcome file, and the launch finishes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import cli, cli_json, write

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
