"""How a training run ended, judged by the rules of sweepq.outcome (Witness.TRAINING), without torch.

Shared by the in-process training of `train:` cells (training.py) and the
attempt process that supervises a program (attempt/main.py), which must not load
torch: what it judges is only a run's counters.
"""

from __future__ import annotations

from typing import Any, Protocol

from sweepq.evidence import Evidence, Witness
from sweepq.host import signals
from sweepq.outcome import decide
from sweepq.queue.records import Outcome


class Trained(Protocol):
    """What the judge reads of a run (sweepq.Run has it)."""

    total_steps: int | None
    nan_step: int | None
    last_step: int
    start_step: int
    start_sha: str | None
    epoch: float | None
    best: float | None
    best_step: int | None

    def newest_committed(self) -> tuple[int, dict[str, Any]] | None: ...


def judged(run: Trained | None, **seen: Any) -> Outcome:
    """The outcome of a run (None: it never started) given what else was seen (raised=, finished=, ...)."""
    total = run.total_steps if run is not None else None
    outcome = decide(
        Evidence(
            Witness.TRAINING,
            nan_step=run.nan_step if run is not None else None,
            reached_end=run is not None and total is not None and run.last_step >= total,
            step=run.last_step if run is not None else None,
            total_steps=total,
            stop_requested=signals.requested(),
            stop_signal=signals.first_signal(),
            **seen,
        )
    )
    assert outcome is not None  # training evidence always has a verdict
    return outcome
