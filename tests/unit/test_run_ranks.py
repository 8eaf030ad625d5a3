"""A Run among a cell's ranks (`processes: N`): its rank from torchrun's environment, one writer."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import make_run

from sweepq.run.run import Run
from sweepq.wire.attempt_spec import ENV_ATTEMPT_FILE


def test_a_run_knows_its_rank_from_torchruns_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    run = make_run(tmp_path)
    assert (run.rank, run.world_size, run.is_main) == (0, 1, True)  # one process
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert (run.rank, run.world_size, run.is_main) == (1, 2, False)
    run.close(completed=False)


def test_from_env_refuses_a_second_writer_on_another_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_ATTEMPT_FILE, str(tmp_path / "attempt.json"))
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(RuntimeError, match=r"on rank 1: under `processes:` only rank 0 holds the cell's Run"):
        Run.from_env()
    monkeypatch.delenv(ENV_ATTEMPT_FILE)
    assert Run.from_env(required=False) is None  # outside sweepq, any rank runs on its own
