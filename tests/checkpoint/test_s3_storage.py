"""The bucket's own rules (checkpoint/s3.py), beyond the contract every storage passes (tests/contract/).

Against moto's server on the loopback (tests/services/s3.py). Faults a real store gives
and moto does not (a 409 to a concurrent conditional write, a proxy that drops
`If-None-Match`, an outage) are injected at the client boundary through botocore's
event hooks: the request is real up to the socket, the answer the store's.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from botocore.awsrequest import AWSResponse

from sweepq.checkpoint import commit, readio, serialize
from sweepq.checkpoint.manifest import FORMAT, CheckpointCorrupt
from sweepq.checkpoint.s3 import META_DATA, S3Checkpoints, S3Url, StorageUnfit
from sweepq.checkpoint.s3 import for_cell as s3_for_cell
from sweepq.layout import CellPaths

PART = 5 << 20  # S3's smallest part (all but the last)


def make(tmp_path: Path, bucket: str, s3: Any, cell: str = "a") -> S3Checkpoints:
    root = tmp_path / "root"
    return S3Checkpoints(CellPaths(root, cell).checkpoints, root, S3Url(bucket, "p"), s3, part_size=PART)


def manifest_bytes(step: int, written: dict[str, tuple[str, int]]) -> bytes:
    files = {name: {"sha256": sha, "size": size} for name, (sha, size) in written.items()}
    m = {"format": FORMAT, "kind": "files", "step": step, "created_at": "2025-03-01T12:00:00Z", "files": files}
    return (json.dumps(m, indent=1, sort_keys=True) + "\n").encode()


class _Raw:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_: Any) -> Any:
        yield self.body


def answer(status: int, code: str, request: Any) -> AWSResponse:
    body = f"<Error><Code>{code}</Code><Message>injected</Message></Error>".encode()
    return AWSResponse(request.url, status, {"content-type": "application/xml"}, _Raw(body))


def _body(request: Any) -> bytes:
    body = request.body
    if hasattr(body, "read"):  # a stream botocore rewinds before each send
        at = body.tell()
        data = body.read()
        body.seek(at)
        return bytes(data)
    return bytes(body)


def big(n: int, seed: int) -> bytes:
    return (
        torch.randint(0, 256, (n,), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed)).numpy().tobytes()
    )


def test_a_large_file_goes_up_in_parts_and_reads_back_verified(tmp_path: Path, s3_server: Any, s3_bucket: str) -> None:
    storage = make(tmp_path, s3_bucket, s3_server.client())
    data = big(2 * PART + 12345, 1)
    # Parts of the caller that do not line up with the upload's parts: chunks span them.
    views = [memoryview(data)[:777], memoryview(data)[777 : PART + 3], memoryview(data)[PART + 3 :]]
    staged = storage.stage(3)
    written = staged.write({"big.bin": views, "small.bin": [memoryview(b"tiny")]})
    assert written["big.bin"] == (hashlib.sha256(data).hexdigest(), len(data))
    assert staged.commit(manifest_bytes(3, written))
    m, _ = storage.read_manifest(3)
    key = f"{storage.s3.head_object(Bucket=s3_bucket, Key=storage.manifest_key(3))['Metadata'][META_DATA]}/big.bin"
    assert storage.s3.head_object(Bucket=s3_bucket, Key=key)["ETag"].endswith('-3"')  # three parts
    assert storage.read(3, "big.bin", m["files"]["big.bin"]) == data
    into = storage.read_into(3, "big.bin", m["files"]["big.bin"], readio.fresh)
    assert bytes(memoryview(into).cast("B")) == data
    storage.check(3, "big.bin", m["files"]["big.bin"])


def test_a_byte_damaged_in_a_middle_part_is_refused_and_an_older_step_loaded(
    tmp_path: Path, s3_server: Any, s3_bucket: str
) -> None:
    storage = make(tmp_path, s3_bucket, s3_server.client())

    def state(seed: int) -> dict[str, Any]:
        g = torch.Generator().manual_seed(seed)
        return {"w": torch.randn(3 * PART // 4, generator=g), "seed": seed}  # 3.75 MiB... x4 bytes: parts

    for step, seed in ((10, 1), (20, 2)):
        skeleton, tensors = serialize.flatten(state(seed))
        commit.write_checkpoint(storage, step, skeleton, tensors, {"attempt": 1})
    m, _ = storage.read_manifest(20)
    name = max(m["files"], key=lambda n: m["files"][n]["size"])
    key = f"{storage.s3.head_object(Bucket=s3_bucket, Key=storage.manifest_key(20))['Metadata'][META_DATA]}/{name}"
    body = bytearray(storage.s3.get_object(Bucket=s3_bucket, Key=key)["Body"].read())
    body[PART + 100] ^= 0x01  # one bit, in the second range read
    storage.s3.put_object(Bucket=s3_bucket, Key=key, Body=bytes(body))
    with pytest.raises(CheckpointCorrupt, match="sha256 does not match"):
        storage.check(20, name, m["files"][name])
    seen: list[int] = []
    loaded = commit.load_newest(storage, on_corrupt=lambda step, why, where: seen.append(step))
    assert loaded is not None and loaded.step == 10 and loaded.state["seed"] == 1
    assert torch.equal(loaded.state["w"], state(1)["w"])
    assert seen == [20] and storage.steps() == [10]
    assert any("corrupt-step-20" in k["Key"] for k in storage.s3.list_objects_v2(Bucket=s3_bucket)["Contents"])


def test_a_409_to_the_manifest_put_is_answered_by_the_same_put_again(
    tmp_path: Path, s3_server: Any, s3_bucket: str
) -> None:
    s3 = s3_server.fresh_client()
    storage = make(tmp_path, s3_bucket, s3)
    sent: list[bytes] = []

    def conflict_once(request: Any, **_: Any) -> AWSResponse | None:
        if request.url.endswith("step-4/manifest.json"):
            sent.append(_body(request))
            if len(sent) == 1:  # what AWS answers when another conditional write of the key is in flight
                return answer(409, "ConditionalRequestConflict", request)
        return None

    s3.meta.events.register("before-send.s3.PutObject", conflict_once)
    staged = storage.stage(4)
    written = staged.write({"x": [memoryview(b"four")]})
    assert staged.commit(manifest_bytes(4, written))
    assert len(sent) == 2 and sent[0] == sent[1] == manifest_bytes(4, written)
    assert storage.steps() == [4] and storage.read(4, "x", storage.read_manifest(4)[0]["files"]["x"]) == b"four"


def test_a_lost_answer_to_our_own_commit_still_counts_as_committed(
    tmp_path: Path, s3_server: Any, s3_bucket: str
) -> None:
    """The put landed, its answer was lost, the client's retry met 412: the manifest there is ours."""
    s3 = s3_server.fresh_client()
    storage = make(tmp_path, s3_bucket, s3)
    staged = storage.stage(6)
    written = staged.write({"x": [memoryview(b"six")]})
    body = manifest_bytes(6, written)
    calls: list[str] = []

    def land_then_lose(request: Any, **_: Any) -> AWSResponse | None:
        if request.url.endswith("step-6/manifest.json") and not calls:
            calls.append("first")
            # The store takes the first try (another client stands for the network) and the answer is lost.
            s3_server.client().put_object(
                Bucket=s3_bucket, Key=storage.manifest_key(6), Body=body, Metadata={META_DATA: staged.data}
            )
            return answer(503, "SlowDown", request)  # botocore retries it; the retry meets 412
        return None

    s3.meta.events.register("before-send.s3.PutObject", land_then_lose)
    assert staged.commit(body)
    assert storage.steps() == [6] and storage.clean_partial() == []  # our data kept: the commit names it


def test_a_store_that_ignores_if_none_match_is_refused(tmp_path: Path, s3_server: Any, s3_bucket: str) -> None:
    s3 = s3_server.fresh_client()

    def drop_condition(request: Any, **_: Any) -> None:  # a proxy in front of the store that drops the header
        request.headers.pop("If-None-Match", None)

    s3.meta.events.register("before-send.s3.PutObject", drop_condition)
    with pytest.raises(StorageUnfit, match="ignores conditional writes") as refused:
        make(tmp_path, s3_bucket, s3)
    assert "\n" not in str(refused.value)  # one paragraph
    assert s3_server.client().list_objects_v2(Bucket=s3_bucket).get("KeyCount") == 0  # the probe left nothing


def test_an_outage_is_raised_as_it_is_and_quarantines_nothing(tmp_path: Path, s3_server: Any, s3_bucket: str) -> None:
    s3 = s3_server.fresh_client(retries={"mode": "standard", "max_attempts": 1})
    storage = make(tmp_path, s3_bucket, s3)
    skeleton, tensors = serialize.flatten({"w": torch.arange(10.0)})
    commit.write_checkpoint(storage, 1, skeleton, tensors, {"attempt": 1})

    def down(request: Any, **_: Any) -> AWSResponse:
        return answer(403, "AccessDenied", request)

    s3.meta.events.register("before-send.s3.GetObject", down)
    with pytest.raises(Exception, match="AccessDenied") as raised:
        commit.load_newest(storage)
    assert not isinstance(raised.value, CheckpointCorrupt)
    s3.meta.events.unregister("before-send.s3.GetObject", down)
    assert storage.steps() == [1] and commit.load(storage, 1).state["w"].sum() == 45


def test_clean_partial_aborts_an_upload_left_open_between_parts(tmp_path: Path, s3_server: Any, s3_bucket: str) -> None:
    storage = make(tmp_path, s3_bucket, s3_server.client())
    staged = storage.stage(2)
    key = f"{staged.data}/big.bin"
    upload = storage.s3.create_multipart_upload(Bucket=s3_bucket, Key=key)["UploadId"]
    storage.s3.upload_part(Bucket=s3_bucket, Key=key, UploadId=upload, PartNumber=1, Body=b"\0" * PART)
    assert storage.steps() == []
    assert storage.clean_partial() == [staged.data.rsplit("/", 1)[1]]
    assert storage.s3.list_multipart_uploads(Bucket=s3_bucket).get("Uploads", []) == []
    assert storage.clean_partial() == []


def test_a_storage_url_and_the_standard_aws_variables_reach_the_bucket(
    tmp_path: Path, s3_server: Any, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No client given: endpoint, credentials and region come from the environment, as on a cluster."""
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    cell = CellPaths(tmp_path / "root", "c")
    store = s3_for_cell(cell, f"s3://{s3_bucket}/team/sweep-1")
    staged = store.stage(1)
    assert staged.commit(manifest_bytes(1, staged.write({"x": [memoryview(b"one")]})))
    keys = [o["Key"] for o in s3_server.client().list_objects_v2(Bucket=s3_bucket)["Contents"]]
    assert "team/sweep-1/cells/c/checkpoints/step-1/manifest.json" in keys  # the root's layout under the prefix
    assert store.location(1) == cell.checkpoint(1)
    with pytest.raises(ValueError, match="not an s3://bucket/prefix URL"):
        s3_for_cell(cell, f"https://{s3_bucket}/team")
