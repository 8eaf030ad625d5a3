"""The on-disk checkpoint format, readable without torch: file names, manifests, format versions.

A checkpoint is a folder `checkpoints/step-<step>/` with three files:
  tensors.safetensors   every tensor of the state (weights, moments, RNG, ...)
  state.json            the state's structure and plain values
  manifest.json         format, step, epoch, metrics, and the size and sha256 of the other files
A checkpoint of `kind: files` holds instead the files another library wrote
(Lightning's `.ckpt`, a Hugging Face `checkpoint-N/`), kept as they are (files.py).
A large state's tensors are split instead over `tensors-00001-of-0000N.safetensors`
... (each a complete safetensors file), hashed in parallel (image.py).

Three states: *writing* (a hidden `.writing-*` folder; readers never look at
it), *committed* (renamed to `step-<step>`), *superseded* (renamed to a hidden
`.trash-*` folder, then deleted in the background). A committed checkpoint that fails
verification is renamed `.corrupt-*` and kept for inspection. Only the holder
of the cell's lock writes, restores, cleans or deletes. Where the folders live
and how they are written and read is storage.py's business; this module only
says what the bytes of a manifest mean.

Format versions. `format` is "sweepq.checkpoint/<N>". This sweepq writes
VERSION and reads every version in READERS. A manifest of a version above
those is a checkpoint from a newer sweepq: CheckpointTooNew, never
CheckpointCorrupt, because a corrupt checkpoint is moved aside and skipped,
and skipping a newer one would silently resume from an older step (or from
0) and later delete it. A format bump adds the new version's reader to
READERS and keeps the old ones, translating an old manifest into the current
shape, so that old checkpoints keep loading.

Shape. Whatever reader translated it, a manifest is then checked against the
current shape (MANIFEST): every key a reader uses, with its type. A manifest
that parses but does not have that shape (a key renamed by a flipped bit, a
file entry that is not an object, a step that is not its folder's) is as
corrupt as one that does not parse, and the error says what is wrong. DONE.json
is checked the same way (marker.py), with the same small language (Field).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Flag, auto
from pathlib import Path, PurePosixPath
from typing import Any

from sweepq.errors import SweepqError
from sweepq.layout import MANIFEST_NAME

FORMAT_PREFIX = "sweepq.checkpoint/"
VERSION = 1
FORMAT = f"{FORMAT_PREFIX}{VERSION}"
TENSORS = "tensors.safetensors"
STATE = "state.json"
_FORMAT = re.compile(re.escape(FORMAT_PREFIX) + r"([1-9][0-9]*)")
_SHARD = re.compile(r"tensors-(\d{5})-of-(\d{5})\.safetensors")


class CheckpointCorrupt(Exception):
    """A committed checkpoint failed verification; the reader falls back."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path.name}: {why}")
        self.path, self.why = path, why


class CheckpointTooNew(SweepqError):
    """A checkpoint in a format newer than this sweepq reads: not corrupt, and never skipped or moved."""

    def __init__(self, path: Path, version: int, readable: int) -> None:
        super().__init__(
            f"{path}: written by a newer sweepq (format {version}; this sweepq reads formats up to {readable}): "
            "upgrade sweepq"
        )
        self.path, self.version, self.readable = path, version, readable


class OtherKind(SweepqError):
    """A committed checkpoint of the other kind: a state where files were asked for, or files where a state was.

    Never corruption (moving it aside would lose good work): the program's code
    changed how it checkpoints, and the user has to decide.
    """

    def __init__(self, where: Path, found: str, wanted: str) -> None:
        super().__init__(
            f"checkpoint {where} holds {found}, but this program resumes from {wanted}: the program's way of "
            "checkpointing changed since it was written (reset the cell to start it afresh: sweepq reset CELL)"
        )


def shard_name(index: int, count: int) -> str:
    return f"tensors-{index + 1:05d}-of-{count:05d}.safetensors"


def tensor_files(files: dict[str, Any]) -> list[str] | None:
    """The tensor files a manifest lists, in order: TENSORS alone or a complete set of shards; else None."""
    shards = [name for name in files if _SHARD.fullmatch(name)]
    if TENSORS in files:
        return None if shards else [TENSORS]
    if not shards:
        return None
    count = int(_SHARD.fullmatch(shards[0]).group(2))  # type: ignore[union-attr]
    expected = [shard_name(i, count) for i in range(count)]
    return expected if sorted(shards) == expected else None


# -- the shape of a JSON document ------------------------------------------------------


class Kind(Flag):
    """The JSON kinds a value may have; a field allows one or several (`Kind.STR | Kind.NULL`)."""

    NULL = auto()
    BOOL = auto()
    INT = auto()
    FLOAT = auto()
    STR = auto()
    LIST = auto()
    OBJECT = auto()


NUMBER = Kind.INT | Kind.FLOAT
_NAMES = {
    Kind.NULL: "null",
    Kind.BOOL: "a boolean",
    Kind.INT: "an integer",
    Kind.FLOAT: "a decimal number",
    Kind.STR: "a string",
    Kind.LIST: "a list",
    Kind.OBJECT: "an object",
}


def kind_of(value: Any) -> Kind:
    if value is None:
        return Kind.NULL
    if isinstance(value, bool):  # before int: a bool is an int to Python, not to JSON
        return Kind.BOOL
    for python, kind in ((int, Kind.INT), (float, Kind.FLOAT), (str, Kind.STR), (list, Kind.LIST)):
        if isinstance(value, python):
            return kind
    return Kind.OBJECT


def describe(kinds: Kind) -> str:
    """`Kind.INT | Kind.FLOAT | Kind.NULL` -> "a number or null"."""
    names = [_NAMES[k] for k in kinds if k not in NUMBER | Kind.NULL]
    if NUMBER in kinds:
        names.insert(0, "a number")
    elif Kind.INT in kinds or Kind.FLOAT in kinds:
        names.insert(0, _NAMES[kinds & NUMBER])
    return " or ".join(names + (["null"] if Kind.NULL in kinds else []))


@dataclass(frozen=True)
class Field:
    """What one value of a document must be: its kinds, and for an object its fields or each value's shape."""

    kinds: Kind
    required: bool = False
    inside: dict[str, Field] = field(default_factory=dict)  # the keys of an object this reader uses
    each: Field | None = None  # the shape of every value of an object (a table keyed by name)


def shape_error(value: Any, shape: Field, at: str = "") -> str | None:
    """The first way `value` is not of `shape`, in words ("files['a'].size is missing"); None when it is.

    Keys the shape does not name are allowed: a reader only answers for what it reads.
    """
    found = kind_of(value)
    if found not in shape.kinds:
        return f"{at or 'the document'} is not {describe(shape.kinds)} (it is {_NAMES[found]})"
    if found is not Kind.OBJECT:
        return None
    prefix = f"{at}." if at else ""
    for key, sub in shape.inside.items():
        if key not in value:
            if sub.required:
                return f"{prefix}{key} is missing"
            continue
        wrong = shape_error(value[key], sub, prefix + key)
        if wrong:
            return wrong
    if shape.each is not None:
        for key, item in value.items():
            wrong = shape_error(item, shape.each, f"{at}[{_short(key)!r}]")
            if wrong:
                return wrong
    return None


def _short(key: str) -> str:
    return key if len(key) <= 60 else key[:57] + "..."


# -- the current manifest ------------------------------------------------------------

MANIFEST = Field(
    Kind.OBJECT,
    inside={
        "step": Field(Kind.INT, required=True),
        "files": Field(
            Kind.OBJECT,
            required=True,
            each=Field(
                Kind.OBJECT,
                inside={"sha256": Field(Kind.STR, required=True), "size": Field(Kind.INT, required=True)},
            ),
        ),
        "created_at": Field(Kind.STR),
        "kind": Field(Kind.STR | Kind.NULL),  # "files": files another library wrote (files.py); else a state
        "epoch": Field(NUMBER | Kind.NULL),
        "metrics": Field(Kind.OBJECT | Kind.NULL),
        "attempt": Field(Kind.INT | Kind.NULL),
        "best": Field(
            Kind.OBJECT | Kind.NULL,
            inside={"value": Field(NUMBER | Kind.NULL), "step": Field(Kind.INT | Kind.NULL)},
        ),
        "fingerprints": Field(
            Kind.OBJECT | Kind.NULL,
            inside={
                "code": Field(
                    Kind.OBJECT | Kind.NULL,
                    inside={"git": Field(Kind.OBJECT | Kind.NULL, inside={"commit": Field(Kind.STR | Kind.NULL)})},
                ),
                "data": Field(Kind.OBJECT | Kind.NULL),
            },
        ),
    },
)
_SHA256 = re.compile(r"[0-9a-f]{64}")


def check(where: Path, m: Any, step: int | None = None) -> dict[str, Any]:
    """`m` when it is a manifest of the current shape (of checkpoint `step`, when given); else CheckpointCorrupt."""
    why = shape_error(m, MANIFEST) or _value_error(m, step)
    if why:
        raise CheckpointCorrupt(where, f"{MANIFEST_NAME}: {why}")
    return m


def _value_error(m: dict[str, Any], step: int | None) -> str | None:
    if m["step"] < 0:
        return f"step is negative ({m['step']})"
    if step is not None and m["step"] != step:
        return f"step is {m['step']}, but the checkpoint is step {step}"
    for name, entry in m["files"].items():
        if not _is_file_name(name):
            return f"files[{_short(name)!r}] is not the name of a checkpoint file"
        if not _SHA256.fullmatch(entry["sha256"]):
            return f"files[{_short(name)!r}].sha256 is not a sha256 digest (64 hex digits)"
        if entry["size"] < 0:
            return f"files[{_short(name)!r}].size is negative"
    return None


def _is_file_name(name: str) -> bool:
    """A plain name inside the checkpoint's folder: never a path that reads elsewhere, never the manifest."""
    return name not in ("", ".", "..", MANIFEST_NAME) and PurePosixPath(name).name == name and "\\" not in name


# -- reading a manifest, by format version ------------------------------------------

Reader = Callable[[Path, dict[str, Any]], dict[str, Any]]


def _read_v1(where: Path, m: dict[str, Any]) -> dict[str, Any]:
    return m  # the current shape: check() below is all it takes


# version -> a function that returns a manifest of that version in the current
# shape (what commit.py, retention and the reaper read), which parse() then
# checks. The newest entry is VERSION; older ones stay for as long as their
# checkpoints may be around.
READERS: dict[int, Reader] = {1: _read_v1}


def format_version(fmt: Any) -> int | None:
    """N of "sweepq.checkpoint/N"; None when `fmt` is no sweepq checkpoint format."""
    found = _FORMAT.fullmatch(fmt) if isinstance(fmt, str) else None
    return int(found.group(1)) if found else None


def parse(raw: bytes, where: Path, step: int | None = None) -> dict[str, Any]:
    """A manifest's bytes as the current format's manifest; raises CheckpointCorrupt or CheckpointTooNew.

    `where` names the checkpoint in errors; `step`, when given, is the step it must say it is.
    """
    try:
        m = json.loads(raw)
    except (ValueError, RecursionError) as e:  # RecursionError: nested deeper than the parser goes
        raise CheckpointCorrupt(where, f"manifest unreadable ({e.__class__.__name__}: {e})") from e
    version = format_version(m.get("format")) if isinstance(m, dict) else None
    if version is None:
        raise CheckpointCorrupt(where, "manifest is not a sweepq checkpoint manifest")
    newest = max(READERS)
    if version > newest:
        raise CheckpointTooNew(where, version, newest)
    reader = READERS.get(version)
    if reader is None:  # an old version no longer read: as unusable as a damaged one
        raise CheckpointCorrupt(where, f"manifest format {version} is no longer read by this sweepq")
    try:
        translated = reader(where, m)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:  # an old shape, damaged
        raise CheckpointCorrupt(where, f"manifest format {version} unreadable ({e.__class__.__name__}: {e})") from e
    return check(where, translated, step)
