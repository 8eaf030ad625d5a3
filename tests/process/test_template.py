"""Attempts forked from the worker's template process are what a fresh interpreter would be.

Real workers, real forks: each cell's train records what its process looks like (parent,
session, descriptors, random generators, the module version it runs, where its prints go);
the receipts say how each attempt started. A module edited between two cells is run in its new
version; a module that starts a thread on import, and `start: fresh`, start fresh interpreters.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from conftest import cli, write

import sweepq.attempt

PROBE = """
import json
import os
import socket
import sys
from pathlib import Path

import numpy
import torch

VERSION = 1


def train(cfg, run):
    lock = int(os.environ["SWEEPQ_LOCK_FD"])
    channel = socket.socket(fileno=os.dup(int(os.environ["SWEEPQ_CHANNEL_FD"])))
    seen = {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "sid": os.getsid(0),
        "numpy": float(numpy.random.rand()),
        "torch_seed": torch.initial_seed(),
        "torch_first": float(torch.rand(1)),
        "version": VERSION,
        "lock_is_cell": os.path.samestat(os.fstat(lock), os.stat(Path(run.root) / "cells" / run.cell)),
        "channel_type": channel.type == socket.SOCK_SEQPACKET,
        "stdin": os.read(0, 10).decode(),
        "cwd": os.getcwd(),
        "argv": sys.argv[1:],
        "argv0": sys.argv[0],
        # As ps shows it: a fork's title is rewritten in place over the template's, padded with blanks.
        "cmdline": Path("/proc/self/cmdline").read_bytes().replace(b"\\0", b" ").decode().split(),
        "cuda_initialised": torch.cuda.is_initialized(),
    }
    channel.detach()
    Path(f"seen-{run.cell}.json").write_text(json.dumps(seen))
    print(f"hello from {run.cell}", flush=True)
    if cfg["edit"] == 1:  # the next cell must run the new version
        me = Path(__file__)
        me.write_text(me.read_text().replace("VERSION = 1", "VERSION = 2  # edited"))
"""
THREADED = """
import threading
import time

threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()


def train(cfg, run):
    return None
"""
SPEC = """
name: {name}
train: {module}:train
root: runs/{name}
{extra}
groups:
  - name: a
    grid: {{edit: {edits}}}
"""


def launch(folder: Path, name: str, module: str, edits: list[int], extra: str = "") -> tuple[Path, str]:
    spec = write(folder / f"{name}.yaml", SPEC.format(name=name, module=module, extra=extra, edits=json.dumps(edits)))
    r = cli("launch", str(spec), "--workers", "1", cwd=folder)
    assert r.returncode == 0, r.stdout + r.stderr
    return folder / "runs" / name, r.stdout + r.stderr


def receipt(root: Path, cell: str) -> dict[str, Any]:
    return json.loads((root / "cells" / cell / "attempts" / "1" / "receipt.json").read_text())


def seen(folder: Path, cell: str) -> dict[str, Any]:
    return json.loads((folder / f"seen-{cell}.json").read_text())


def test_forked_attempts_are_fresh_processes_and_run_the_code_on_disk(sweep_dir: Path) -> None:
    write(sweep_dir / "probe.py", PROBE)
    root, _ = launch(sweep_dir, "forked", "probe", [0, 1, 2])
    cells = ["1.1", "1.2", "1.3"]
    assert [receipt(root, c)["reason"] for c in cells] == ["completed"] * 3
    assert [receipt(root, c)["started_by"] for c in cells] == ["template"] * 3
    worker = json.loads((root / "cells" / "1.1" / "attempts" / "1" / "attempt.json").read_text())["worker_pid"]
    for c in cells:
        s = seen(sweep_dir, c)
        assert s["ppid"] == worker and s["sid"] == s["pid"]  # the worker's child, in its own session
        assert s["lock_is_cell"] and s["channel_type"] and s["stdin"] == ""
        assert s["cwd"] == str(sweep_dir) and s["argv"] == [str(root / "cells" / c / "attempts" / "1" / "attempt.json")]
        assert not s["cuda_initialised"]
        assert s["cmdline"] == [sys.executable, "-m", "sweepq.attempt", *s["argv"]]  # the entry a fresh one runs
        assert s["argv0"] == str(Path(sweepq.attempt.__file__).with_name("__main__.py"))
        assert (root / "cells" / c / "attempts" / "1" / "stdout.log").read_text() == f"hello from {c}\n"
    forks = [seen(sweep_dir, c) for c in cells]
    for generator in ("numpy", "torch_seed", "torch_first"):  # reseeded from the OS in each fork
        assert len({seen(sweep_dir, c)[generator] for c in cells}) == 3, generator
    assert [seen(sweep_dir, c)["version"] for c in cells] == [1, 1, 2]  # 1.2 edited the module: 1.3 runs it

    # The same module in fresh interpreters: what the forks' checks above compare against.
    write(sweep_dir / "probe.py", PROBE)
    fresh_root, _ = launch(sweep_dir, "fresh", "probe", [0], extra="start: fresh")
    assert receipt(fresh_root, "1.1")["started_by"] == "interpreter"
    fresh = seen(sweep_dir, "1.1")
    fresh_worker = json.loads((fresh_root / "cells" / "1.1" / "attempts" / "1" / "attempt.json").read_text())
    assert fresh["ppid"] == fresh_worker["worker_pid"] and fresh["sid"] == fresh["pid"]
    assert fresh["cmdline"] == [sys.executable, "-m", "sweepq.attempt", *fresh["argv"]]
    assert fresh["argv0"] == forks[0]["argv0"]
    assert fresh["torch_seed"] not in {seen_before["torch_seed"] for seen_before in forks}


def test_a_module_that_starts_a_thread_on_import_gets_fresh_interpreters(sweep_dir: Path) -> None:
    write(sweep_dir / "threaded.py", THREADED)
    root, _ = launch(sweep_dir, "threaded", "threaded", [0, 1])
    assert [receipt(root, c)["started_by"] for c in ("1.1", "1.2")] == ["interpreter", "interpreter"]
    log = "".join(p.read_text() for p in (root / ".sweepq" / "logs").glob("worker-*.log"))  # the worker says why
    assert "each attempt starts a fresh interpreter: importing threaded:train started a Python thread" in log, log
