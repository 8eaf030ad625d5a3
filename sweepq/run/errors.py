"""The exceptions training code raises to say how it ended, and what any exception counts as.

A full or read-only disk behind an exception (diskfull.py) makes it DISK_FULL: the machine's fault.

`sweepq.DataError` and `sweepq.NonFiniteLoss` are these classes (public API).
"""

from __future__ import annotations

import sys
import traceback

from sweepq.evidence import Kind, Raised
from sweepq.host.diskfull import describe, disk_error
from sweepq.host.tails import tail


class DataError(Exception):
    """Raise from training code when the data is bad: the attempt ends `data_error`."""


class NonFiniteLoss(FloatingPointError):
    """A logged or checkpointed loss was NaN or infinite: the attempt ends `nan`."""

    def __init__(self, step: int, name: str, value: float) -> None:
        super().__init__(f"non-finite {name}={value} at step {step}")
        self.step, self.name, self.value = step, name, value


def kind_of(e: BaseException) -> Kind:
    if isinstance(e, NonFiniteLoss):
        return Kind.NON_FINITE_LOSS
    if isinstance(e, DataError):
        return Kind.DATA_ERROR
    if disk_error(e) is not None:  # the machine's fault, whatever wrapped it
        return Kind.DISK_FULL
    if isinstance(e, MemoryError):
        return Kind.MEMORY_ERROR
    torch = sys.modules.get("torch")  # a CUDA OOM can only come from a process that imported torch
    if torch is not None and isinstance(e, torch.cuda.OutOfMemoryError):
        return Kind.CUDA_OOM
    return Kind.OTHER


def raised(e: BaseException) -> Raised:
    """The evidence an exception gives (sweepq.outcome decides what it means)."""
    step = e.step if isinstance(e, NonFiniteLoss) else None
    disk = disk_error(e)
    words = describe(*disk) if disk is not None and kind_of(e) is Kind.DISK_FULL else None
    return Raised(kind_of(e), type(e).__name__, tail("".join(traceback.format_exception(e))), step, words)
