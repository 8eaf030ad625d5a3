"""A process writing checkpoints to a bucket, killed with SIGKILL at every crash point of the object
commit and of retention's deletes (s3_crash_writer.py, against moto's server on the loopback).

Whatever the point, afterwards: the steps listed are committed ones only and each loads verified, with
the state that step saved (the previous committed step is always there); what the dead process left
(data no manifest names, a multipart upload left open) is never listed as a step, and `clean_partial()`,
which the next attempt runs before it trains (attempt/main.py), removes exactly that and nothing else;
the next writer then commits the step the dead one could not.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from s3_crash_writer import state_of, storage_of

from sweepq.checkpoint import commit, serialize
from sweepq.checkpoint.s3 import DATA, META_DATA, S3Checkpoints
from sweepq.layout import MANIFEST_NAME

pytestmark = pytest.mark.process  # a Python process with torch per point

WRITER = Path(__file__).with_name("s3_crash_writer.py")

# point: (the steps listed afterwards, newest first, the step whose data the dead process left unreferenced, if any,
# whether a multipart upload was left open). The writer commits 1 and 2 before any point fires.
CASES = {
    "before_write": ([2], None, False),  # step 3 staged: nothing written yet
    "mid_file": ([2], 3, True),  # step 3's tensor file: between its parts
    "after_tensors": ([2], 3, False),  # step 3's data complete, no manifest
    "after_state": ([2], 3, False),
    "after_commit": ([2, 1], None, False),  # step 2's manifest put: committed, retention not run yet
    "mid_delete": ([2], 1, False),  # retention deleting step 1: its manifest gone, its data not yet
}


def data_prefixes(storage: S3Checkpoints) -> tuple[set[str], set[str]]:
    """(every data prefix in the bucket, those a manifest names), as names under `data/`."""
    data_root = f"{storage.prefix}/{DATA}/"
    found, named = set(), set()
    for page in storage.s3.get_paginator("list_objects_v2").paginate(Bucket=storage.bucket, Prefix=storage.prefix):
        for obj in page.get("Contents", ()):
            key = obj["Key"]
            if key.startswith(data_root):
                found.add(stage_of(storage, key))
            elif key.endswith("/" + MANIFEST_NAME):
                meta = storage.s3.head_object(Bucket=storage.bucket, Key=key)["Metadata"]
                named.add(meta[META_DATA][len(data_root) :])
    return found, named


def open_uploads(storage: S3Checkpoints) -> list[str]:
    answer = storage.s3.list_multipart_uploads(Bucket=storage.bucket, Prefix=f"{storage.prefix}/{DATA}/")
    return [u["Key"] for u in answer.get("Uploads", ())]


def stage_of(storage: S3Checkpoints, key: str) -> str:
    return key[len(f"{storage.prefix}/{DATA}/") :].split("/", 1)[0]


def assert_loads(storage: S3Checkpoints, step: int) -> None:
    loaded = commit.load(storage, step)  # every byte against the manifest's sha256
    assert loaded.step == step and loaded.state["step"] == step
    assert torch.equal(loaded.state["model"]["w"], state_of(step)["model"]["w"])


@pytest.mark.parametrize("point", list(CASES))
def test_a_writer_killed_at_each_crash_point_leaves_the_committed_steps_loadable_and_orphans_cleaned(
    tmp_path: Path, s3_server: Any, s3_bucket: str, point: str
) -> None:
    listed, orphan_step, upload_left_open = CASES[point]
    root = tmp_path / "root"
    writer = subprocess.run(
        [sys.executable, str(WRITER), str(root), s3_bucket, point],
        env={**{k: v for k, v in os.environ.items() if not k.startswith("SWEEPQ_CRASH")}, **s3_server.env()},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert writer.returncode == -signal.SIGKILL, writer.stderr
    storage = storage_of(root, s3_bucket, s3_server.client())

    # No orphan is taken for a checkpoint: the steps listed are committed ones, and each loads verified.
    assert storage.steps() == listed
    for step in listed:
        assert_loads(storage, step)
    damaged: list[int] = []
    resumed = commit.load_newest(storage, on_corrupt=lambda step, why, where: damaged.append(step))
    assert resumed is not None and resumed.step == listed[0] and damaged == []  # what a resume takes
    found, named = data_prefixes(storage)
    uploads = open_uploads(storage)
    assert len(named) == len(listed) and bool(uploads) == upload_left_open
    # What the dead process left: data no manifest names, and the stage of an upload left open (its
    # parts are no object yet).
    orphans = (found - named) | {stage_of(storage, key) for key in uploads}
    if orphan_step is None:
        assert orphans == set()
    else:
        assert len(orphans) == 1 and next(iter(orphans)).startswith(f"step-{orphan_step}-"), orphans

    # Cleaned later: exactly the orphans go; what a manifest names stays and still loads.
    assert set(storage.clean_partial()) == orphans
    assert data_prefixes(storage) == (named, named) and open_uploads(storage) == []
    assert storage.steps() == listed
    assert_loads(storage, listed[0])

    # The next writer commits the step the dead one could not, over whatever it left.
    skeleton, tensors = serialize.flatten(state_of(3))
    commit.write_checkpoint(storage, 3, skeleton, tensors, {"attempt": 2})
    assert storage.steps() == [3, *listed]
    assert_loads(storage, 3)
    assert storage.clean_partial() == []
