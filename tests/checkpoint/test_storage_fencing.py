"""Fencing at the storage (checkpoint/witnessed.py): a commit that lands after the queue gave the cell
to a later attempt is never resumed from, in a folder every machine mounts and in a bucket.

Real processes: attempt 1 stops itself (SIGSTOP) between the fence's answer and the commit of its
third checkpoint (crashpoints `after_fence`). Its cell folder is moved away while it is stopped, which
frees the cell's lock, and a reaper closes attempt 1 as lost: the cell moved on. Then attempt 1 is
continued: its commit of step 12 lands in the storage (a sound manifest over sound bytes, verified like
any other) and its next question to the fence ends it. Attempt 2 must resume from step 8, the newest
step with a witness, never from the stray step 12, and commit its own step 12 in its place.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import psutil
import pytest
from conftest import db_rows, start, trainer_of, wait_for, write

from sweepq.checkpoint import storage, storage_url
from sweepq.layout import CellPaths
from sweepq.queue.reaper import reap
from sweepq.queue.store import Store

pytestmark = pytest.mark.process

SPEC = """
name: zombie
train: trainers:train
root: runs/zombie
params: {steps: 24, delay: 0.02, seed: 5, crash_at: after_fence, crash_after: 2}
checkpoint: {every_steps: 4, keep_last: 3}
retries: {lost: 3}
storage: STORAGE
groups:
  - name: a
"""


def _stopped(p: psutil.Process) -> bool:
    try:
        return p.status() == psutil.STATUS_STOPPED
    except psutil.NoSuchProcess:
        return False


@pytest.fixture(params=["folder", "bucket"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, str]]:
    """(the sweep's storage, the environment its processes need)."""
    if request.param == "folder":
        return str(tmp_path / "nas"), {}
    server = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("s3_bucket")
    return f"s3://{bucket}/team", server.env()


def test_a_late_commit_of_a_superseded_attempt_is_never_resumed_from(
    sweep_dir: Path, where: tuple[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, aws = where
    env = {**os.environ, **aws, "SWEEPQ_CRASH_SIGNAL": "SIGSTOP"}
    env.pop(storage_url.ENV_STORAGE, None)
    spec = write(sweep_dir / "zombie.yaml", SPEC.replace("STORAGE", url))
    root = sweep_dir / "runs" / "zombie"
    cell = CellPaths(root, "1.1")
    launch = start("launch", str(spec), "--no-live", cwd=sweep_dir, env=env)
    zombie = wait_for(lambda: trainer_of(launch.pid), what="attempt 1's training process")
    wait_for(lambda: _stopped(zombie), what="attempt 1 stopped between the fence and its commit")
    try:
        cell.dir.rename(root / "cells" / "1.1-tidied")  # its lock goes with the folder
        for name, value in aws.items():  # this process reaps as another machine would: the same storage
            monkeypatch.setenv(name, value)
        store = Store.open(root)
        try:
            assert reap(store) == [("1.1", "lost")]  # the cell moved on, attempt 1 still alive (stopped)
        finally:
            store.close()
    finally:
        zombie.send_signal(signal.SIGCONT)
    out, _ = launch.communicate(timeout=300)
    assert launch.returncode == 0, out

    attempts = db_rows(root, "SELECT number, reason, start_step FROM attempts WHERE cell_id = '1.1' ORDER BY number")
    assert [a[:2] for a in attempts] == [(1, "lost"), (2, "completed")], attempts
    # Attempt 2 resumed from the newest witnessed step, not from the step attempt 1 committed late.
    assert attempts[1][2] == 8, attempts

    checkpoints = storage.for_cell(cell, url, {**os.environ, **aws})
    stray = _moved_aside_manifests(checkpoints, url)
    assert [(m["step"], m["attempt"]) for m in stray] == [(12, 1)]  # it did land, and was moved aside
    assert {checkpoints.read_manifest(s)[0]["attempt"] for s in checkpoints.steps()} == {2}
    done = json.loads(cell.done.read_text())
    assert (done["attempt"], done["checkpoint"]) == (2, "checkpoints/step-24")
    said = db_rows(root, "SELECT detail FROM events WHERE cell_id = '1.1' AND kind = 'checkpoint_unwitnessed'")
    assert len(said) == 1 and "committed by attempt 1" in said[0][0], said


def _moved_aside_manifests(checkpoints: object, url: str) -> list[dict]:
    """The manifests a resume moved aside (a folder's `.corrupt-*`, a bucket's `corrupt-*` keys)."""
    if url.startswith("s3://"):
        s3, bucket, prefix = checkpoints.s3, checkpoints.bucket, checkpoints.prefix  # type: ignore[attr-defined]
        keys = [
            o["Key"]
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/corrupt-")
            for o in page.get("Contents", ())
        ]
        return [json.loads(s3.get_object(Bucket=bucket, Key=k)["Body"].read()) for k in keys]
    folder: Path = checkpoints.folder  # type: ignore[attr-defined]
    return [json.loads(m.read_text()) for m in sorted(folder.glob(".corrupt-*/manifest.json"))]
