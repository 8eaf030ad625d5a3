"""The last lines of a traceback or a log: what a receipt's error_tail holds."""

from __future__ import annotations

import os
from pathlib import Path

TAIL_LINES = 40
_READ_BYTES = 64_000  # enough for TAIL_LINES of any sane log; a log can be gigabytes


def tail(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def tail_file(path: Path, lines: int = TAIL_LINES) -> str | None:
    """The end of a log file; None when it is missing or empty."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - _READ_BYTES))
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    return tail(text, lines) or None
