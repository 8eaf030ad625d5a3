"""The done marker, DONE.json: written last by the training process, trusted first on relaunch.

It is written atomically after the final checkpoint is committed and before
the database is told, so a crash in between leaves a marker that the next
launch uses to repair the database (never the other way round). A DONE.json
that does not have the marker's shape (DONE below) is no marker: the cell is
not done, whatever else it says.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweepq.atomic import atomic_write_json, read_json
from sweepq.checkpoint.manifest import CheckpointCorrupt, CheckpointTooNew, Field, Kind, shape_error
from sweepq.durable.files import CellFiles, is_root
from sweepq.layout import DONE_NAME, MANIFEST_NAME, STEP_DIR, CellPaths

if TYPE_CHECKING:
    from sweepq.checkpoint.storage import CheckpointStorage

# What write_done writes and its readers use (verify_done, the reaper, repairs from the marker);
# epoch and best are a program's own words, shown as they are.
DONE = Field(
    Kind.OBJECT,
    inside={
        "cell": Field(Kind.STR, required=True),
        "cfg_hash": Field(Kind.STR, required=True),
        "metrics": Field(Kind.OBJECT | Kind.NULL, required=True),
        "checkpoint": Field(Kind.STR | Kind.NULL, required=True),
        "attempt": Field(Kind.INT, required=True),
        "finished_at": Field(Kind.STR, required=True),
        "checkpoint_manifest_sha256": Field(Kind.STR | Kind.NULL),
        "step": Field(Kind.INT | Kind.NULL),
    },
)


def write_done(
    paths: CellPaths,
    *,
    cfg_hash: str,
    metrics: Any,
    checkpoint_step: int | None,
    attempt: int,
    step: int | None,
    epoch: float | None,
    best: float | None,
    best_step: int | None,
    checkpoints: CheckpointStorage | None = None,
    files: CellFiles | None = None,
) -> dict[str, Any]:
    """`checkpoints`: the sweep's storage of the cell's checkpoints (storage.for_cell); None: the root's.
    `files`: the cell's durable files in the sweep's storage (durable/files.py); None: the root's.

    In a storage other than the root, the marker is put there first (where every machine reads it),
    and also as `attempts/<n>/DONE.json`, which no other attempt ever writes: a superseded attempt's
    late put of DONE.json cannot take the current attempt's account away. The root's copy follows.
    """
    ckpt = paths.checkpoint(checkpoint_step) if checkpoint_step is not None else None
    msha = _manifest_sha(paths, checkpoint_step, checkpoints) if checkpoint_step is not None else None
    marker = {
        "cell": paths.cell_id,
        "cfg_hash": cfg_hash,
        "metrics": metrics,
        "checkpoint": paths.relative(ckpt) if ckpt is not None else None,
        "checkpoint_manifest_sha256": msha,
        "attempt": attempt,
        "finished_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        "step": step,
        "epoch": epoch,
        "best": best,
        "best_step": best_step,
    }
    if files is not None and not is_root(files, paths):
        raw = (json.dumps(marker, indent=2, sort_keys=True) + "\n").encode()
        files.put(f"attempts/{attempt}/{DONE_NAME}", raw)
        files.put(DONE_NAME, raw)
    atomic_write_json(paths.done, marker)
    return marker


def load_done(paths: CellPaths, files: CellFiles | None = None) -> tuple[dict[str, Any] | None, str | None]:
    """(marker, None) when DONE.json is there, parses and has the marker's shape; (None, why) otherwise.

    `files`: the cell's durable files in the sweep's storage; the marker there is the one that counts
    (the root's copy may be missing, on another machine than the one that trained the cell)."""
    try:
        if files is not None and not is_root(files, paths):
            raw = files.read(DONE_NAME)
            if raw is None:
                raise FileNotFoundError(files.describe(DONE_NAME))
            marker = json.loads(raw)
        else:
            marker = read_json(paths.done)
    except FileNotFoundError:
        return None, "no DONE.json"
    except OSError as e:
        return None, f"DONE.json cannot be read ({e.__class__.__name__}: {e})"
    except (ValueError, RecursionError) as e:  # RecursionError: nested deeper than the parser goes
        return None, f"DONE.json does not parse ({e.__class__.__name__}: {e})"
    wrong = shape_error(marker, DONE)
    if wrong is None and marker["attempt"] < 1:
        wrong = f"attempt is {marker['attempt']}"
    if wrong is not None:
        return None, f"DONE.json is not a done marker: {wrong}"
    return marker, None


def read_done(paths: CellPaths, files: CellFiles | None = None) -> dict[str, Any] | None:
    """The marker if present, parseable and of the marker's shape, else None."""
    return load_done(paths, files)[0]


def verify_done(
    paths: CellPaths, cfg_hash: str, checkpoints: CheckpointStorage | None = None, files: CellFiles | None = None
) -> tuple[dict[str, Any] | None, str | None]:
    """(marker, None) when DONE.json verifies; (None, why) otherwise.

    Verified means: it parses, has the marker's shape, names this cell and this
    cfg, and the final checkpoint it names still has the manifest it had (cheap:
    the manifest's sha256, not every file's, so a relaunch stays fast with
    large models). `checkpoints` is where the cell's checkpoints are (storage.for_cell), `files` its
    durable files (durable/files.py); None: the root.
    """
    marker, why = load_done(paths, files)
    if marker is None:
        return None, why
    if marker["cell"] != paths.cell_id:
        return None, f"DONE.json names cell {marker['cell']!r}"
    if marker["cfg_hash"] != cfg_hash:
        return None, "DONE.json was written for a different cfg"
    rel = marker["checkpoint"]
    if rel:
        try:
            sha = _named_sha(paths, rel, checkpoints)
        except FileNotFoundError:
            return None, f"the final checkpoint {rel} is missing"
        except (OSError, ValueError) as e:  # ValueError: a path with a NUL byte
            return None, f"the final checkpoint {rel} cannot be read ({e.__class__.__name__}: {e})"
        if marker.get("checkpoint_manifest_sha256") not in (None, sha):
            return None, f"the final checkpoint {rel} changed since DONE.json was written"
    return marker, None


def _named_sha(paths: CellPaths, rel: str, checkpoints: CheckpointStorage | None) -> str:
    """The sha256 of the manifest of the checkpoint DONE.json names (`checkpoints/step-<step>`)."""
    if checkpoints is None:
        return _sha(paths.resolve(rel) / MANIFEST_NAME)
    folder, _, name = rel.rpartition("/")
    named = STEP_DIR.match(name)
    if folder != "checkpoints" or named is None:
        raise ValueError("it is no checkpoint of the cell's")
    return _manifest_sha(paths, int(named.group(1)), checkpoints)


def _manifest_sha(paths: CellPaths, step: int, checkpoints: CheckpointStorage | None) -> str:
    """A committed step's manifest's sha256: a folder's file hashed as it is (cheap, whatever it says); an
    object store's manifest read through its storage (missing: FileNotFoundError, like a file's)."""
    from sweepq.checkpoint.storage import LocalFolder

    if checkpoints is None:
        return _sha(paths.manifest(step))
    if isinstance(checkpoints, LocalFolder):
        return _sha(checkpoints.location(step) / MANIFEST_NAME)
    try:
        return checkpoints.read_manifest(step)[1]
    except (CheckpointCorrupt, CheckpointTooNew) as e:
        if step not in checkpoints.steps():
            raise FileNotFoundError(str(e)) from e
        raise OSError(e.why if isinstance(e, CheckpointCorrupt) else str(e)) from e


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
