"""The contract suites' fixtures: each seam's implementation, parametrized over every backend (backends.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.backends import CHECKPOINT_BACKENDS, LIVENESS_BACKENDS, CheckpointBackend, LivenessBackend


@pytest.fixture(params=sorted(CHECKPOINT_BACKENDS))
def checkpoints(request: pytest.FixtureRequest) -> CheckpointBackend:
    return CHECKPOINT_BACKENDS[request.param]()


@pytest.fixture(params=sorted(LIVENESS_BACKENDS))
def owners(request: pytest.FixtureRequest, tmp_path: Path) -> LivenessBackend:
    return LIVENESS_BACKENDS[request.param]()
