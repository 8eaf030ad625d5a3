"""Checkpoints in a bucket: a ~100 MB training state committed and resumed through sweepq's S3 storage.

Against moto's server started here on 127.0.0.1 as a process of its own (tests/services/s3.py), so
that the server's Python does not share this process's GIL. Each figure is a ratio of medians of
methods measured in this process, interleaved round by round (benchlib.interleave):

- write: `commit.write_checkpoint` to the bucket (data parts hashed and uploaded in parallel, then
  the manifest's conditional put) against a raw boto3 multipart put of the same bytes
  (`upload_fileobj`, the same part size and threads) — the cost of the protocol (issue target 1.25x);
- resume: `commit.load` from the bucket (ranges in parallel, every byte verified) against a raw
  `download_fileobj` of the same bytes (target 1.25x);
- against the local disk: the same write and load to a local folder (`storage.for_cell`), the figure
  a user moving from a disk to a bucket on this server sees.

moto keeps objects in its own memory and computes an MD5 of each part: its throughput is not a
real store's, so only the ratios between methods on the same server mean anything. Prints ONE
JSON object on stdout (progress goes to stderr); nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the throwaway server of the tests
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from benchlib import interleave, load, log  # noqa: E402
from services.s3 import S3Server  # noqa: E402

from sweepq.checkpoint import commit, serialize, storage  # noqa: E402
from sweepq.checkpoint import s3 as s3_storage  # noqa: E402
from sweepq.layout import CellPaths  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--full", action="store_true", help="more rounds")
    ap.add_argument("--mb", type=int, default=100, help="size of the state (MB)")
    args = ap.parse_args()
    rounds = 5 if args.full else 3
    n = args.mb * (1 << 20) // 4
    g = torch.Generator().manual_seed(0)
    model = {f"w{i}": torch.randn(n // 4, generator=g) for i in range(4)}
    state: dict[str, Any] = {"model": model, "step": 1}
    skeleton, tensors = serialize.flatten(state)
    raw = b"".join(t.numpy().tobytes() for t in tensors.values())
    log(f"state of {len(raw) / 1e6:.1f} MB in {len(tensors)} tensors")

    tmp = Path(tempfile.mkdtemp(prefix="sweepq-bench-s3-"))
    with S3Server(mode="process") as server:
        s3 = server.client(max_pool_connections=4 * s3_storage.WORKERS)
        bucket = server.create_bucket("bench")
        root = tmp / "root"
        cell = CellPaths(root, "a")
        bucket_store = s3_storage.S3Checkpoints(cell.checkpoints, root, s3_storage.S3Url(bucket, "b"), s3)
        local_store = storage.for_cell(cell, None)
        from boto3.s3.transfer import TransferConfig

        transfer = TransferConfig(
            multipart_threshold=s3_storage.PART_SIZE,
            multipart_chunksize=s3_storage.PART_SIZE,
            max_concurrency=s3_storage.WORKERS,
        )

        def write_to(store: Any) -> Any:
            def run(r: int) -> float:
                t = time.perf_counter()
                commit.write_checkpoint(store, 100 + r, skeleton, tensors, {"attempt": 1})
                took = time.perf_counter() - t
                store.delete(100 + r)
                store.clean_partial()
                return took

            return run

        def raw_put(r: int) -> float:
            t = time.perf_counter()
            s3.upload_fileobj(io.BytesIO(raw), bucket, f"raw/{r}", Config=transfer)
            took = time.perf_counter() - t
            s3.delete_object(Bucket=bucket, Key=f"raw/{r}")
            return took

        writes = interleave(
            {"s3_write": write_to(bucket_store), "raw_put": raw_put, "local_write": write_to(local_store)},
            rounds,
            "write",
        )

        commit.write_checkpoint(bucket_store, 1, skeleton, tensors, {"attempt": 1})
        commit.write_checkpoint(local_store, 1, skeleton, tensors, {"attempt": 1})
        s3.upload_fileobj(io.BytesIO(raw), bucket, "raw/read", Config=transfer)

        def load_from(store: Any) -> Any:
            def run(r: int) -> float:
                t = time.perf_counter()
                loaded = commit.load(store, 1)
                took = time.perf_counter() - t
                assert torch.equal(loaded.state["model"]["w0"], model["w0"])
                return took

            return run

        def raw_get(r: int) -> float:
            out = io.BytesIO()
            t = time.perf_counter()
            s3.download_fileobj(bucket, "raw/read", out, Config=transfer)
            took = time.perf_counter() - t
            assert out.getbuffer().nbytes == len(raw)
            return took

        reads = interleave(
            {"s3_resume": load_from(bucket_store), "raw_get": raw_get, "local_resume": load_from(local_store)},
            rounds,
            "resume",
        )
    shutil.rmtree(tmp, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in {**writes, **reads}.items()}
    out: dict[str, Any] = {
        "bench": "s3",
        "state_mb": round(len(raw) / 1e6, 1),
        "server": "moto (process, loopback)",
        "part_mb": s3_storage.PART_SIZE >> 20,
        "workers": s3_storage.WORKERS,
        "seconds_median": {k: round(v, 4) for k, v in med.items()},
        "write_vs_raw_put": {"ratio": round(med["s3_write"] / med["raw_put"], 3), "target": 1.25},
        "resume_vs_raw_get": {"ratio": round(med["s3_resume"] / med["raw_get"], 3), "target": 1.25},
        "write_vs_local": round(med["s3_write"] / med["local_write"], 3),
        "resume_vs_local": round(med["s3_resume"] / med["local_resume"], 3),
        "rounds": rounds,
        "machine": {"python": platform.python_version(), **load()},
    }
    for key in ("write_vs_raw_put", "resume_vs_raw_get"):
        out[key]["pass"] = out[key]["ratio"] <= out[key]["target"]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
