"""A training process's checkpoint writes to a bucket, killed (SIGKILL) at a named crash point.

    python s3_crash_writer.py ROOT BUCKET POINT      (the endpoint and credentials: the AWS variables)

It commits steps 1, 2, 3, 4 through the real commit (commit.write_checkpoint on S3Checkpoints) and
keeps the last one only, as retention with keep_last: 1 does (each older step deleted once the newer
one is committed). sweepq.checkpoint.crashpoints kills it at the first passage through POINT once two
steps were committed, so that there is a committed step to fall back to. test_s3_crash.py reads the
bucket afterwards.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from sweepq.checkpoint import commit, crashpoints, serialize
from sweepq.checkpoint.s3 import S3Checkpoints, S3Url
from sweepq.layout import CellPaths

PART = 5 << 20  # S3's smallest part: the tensor file goes up in three
CELL = "1.1"
PREFIX = "sweep"


def storage_of(root: Path, bucket: str, s3: Any = None) -> S3Checkpoints:
    return S3Checkpoints(CellPaths(root, CELL).checkpoints, root, S3Url(bucket, PREFIX), s3, part_size=PART)


def state_of(step: int) -> dict[str, Any]:
    """The training state at `step`: 12 MiB of weights no other step has."""
    g = torch.Generator().manual_seed(step)
    return {"model": {"w": torch.randn(3 << 20, generator=g)}, "step": step}


def main(root: Path, bucket: str, point: str) -> None:
    storage = storage_of(root, bucket)
    crashpoints.arm(point, after_commits=2)
    for step in (1, 2, 3, 4):
        skeleton, tensors = serialize.flatten(state_of(step))
        commit.write_checkpoint(storage, step, skeleton, tensors, {"attempt": 1})
        for older in storage.steps():
            if older < step:
                storage.delete(older)  # retention, keep_last: 1
    raise SystemExit(f"{point} never fired")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3])
