"""An attempt's growing files shipped to the storage (durable/shipping.py): segments while a file only grows,
the whole bounded log once its tail is rewritten, everything whole (logs) or complete (history) at the end."""

from __future__ import annotations

from pathlib import Path

from sweepq.durable.files import SEGMENTS, MemoryFiles
from sweepq.durable.shipping import Shipper


def test_a_growing_history_goes_up_in_segments_never_rewritten(tmp_path: Path) -> None:
    files = MemoryFiles("1.1")
    shipper = Shipper(files, tmp_path, 3)
    history = tmp_path / "metrics.jsonl"
    history.write_bytes(b'{"step": 1}\n')
    shipper.round()
    with history.open("ab") as f:
        f.write(b'{"step": 2}\n')
    shipper.round()
    shipper.round()  # nothing new: no segment
    segments = sorted(k for k in files.objects if SEGMENTS in k)
    assert segments == [
        f"cells/1.1/attempts/3/metrics.jsonl{SEGMENTS}/{0:020d}",
        f"cells/1.1/attempts/3/metrics.jsonl{SEGMENTS}/{12:020d}",
    ]
    with history.open("ab") as f:
        f.write(b'{"step": 3}\n')
    shipper.finish()
    assert files.read("attempts/3/metrics.jsonl") == history.read_bytes()
    assert "cells/1.1/attempts/3/metrics.jsonl" not in files.objects  # a history is never put whole


def test_a_bounded_log_rewritten_in_place_is_put_whole(tmp_path: Path) -> None:
    files = MemoryFiles("1.1")
    shipper = Shipper(files, tmp_path, 1)
    log = tmp_path / "stdout.log"
    log.write_bytes(b"head\n" + b"line\n" * 100)
    shipper.round()
    assert files.read("attempts/1/stdout.log") == log.read_bytes()
    # The log keeper drops the middle: the tail after the head is rewritten, the file gets shorter.
    log.write_bytes(b"head\n[sweepq: 400 B dropped here]\n" + b"line\n" * 20)
    shipper.round()
    assert files.read("attempts/1/stdout.log") == log.read_bytes()
    # Rewritten again at the same length: seen by its bytes, not its size.
    log.write_bytes(b"head\n[sweepq: 500 B dropped here]\n" + b"last\n" * 20)
    shipper.finish()
    assert files.read("attempts/1/stdout.log") == log.read_bytes()


def test_a_storage_that_refuses_costs_a_round_not_the_attempt(tmp_path: Path) -> None:
    class Down(MemoryFiles):
        down = True

        def _put(self, key: str, data: bytes) -> None:
            if self.down:
                raise ConnectionError("the bucket is unreachable")
            super()._put(key, data)

    files = Down("1.1")
    shipper = Shipper(files, tmp_path, 1)
    (tmp_path / "stderr.log").write_bytes(b"warning\n")
    shipper.round()  # said once on stderr, tried again next round
    assert shipper.failures == 1 and files.read("attempts/1/stderr.log") is None
    files.down = False
    shipper.round()
    assert files.read("attempts/1/stderr.log") == b"warning\n"
