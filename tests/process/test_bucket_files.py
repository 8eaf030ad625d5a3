"""A cell's files outlive its machine: DONE.json, receipts, history and logs read from the bucket alone.

Machine A (its own root) trains with the queue on a real PostgreSQL server and the storage an S3
bucket (moto's server on the loopback); it finishes cell 1.1, is SIGKILLed (every process of it)
while it trains 1.2, and its whole root folder is deleted. Machine B (another root) joins with
`sweepq worker --database URL --sweep NAME` and finishes the sweep: 1.1 stays done with its one
attempt. Then `show`, `logs`, `plot`, `report --html` and `export csv` run from a
third folder (`--database URL --sweep NAME`: a folder of the command's own) and show A's attempt
of 1.1: its DONE.json and receipt, the lines it printed, every point it logged. The lost attempt of
1.2 left what it shipped while it ran (its first log lines) in the bucket too. A relaunch from the
third folder trains nothing again: every DONE.json is read from the bucket.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import cli, env_with, start, wait_for, wait_gone, write
from pg_machines import attempts, cell_states, machine_processes
from services.s3 import S3Server

PREFIX = "sweeps/shared"
SPEC = """
name: shared
train: printing:train
database: '{url}'
storage: 's3://{bucket}/{prefix}'
lease: {{renew_seconds: 1, expire_seconds: 5}}
params: {{delay: 0.05}}
checkpoint: {{every_steps: 10}}
groups:
  - name: a
    grid: {{seed: [1, 2, 3], steps: [{steps}]}}
"""
# A's first cell is short; the next one still trains when A is killed.
STEPS = 12

PRINTING = """
import trainers


def train(cfg, run):
    print(f"printing: seed {cfg['seed']} attempt {run.attempt} starts", flush=True)
    if cfg["seed"] != 1:
        cfg = {**cfg, "steps": 400}  # long enough to be trained when machine A dies
    result = trainers.train(cfg, run)
    print(f"printing: seed {cfg['seed']} attempt {run.attempt} ends", flush=True)
    return result
"""


def _object(server: S3Server, bucket: str, key: str) -> Any:
    return json.loads(server.client().get_object(Bucket=bucket, Key=f"{PREFIX}/{key}")["Body"].read())


def _keys(server: S3Server, bucket: str, prefix: str) -> list[str]:
    listed = server.client().list_objects_v2(Bucket=bucket, Prefix=f"{PREFIX}/{prefix}")
    return [o["Key"][len(PREFIX) + 1 :] for o in listed.get("Contents", ())]


@pytest.mark.slow
def test_a_dead_machines_cell_is_read_from_the_bucket_from_a_third_folder(
    sweep_dir: Path, postgres_url: str, s3_server: S3Server, s3_bucket: str
) -> None:
    write(sweep_dir / "printing.py", PRINTING)
    spec = write(sweep_dir / "shared.yaml", SPEC.format(url=postgres_url, bucket=s3_bucket, prefix=PREFIX, steps=STEPS))
    env = env_with(**s3_server.env(), COLUMNS="400")
    roots = [sweep_dir / "machine-a", sweep_dir / "machine-b"]

    a = start("launch", str(spec), "--root", str(roots[0]), "--workers", "1", "--no-live", cwd=sweep_dir, env=env)

    def a_trains_the_second() -> bool:
        assert a.poll() is None, a.communicate()[0]
        try:
            states = cell_states(postgres_url, "shared")
        except Exception:  # psycopg's UndefinedTable: the launch has not made the sweep's tables yet
            return False
        if states.get("1.1") != "done" or states.get("1.2") != "running":
            return False
        # 1.2's first lines shipped (a round every few seconds): what its machine leaves behind.
        return any(k.startswith("cells/1.2/attempts/1/stdout.log") for k in _keys(s3_server, s3_bucket, "cells/1.2/"))

    wait_for(a_trains_the_second, what="machine A done with 1.1 and training 1.2, its logs shipped")
    gone = [p.pid for p in machine_processes([a.pid])]
    for pid in gone:  # the machine is gone: nothing of it says goodbye
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    wait_gone(gone)
    a.communicate()
    shutil.rmtree(roots[0])  # its disk with it

    # Machine B joins by the server's URL and the sweep's name, and works until the sweep is settled.
    b = start(
        "worker", "--root", str(roots[1]), "--database", postgres_url, "--sweep", "shared", cwd=sweep_dir, env=env
    )
    try:
        out = b.communicate(timeout=600)[0]  # A's lease ends (5 s), then B resumes 1.2 and trains 1.3
    except subprocess.TimeoutExpired:
        b.kill()
        raise AssertionError(
            f"machine B did not finish: {cell_states(postgres_url, 'shared')}\n{b.communicate()[0]}"
        ) from None
    assert b.returncode == 0, out
    assert set(cell_states(postgres_url, "shared").values()) == {"done"}
    rows = attempts(postgres_url, "shared")
    only_a = [r for r in rows if r["cell_id"] == "1.1"]
    assert [(r["number"], r["reason"]) for r in only_a] == [(1, "completed")], rows  # never requeued by B
    assert not (roots[1] / "cells/1.1/attempts/1").exists()  # B never trained it

    # What the bucket holds of A's cell: its marker (also as its attempt's own), its receipt.
    done = _object(s3_server, s3_bucket, "cells/1.1/DONE.json")
    assert (done["cell"], done["attempt"]) == ("1.1", 1)
    assert _object(s3_server, s3_bucket, "cells/1.1/attempts/1/DONE.json") == done
    receipt = _object(s3_server, s3_bucket, "cells/1.1/attempts/1/receipt.json")
    assert receipt["reason"] == "completed"
    assert receipt["usage"]["samples"] >= 1  # what only its worker saw, added after the attempt put it

    third = sweep_dir / "third"
    third.mkdir()
    where = ["--database", postgres_url, "--sweep", "shared"]

    shown = cli("show", "1.1", *where, "--json", cwd=third, env=env)
    assert shown.returncode == 0, shown.stderr
    cell = json.loads(shown.stdout)
    assert cell["done"] is not None and cell["done"]["attempt"] == 1 and cell["done"]["metrics"] == done["metrics"]
    assert [a["reason"] for a in cell["attempts"]] == ["completed"]

    logs = cli("logs", "1.1", *where, "--stdout", cwd=third, env=env)
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout.splitlines() == ["printing: seed 1 attempt 1 starts", "printing: seed 1 attempt 1 ends"]
    lost = cli("logs", "1.2", *where, "--attempt", "1", "--stdout", cwd=third, env=env)
    assert lost.returncode == 0, lost.stderr
    assert lost.stdout.splitlines()[0] == "printing: seed 2 attempt 1 starts"  # shipped while A lived

    exported = cli("export", "csv", str(third / "csv"), *where, "--cell", "1.1", cwd=third, env=env)
    assert exported.returncode == 0, exported.stderr
    with open(third / "csv" / "metrics.csv", newline="") as f:
        points = [r for r in csv.DictReader(f) if r["cell"] == "1.1"]
    assert sorted(int(r["step"]) for r in points) == list(range(1, STEPS + 1))  # every point A logged
    assert {r["attempt"] for r in points} == {"1"}

    plotted = cli("plot", *where, "--cells", "1.1", "-o", str(third / "curve.svg"), cwd=third, env=env)
    assert plotted.returncode == 0, plotted.stderr
    assert f"1 cells, {STEPS} points drawn" in plotted.stdout, plotted.stdout

    page = third / "report.html"
    reported = cli("report", *where, "--html", str(page), cwd=third, env=env)
    assert reported.returncode == 0, reported.stderr
    assert "3 cells, 1 metric chart(s)" in reported.stdout, reported.stdout
    assert "No metric history" not in page.read_text()

    # A relaunch from the third folder (a root of its own): every cell's DONE.json is read from the
    # bucket, none is requeued, nothing is trained again.
    relaunched = cli(
        "launch", str(spec), "--root", str(third / "root"), "--workers", "1", "--no-live", cwd=third, env=env
    )
    assert relaunched.returncode == 0, relaunched.stdout + relaunched.stderr
    assert attempts(postgres_url, "shared") == rows
    assert set(cell_states(postgres_url, "shared").values()) == {"done"}
