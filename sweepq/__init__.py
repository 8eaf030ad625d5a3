"""sweepq: hyperparameter sweeps of PyTorch training that survive disconnects, preemptions and reboots."""

from typing import Any

from sweepq.version import __version__

__all__ = ["DataError", "NonFiniteLoss", "Run", "__version__"]


def __getattr__(name: str) -> Any:
    # Imported lazily: the CLI's read commands and `plan` must not pay for torch.
    if name in ("DataError", "NonFiniteLoss", "Run"):
        from sweepq.run import run

        return getattr(run, name)
    raise AttributeError(f"module 'sweepq' has no attribute {name!r}")
