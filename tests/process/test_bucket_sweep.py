"""Nothing on a machine's disk: a sweep whose queue is on PostgreSQL and whose checkpoints are in a bucket
survives the loss of the machine that trained it, folder and all.

Machine A (root A) trains a small real torch sweep (`database:` on the server, `storage: s3://...` on
moto's server): two cells are held at a gate once each has committed two checkpoints, then every
process of A is killed with SIGKILL and root A is deleted. The newest checkpoint of one cell is damaged
in the bucket (a put of altered bytes over one of its data objects). Machine B (root B, nothing shared
with A but the server and the bucket) joins the sweep with `sweepq worker --database URL --sweep NAME`
and finishes every cell: the damaged step refused and moved aside, the step before it used, and every
cell's final weights and optimizer state equal, bit for bit, those of the same sweep run without
interruption.

The helpers that build and run the sweep (`Bucket`, `write_sweep`, `machine_a_killed`, `finish_on`,
`final_state`) are importable for the tests that check what else the bucket keeps.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch
from conftest import start, wait_for, write
from pg_machines import attempts, cell_states, events, machine_processes

from sweepq.checkpoint import commit, storage, storage_url
from sweepq.checkpoint.s3 import META_DATA
from sweepq.layout import CellPaths

SWEEP = "bucket"
CELLS = [f"1.{i}" for i in range(1, 5)]
STEPS, EVERY = 40, 10
HELD_AT = 2 * EVERY  # A's cells wait here (their second checkpoint committed) until the gate goes
GATE_ENV = "SWEEPQ_TEST_GATE"

# A small real model: an MLP fitted by SGD with momentum to a function of its inputs, each step's batch
# drawn from a generator seeded by the cell's seed and the step, so a resumed cell sees the batches an
# uninterrupted one would. Held at step HELD_AT while the gate file of $SWEEPQ_TEST_GATE exists.
TRAINER = f'''
"""The bucket tests' trainer (tests/process/test_bucket_sweep.py)."""

import os
import time
from pathlib import Path

import torch

import sweepq


def train(cfg, run):
    seed = int(cfg["seed"])
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=float(cfg["lr"]), momentum=0.9)
    state = {{"model": model, "optimizer": opt, "step": 0}}
    run.restore(state)
    steps = int(cfg["steps"])
    run.set_total(steps)
    gate = os.environ.get("{GATE_ENV}")
    while state["step"] < steps:
        step = state["step"] + 1
        batch = torch.Generator().manual_seed(seed * 100003 + step)
        x = torch.randn(32, 4, generator=batch)
        y = torch.sin(x.sum(dim=1, keepdim=True))
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        state["step"] = step
        run.log(step, loss=float(loss))
        time.sleep(float(cfg.get("delay", 0.0)))
        if run.should_stop:
            run.checkpoint(state, step, force=True)
            return None
        run.checkpoint(state, step)
        if gate and step == {HELD_AT} and Path(gate).exists():
            Path(f"{{gate}}.{{run.cell}}").touch()
            while Path(gate).exists():
                time.sleep(0.05)
    return {{"loss": float(loss)}}
'''

SPEC = """
name: {name}
train: bucket_trainer:train
root: runs/{name}
{servers}
params: {{steps: {steps}, lr: 0.05, delay: 0.01}}
checkpoint: {{every_steps: {every}, keep_last: 3}}
retries: {{lost: 3}}
groups:
  - name: fit
    grid: {{seed: [1, 2, 3, 4]}}
"""


@dataclass(frozen=True)
class Bucket:
    """The sweep's bucket on moto's server: its storage URL and the environment its processes need."""

    url: str
    env: Mapping[str, str]  # AWS_ENDPOINT_URL, credentials, region
    client: Any

    def key(self, cell: str, *rest: str) -> str:
        """The key of a name in `cell`'s checkpoints (the root's layout under the prefix)."""
        prefix = self.url.removeprefix("s3://").partition("/")[2].strip("/")
        return "/".join([*([prefix] if prefix else []), "cells", cell, "checkpoints", *rest])

    @property
    def name(self) -> str:
        return self.url.removeprefix("s3://").split("/", 1)[0]

    def committed(self, cell: str, step: int) -> bool:
        found = self.client.list_objects_v2(Bucket=self.name, Prefix=self.key(cell, f"step-{step}/"))
        return found.get("KeyCount", 0) > 0

    def keys(self, cell: str, under: str) -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.name, Prefix=self.key(cell, under))
        return [o["Key"] for page in pages for o in page.get("Contents", ())]


def write_sweep(folder: Path, name: str, database: str | None = None, storage: str | None = None) -> Path:
    """The sweep file `name`.yaml and its trainer in `folder`: the bucket sweep when given a server and a
    bucket, else the same cells on the root's own SQLite file and folder (the uninterrupted reference)."""
    write(folder / "bucket_trainer.py", TRAINER)
    servers = ""
    if database is not None:
        servers += f"database: '{database}'\nlease: {{renew_seconds: 0.5, expire_seconds: 3}}\n"
    if storage is not None:
        servers += f"storage: '{storage}'\n"
    return write(folder / f"{name}.yaml", SPEC.format(name=name, servers=servers, steps=STEPS, every=EVERY))


def environment(bucket: Bucket, **extra: str) -> dict[str, str]:
    env = {**os.environ, **bucket.env, **extra}
    env.pop(storage_url.ENV_STORAGE, None)  # the sweep file's storage: is the one under test
    env.pop("SWEEPQ_DATABASE_URL", None)
    return env


def machine_a_killed(folder: Path, spec: Path, root: Path, bucket: Bucket, held: int = 2) -> list[str]:
    """Launch the sweep on root A until `held` cells wait at the gate with step HELD_AT committed in the
    bucket, then SIGKILL every process of A and delete root A. Returns the held cells."""
    gate = folder / "gate"
    gate.touch()
    env = environment(bucket, **{GATE_ENV: str(gate)})
    launch = start("launch", str(spec), "--root", str(root), "--workers", str(held), "--no-live", cwd=folder, env=env)
    try:

        def holding() -> list[str]:
            ready = [c for c in CELLS if Path(f"{gate}.{c}").exists() and bucket.committed(c, HELD_AT)]
            if launch.poll() is not None:
                raise AssertionError(f"machine A's launch ended early: {launch.communicate()[0]}")
            return ready if len(ready) >= held else []

        cells = wait_for(holding, timeout=300, what=f"{held} cells held at step {HELD_AT} on machine A")
        kill_machine(launch.pid)
        launch.wait(timeout=60)
    finally:
        if launch.poll() is None:
            launch.kill()
            launch.wait()
    gate.unlink()
    shutil.rmtree(root)  # its disk goes with it
    return sorted(cells)


def kill_machine(pid: int) -> None:
    """SIGKILL every process of the machine started by `pid`: all frozen first (SIGSTOP), the tree read
    again until it holds no new process (none can start another meanwhile), then all killed at once."""
    seen: dict[int, psutil.Process] = {}
    while True:
        found = [p for p in machine_processes([pid, *seen]) if p.pid not in seen]
        if not found:
            break
        for p in found:
            seen[p.pid] = p
            try:
                p.send_signal(signal.SIGSTOP)
            except psutil.NoSuchProcess:
                continue
    for p in seen.values():
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(list(seen.values()), timeout=60)
    assert not [p for p in alive if _running(p)], f"machine A's processes outlived SIGKILL: {alive}"


def _running(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE  # killed, not yet reaped by whoever adopted it
    except psutil.NoSuchProcess:
        return False


def damage_newest(bucket: Bucket, cell: str, step: int) -> str:
    """Alter bytes of the largest data object of `cell`'s committed `step` (same length, one put)."""
    s3 = bucket.client
    head = s3.head_object(Bucket=bucket.name, Key=bucket.key(cell, f"step-{step}", "manifest.json"))
    data = head["Metadata"][META_DATA]
    objects = s3.list_objects_v2(Bucket=bucket.name, Prefix=data + "/")["Contents"]
    target = max(objects, key=lambda o: o["Size"])["Key"]
    body = bytearray(s3.get_object(Bucket=bucket.name, Key=target)["Body"].read())
    body[len(body) // 2] ^= 0xFF
    s3.put_object(Bucket=bucket.name, Key=target, Body=bytes(body))
    return target


def finish_on(folder: Path, root: Path, database: str, bucket: Bucket, workers: int = 2) -> None:
    """Machine B: `workers` workers join the sweep from `root` by the server's URL and the sweep's name
    (no sweep file, no folder of A's), and run until the sweep is settled."""
    env = environment(bucket)
    joined = [
        start(
            "worker",
            "--root",
            str(root),
            "--database",
            database,
            "--sweep",
            SWEEP,
            "--name",
            f"b{i}",
            cwd=folder,
            env=env,
        )
        for i in range(workers)
    ]
    outputs = []
    for p in joined:
        try:
            outputs.append(p.communicate(timeout=300)[0])
        except subprocess.TimeoutExpired:
            for q in joined:
                q.kill()
            outputs = [q.communicate()[0] for q in joined]
            states = cell_states(database, SWEEP)
            raise AssertionError(f"machine B did not finish the sweep: {states}\n" + "\n".join(outputs)) from None
    assert [p.returncode for p in joined] == [0] * workers, "\n".join(outputs)


def final_state(where: str | None, root: Path, cell: str, env: Mapping[str, str]) -> dict[str, Any]:
    """The state of `cell`'s final checkpoint (step STEPS), every byte verified, read from its storage."""
    return commit.load(storage.for_cell(CellPaths(root, cell), where, env), STEPS).state


def same(a: Any, b: Any) -> bool:
    """Bit for bit: tensors by torch.equal, containers by their items."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return isinstance(b, list | tuple) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@pytest.fixture
def bucket(s3_server: Any, s3_bucket: str) -> Bucket:
    return Bucket(f"s3://{s3_bucket}/team/{SWEEP}", s3_server.env(), s3_server.client())


def test_machine_b_finishes_every_cell_bit_exactly_from_the_bucket_after_machine_a_is_gone(
    sweep_dir: Path, postgres_url: str, bucket: Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The uninterrupted reference: the same cells on one machine's own folder.
    reference = sweep_dir / "reference"
    reference.mkdir()
    ref_spec = write_sweep(reference, "reference")
    ref = start("launch", str(ref_spec), "--workers", "2", "--no-live", cwd=reference, env=environment(bucket))

    spec = write_sweep(sweep_dir, SWEEP, postgres_url, bucket.url)
    root_a, root_b = sweep_dir / "machine-a", sweep_dir / "machine-b"
    held = machine_a_killed(sweep_dir, spec, root_a, bucket)
    assert not root_a.exists()
    damaged = held[0]
    damage_newest(bucket, damaged, HELD_AT)

    finish_on(sweep_dir, root_b, postgres_url, bucket)
    out, _ = ref.communicate(timeout=600)
    assert ref.returncode == 0, out

    assert cell_states(postgres_url, SWEEP) == dict.fromkeys(CELLS, "done")
    for name, value in bucket.env.items():
        monkeypatch.setenv(name, value)
    for cell in CELLS:
        got = final_state(bucket.url, root_b, cell, os.environ)
        want = final_state(None, reference / "runs" / "reference", cell, os.environ)
        assert same(got, want), f"cell {cell}: the final state differs from the uninterrupted run's"
    # Nothing of a checkpoint on B's disk: the bucket holds them all.
    assert not list(root_b.glob("cells/*/checkpoints/*"))

    rows = attempts(postgres_url, SWEEP)
    resumed = {r["cell_id"]: r["start_step"] for r in rows if r["number"] == 2}
    lost = {r["cell_id"] for r in rows if r["number"] == 1 and r["reason"] == "lost"}
    assert lost == set(held), rows  # A's attempts, closed by B once their leases expired
    # The damaged step refused (moved aside under corrupt-), the one before it used; the other held
    # cell resumed from its newest.
    assert resumed[damaged] == HELD_AT - EVERY, rows
    assert resumed[held[1]] == HELD_AT, rows
    corrupt = events(postgres_url, SWEEP, "checkpoint_corrupt")
    details = [(c, d if isinstance(d, dict) else json.loads(d)) for c, d in corrupt]
    assert [(c, d["step"]) for c, d in details] == [(damaged, HELD_AT)], corrupt
    assert any(k.endswith("/manifest.json") for k in bucket.keys(damaged, f"corrupt-step-{HELD_AT}-"))
