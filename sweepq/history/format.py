"""An attempt's metrics.jsonl: one JSON object a line, appended, read back tolerating a torn end.

    {"format": "sweepq.metrics", "version": 1, "cell": "2.3", "attempt": 2}
    {"step": 1, "time": 1764000000.123456, "values": {"loss": 2.31, "epoch": 0.01}}
    {"step": 2, "time": 1764000000.131872, "values": {"loss": "NaN"}}

The first line names the file's format, cell and attempt; every other line is
one `run.log` call: its step, its wall time (seconds since the epoch) and its
numbers (ints and floats; other values are not history). The file is standard
JSON Lines: a value that is not finite is written as the string "NaN",
"Infinity" or "-Infinity". Each write ends with a newline; a writer killed
mid-write may leave a last line without one, which readers ignore.
"""

from __future__ import annotations

import json
import math
import numbers
from pathlib import Path
from typing import Any

from sweepq.errors import SweepqError
from sweepq.history.records import AttemptLog, Logged

FORMAT = "sweepq.metrics"
VERSION = 1
_NOT_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_KEYS: dict[str, str] = {}


class HistoryTooNew(SweepqError):
    """A metrics.jsonl written by a newer sweepq."""


def header(cell: str, attempt: int) -> bytes:
    return (json.dumps({"format": FORMAT, "version": VERSION, "cell": cell, "attempt": attempt}) + "\n").encode()


def _key(name: str) -> str:
    """`"name":`, quoted as JSON (cached: the same few names come every step)."""
    quoted = _KEYS.get(name)
    if quoted is None:
        quoted = json.dumps(name) + ":"
        if len(_KEYS) < 10_000:  # names made per step (f"loss_{step}") must not grow it forever
            _KEYS[name] = quoted
    return quoted


def encode(step: int, time: float, values: dict[str, Any]) -> str | None:
    """One line (without its newline); None when nothing in `values` is a number.

    Formatted by hand rather than by json.dumps: it runs on a thread beside the
    training loop, every point, and this is the same JSON at about half the cost.
    """
    parts = []
    for name, v in values.items():
        if type(v) is not float and type(v) is not int:  # a subclass (numpy's float64) as the number it is
            if isinstance(v, bool) or not isinstance(v, numbers.Real):
                continue  # bools, strings, lists: not points of a curve
            v = int(v) if isinstance(v, numbers.Integral) else float(v)
        if type(v) is int or math.isfinite(v):
            parts.append(_key(name) + repr(v))
        else:
            parts.append(_key(name) + ('"NaN"' if v != v else '"Infinity"' if v > 0 else '"-Infinity"'))
    if not parts:
        return None
    return f'{{"step":{int(step)},"time":{float(time)!r},"values":{{{",".join(parts)}}}}}'


def _decode(obj: Any, line: int) -> Logged | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("step"), int) or not isinstance(obj.get("values"), dict):
        return None
    values = {}
    for k, v in obj["values"].items():
        if isinstance(v, str):
            v = _NOT_FINITE.get(v)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            values[k] = v
    return Logged(obj["step"], float(obj.get("time") or 0.0), values, line)


def read_attempt(path: Path, attempt: int) -> AttemptLog:
    """The points of one attempt's metrics.jsonl; an absent file holds none.

    An incomplete last line is ignored (`torn`); another line that does not read
    is skipped and counted (`damaged`). Raises HistoryTooNew for a newer format.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return AttemptLog(attempt, ())
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline
    points: list[Logged] = []
    damaged = 0
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError:
            damaged += 1
            continue
        if number == 1 and isinstance(obj, dict) and obj.get("format") == FORMAT:
            _check_version(obj, path)
            continue
        logged = _decode(obj, number)
        if logged is None:
            damaged += 1
        else:
            points.append(logged)
    return AttemptLog(attempt, tuple(points), torn=bool(tail.strip()), damaged=damaged)


def _check_version(head: dict[str, Any], path: Path) -> None:
    version = head.get("version")
    if isinstance(version, int) and version > VERSION:
        raise HistoryTooNew(
            f"{path} is metric history of format version {version}, written by a newer sweepq "
            f"(this one reads up to version {VERSION}): upgrade sweepq to read it"
        )
