"""A write in the background hashes on the cores the training loop leaves free, and on all of them once awaited."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import numpy as np
import torch

from sweepq.checkpoint import commit as checkpoint
from sweepq.checkpoint import diskio, lanes, sharing
from sweepq.checkpoint.lanes import SMALL
from sweepq.checkpoint.sharing import Sharing

WAIT_S = 60.0  # a guard against a hang, never a bound on how fast anything is


def test_the_width_leaves_the_busy_cores_until_somebody_waits() -> None:
    cores = sharing.cores()
    assert Sharing(busy=0).width() == cores
    assert Sharing(busy=cores).width() == 1  # never none
    share = Sharing(busy=1)
    assert share.width() == max(1, cores - 1)
    calls: list[str] = []
    with share.on_hurry(lambda: calls.append("hurried")):
        share.hurry()
    share.hurry()  # after the block: the hook is gone
    assert calls == ["hurried"] and share.width() == cores
    with share.on_hurry(lambda: calls.append("already")):  # it already came: called at once
        pass
    assert calls == ["hurried", "already"]


def test_a_hash_offered_to_two_lanes_runs_once_and_a_cancelled_one_never() -> None:
    data = memoryview(np.random.default_rng(0).integers(0, 256, 3 * SMALL, dtype=np.uint8).tobytes())
    release = threading.Event()
    blocked = lanes.hasher(0).submit(release.wait)
    h = diskio._Hash([data])
    lanes.hasher(0).submit(h.run)  # behind the blocked job
    lanes.hasher(1).submit(h.run)  # free: takes it
    assert h.done.result(timeout=WAIT_S) == hashlib.sha256(data).hexdigest()
    assert not h.cancel()  # taken: too late
    release.set()
    blocked.result(timeout=WAIT_S)
    assert lanes.hasher(0).submit(lambda: None).result(timeout=WAIT_S) is None  # its late run did nothing
    never = diskio._Hash([data])
    assert never.cancel() and never.done.cancelled()
    never.run()  # a lane that gets to it later finds nothing to do
    assert never.done.cancelled()


def test_a_background_write_hurried_halfway_writes_the_exact_bytes(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    data = {f"f{i}": rng.integers(0, 256, 2 * SMALL + i, dtype=np.uint8) for i in range(3)}
    files = {name: [a.data] for name, a in data.items()} | {"small": [memoryview(b"s")]}
    share = Sharing(busy=sharing.cores())  # one hashing lane: the shards one after another
    release = threading.Event()
    lanes.hasher(0).submit(release.wait)  # so that the hashes are still queued when the hurry comes
    out: dict[str, tuple[str, int]] = {}

    def write() -> None:
        with sharing.background(share):
            out.update(diskio.write_files(tmp_path, files))

    t = threading.Thread(target=write)
    t.start()
    share.hurry()
    release.set()
    t.join(timeout=WAIT_S)
    assert not t.is_alive()
    for name, parts in files.items():
        body = b"".join(bytes(p) for p in parts)
        assert out[name] == (hashlib.sha256(body).hexdigest(), len(body)), name
        assert (tmp_path / name).read_bytes() == body, name


def test_the_async_writer_shares_the_cores_until_flushed() -> None:
    w = checkpoint.AsyncWriter()
    started, hurried = threading.Event(), threading.Event()
    seen: list[Sharing | None] = []

    def job() -> None:
        share = sharing.current()
        seen.append(share)
        assert share is not None
        with share.on_hurry(hurried.set):
            started.set()
            hurried.wait(timeout=WAIT_S)  # ends when a flush hurries it

    w.submit(job)
    assert started.wait(timeout=WAIT_S)
    w.flush()
    assert hurried.is_set()
    share = seen[0]
    assert share is not None and share.busy == torch.get_num_threads() and share.urgent
    assert sharing.current() is None  # this thread never was in the background
