"""The database server paused (SIGSTOP of the postmaster and every backend) for 20 s under a 30 s lease.

Issue 31's figure: a database outage shorter than the lease must not turn into a reclaim. Two cells
train on machine A; machine B's worker has nothing to claim and reaps every half second, so any
lease that looked expired after the thaw would be taken at once. The server is stopped while both
cells train and continued 20 s later: no attempt is `lost`, each cell is trained by one attempt from
step 0 to its end with the uninterrupted run's result, and training went on while the server was
stopped (points logged in that window, by their recorded times).

A pause longer than the lease is an outage the lease cannot ride out: each holder finds its lease
expired at the thaw, stops writing and says so, and its attempt ends `lost` (or `preempted`, when its
worker's stop came first): the queue's loss, retried from the last checkpoint, never the training
code's error that would fail the cell for good.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import start, wait_for, write
from pg_machines import attempts, cell_states, expected_w_sum, logged_times, overlaps, paused, server_processes
from services.postgres import PostgresServer

from sweepq.layout import CellPaths

PAUSE_S = 20.0  # the figure, under the lease (30 s, renewed every 5 s)
STEPS = 60

SPEC = """
name: paused
train: trainers:train
database: '{url}'
lease: {{renew_seconds: 5, expire_seconds: 30}}
params: {{steps: {steps}, delay: 0.5}}
checkpoint: {{every_steps: 10}}
grid: {{seed: [1, 2]}}
"""


@pytest.mark.slow
def test_a_server_paused_for_20_s_reclaims_nothing_and_training_goes_on(
    sweep_dir: Path, postgres_server: PostgresServer
) -> None:
    url = postgres_server.create_database()
    spec = write(sweep_dir / "paused.yaml", SPEC.format(url=url, steps=STEPS))
    a_root, b_root = sweep_dir / "machine-a", sweep_dir / "machine-b"
    a = start("launch", str(spec), "--root", str(a_root), "--workers", "2", "--no-live", cwd=sweep_dir)
    cells = [CellPaths(a_root, c) for c in ("1.1", "1.2")]
    wait_for(lambda: all(c.committed_steps() for c in cells) or a.poll() is not None, what="both cells training")
    assert a.poll() is None, a.communicate()[0]
    # B: a worker with nothing to claim (both cells run on A), reaping every half second.
    b = start("worker", "--root", str(b_root), "--database", url, "--sweep", "paused", "--name", "b", cwd=sweep_dir)

    with paused(server_processes(postgres_server)):
        stopped_at = time.time()
        time.sleep(PAUSE_S)
        thawed_at = time.time()
    outputs = [p.communicate(timeout=300)[0] for p in (a, b)]
    assert [a.returncode, b.returncode] == [0, 0], "\n".join(outputs)

    rows = attempts(url, "paused")
    assert [(r["cell_id"], r["number"], r["reason"]) for r in rows] == [
        ("1.1", 1, "completed"),
        ("1.2", 1, "completed"),
    ], rows  # 0 reclaimed: no `lost`, no second attempt
    assert cell_states(url, "paused") == {"1.1": "done", "1.2": "done"}
    for r in rows:
        assert r["start_step"] == 0 and r["end_step"] == STEPS, r
        # Each ran across the whole pause: started before it, ended after it.
        assert r["started_at"].timestamp() < stopped_at and r["ended_at"].timestamp() > thawed_at, r
    for seed, cell in zip((1, 2), cells, strict=True):
        done = json.loads(cell.done.read_text())
        assert done["attempt"] == 1 and done["metrics"]["w_sum"] == expected_w_sum(seed, STEPS), done
        during = [step for step, at in logged_times(cell.metrics(1)) if stopped_at < at < thawed_at]
        assert during, f"cell {cell.cell_id} logged nothing while the server was stopped"
    assert "no longer this worker's" not in "\n".join(outputs)


LAPSING = """
name: lapsed
train: trainers:train
database: '{url}'
lease: {{renew_seconds: 1, expire_seconds: {expire}}}
params: {{steps: {steps}, delay: 0.2}}
checkpoint: {{every_steps: 10}}
grid: {{seed: [1, 2]}}
"""


@pytest.mark.slow
def test_a_pause_longer_than_the_lease_loses_attempts_never_cells(
    sweep_dir: Path, postgres_server: PostgresServer
) -> None:
    expire = 5
    url = postgres_server.create_database()
    spec = write(sweep_dir / "lapsed.yaml", LAPSING.format(url=url, steps=STEPS, expire=expire))
    root = sweep_dir / "machine-a"
    a = start("launch", str(spec), "--root", str(root), "--workers", "2", "--no-live", cwd=sweep_dir)
    cells = [CellPaths(root, c) for c in ("1.1", "1.2")]
    wait_for(lambda: all(c.committed_steps() for c in cells) or a.poll() is not None, what="both cells training")
    assert a.poll() is None, a.communicate()[0]
    with paused(server_processes(postgres_server)):
        time.sleep(2 * expire)  # every lease lapses, whenever it was last renewed
    out = a.communicate(timeout=300)[0]
    assert a.returncode == 0, out

    assert cell_states(url, "lapsed") == {"1.1": "done", "1.2": "done"}
    by_cell: dict[str, list[dict]] = {}
    for r in attempts(url, "lapsed"):
        by_cell.setdefault(r["cell_id"], []).append(r)
    for seed, cell in zip((1, 2), cells, strict=True):
        first, *rest = by_cell[cell.cell_id]
        assert first["reason"] in ("lost", "preempted"), first  # never `error`: the cell is not failed
        assert rest and rest[-1]["reason"] == "completed", by_cell
        assert 0 < rest[0]["start_step"] <= first["end_step"], by_cell  # resumed from a checkpoint
        done = json.loads(cell.done.read_text())
        assert done["attempt"] == rest[-1]["number"] and done["metrics"]["w_sum"] == expected_w_sum(seed, STEPS)
    logs = "".join(p.read_text() for p in (root / ".sweepq" / "logs").glob("worker-*.log"))
    assert "is no longer this worker's: its lease expired" in logs, logs  # each holder said so
    assert not overlaps(attempts(url, "lapsed"))
