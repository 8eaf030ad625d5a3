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

Read line by line (`AttemptFile`): memory does not grow with the file. Numbers no
writer of sweepq's makes are skipped and counted (`out_of_range`), never passed
on as data: a step that is not a 64-bit integer (TensorBoard, MLflow and SQLite
hold no other), a time that is not a finite number of seconds (1e999 reads as
infinity), a value written as a bare number beyond a double (1e999: a logged
infinity is the string "Infinity"). A line whose step or time is out of range is
skipped whole; a value out of range is dropped from its line.
"""

from __future__ import annotations

import json
import math
import numbers
import sys
from collections.abc import Iterator
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


STEP_MIN, STEP_MAX = -(2**63), 2**63 - 1
_FLOAT_MAX = int(sys.float_info.max)
_OUT = object()  # a line whose step or time is out of range


def _decode(obj: Any, line: int) -> tuple[Logged | object | None, bool]:
    """(the line's point, whether a value of it was out of range and left out).

    The point is None for a line that is not one (damaged), _OUT for a step or time out of range."""
    if not isinstance(obj, dict) or not isinstance(obj.get("step"), int) or not isinstance(obj.get("values"), dict):
        return None, False
    step, time = obj["step"], obj.get("time") or 0.0
    if isinstance(step, bool) or not STEP_MIN <= step <= STEP_MAX:
        return _OUT, False
    if isinstance(time, bool) or not isinstance(time, (int, float)):
        return None, False
    if not -_FLOAT_MAX <= time <= _FLOAT_MAX:  # 1e999 (json reads it as inf), nan, an int no double holds
        return _OUT, False
    values: dict[str, float] = {}
    dropped = False
    for k, v in obj["values"].items():
        if isinstance(v, str):
            v = _NOT_FINITE.get(v)  # a non-finite value, as the writer spells it
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and not -_FLOAT_MAX <= v <= _FLOAT_MAX:
            dropped = True  # a bare 1e999 or an int no double holds: out of range, not data
            continue
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            values[k] = v
    return Logged(step, float(time), values, line), dropped


class AttemptFile:
    """One attempt's metrics.jsonl read line by line: its points as they come, counting what it skipped.

    An incomplete last line is ignored (`torn`); another line that does not read is skipped and
    counted (`damaged`); a line holding numbers out of range (the module says which) is counted in
    `out_of_range`, its point skipped or its values out of range dropped. The counts are final once
    `points()` is exhausted. Raises HistoryTooNew for a newer format. An absent file holds none.
    """

    def __init__(self, path: Path, attempt: int) -> None:
        self.path, self.attempt = path, attempt
        self.torn = False
        self.damaged = 0
        self.out_of_range = 0

    def points(self) -> Iterator[Logged]:
        self.torn, self.damaged, self.out_of_range = False, 0, 0
        try:
            f = open(self.path, "rb")  # noqa: SIM115 (closed below, also when the caller stops early)
        except FileNotFoundError:
            return
        with f:
            for number, raw in enumerate(f, start=1):
                if not raw.endswith(b"\n"):  # the last line, without its newline: torn, ignored
                    self.torn = bool(raw.strip())
                    break
                if not raw.strip():
                    continue
                try:
                    obj = json.loads(raw)
                except ValueError:
                    self.damaged += 1
                    continue
                if number == 1 and isinstance(obj, dict) and obj.get("format") == FORMAT:
                    _check_version(obj, self.path)
                    continue
                logged, dropped = _decode(obj, number)
                if logged is None:
                    self.damaged += 1
                elif not isinstance(logged, Logged):
                    self.out_of_range += 1
                else:
                    self.out_of_range += dropped
                    yield logged


def read_attempt(path: Path, attempt: int) -> AttemptLog:
    """The points of one attempt's metrics.jsonl, all in memory (AttemptFile reads them one at a time)."""
    f = AttemptFile(path, attempt)
    points = tuple(f.points())
    return AttemptLog(attempt, points, torn=f.torn, damaged=f.damaged, out_of_range=f.out_of_range)


def _check_version(head: dict[str, Any], path: Path) -> None:
    version = head.get("version")
    if isinstance(version, int) and version > VERSION:
        raise HistoryTooNew(
            f"{path} is metric history of format version {version}, written by a newer sweepq "
            f"(this one reads up to version {VERSION}): upgrade sweepq to read it"
        )
