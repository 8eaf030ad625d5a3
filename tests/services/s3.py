"""A throwaway S3-compatible server for the tests and benchmarks: moto's server (`moto[server]`), on 127.0.0.1 only.

It enforces `If-None-Match` and `If-Match` as S3 does, multipart uploads and ranged reads
included. Two ways to run it:

- `S3Server(mode="thread")` (the tests): moto's `ThreadedMotoServer` in this process, on a free
  port of the loopback; `stop()` shuts it down through its handle. In process, so that the
  suite's check for stray processes (which kills every child of the test process after each
  test) leaves it alone, and so that a crash of the test process takes it along.
- `S3Server(mode="process")` (the benchmarks): `python -m moto.server` as a child process of its
  own, so that its Python does not share this process's GIL with the client it measures;
  `stop()` ends it by its process id.

Nothing ever leaves the machine: `env()` gives the endpoint (AWS_ENDPOINT_URL), dummy
credentials, a region, and AWS_EC2_METADATA_DISABLED=true (no instance-metadata lookup for
credentials), and `client()` names the endpoint explicitly.

`python tests/services/s3.py` starts one, prints its endpoint and the seconds it took, and stops it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from typing import Any

LOOPBACK = "127.0.0.1"
START_TIMEOUT_S = 60.0
REGION = "us-east-1"
# Credentials moto accepts and no real account has.
ACCESS_KEY, SECRET_KEY = "sweepq-test", "sweepq-test-secret"


class S3Unavailable(RuntimeError):
    """The server could not be started; the message says why."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


class S3Server:
    def __init__(self, mode: str = "thread") -> None:
        if mode not in ("thread", "process"):
            raise ValueError(f"mode is thread or process, not {mode!r}")
        self.mode = mode
        self.port: int | None = None
        self.pid: int | None = None
        self.start_seconds: float | None = None
        self._thread_server: Any = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._client: Any = None

    @property
    def endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def env(self) -> dict[str, str]:
        """The standard AWS variables that point a client (and sweepq's processes) at this server only."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def start(self) -> S3Server:
        begin = time.monotonic()
        os.environ["AWS_EC2_METADATA_DISABLED"] = "true"  # even a misconfigured client never asks a metadata service
        try:
            if self.mode == "thread":
                from moto.server import ThreadedMotoServer

                self._thread_server = ThreadedMotoServer(ip_address=LOOPBACK, port=0, verbose=False)
                self._thread_server.start()
                self.port = int(self._thread_server.get_host_and_port()[1])
            else:
                self._spawn()
            self._wait_ready()
        except ImportError as e:
            raise S3Unavailable(f"moto's server is not installed (pip install 'moto[server]'): {e}") from e
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - begin
        return self

    def _spawn(self) -> None:
        import moto  # noqa: F401  (missing: ImportError, said clearly above)

        self.port = free_port()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", LOOPBACK, "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C in the terminal reaches the caller, which stops it
        )
        self.pid = self._proc.pid

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self._proc is not None and self._proc.poll() is not None:
                raise S3Unavailable(f"moto's server exited with {self._proc.returncode}")
            try:
                self.client().list_buckets()
                return
            except Exception as e:
                if time.monotonic() > deadline:
                    raise S3Unavailable(f"moto's server did not answer on {self.endpoint}: {e}") from e
                time.sleep(0.05)

    def stop(self) -> None:
        """Shut the server down (safe to call twice)."""
        server, self._thread_server = self._thread_server, None
        if server is not None:
            server.stop()
        proc, self._proc = self._proc, None
        if proc is not None:
            self.pid = None
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # -- clients and buckets ---------------------------------------------------------------

    def client(self, **config: Any) -> Any:
        """A boto3 S3 client of this server, its endpoint and dummy credentials given explicitly.

        Without `config`, one client shared by every caller (thread-safe; making one loads botocore's
        service model, a noticeable fraction of a second): a test that adds event hooks asks for its own
        with `config` (e.g. `client(retries={"max_attempts": 1})`) or `fresh_client()`.
        """
        if not config:
            if self._client is None:
                self._client = self.fresh_client()
            return self._client
        return self.fresh_client(**config)

    def fresh_client(self, **config: Any) -> Any:
        """A client of its own (its event hooks seen by nobody else)."""
        import boto3
        from botocore.config import Config

        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
            config=Config(**{"retries": {"mode": "standard", "max_attempts": 3}, **config}),
        )

    def create_bucket(self, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def empty(self, bucket: str) -> None:
        """Delete every object (and open upload) of a bucket, then the bucket: its memory freed."""
        s3 = self.client()
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", ())]
            if keys:
                s3.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
        for page in s3.get_paginator("list_multipart_uploads").paginate(Bucket=bucket):
            for u in page.get("Uploads", ()):
                s3.abort_multipart_upload(Bucket=bucket, Key=u["Key"], UploadId=u["UploadId"])
        s3.delete_bucket(Bucket=bucket)


if __name__ == "__main__":
    with S3Server(mode=sys.argv[1] if len(sys.argv) > 1 else "thread") as server:
        print(f"{server.endpoint} started in {server.start_seconds:.2f} s", file=sys.stderr)
