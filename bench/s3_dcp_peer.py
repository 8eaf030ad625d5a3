"""The peer of bench/s3.py: the same state saved and loaded with torch DCP's fsspec writer and reader on s3fs.

Run by bench/s3.py under .venv-dcp (bench/dcp-requirements.txt: s3fs pins a botocore of its own), as a
process that stays up for the whole bench so that its rounds interleave with the others':

    python s3_dcp_peer.py BUCKET MB        then, one a line on stdin: save R | load R | quit

Each command answers one line on stdout: the seconds `dcp.save` or `dcp.load` took (the load's
tensors compared with the state afterwards, outside the time: DCP itself verifies no checksum).
The endpoint and credentials are the standard AWS variables bench/s3.py sets.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter

THREADS = 8  # bench/s3.py's WORKERS: the same number of transfers in flight


def state_of(mb: int) -> dict[str, Any]:
    """bench/s3.py's state, made the same way."""
    n = mb * (1 << 20) // 4
    g = torch.Generator().manual_seed(0)
    return {"model": {f"w{i}": torch.randn(n // 4, generator=g) for i in range(4)}}


def main(bucket: str, mb: int) -> None:
    state = state_of(mb)
    endpoint = os.environ["AWS_ENDPOINT_URL"]
    for line in sys.stdin:
        command, r = line.split()
        path = f"s3://{bucket}/dcp/{r}"
        if command == "quit":
            return
        if command == "save":
            t = time.perf_counter()
            writer = FsspecWriter(
                path, single_file_per_rank=False, thread_count=THREADS, endpoint_url=endpoint, max_concurrency=THREADS
            )
            dcp.save(state, storage_writer=writer)
            took = time.perf_counter() - t
        else:
            into = {"model": {k: torch.empty_like(v) for k, v in state["model"].items()}}
            t = time.perf_counter()
            dcp.load(into, storage_reader=FsspecReader(path, endpoint_url=endpoint, max_concurrency=THREADS))
            took = time.perf_counter() - t
            assert all(torch.equal(into["model"][k], v) for k, v in state["model"].items())
        print(took, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
