"""sweepq: hyperparameter sweeps of PyTorch training that survive disconnects, preemptions and reboots."""

from typing import TYPE_CHECKING, Any

from sweepq.version import __version__

if TYPE_CHECKING:
    # The same names, seen without importing: type checkers and the API reference (docs/reference/api.md)
    # read them here, where the lazy __getattr__ below is invisible to static analysis.
    from sweepq.run.run import DataError, NonFiniteLoss, Run

__all__ = ["DataError", "NonFiniteLoss", "Run", "__version__"]


def __getattr__(name: str) -> Any:
    # Imported lazily: the CLI's read commands and `plan` must not pay for torch.
    if name in ("DataError", "NonFiniteLoss", "Run"):
        from sweepq.run import run

        return getattr(run, name)
    raise AttributeError(f"module 'sweepq' has no attribute {name!r}")
