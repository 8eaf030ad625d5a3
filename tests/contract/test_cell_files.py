"""The CellFiles contract (durable/files.py), one suite over every implementation (contract/backends.py).

Each test is written once and runs over the root folder, a mounted folder, the in-memory object
store and a bucket on a real S3 API (moto's server on the loopback): a put replaces an object
whole; a stream grows by segments, reads back joined, takes a segment sent again without harm and
refuses one that would leave a hole; a put ends a stream with its final bytes; another process's
view sees all of it; names are listed once each; a name that leaves the cell is refused.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.backends import CellFilesFactory
from contract.racing import race
from sweepq.durable.files import CellFiles, SegmentGap


@pytest.fixture
def files(cell_files: CellFilesFactory, request: pytest.FixtureRequest, tmp_path: Path) -> CellFiles:
    return cell_files(request, tmp_path, "a")


def test_nothing_is_there_at_first(files: CellFiles) -> None:
    assert files.read("DONE.json") is None
    assert files.read("attempts/1/metrics.jsonl") is None
    assert files.names() == []
    assert files.names("attempts/") == []


def test_a_put_reads_back_and_is_replaced_whole(files: CellFiles) -> None:
    files.put("DONE.json", b'{"attempt": 1}\n')
    assert files.read("DONE.json") == b'{"attempt": 1}\n'
    files.put("DONE.json", b'{"attempt": 2, "longer": true}\n')
    assert files.read("DONE.json") == b'{"attempt": 2, "longer": true}\n'
    files.put("DONE.json", b"{}")  # shorter: nothing of the older bytes stays
    assert files.read("DONE.json") == b"{}"
    files.put("attempts/1/empty", b"")
    assert files.read("attempts/1/empty") == b""


def test_a_stream_grows_by_segments_and_reads_back_joined(files: CellFiles) -> None:
    lines = [f'{{"step": {i}, "loss": {1 / (i + 1)}}}\n'.encode() for i in range(50)]
    offset = 0
    for i in range(0, 50, 7):
        chunk = b"".join(lines[i : i + 7])
        files.append("attempts/1/metrics.jsonl", offset, chunk)
        offset += len(chunk)
        assert files.read("attempts/1/metrics.jsonl") == b"".join(lines[: i + 7])
    files.append("attempts/1/metrics.jsonl", offset, b"")  # nothing new: nothing changes
    assert files.read("attempts/1/metrics.jsonl") == b"".join(lines)


def test_a_segment_sent_again_changes_nothing(files: CellFiles) -> None:
    files.append("attempts/1/stdout.log", 0, b"hello\n")
    files.append("attempts/1/stdout.log", 6, b"world\n")
    files.append("attempts/1/stdout.log", 6, b"world\n")  # a retried upload
    files.append("attempts/1/stdout.log", 0, b"hello\n")
    assert files.read("attempts/1/stdout.log") == b"hello\nworld\n"
    files.append("attempts/1/stdout.log", 12, b"!\n")
    assert files.read("attempts/1/stdout.log") == b"hello\nworld\n!\n"


def test_a_segment_that_leaves_a_hole_is_refused(files: CellFiles) -> None:
    with pytest.raises(SegmentGap, match="byte 5 of a stream of 0 bytes"):
        files.append("attempts/1/stdout.log", 5, b"late\n")
    files.append("attempts/1/stdout.log", 0, b"abc")
    with pytest.raises(SegmentGap, match="byte 4 of a stream of 3 bytes"):
        files.append("attempts/1/stdout.log", 4, b"x")
    assert files.read("attempts/1/stdout.log") == b"abc"


def test_a_put_ends_a_stream_with_its_final_bytes(files: CellFiles) -> None:
    # A bounded log: segments while it ran, then its kept head and tail put whole at its end.
    files.append("attempts/1/stdout.log", 0, b"head\n" + b"x" * 100)
    files.put("attempts/1/stdout.log", b"head\n[dropped]\ntail\n")
    assert files.read("attempts/1/stdout.log") == b"head\n[dropped]\ntail\n"
    assert files.names("attempts/1/") == ["attempts/1/stdout.log"]


def test_another_view_of_the_storage_sees_everything(
    cell_files: CellFilesFactory, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    writer, reader = cell_files(request, tmp_path, "a"), cell_files(request, tmp_path, "a")
    writer.put("DONE.json", b"done")
    writer.append("attempts/2/metrics.jsonl", 0, b"one\n")
    assert reader.read("DONE.json") == b"done"
    assert reader.read("attempts/2/metrics.jsonl") == b"one\n"
    # A writer that restarts (a new process) continues the stream where the storage says it ends.
    again = cell_files(request, tmp_path, "a")
    again.append("attempts/2/metrics.jsonl", 4, b"two\n")
    with pytest.raises(SegmentGap):
        again.append("attempts/2/metrics.jsonl", 100, b"far\n")
    assert reader.read("attempts/2/metrics.jsonl") == b"one\ntwo\n"


def test_cells_do_not_see_each_others_files(
    cell_files: CellFilesFactory, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    a, b, ab = (cell_files(request, tmp_path, c) for c in ("a", "b", "a-b"))
    a.put("DONE.json", b"a")
    a.append("attempts/1/metrics.jsonl", 0, b"a\n")
    ab.put("attempts/1/receipt.json", b"ab")
    assert b.read("DONE.json") is None
    assert b.names() == []
    assert a.names() == ["DONE.json", "attempts/1/metrics.jsonl"]
    assert ab.names() == ["attempts/1/receipt.json"]


def test_names_list_objects_and_streams_once_each(files: CellFiles) -> None:
    files.put("DONE.json", b"{}")
    files.put("attempts/1/receipt.json", b"{}")
    for offset, part in ((0, b"a\n"), (2, b"b\n"), (4, b"c\n")):
        files.append("attempts/1/metrics.jsonl", offset, part)
        files.append("attempts/10/stderr.log", offset, part)
    assert files.names() == [
        "DONE.json",
        "attempts/1/metrics.jsonl",
        "attempts/1/receipt.json",
        "attempts/10/stderr.log",
    ]
    assert files.names("attempts/1/") == ["attempts/1/metrics.jsonl", "attempts/1/receipt.json"]
    assert files.names("attempts/10/") == ["attempts/10/stderr.log"]


@pytest.mark.parametrize("name", ["", "/etc/passwd", "../b/DONE.json", "attempts/../../x", "a//b", "x.segments"])
def test_a_name_outside_the_cell_is_refused(files: CellFiles, name: str) -> None:
    with pytest.raises(ValueError, match="name"):
        files.put(name, b"x")
    with pytest.raises(ValueError, match="name"):
        files.append(name, 0, b"x")
    with pytest.raises(ValueError, match="name"):
        files.read(name)


def test_large_segments_keep_every_byte(files: CellFiles) -> None:
    data = bytes(range(256)) * (3 << 12)  # 3 MiB in three segments
    third = len(data) // 3
    for i in range(3):
        files.append("attempts/1/stdout.log", i * third, data[i * third : (i + 1) * third])
    assert files.read("attempts/1/stdout.log") == data


def test_streams_of_several_writers_at_once(
    cell_files: CellFilesFactory, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    # The history and both logs of one attempt are shipped at once, each stream by one writer.
    views = [cell_files(request, tmp_path, "a") for _ in range(3)]
    names = ["attempts/1/metrics.jsonl", "attempts/1/stdout.log", "attempts/1/stderr.log"]

    def ship(i: int) -> None:
        offset = 0
        for n in range(20):
            part = f"{names[i]} {n}\n".encode()
            views[i].append(names[i], offset, part)
            offset += len(part)

    assert race(ship, 3) == []
    for name in names:
        assert views[0].read(name) == b"".join(f"{name} {n}\n".encode() for n in range(20))
