"""When Run takes a checkpoint: the policy's steps and seconds, or the automatic cadence."""

from __future__ import annotations

import time

from sweepq.checkpoint.commit import AsyncWriter
from sweepq.spec.sweep import CheckpointPolicy

# Automatic cadence: checkpoint often enough that the overhead stays near this
# share of the run, within these bounds (seconds).
AUTO_OVERHEAD = 0.02
AUTO_MIN_INTERVAL = 10.0
AUTO_MAX_INTERVAL = 300.0
AUTO_FIRST = 10.0


class Cadence:
    """The last step scheduled for a checkpoint, and whether the next one is due."""

    def __init__(self, policy: CheckpointPolicy, writer: AsyncWriter) -> None:
        self.policy = policy
        self.writer = writer
        self.last_scheduled = -1  # the newest step handed to the writer (or resumed from)
        self.last_time = time.monotonic()
        self.stall_seconds: list[float] = []  # how long each checkpoint paused training

    def restart_at(self, step: int) -> None:
        self.last_scheduled = step
        self.last_time = time.monotonic()

    def paused(self, stall: float) -> None:
        """A checkpoint was handed to the writer after pausing training `stall` seconds."""
        self.stall_seconds.append(stall)
        self.last_time = time.monotonic()

    def due(self, step: int) -> bool:
        p = self.policy
        if p.every_steps and step - max(self.last_scheduled, 0) >= p.every_steps:
            return True
        elapsed = time.monotonic() - self.last_time
        if p.every_seconds and elapsed >= p.every_seconds:
            return True
        return p.auto and elapsed >= self.auto_interval()

    def auto_interval(self) -> float:
        """Often enough to lose little, rarely enough that checkpoints cost ~AUTO_OVERHEAD of the run.

        The cost of the last checkpoint is its pause plus its background write,
        measured once that write finished (the write competes for the CPU).
        """
        if not self.stall_seconds:
            return AUTO_FIRST
        cost = self.stall_seconds[-1] + (0.0 if self.writer.busy else self.writer.last_seconds)
        return min(AUTO_MAX_INTERVAL, max(AUTO_MIN_INTERVAL, cost / AUTO_OVERHEAD))
