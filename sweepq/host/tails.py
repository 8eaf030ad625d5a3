"""The last lines of a traceback or a log: what a receipt's error_tail holds."""

from __future__ import annotations

import os
import re
from pathlib import Path

TAIL_LINES = 40
_READ_BYTES = 64_000  # enough for TAIL_LINES of any sane log; a log can be gigabytes


# A progress bar's line as tqdm (and Lightning's, Hugging Face's bars) draws it: "37%|███▋ | 6/16 [...]".
_PROGRESS_BAR = re.compile(r"^.{0,80}?\d+%\|.*\|\s*\d+/\d+")


def tail(text: str, lines: int = TAIL_LINES) -> str:
    """The last lines as a terminal showed them, progress bars left out.

    A progress bar redraws itself with carriage returns: of each line only the
    text after its last \\r was ever on screen, and a bar's line is not what
    went wrong, so a receipt's note (the tail's last line) never shows one.
    """
    shown = (line.rstrip("\r").rsplit("\r", 1)[-1] for line in text.rstrip().split("\n"))
    kept = [line for line in shown if not _PROGRESS_BAR.match(line)]
    return "\n".join(kept[-lines:]).strip("\n")


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
