"""The root as a cache of the storage (durable/cache.py): a read command's root gets what only the storage has."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from sweepq.checkpoint.storage_url import ENV_STORAGE
from sweepq.durable import cache
from sweepq.durable.files import FolderFiles
from sweepq.layout import CellPaths


@dataclass
class _Settings:
    storage: str | None


@dataclass
class Queue:
    """What `fill` asks of a Store or a Reader: its root and the sweep's storage."""

    root: Path
    storage: str | None

    def settings(self) -> _Settings:
        return _Settings(self.storage)


@pytest.fixture(autouse=True)
def _no_storage_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_STORAGE, raising=False)


def test_a_third_root_gets_the_files_only_the_storage_has(tmp_path: Path) -> None:
    stored = FolderFiles(tmp_path / "nas", "1.1")
    stored.put("DONE.json", b'{"attempt": 1}\n')
    stored.put("attempts/1/receipt.json", b'{"reason": "completed"}\n')
    stored.append("attempts/1/metrics.jsonl", 0, b'{"step": 1}\n')
    stored.put("attempts/1/stdout.log", b"hello\n")
    stored.append("attempts/2/stdout.log", 0, b"running\n")  # attempt 2 runs elsewhere: no receipt yet
    queue = Queue(tmp_path / "third", (tmp_path / "nas").as_uri())
    assert cache.fill(queue, ["1.1", "1.2"]) == 5
    cell = CellPaths(queue.root, "1.1")
    assert cell.done.read_bytes() == b'{"attempt": 1}\n'
    assert cell.metrics(1).read_bytes() == b'{"step": 1}\n'
    assert cell.stdout(1).read_bytes() == b"hello\n"
    assert cell.stdout(2).read_bytes() == b"running\n"
    assert not CellPaths(queue.root, "1.2").dir.exists()  # nothing stored: nothing made

    # Again: an ended attempt's files are taken as they are; a running one's grow; DONE.json follows.
    cell.stdout(1).write_bytes(b"the root's own\n")
    stored.append("attempts/2/stdout.log", 8, b"more\n")
    stored.put("DONE.json", b'{"attempt": 2}\n')
    assert cache.fill(queue, ["1.1"]) == 2
    assert cell.stdout(1).read_bytes() == b"the root's own\n"
    assert cell.stdout(2).read_bytes() == b"running\nmore\n"
    assert cell.done.read_bytes() == b'{"attempt": 2}\n'


def test_a_machines_own_running_attempt_is_never_overwritten(tmp_path: Path) -> None:
    stored = FolderFiles(tmp_path / "nas", "1.1")
    stored.append("attempts/1/stdout.log", 0, b"line 1\n")  # shipped a round ago
    queue = Queue(tmp_path / "root", str(tmp_path / "nas"))
    local = CellPaths(queue.root, "1.1").stdout(1)
    local.parent.mkdir(parents=True)
    local.write_bytes(b"line 1\nline 2\n")  # ahead of the storage: the attempt runs here
    assert cache.fill(queue, ["1.1"]) == 0
    assert local.read_bytes() == b"line 1\nline 2\n"


def test_with_the_storage_the_root_nothing_is_copied(tmp_path: Path) -> None:
    root = tmp_path / "root"
    FolderFiles(root, "1.1").put("DONE.json", b"{}")
    assert cache.fill(Queue(root, None), ["1.1"]) == 0
    assert sorted(p.name for p in (root / "cells/1.1").iterdir()) == ["DONE.json"]
