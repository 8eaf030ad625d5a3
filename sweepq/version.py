"""The version of sweepq, in a module of its own: what imports it imports nothing else of sweepq."""

__version__ = "0.1.0"
