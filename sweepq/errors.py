"""Errors that reach the user: each carries the exit code the CLI returns."""

from __future__ import annotations


class SweepqError(Exception):
    """Base of every error sweepq reports to a user (message is one paragraph)."""

    exit_code = 1


class UsageError(SweepqError):
    """Bad input: a malformed sweep file, an unknown cell, a root that is not a root.

    Raised before anything is written, so the CLI can exit 2 with nothing half-done.
    """

    exit_code = 2


class SpecError(UsageError):
    """The sweep file is invalid; the message names the file, the key path and the fix."""


class DriftError(UsageError):
    """A relaunch would give an existing cell a different cfg."""


class IllegalTransition(SweepqError):
    """A state change that the cell state machine forbids (a bug or a lost race)."""
