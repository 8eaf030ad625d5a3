"""The messages a training process sends its worker: one frozen class per kind.

On the wire each is one JSON object, its kind under "t" and its fields by
name. `decode` accepts exactly the fields of its kind, each of its declared
type: an unknown kind, a missing, misspelt or extra field, or a wrong type is
a BadMessage naming what is wrong, never a key silently dropped.
"""

from __future__ import annotations

import json
import types
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Union, get_args, get_origin, get_type_hints

KIND = "t"


class BadMessage(ValueError):
    """A message that is not one of ours (what is wrong is in the text)."""


@dataclass(frozen=True)
class Started:
    """The training process is up: who it is, what it runs on and with."""

    kind: ClassVar[str] = "started"
    pid: int
    gpus: list[dict[str, Any]]
    environment: dict[str, Any]
    code_fingerprint: dict[str, Any]
    data_fingerprint: dict[str, Any]


@dataclass(frozen=True)
class Resumed:
    """`run.restore()` loaded a checkpoint (path: relative to the cell folder)."""

    kind: ClassVar[str] = "resumed"
    step: int
    sha: str | None
    path: str
    epoch: float | None
    metrics: dict[str, Any]
    rollback: bool  # after a `nan`: from before the bad interval
    best: float | None
    best_step: int | None


@dataclass(frozen=True)
class Fresh:
    """`run.restore()` found nothing to load."""

    kind: ClassVar[str] = "fresh"
    rollback: bool  # rolled back past every checkpoint
    none_verified: bool  # there were checkpoints, and none verified


@dataclass(frozen=True)
class Total:
    """`run.set_total()`: the cell's declared length."""

    kind: ClassVar[str] = "total"
    steps: int
    epochs: float | None


@dataclass(frozen=True)
class _AtStep:
    """The point of training a message speaks of: its first fields."""

    step: int
    epoch: float | None


@dataclass(frozen=True)
class Logged(_AtStep):
    """Scalars logged since the last message (sent at most every LOG_INTERVAL)."""

    kind: ClassVar[str] = "log"
    scalars: dict[str, Any]
    best: float | None
    best_step: int | None


@dataclass(frozen=True)
class Checkpointed(_AtStep):
    """A checkpoint was committed (path: relative to the cell folder)."""

    kind: ClassVar[str] = "ckpt"
    metrics: dict[str, Any]
    path: str
    sha: str
    size: int
    created_at: str
    attempt: int


@dataclass(frozen=True)
class Superseded:
    """Checkpoints deleted by retention, or abandoned by a resume from an earlier step."""

    kind: ClassVar[str] = "superseded"
    steps: list[int]
    note: str


@dataclass(frozen=True)
class Corrupt:
    """A checkpoint failed verification on restore and was moved aside."""

    kind: ClassVar[str] = "corrupt"
    step: int
    why: str
    moved_to: str  # relative to the cell folder


@dataclass(frozen=True)
class Warned:
    """Something a person should know about this attempt (also printed to its stderr)."""

    kind: ClassVar[str] = "warning"
    event: str
    step: int
    notes: list[str]


@dataclass(frozen=True)
class Ended:
    """The attempt's receipt, as also written to receipt.json: the last message."""

    kind: ClassVar[str] = "end"
    outcome: dict[str, Any]


Message = Started | Resumed | Fresh | Total | Logged | Checkpointed | Superseded | Corrupt | Warned | Ended
KINDS: dict[str, type[Message]] = {
    c.kind: c for c in (Started, Resumed, Fresh, Total, Logged, Checkpointed, Superseded, Corrupt, Warned, Ended)
}


# Resolved once: the declared type of every field of every kind.
_HINTS: dict[str, dict[str, Any]] = {
    kind: {f.name: get_type_hints(cls)[f.name] for f in fields(cls)} for kind, cls in KINDS.items()
}


def encode(msg: Message) -> bytes:
    body = {f.name: getattr(msg, f.name) for f in fields(msg)}
    return json.dumps({KIND: msg.kind, **body}, default=str, allow_nan=True).encode()


MAX_DEPTH = 32  # sweepq's own messages nest 4 levels; deeper is not one of ours
EXCERPT = 120  # characters of a rejected message kept in its event and words
_INT64 = 1 << 63  # the database's integers: a wider one is refused here, not by SQLite at the flush
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')


def decode(data: bytes) -> Message:
    """The message in `data`; BadMessage when it is not exactly one of KINDS.

    `data` is untrusted (a stray write of the user's program to the descriptor it inherits, a buggy
    writer): its nesting is measured without recursion before any parser sees it (100,000 `[`
    made json's parser raise RecursionError), and what is wrong is named in words of bounded length.
    """
    depth = nesting(data)
    if depth > MAX_DEPTH:
        raise BadMessage(f"not a message: JSON nested deeper than {MAX_DEPTH} levels")
    try:
        obj = json.loads(data)
    except ValueError as e:  # UnicodeDecodeError included
        raise BadMessage(f"not JSON: {short(str(e))}") from None
    if not isinstance(obj, dict):
        raise BadMessage(f"not a JSON object: {type(obj).__name__}")
    cls = KINDS.get(obj.get(KIND))  # type: ignore[arg-type]
    if cls is None:
        raise BadMessage(f"unknown message kind {short(repr(obj.get(KIND)))} (known: {', '.join(sorted(KINDS))})")
    values = {k: v for k, v in obj.items() if k != KIND}
    _check_fields(cls, values)
    return cls(**values)


def nesting(data: bytes) -> int:
    """How deep `data`'s arrays and objects nest, brackets inside strings not counted (a loop, no recursion).

    Escaped backslashes and quotes are dropped first, then every byte but brackets and quotes: what
    is left is short for any real message. Stops counting once past MAX_DEPTH."""
    kept = data.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE)
    depth = deepest = 0
    in_string = False
    for b in kept:
        if b == 34:  # "
            in_string = not in_string
        elif in_string:
            continue
        elif b in (91, 123):  # [ {
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    break
        else:
            depth -= 1
    return deepest


def short(text: str, limit: int = EXCERPT) -> str:
    """`text` cut to `limit` characters (what a rejection quotes of untrusted input)."""
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def excerpt(data: bytes) -> str:
    """The start of a rejected message, printable and bounded, for its event."""
    return short(data[: EXCERPT * 4].decode("utf-8", errors="backslashreplace"))


def _check_fields(cls: type[Message], values: dict[str, Any]) -> None:
    names = {f.name for f in fields(cls)}
    missing, unknown = sorted(names - set(values)), sorted(set(values) - names)
    if missing or unknown:
        problems = ([f"missing {', '.join(missing)}"] if missing else []) + (
            [f"unknown {', '.join(unknown)}"] if unknown else []
        )
        raise BadMessage(short(f"message {cls.kind!r}: {'; '.join(problems)}"))
    for name, hint in _HINTS[cls.kind].items():
        if not _conforms(values[name], hint):
            raise BadMessage(f"message {cls.kind!r}: {name}={short(repr(values[name]))} is not {hint}")


def _conforms(value: Any, hint: Any) -> bool:
    """Does a JSON value fit a field's annotation (shallow: containers by their own type only)?"""
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return any(_conforms(value, h) for h in get_args(hint))
    if origin is not None:
        return isinstance(value, origin)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool) and -_INT64 <= value < _INT64
    return isinstance(value, hint)
