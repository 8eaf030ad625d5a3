"""The done marker, DONE.json: written last by the training process, trusted first on relaunch.

It is written atomically after the final checkpoint is committed and before
the database is told, so a crash in between leaves a marker that the next
launch uses to repair the database (never the other way round).
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from sweepq.atomic import atomic_write_json, read_json
from sweepq.layout import MANIFEST_NAME, CellPaths


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


def read_done(paths: CellPaths) -> dict[str, Any] | None:
    """The marker if present and parseable, else None."""
    try:
        marker = read_json(paths.done)
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def verify_done(paths: CellPaths, cfg_hash: str) -> tuple[dict[str, Any] | None, str | None]:
    """(marker, None) when DONE.json verifies; (None, why) otherwise.

    Verified means: it parses, names this cell and this cfg, and the final
    checkpoint it names still has the manifest it had (cheap: the manifest's
    sha256, not every file's, so a relaunch stays fast with large models).
    """
    if not paths.done.exists():
        return None, "no DONE.json"
    marker = read_done(paths)
    if marker is None:
        return None, "DONE.json does not parse"
    if marker.get("cell") != paths.cell_id:
        return None, f"DONE.json names cell {marker.get('cell')!r}"
    if marker.get("cfg_hash") != cfg_hash:
        return None, "DONE.json was written for a different cfg"
    rel = marker.get("checkpoint")
    if rel:
        manifest = paths.resolve(rel) / MANIFEST_NAME
        if not manifest.exists():
            return None, f"the final checkpoint {rel} is missing"
        if marker.get("checkpoint_manifest_sha256") not in (None, _sha(manifest)):
            return None, f"the final checkpoint {rel} changed since DONE.json was written"
    return marker, None


def _sha(path: Any) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
