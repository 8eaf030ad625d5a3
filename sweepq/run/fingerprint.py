"""Fingerprints of what an attempt ran with: environment, training code, declared data.

Recorded in every receipt and checkpoint manifest, so that "what changed?"
has an answer a week later, and a resume under different code or data warns.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from sweepq.version import __version__


def environment() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "torch": _torch_version(),
        "sweepq": __version__,
        "platform": platform.platform(),
        "executable": sys.executable,
    }


def _torch_version() -> str | None:
    """Without importing torch where it is not loaded (a program cell's supervisor)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return str(torch.__version__)
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def git_commit(folder: Path) -> dict[str, Any] | None:
    """The commit of the repository holding `folder` (and whether it had local changes)."""
    try:
        out = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        if out.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return {"commit": out.stdout.strip(), "dirty": bool(dirty.stdout.strip())}


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def entry_file(train: str, spec_dir: str) -> Path | None:
    """The file of a `module:function` entry point, found without importing it."""
    module = train.split(":", 1)[0]
    added = spec_dir not in sys.path
    if added:
        sys.path.insert(0, spec_dir)
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    finally:
        if added:
            sys.path.remove(spec_dir)
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        return None
    return Path(spec.origin)


def code(train: str | None, program: str | None, spec_dir: str) -> dict[str, Any]:
    path = entry_file(train, spec_dir) if train else (Path(spec_dir) / program if program else None)
    if path is None or not path.is_file():
        return {"entry": train or program, "file": None}
    return {
        "entry": train or program,
        "file": str(path),
        "sha256": file_sha256(path),
        "git": git_commit(path.parent),
    }


def data(paths: list[str]) -> dict[str, Any]:
    """Size and mtime of each declared data path (a folder: of every file in it)."""
    out: dict[str, Any] = {}
    for p in paths:
        path = Path(p)
        if not path.exists():
            out[p] = None
            continue
        files = [path] if path.is_file() else sorted(f for f in path.rglob("*") if f.is_file())
        h = hashlib.sha256()
        for f in files:
            st = f.stat()
            h.update(f"{f.relative_to(path) if f != path else f.name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        out[p] = {"files": len(files), "size_mtime_sha256": h.hexdigest()}
    return out


def changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between two fingerprints {"code": ..., "data": ...}, in words."""
    notes = []
    oc, nc = old.get("code") or {}, new.get("code") or {}
    if oc.get("sha256") and nc.get("sha256") and oc["sha256"] != nc["sha256"]:
        notes.append(f"training code {nc.get('file') or nc.get('entry')} changed since the checkpoint was written")
    og, ng = (oc.get("git") or {}), (nc.get("git") or {})
    if og.get("commit") and ng.get("commit") and og["commit"] != ng["commit"]:
        notes.append(f"git commit changed ({og['commit'][:10]} -> {ng['commit'][:10]})")
    od, nd = old.get("data") or {}, new.get("data") or {}
    for p in sorted(set(od) | set(nd)):
        if od.get(p) != nd.get(p):
            notes.append(f"data {p} changed since the checkpoint was written")
    return notes
