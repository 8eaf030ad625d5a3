"""The attempt file: what a worker tells the training process about its attempt.

Written by the worker to attempts/<n>/attempt.json before it starts the
training process, and again by that process for a program it starts (then with
fingerprints), whose `Run.from_env()` finds it through ENV_ATTEMPT_FILE.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sweepq.atomic import atomic_write_json, read_json

ENV_ATTEMPT_FILE = "SWEEPQ_ATTEMPT_FILE"


@dataclass
class AttemptSpec:
    root: str
    cell: str
    attempt: int
    cfg: dict[str, Any]
    cfg_hash: str
    settings: dict[str, Any]
    nan_step: int | None = None
    previous_reason: str | None = None
    worker_pid: int | None = None
    fingerprints: dict[str, Any] = field(default_factory=dict)
    # The worker's time.monotonic() just before it started the training process:
    # the instant max_attempt_seconds counts from. CLOCK_MONOTONIC is one clock
    # for every process of a machine, so the receipt's wall time counts from it too.
    started_monotonic: float | None = None
    # The queue's committed checkpoint rows of the cell when the attempt started, [step, attempt, manifest
    # sha256] each: the witnesses of earlier attempts' checkpoints (checkpoint/witnessed.py). None (a spec
    # written without a queue): every committed step is trusted.
    witnessed: list[list[Any]] | None = None

    def save(self, path: Path) -> None:
        atomic_write_json(path, asdict(self))

    @classmethod
    def load(cls, path: Path) -> AttemptSpec:
        return cls(**read_json(path))

    def seconds_since_start(self, started_here: float) -> float:
        """Wall seconds of the attempt so far; from `started_here` when the worker gave no start."""
        start = self.started_monotonic if self.started_monotonic is not None else started_here
        return time.monotonic() - start
