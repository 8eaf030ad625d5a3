"""An attempt's bounded logs (host/logkeeper.py), on real files: head, one line, tail."""

from __future__ import annotations

import os
import re
from pathlib import Path

from sweepq.host.logkeeper import CHUNK, BoundedLog, Limits, Source

KEEP = 1000


def log_at(path: Path, before: bytes = b"") -> BoundedLog:
    path.write_bytes(before)
    return BoundedLog(os.open(path, os.O_RDWR), KEEP)


def lines(first: int, last: int) -> bytes:
    return b"".join(b"line %05d\n" % i for i in range(first, last + 1))  # 11 bytes a line


def test_a_log_under_its_bound_is_kept_whole(tmp_path: Path) -> None:
    log = log_at(tmp_path / "out.log", b"sweepq: cell 1.1 attempt 1: prog\n")
    data = lines(1, 150)
    for i in range(0, len(data), 7):  # as a pipe hands it over: in pieces that cut lines
        log.feed(data[i : i + 7])
    assert log.finish() == {"received": len(data), "dropped": 0, "dropped_lines": 0}
    assert (tmp_path / "out.log").read_bytes() == b"sweepq: cell 1.1 attempt 1: prog\n" + data


def test_a_flood_keeps_the_head_and_the_tail_with_one_line_saying_what_was_dropped(tmp_path: Path) -> None:
    path = tmp_path / "out.log"
    log = log_at(path)
    data = lines(1, 20_000)
    biggest = 0
    for i in range(0, len(data), 333):
        log.feed(data[i : i + 333])
        biggest = max(biggest, path.stat().st_size)
    stats = log.finish()
    text = path.read_bytes()
    head, marker, tail = re.fullmatch(rb"(.*?\n)(\[sweepq: [^\n]*\]\n)(.*)", text, re.S).groups()  # type: ignore[union-attr]
    assert head == lines(1, 90)  # 990 bytes: the head ends at its last line end
    assert tail == lines(20_000 - 89, 20_000)  # 990 bytes: the tail starts at a line start
    dropped = len(data) - len(head) - len(tail)
    assert (
        marker
        == (
            f"[sweepq: 212.9 KiB dropped here ({dropped} bytes, {20_000 - 180} lines): this log keeps its first "
            "1000 B and its last 1000 B (SWEEPQ_LOG_KEEP)]\n"
        ).encode()
    )
    assert stats == {"received": len(data), "dropped": dropped, "dropped_lines": 20_000 - 180}
    assert biggest <= KEEP + len(marker) + 2 * KEEP  # while it ran: head, the line, at most twice the tail


def test_a_head_cut_inside_a_line_is_said_on_a_line_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "err.log"
    log = log_at(path)
    log.feed(b"x" * 5000)  # no line end at all
    log.finish()
    text = path.read_bytes()
    assert text.startswith(b"x" * KEEP + b"\n[sweepq: 2.9 KiB dropped here (3000 bytes, 0 lines)")
    assert text.endswith(b"(SWEEPQ_LOG_KEEP)]\n" + b"x" * KEEP)


def test_limits_come_from_the_environment() -> None:
    limits = Limits.from_env({"SWEEPQ_LOG_KEEP": "65536", "SWEEPQ_LOG_FLOOD": "1048576"})
    assert (limits.keep, limits.flood) == (65536, 1 << 20)
    assert (Limits.from_env({}).keep, Limits.from_env({}).flood) == (4 << 20, 1 << 30)
    assert Limits.from_env({"SWEEPQ_LOG_KEEP": "lots"}).keep == 4 << 20
    assert limits.flood_words() == (
        "printed more than 1.0 MiB to stdout.log and stderr.log (SWEEPQ_LOG_FLOOD) and was stopped: a log flood "
        "(each log keeps its first and last 64.0 KiB; its middle was dropped)"
    )


def test_ranks_printing_at_once_keep_their_lines_whole_and_marked(tmp_path: Path) -> None:
    path = tmp_path / "out.log"
    log = BoundedLog(os.open(path, os.O_RDWR | os.O_CREAT), 1 << 20)
    own, rank0, rank1 = Source(log), Source(log, b"[rank0]:"), Source(log, b"[rank1]:")
    # Unbuffered prints: each line and its newline are two writes, and the ranks' writes alternate.
    for i in range(3):
        for rank, source in ((0, rank0), (1, rank1)):
            source.feed(b"rank %d: step %d" % (rank, i))
        rank0.feed(b"\n")
        rank1.feed(b"\n")
    own.feed(b"sweepq: said as it came\n")
    rank0.feed(b"10%\r20%\r")  # a progress bar redraws its line: each state goes in as it is drawn
    rank1.feed(b"no end yet")
    before_close = path.read_bytes()
    rank1.close()  # its pipe ended: what it held goes in
    text = path.read_bytes()
    assert before_close.endswith(b"[rank0]:10%\r[rank0]:20%\r")
    assert text.splitlines(keepends=True) == [
        b"[rank0]:rank 0: step 0\n",
        b"[rank1]:rank 1: step 0\n",
        b"[rank0]:rank 0: step 1\n",
        b"[rank1]:rank 1: step 1\n",
        b"[rank0]:rank 0: step 2\n",
        b"[rank1]:rank 1: step 2\n",
        b"sweepq: said as it came\n",
        b"[rank0]:10%\r",
        b"[rank0]:20%\r",
        b"[rank1]:no end yet",
    ]


def test_a_rank_line_longer_than_a_chunk_goes_in_without_waiting_for_its_end(tmp_path: Path) -> None:
    path = tmp_path / "out.log"
    source = Source(BoundedLog(os.open(path, os.O_RDWR | os.O_CREAT), 8 * CHUNK), b"[rank1]:")
    source.feed(b"x" * CHUNK)
    source.feed(b"y\nnext")
    assert path.read_bytes() == b"[rank1]:" + b"x" * CHUNK + b"y\n"  # held no longer; one mark a line
