"""The one sanitiser of human output (no rich: an error paragraph uses it before rich is loaded).

Every control character but newline and tab (C0, DEL, C1) becomes its Python escape, `\\x1b` for ESC:
the text a user or a training program wrote stays readable, and no terminal runs it.
"""

from __future__ import annotations

import re
from typing import BinaryIO

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """`text` with each control character but newline and tab as `\\xNN` (ESC is `\\x1b`)."""
    return CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


_CONTROL_BYTES = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")


def visible_bytes(data: bytes) -> bytes:
    """`visible` for bytes a program wrote (UTF-8 or not): C0 and DEL bytes, and C1 as UTF-8 encodes it."""
    return _CONTROL_BYTES.sub(lambda m: b"\\x%02x" % ord(m.group().decode("utf-8")), data)


class VisibleWriter:
    """A binary stream that writes through `visible_bytes` (what `sweepq logs` copies from a log)."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw

    def write(self, data: bytes) -> int:
        self.raw.write(visible_bytes(data))
        return len(data)

    def flush(self) -> None:
        self.raw.flush()
