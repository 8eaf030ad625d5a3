"""One sweep, its queue on a real PostgreSQL server, run from two roots at once (two machines' folders).

The sweep file names the database (`database:`); each launch records it in its own root, and the two
roots share nothing but the server: no queue file, no lock, no folder. Every cell is trained once
(a second writer would raise "two writers" in the training code, trainers.py), every cell's
attempt is fenced by a lease, and the read commands answer from either root.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import cli_json, start, wait_for, write

SPEC = """
name: shared
train: trainers:train
database: '{url}'
lease: {{renew_seconds: 1, expire_seconds: 5}}
params: {{steps: 30, delay: 0.05}}
checkpoint: {{every_steps: 10}}
groups:
  - name: a
    grid: {{seed: [1, 2, 3, 4, 5, 6, 7, 8]}}
"""


def test_two_roots_on_one_server_run_one_sweep_without_overlap(sweep_dir: Path, postgres_url: str) -> None:
    spec = write(sweep_dir / "shared.yaml", SPEC.format(url=postgres_url))
    roots = [sweep_dir / "machine-a", sweep_dir / "machine-b"]
    first = start("launch", str(spec), "--root", str(roots[0]), "--workers", "2", "--no-live", cwd=sweep_dir)
    wait_for(lambda: (roots[0] / "database.json").exists() or first.poll() is not None, what="the first root")
    second = start("launch", str(spec), "--root", str(roots[1]), "--workers", "2", "--no-live", cwd=sweep_dir)
    outputs = [p.communicate(timeout=300)[0] for p in (first, second)]
    assert [p.returncode for p in (first, second)] == [0, 0], "\n".join(outputs)

    for root in roots:  # the queue is on the server: neither root holds a database file
        assert not (root / "sweepq.db").exists()
        assert json.loads((root / "database.json").read_text())["sweep"] == "shared"
    receipts = cli_json("attempts", "--root", str(roots[1]))
    assert sorted(a["cell"] for a in receipts) == [f"1.{i}" for i in range(1, 9)]  # each cell once
    assert {a["reason"] for a in receipts} == {"completed"}
    done = [{p.parent.name for p in (root / "cells").glob("*/DONE.json")} for root in roots]
    assert done[0] | done[1] == {f"1.{i}" for i in range(1, 9)} and not done[0] & done[1], done  # no cell twice
    for root in roots:
        status = cli_json("status", "--root", str(root))
        assert [c["state"] for c in status] == ["done"] * 8


def test_a_worker_joins_from_another_root_with_the_servers_url_and_the_sweeps_name(
    sweep_dir: Path, postgres_url: str
) -> None:
    spec = write(sweep_dir / "shared.yaml", SPEC.format(url=postgres_url))
    roots = [sweep_dir / "machine-a", sweep_dir / "machine-b"]
    launch = start("launch", str(spec), "--root", str(roots[0]), "--workers", "1", "--no-live", cwd=sweep_dir)
    wait_for(lambda: launch.poll() is not None or _listed(roots[0]), what="the sweep's cells on the server")
    joined = start(
        "worker", "--root", str(roots[1]), "--database", postgres_url, "--sweep", "shared", "--name", "b", cwd=sweep_dir
    )
    outputs = [p.communicate(timeout=300)[0] for p in (launch, joined)]
    assert [p.returncode for p in (launch, joined)] == [0, 0], "\n".join(outputs)
    assert json.loads((roots[1] / "database.json").read_text())["sweep"] == "shared"
    done = [{p.parent.name for p in (root / "cells").glob("*/DONE.json")} for root in roots]
    assert done[0] | done[1] == {f"1.{i}" for i in range(1, 9)} and not done[0] & done[1], done
    receipts = cli_json("attempts", "--root", str(roots[1]))
    assert sorted(a["cell"] for a in receipts) == [f"1.{i}" for i in range(1, 9)]
    assert {a["worker"] for a in receipts if a["cell"] in done[1]} <= {"b"}


def _listed(root: Path) -> bool:
    try:
        return len(cli_json("status", "--root", str(root))) == 8
    except Exception:
        return False
