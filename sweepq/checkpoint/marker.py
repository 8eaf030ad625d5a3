"""The done marker, DONE.json: written last by the training process, trusted first on relaunch.

It is written atomically after the final checkpoint is committed and before
the database is told, so a crash in between leaves a marker that the next
launch uses to repair the database (never the other way round). A DONE.json
that does not have the marker's shape (DONE below) is no marker: the cell is
not done, whatever else it says.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from sweepq.atomic import atomic_write_json, read_json
from sweepq.checkpoint.manifest import Field, Kind, shape_error
from sweepq.layout import MANIFEST_NAME, CellPaths

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
) -> dict[str, Any]:
    ckpt = paths.checkpoint(checkpoint_step) if checkpoint_step is not None else None
    msha = _sha(paths.manifest(checkpoint_step)) if checkpoint_step is not None else None
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
    atomic_write_json(paths.done, marker)
    return marker


def load_done(paths: CellPaths) -> tuple[dict[str, Any] | None, str | None]:
    """(marker, None) when DONE.json is there, parses and has the marker's shape; (None, why) otherwise."""
    try:
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


def read_done(paths: CellPaths) -> dict[str, Any] | None:
    """The marker if present, parseable and of the marker's shape, else None."""
    return load_done(paths)[0]


def verify_done(paths: CellPaths, cfg_hash: str) -> tuple[dict[str, Any] | None, str | None]:
    """(marker, None) when DONE.json verifies; (None, why) otherwise.

    Verified means: it parses, has the marker's shape, names this cell and this
    cfg, and the final checkpoint it names still has the manifest it had (cheap:
    the manifest's sha256, not every file's, so a relaunch stays fast with
    large models).
    """
    marker, why = load_done(paths)
    if marker is None:
        return None, why
    if marker["cell"] != paths.cell_id:
        return None, f"DONE.json names cell {marker['cell']!r}"
    if marker["cfg_hash"] != cfg_hash:
        return None, "DONE.json was written for a different cfg"
    rel = marker["checkpoint"]
    if rel:
        try:
            sha = _sha(paths.resolve(rel) / MANIFEST_NAME)
        except FileNotFoundError:
            return None, f"the final checkpoint {rel} is missing"
        except (OSError, ValueError) as e:  # ValueError: a path with a NUL byte
            return None, f"the final checkpoint {rel} cannot be read ({e.__class__.__name__}: {e})"
        if marker.get("checkpoint_manifest_sha256") not in (None, sha):
            return None, f"the final checkpoint {rel} changed since DONE.json was written"
    return marker, None


def _sha(path: Any) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
