"""Checkpoints in a bucket: a ~160 MB training state committed and resumed through sweepq's S3 storage.

Against moto's server started here on 127.0.0.1 as a process of its own (tests/services/s3.py), so
that the server's Python does not share this process's GIL. Each figure is a ratio of medians of
methods measured in this process, interleaved round by round (benchlib.interleave):

- write: `commit.write_checkpoint` to the bucket (data parts hashed and uploaded in parallel, then
  the manifest's conditional put) against a raw boto3 multipart put of the same bytes
  (`upload_fileobj`, the same part size and threads) — the cost of the protocol (issue target 1.25x);
- resume: `commit.load` from the bucket (ranges in parallel, every byte verified) against a raw
  `download_fileobj` of the same bytes (target 1.25x);
- against the local disk: the same write and load to a local folder (`storage.for_cell`), the figure
  a user moving from a disk to a bucket on this server sees;
- the loop's pause: `Run.checkpoint` of the same state in the training thread, a Run whose sweep keeps
  its checkpoints in the bucket (`storage: s3://...`) against one on the local disk (the upload
  overlaps training as the disk write does: the pause must not grow), forced (everything copied
  before the call returns) and at the cadence (the call, then the optimizer step's wait for the copy);
- the peer: the same state through torch DCP's fsspec writer and reader on s3fs (`dcp.save`,
  `dcp.load`, 8 threads, one file per tensor), run in a process of its own under .venv-dcp, made
  here on first use from bench/dcp-requirements.txt (s3fs pins an older botocore than the test
  extra's); DCP verifies no checksum on load.

moto keeps objects in its own memory and computes an MD5 of each part: its throughput is not a
real store's, so only the ratios between methods on the same server mean anything. Prints ONE
JSON object on stdout (progress goes to stderr); nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shutil
import statistics
import subprocess
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
from sweepq.run.run import Run  # noqa: E402
from sweepq.spec.sweep import CheckpointPolicy, Settings  # noqa: E402
from sweepq.wire.attempt_spec import AttemptSpec  # noqa: E402

DCP_VENV = REPO / ".venv-dcp"
DCP_PINS = REPO / "bench" / "dcp-requirements.txt"


def dcp_python() -> tuple[Path | None, str]:
    """The interpreter of .venv-dcp (made on first use: its own s3fs, the project's torch), or why not."""
    python = DCP_VENV / "bin" / "python"
    stamp = DCP_VENV / ".installed"
    if not stamp.exists() or stamp.read_text() != DCP_PINS.read_text():
        log(f"making {DCP_VENV.name} for the DCP peer ({DCP_PINS.name})")
        try:
            subprocess.run([sys.executable, "-m", "venv", str(DCP_VENV)], check=True)
            subprocess.run(
                [str(python), "-m", "pip", "install", "--quiet", "-r", str(DCP_PINS)], check=True, timeout=900
            )
        except (OSError, subprocess.SubprocessError) as e:
            return None, f"{DCP_VENV.name} could not be made: {e}"
        # After its own site-packages (its botocore first): the project venv's torch and fsspec.
        site = next((DCP_VENV / "lib").glob("python3*/site-packages"))
        ours = next(Path(sys.prefix, "lib").glob("python3*/site-packages"))
        (site / "project-venv.pth").write_text(os.path.relpath(ours, site) + "\n")
        stamp.write_text(DCP_PINS.read_text())
    return python, ""


class DcpPeer:
    """bench/s3_dcp_peer.py, up for the whole bench: one command a round, its seconds back."""

    def __init__(self, python: Path, bucket: str, mb: int, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [str(python), "-W", "ignore::UserWarning", str(REPO / "bench" / "s3_dcp_peer.py"), bucket, str(mb)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, **env},
        )

    def ask(self, command: str, r: int | str) -> float:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{command} {r}\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer:
            raise RuntimeError(f"the DCP peer ended (exit {self.proc.wait()})")
        return float(answer)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("quit 0\n")
        self.proc.stdin.close()
        self.proc.wait(60)


def make_run(root: Path, where: str | None) -> Run:
    """A Run as a training process gets it, its sweep's checkpoints in `where` (None: the root folder)."""
    policy = CheckpointPolicy(every_steps=1, auto=False, keep_last=1, keep_best=False)
    settings = Settings(name="b", form="grouped", spec_dir=".", train="m:f", checkpoint=policy, storage=where)
    return Run(AttemptSpec(root=str(root), cell="a", attempt=1, cfg={}, cfg_hash="x", settings=settings.to_json()))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--full", action="store_true", help="more rounds")
    ap.add_argument("--mb", type=int, default=160, help="size of the state (MB)")
    ap.add_argument("--no-dcp", action="store_true", help="leave out the DCP peer (no .venv-dcp made)")
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

        dcp: DcpPeer | None = None
        dcp_skipped = "--no-dcp" if args.no_dcp else ""
        if not args.no_dcp:
            python, dcp_skipped = dcp_python()
            if python is not None:
                dcp = DcpPeer(python, bucket, args.mb, server.env())

        def dcp_save(r: int) -> float:
            assert dcp is not None
            took = dcp.ask("save", r)
            keys = [{"Key": k} for k in bucket_store._list(f"dcp/{r}/")]
            s3.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
            return took

        write_methods = {"s3_write": write_to(bucket_store), "raw_put": raw_put, "local_write": write_to(local_store)}
        if dcp is not None:
            write_methods["dcp_save"] = dcp_save
        writes = interleave(write_methods, rounds, "write")

        # The loop's pause: Run.checkpoint in the training thread, the sweep's storage a bucket or the disk.
        os.environ.update(server.env())  # the Run makes its client the standard AWS way
        runs = {"s3": make_run(tmp / "root-s3", f"s3://{bucket}/pause"), "local": make_run(tmp / "root-local", None)}
        steps = [0]

        def pause(run: Run, force: bool) -> Any:
            def method(r: int) -> float:
                run._writer.flush()  # no write in flight: the pause of one checkpoint, not a wait for the last
                steps[0] += 1
                t = time.perf_counter()
                assert run.checkpoint(state, steps[0], force=force)
                if not force:
                    run._guard.wait()  # what the optimizer's step pre-hook does: waits for the late copy
                took = time.perf_counter() - t
                run._writer.flush()  # the upload ends before the next method runs
                return took

            return method

        pauses = interleave(
            {
                f"{k}_{how}": pause(run, force)
                for k, run in runs.items()
                for how, force in (("forced", True), ("cadence", False))
            },
            rounds,
            "pause",
        )
        for run in runs.values():
            run.close(completed=False)

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

        read_methods = {
            "s3_resume": load_from(bucket_store),
            "raw_get": raw_get,
            "local_resume": load_from(local_store),
        }
        if dcp is not None:
            dcp.ask("save", "read")
            read_methods["dcp_load"] = lambda r: dcp.ask("load", "read")  # compared with the state, untimed
        reads = interleave(read_methods, rounds, "resume")
        if dcp is not None:
            dcp.close()
    shutil.rmtree(tmp, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in {**writes, **reads, **pauses}.items()}
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
        "pause_vs_local": {
            "what": "Run.checkpoint's wall time in the training thread, storage in the bucket / on the local disk",
            "forced": round(med["s3_forced"] / med["local_forced"], 3),
            "cadence_and_step": round(med["s3_cadence"] / med["local_cadence"], 3),
            "target": 1.25,
        },
        "dcp_peer": (
            {
                "what": "torch DCP's FsspecWriter/FsspecReader on s3fs, 8 threads (no checksum verified on load)",
                "write_vs_dcp_save": round(med["s3_write"] / med["dcp_save"], 3),
                "resume_vs_dcp_load": round(med["s3_resume"] / med["dcp_load"], 3),
            }
            if dcp is not None
            else {"skipped": dcp_skipped}
        ),
        "rounds": rounds,
        "machine": {"python": platform.python_version(), **load()},
    }
    for key in ("write_vs_raw_put", "resume_vs_raw_get"):
        out[key]["pass"] = out[key]["ratio"] <= out[key]["target"]
    pause_ratio = max(out["pause_vs_local"]["forced"], out["pause_vs_local"]["cadence_and_step"])
    out["pause_vs_local"]["pass"] = pause_ratio <= out["pause_vs_local"]["target"]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
