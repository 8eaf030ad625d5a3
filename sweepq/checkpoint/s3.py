"""A cell's checkpoints in an S3-compatible bucket: the storage interface (storage.py) on objects.

The layout and the protocol are memory.py's, on a real store (AWS S3, MinIO,
Ceph, R2, CoreWeave; the tests run moto's server on the loopback):

  stage      data objects put under `data/step-<step>-<tag>/`, nothing lists them as a
             step; a file larger than one part goes up as a multipart upload, its parts copied
             by the writer and hashed in order on a thread of its own while earlier parts upload
  commit     the manifest put last at `step-<step>/manifest.json` with `If-None-Match: *`:
             its existence is the commit, its metadata (`sweepq-data`) names the data
             prefix it vouches for. 412 is "already committed" (ours, when an earlier try's
             answer was lost, is recognised by that metadata), 409 (a concurrent conditional
             write, AWS and CoreWeave) is "put the same bytes again"
  delete     the manifest first (the step is gone from `steps()` at once), then the data
  quarantine the manifest copied under `corrupt-step-<step>-<tag>/`, then deleted; the data
             stays, referenced, for inspection
  clean      data prefixes no manifest names (a crash before the commit, during a deletion)
             and multipart uploads left open are removed

Nothing is ever renamed. The newest committed step is found with one LIST (of
`step-` keys, manifests only) and one GET (its manifest). Every read is verified:
each byte goes through sha256 against the manifest, sizes are checked before a
buffer is allocated, and the ranges of one object are read with `If-Match` on the
first range's ETag, so an object replaced mid-read is refused, not stitched
together. Only a missing object is damage: any other error (network, permissions)
is raised as it is, so that an outage never sends sound checkpoints to quarantine.

Before the first use of a bucket, `probe` puts one object twice with
`If-None-Match: *`: a store (or a proxy in front of it) that silently ignores the
header would let two writers both "commit" one step, and is refused.

The client is boto3 (botocore), chosen over s3fs and obstore for correctness first:
it reads endpoint and credentials exactly the standard AWS way (AWS_ENDPOINT_URL,
profiles, SSO, instance roles), exposes `IfNoneMatch`/`IfMatch` and the raw status of
every answer (the commit must tell 412 from 409 from an outage), retries throttling
and 5xx itself, and lets the tests inject faults at the client boundary through its
event hooks. s3fs runs on aiobotocore (botocore underneath, pinned in lockstep, plus an
event loop thread) and hides conditional failures behind file-system exceptions; obstore
(Rust) is faster per request but its conditional-put errors do not distinguish 409 from
412 and its configuration is not the AWS one. Speed comes from parallelism instead:
parts and ranges go on a pool of threads (botocore's socket I/O and hashlib release the
GIL), the writer copying part n+1 while a thread of its own hashes part n (in order) and
earlier parts are uploading.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

from sweepq import layout
from sweepq.checkpoint import manifest
from sweepq.checkpoint.crashpoints import count_commit, crash_point
from sweepq.checkpoint.manifest import CheckpointCorrupt
from sweepq.errors import SweepqError
from sweepq.layout import MANIFEST_NAME, CellPaths

_B = TypeVar("_B")

DATA = "data"
CORRUPT = "corrupt-"
LINKED = "linked-"
META_DATA = "sweepq-data"  # the manifest's metadata: the data prefix it vouches for
META_LINK = "sweepq-link"  # a linked step's: the key of the manifest it stands for
PART_SIZE = 8 << 20  # S3's minimum is 5 MiB (but the last); 8 MiB is boto3's own default
WORKERS = 8  # parts and ranges in flight at once
CONFLICT_RETRIES = 8  # 409s answered to one conditional put before giving up


class StorageUnfit(SweepqError):
    """The bucket cannot keep checkpoints safely (it ignores conditional writes); the message says why."""


@dataclass(frozen=True)
class S3Url:
    bucket: str
    prefix: str  # without leading or trailing "/"; "" for the bucket's top

    @classmethod
    def parse(cls, url: str) -> S3Url:
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise ValueError(f"{url!r} is not an s3://bucket/prefix URL")
        return cls(parsed.netloc, parsed.path.strip("/"))

    def key(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"


def client(max_connections: int = 4 * WORKERS) -> Any:
    """An S3 client configured the standard AWS way (AWS_ENDPOINT_URL, credentials, region, profiles)."""
    import boto3
    from botocore.config import Config

    config = Config(
        max_pool_connections=max_connections,
        retries={"mode": "standard", "max_attempts": 5},
        connect_timeout=10,
        read_timeout=120,
    )
    return boto3.session.Session().client("s3", config=config)


def _status(error: Exception) -> int | None:
    response = getattr(error, "response", None)
    if not isinstance(response, dict):
        return None
    return response.get("ResponseMetadata", {}).get("HTTPStatusCode")


def _code(error: Exception) -> str:
    response = getattr(error, "response", None)
    return str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""


def _missing(error: Exception) -> bool:
    return _status(error) == 404 or _code(error) in ("NoSuchKey", "404", "NotFound")


def put_if_absent(s3: Any, bucket: str, key: str, body: bytes, meta: dict[str, str] | None = None) -> bool:
    """Put `body` at `key` only if no object has that key: True when written, False on 412.

    A 409 (another conditional write on the key in flight) is answered by putting the same
    bytes again, after a short, growing pause.
    """
    pause = 0.05
    for attempt in range(CONFLICT_RETRIES + 1):
        try:
            s3.put_object(Bucket=bucket, Key=key, Body=body, Metadata=meta or {}, IfNoneMatch="*")
            return True
        except Exception as e:
            status = _status(e)
            if status == 412:
                return False
            if status != 409 or attempt == CONFLICT_RETRIES:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 2.0)
    raise AssertionError("unreachable")


_probed: dict[tuple[str, str], None] = {}
_probe_lock = threading.Lock()


def probe(s3: Any, where: S3Url) -> None:
    """Refuse a store that ignores `If-None-Match: *` (StorageUnfit); once per endpoint and bucket per process."""
    ident = (str(s3.meta.endpoint_url), where.bucket)
    with _probe_lock:
        if ident in _probed:
            return
        key = where.key(f".sweepq-probe-{secrets.token_hex(8)}")
        try:
            if not put_if_absent(s3, where.bucket, key, b"first"):
                raise StorageUnfit(f"{where}: a conditional put of a new key {key} was refused as if it existed")
            if put_if_absent(s3, where.bucket, key, b"second"):
                raise StorageUnfit(
                    f"{where} ignores conditional writes: a second put of {key} with `If-None-Match: *` "
                    "replaced the object instead of failing with 412 Precondition Failed. sweepq commits "
                    "a checkpoint by writing its manifest only if absent, so on this store two writers "
                    "of one cell (a zombie and its successor) could both believe they committed the same "
                    "step, and the one read back would not be the one verified. Use a store that honours "
                    "If-None-Match (AWS S3, MinIO, Ceph RGW, R2 and CoreWeave do), or remove the proxy "
                    "in front of it that drops the header; checkpoints were not written."
                )
        finally:
            try:
                s3.delete_object(Bucket=where.bucket, Key=key)
            except Exception:
                pass  # the probe object is tiny and named as such; the outcome above is what matters
        _probed[ident] = None


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def transfers() -> ThreadPoolExecutor:
    """The process's pool for parts and ranges (one, shared by every cell's storage)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="sweepq-s3")
        return _pool


class S3Checkpoints:
    """The checkpoints folder `folder` of the sweep root `root`, kept under `where` (an s3:// bucket and prefix).

    Keys mirror the root's layout under the prefix: `<prefix>/cells/<cell>/checkpoints/...`.
    """

    def __init__(self, folder: Path, root: Path, where: S3Url, s3: Any | None = None, *, part_size: int = PART_SIZE):
        self.folder = folder
        self.where = where
        self.s3 = s3 if s3 is not None else client()
        self.bucket = where.bucket
        self.prefix = where.key(folder.relative_to(root).as_posix())
        self.part_size = part_size
        probe(self.s3, where)

    # -- keys --------------------------------------------------------------------

    def _key(self, *parts: str) -> str:
        return "/".join((self.prefix, *parts))

    def manifest_key(self, step: int) -> str:
        return self._key(layout.step_name(step), MANIFEST_NAME)

    def _list(self, prefix: str) -> Iterator[str]:
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            for obj in page.get("Contents", ()):
                yield obj["Key"]

    def _head_meta(self, key: str) -> dict[str, str] | None:
        try:
            return dict(self.s3.head_object(Bucket=self.bucket, Key=key)["Metadata"])
        except Exception as e:
            if _missing(e):
                return None
            raise

    def _get(self, key: str) -> tuple[bytes, dict[str, str]] | None:
        try:
            r = self.s3.get_object(Bucket=self.bucket, Key=key)
        except Exception as e:
            if _missing(e):
                return None
            raise
        return r["Body"].read(), dict(r["Metadata"])

    def _commit_record(self, step: int) -> tuple[bytes, dict[str, str]]:
        """The manifest object of a committed step, a link followed (CheckpointCorrupt when gone)."""
        record = self._get(self.manifest_key(step))
        if record is not None and META_LINK in record[1]:
            record = self._get(record[1][META_LINK])
        if record is None or META_DATA not in record[1]:
            raise CheckpointCorrupt(self.location(step), "manifest unreadable (no such object)")
        return record

    def _data_key(self, step: int, name: str) -> str:
        _, meta = self._commit_record(step)
        return f"{meta[META_DATA]}/{name}"

    # -- reads -------------------------------------------------------------------

    def steps(self) -> list[int]:
        """One LIST of the manifests' keys (one page per 1000 steps)."""
        return layout.manifest_steps(self._list(self._key("step-")), self.prefix)

    def location(self, step: int) -> Path:
        return self.folder / layout.step_name(step)

    def read_manifest(self, step: int) -> tuple[dict[str, Any], str]:
        raw, _ = self._commit_record(step)
        return manifest.parse(raw, self.location(step), step), hashlib.sha256(raw).hexdigest()

    def read(self, step: int, name: str, entry: dict[str, Any]) -> bytes:
        return bytes(self.read_into(step, name, entry, bytearray))

    def read_into(self, step: int, name: str, entry: dict[str, Any], alloc: Callable[[int], _B]) -> _B:
        """Ranges fetched in parallel into `alloc(size)`, hashed in order as they arrive; the size checked first."""
        holder: list[_B] = []

        def into(size: int) -> memoryview:
            holder.append(alloc(size))
            return memoryview(holder[0]).cast("B")  # type: ignore[arg-type]

        self._fetch(step, name, entry, into)
        return holder[0]

    def check(self, step: int, name: str, entry: dict[str, Any]) -> None:
        """The same reads into a window of a few parts: a file of any size in little memory."""
        self._fetch(step, name, entry, None)

    def _fetch(self, step: int, name: str, entry: dict[str, Any], into: Callable[[int], memoryview] | None) -> None:
        where, size = self.location(step), int(entry["size"])
        key = self._data_key(step, name)
        part = self.part_size
        try:
            first = self.s3.get_object(
                Bucket=self.bucket, Key=key, **({"Range": f"bytes=0-{part - 1}"} if size else {})
            )
        except Exception as e:
            if _missing(e):
                raise CheckpointCorrupt(where, f"{name} unreadable (no such object)") from e
            if _code(e) == "InvalidRange":  # the object is empty, the manifest says otherwise
                raise CheckpointCorrupt(where, f"{name} has 0 bytes, manifest says {size}") from e
            raise
        total = _total_size(first)
        if total != size:
            first["Body"].close()
            raise CheckpointCorrupt(where, f"{name} has {total} bytes, manifest says {size}")
        etag = first["ETag"]
        out = into(size) if into is not None else None
        digest = hashlib.sha256()
        head = first["Body"].read()
        digest.update(head)
        if out is not None:
            out[: len(head)] = head
        starts = list(range(len(head), size, part))
        pool = transfers()

        def fetch(start: int) -> bytes:
            end = min(start + part, size) - 1
            try:
                r = self.s3.get_object(Bucket=self.bucket, Key=key, Range=f"bytes={start}-{end}", IfMatch=etag)
            except Exception as e:
                if _missing(e) or _status(e) == 412:
                    raise CheckpointCorrupt(where, f"{name} changed or vanished while read") from e
                raise
            return bytes(r["Body"].read())

        window = 2 * WORKERS
        pending: list[tuple[int, Future[bytes]]] = []
        try:
            for start in starts:
                pending.append((start, pool.submit(fetch, start)))
                if len(pending) >= window:
                    _absorb(pending.pop(0), digest, out)
            while pending:
                _absorb(pending.pop(0), digest, out)
        finally:
            for _, f in pending:
                f.cancel()
        if digest.hexdigest() != entry["sha256"]:
            raise CheckpointCorrupt(where, f"{name} sha256 does not match the manifest")

    def linked(self, step: int) -> str | None:
        meta = self._head_meta(self.manifest_key(step))
        return None if meta is None else meta.get(META_LINK)

    # -- changes -----------------------------------------------------------------

    def stage(self, step: int) -> S3Staged:
        return S3Staged(self, step, self._key(DATA, f"{layout.step_name(step)}-{secrets.token_hex(4)}"))

    def _move_manifest(self, step: int, aside: str) -> Path:
        """Copy the step's manifest object under `aside`, then delete it: the step leaves `steps()`."""
        key = self.manifest_key(step)
        name = f"{aside}{layout.step_name(step)}-{secrets.token_hex(4)}"
        try:
            self.s3.copy_object(
                Bucket=self.bucket, Key=self._key(name, MANIFEST_NAME), CopySource={"Bucket": self.bucket, "Key": key}
            )
        except Exception as e:
            if _missing(e):
                raise FileNotFoundError(f"no committed step {step} in {self.where.bucket}/{self.prefix}") from e
            raise
        self.s3.delete_object(Bucket=self.bucket, Key=key)
        return self.folder / name

    def quarantine(self, step: int) -> Path:
        """A linked step's link is moved; what it points at is untouched."""
        return self._move_manifest(step, CORRUPT)

    def link(self, step: int, source: S3Checkpoints, source_step: int) -> None:
        """Make `step` a linked step: `source`'s committed `source_step`, in the same bucket (a warm start)."""
        if source.bucket != self.bucket:
            raise ValueError("a linked step must be in the same bucket")
        target = source.manifest_key(source_step)
        if self._head_meta(target) is None:
            raise FileNotFoundError(f"no committed step {source_step} in {source.prefix}")
        if not put_if_absent(self.s3, self.bucket, self.manifest_key(step), b"", {META_LINK: target}):
            raise FileExistsError(f"step {step} exists in {self.prefix}")

    def detach(self, step: int) -> Path:
        if self.linked(step) is None:
            raise ValueError(f"{self.location(step)} is no link: only a linked step is detached")
        return self._move_manifest(step, LINKED)

    def delete(self, step: int) -> None:
        """The manifest first, then the data: a crash between leaves only unreferenced data (clean_partial)."""
        key = self.manifest_key(step)
        meta = self._head_meta(key)
        if meta is None:
            raise FileNotFoundError(f"no committed step {step} in {self.where.bucket}/{self.prefix}")
        self.s3.delete_object(Bucket=self.bucket, Key=key)
        crash_point("mid_delete")
        if META_LINK not in meta and META_DATA in meta:  # a link's target belongs to another storage
            self._delete_keys(list(self._list(meta[META_DATA] + "/")))

    def _delete_keys(self, keys: list[str]) -> None:
        for i in range(0, len(keys), 1000):  # DeleteObjects takes 1000 keys a request
            batch = [{"Key": k} for k in keys[i : i + 1000]]
            self.s3.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})

    def clean_partial(self) -> list[str]:
        """Data prefixes no manifest (committed, quarantined or detached) names, and open multipart uploads."""
        keys = list(self._list(self._key("")))
        data_root = self._key(DATA, "")
        referenced = set()
        for key in keys:
            if key.endswith("/" + MANIFEST_NAME) and not key.startswith(data_root):
                meta = self._head_meta(key)
                if meta is not None and META_DATA in meta:
                    referenced.add(meta[META_DATA])
        removed: dict[str, None] = {}
        orphans = []
        for key in keys:
            if key.startswith(data_root) and "/" in key[len(data_root) :]:
                stage = key[: key.index("/", len(data_root))]
                if stage not in referenced:
                    orphans.append(key)
                    removed[stage[len(data_root) :]] = None
        self._delete_keys(orphans)
        for page in self.s3.get_paginator("list_multipart_uploads").paginate(Bucket=self.bucket, Prefix=data_root):
            for upload in page.get("Uploads", ()):
                self.s3.abort_multipart_upload(Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"])
                rest = upload["Key"][len(data_root) :]
                removed[rest.split("/", 1)[0]] = None
        return list(removed)


def for_cell(cell: CellPaths, url: str, s3: Any | None = None) -> S3Checkpoints:
    """The checkpoints of `cell` under the bucket and prefix of `url` (`s3://bucket/prefix`): the root's
    layout mirrored under the prefix. The client is made the standard AWS way when none is given."""
    return S3Checkpoints(cell.checkpoints, cell.root, S3Url.parse(url), s3)


def _total_size(response: dict[str, Any]) -> int:
    """The object's whole size from a (ranged) GET: Content-Range's total, else the length."""
    content_range = response.get("ContentRange")
    if content_range:
        return int(str(content_range).rsplit("/", 1)[1])
    return int(response["ContentLength"])


def _absorb(item: tuple[int, Future[bytes]], digest: Any, out: memoryview | None) -> None:
    start, future = item
    chunk = future.result()
    digest.update(chunk)
    if out is not None:
        if start + len(chunk) > len(out):
            raise CheckpointCorrupt(Path("?"), "a range longer than asked")
        out[start : start + len(chunk)] = chunk


def _chunks(parts: list[memoryview], size: int) -> Iterator[bytes]:
    """The concatenation of `parts` in copies of `size` bytes (the last shorter): the caller's buffers free after."""
    pending = bytearray()
    for view in parts:
        view = view.cast("B") if view.format != "B" or view.ndim != 1 else view
        at = 0
        if pending:
            take = min(size - len(pending), len(view))
            pending += view[:take]
            at = take
            if len(pending) < size:
                continue
            yield bytes(pending)
            pending = bytearray()
        while len(view) - at >= size:
            yield bytes(view[at : at + size])
            at += size
        pending += view[at:]
    if pending:
        yield bytes(pending)


_hash_pool: ThreadPoolExecutor | None = None


def _hasher() -> ThreadPoolExecutor:
    """One thread: the parts of a file are hashed in the order they were submitted."""
    global _hash_pool
    with _pool_lock:
        if _hash_pool is None:
            _hash_pool = ThreadPoolExecutor(1, thread_name_prefix="sweepq-s3-hash")
        return _hash_pool


class S3Staged:
    def __init__(self, storage: S3Checkpoints, step: int, data: str) -> None:
        self.storage, self.step, self.data = storage, step, data

    def write(self, files: dict[str, list[memoryview]]) -> dict[str, tuple[str, int]]:
        """Every file's parts hashed and copied in order here while the pool uploads the earlier ones."""
        st = self.storage
        s3, bucket, pool = st.s3, st.bucket, transfers()
        room = threading.BoundedSemaphore(2 * WORKERS)  # parts copied but not yet sent: bounded memory
        puts: list[Future[Any]] = []
        uploads: list[tuple[str, str, list[Future[dict[str, Any]]]]] = []
        hashing: list[Future[None]] = []
        digests: dict[str, tuple[Any, int]] = {}

        def sent(fn: Callable[..., Any], **kwargs: Any) -> Any:
            try:
                return fn(**kwargs)
            finally:
                room.release()

        try:
            for name, parts in files.items():
                key, size = f"{self.data}/{name}", sum(v.nbytes for v in parts)
                digest = hashlib.sha256()
                if size <= st.part_size:
                    body = b"".join(parts)
                    digest.update(body)
                    room.acquire()
                    puts.append(pool.submit(sent, s3.put_object, Bucket=bucket, Key=key, Body=body))
                else:
                    upload_id = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
                    sends: list[Future[dict[str, Any]]] = []
                    uploads.append((key, upload_id, sends))
                    for number, chunk in enumerate(_chunks(parts, st.part_size), start=1):
                        # In order on a thread of its own: the next part is copied while this one is hashed.
                        hashing.append(_hasher().submit(digest.update, chunk))
                        room.acquire()
                        sends.append(
                            pool.submit(
                                sent,
                                s3.upload_part,
                                Bucket=bucket,
                                Key=key,
                                UploadId=upload_id,
                                PartNumber=number,
                                Body=chunk,
                            )
                        )
                        if number == 2:
                            crash_point("mid_file")
                digests[name] = (digest, size)  # read once every part is hashed
            for f in hashing:
                f.result()
            written = {name: (d.hexdigest(), n) for name, (d, n) in digests.items()}
            for f in puts:
                f.result()
            for key, upload_id, sends in uploads:
                done = [{"ETag": f.result()["ETag"], "PartNumber": i} for i, f in enumerate(sends, start=1)]
                s3.complete_multipart_upload(
                    Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": done}
                )
        except BaseException:
            for f in [*hashing, *puts, *(f for _, _, s in uploads for f in s)]:
                f.cancel()
            for key, upload_id, _ in uploads:
                try:
                    s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
                except Exception:
                    pass  # clean_partial aborts what is left open
            raise
        return written

    def commit(self, manifest_bytes: bytes) -> bool:
        st = self.storage
        if st.linked(self.step) is not None:
            # A linked step of the same number is not the cell's own: the link moves aside, ours commits.
            st.detach(self.step)
        key = st.manifest_key(self.step)
        if not put_if_absent(st.s3, st.bucket, key, manifest_bytes, {META_DATA: self.data}):
            if st._head_meta(key) == {META_DATA: self.data}:
                # Ours: an earlier try landed and its answer was lost (the client retried it).
                count_commit()
                return True
            # The same step committed earlier (a repeated request, a racing writer): the first stays.
            st._delete_keys(list(st._list(self.data + "/")))
            return False
        count_commit()
        crash_point("after_commit")
        return True
