"""Which sweep root a command means: --root (a folder or a sweep file), the SPEC, or the current folder.

Its own module so that read commands find their root without importing `launch` and what it brings.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sweepq.errors import UsageError
from sweepq.layout import default_root_beside
from sweepq.queue.opening import database_file

if TYPE_CHECKING:
    from sweepq.spec.sweep import Sweep


def _load(path: str | Path) -> Sweep:
    from sweepq.spec.sweep import load_sweep  # the YAML reader and the grid: only when a file names the root

    return load_sweep(path)


def default_root(sweep: Sweep) -> Path:
    """`root:` from the file, else runs/<name> beside the file."""
    return sweep.root or default_root_beside(Path(sweep.settings.spec_dir), sweep.settings.name)


def resolve_root(spec: str | None, root: str | None) -> Path:
    """The sweep root from --root (a folder, or a sweep file), the SPEC, or the current folder."""
    if root:
        p = Path(root)
        if p.is_file() and p.suffix in (".yaml", ".yml"):
            return _resolved(default_root(_load(p)))
        return _resolved(p)
    if spec:
        if Path(spec).is_dir():  # `sweepq status runs/x`: a root where a sweep file may stand
            return _resolved(Path(spec))
        return _resolved(default_root(_load(spec)))
    cwd = Path.cwd()
    if database_file(cwd).exists():
        return cwd
    raise UsageError(
        "no sweep root given and the current folder is not one: pass the sweep file, "
        "--root DIR, or run the command inside a sweep root"
    )


def _resolved(root: Path) -> Path:
    try:
        return root.resolve()
    except (RuntimeError, OSError) as e:  # a loop of symbolic links (RuntimeError before Python 3.13)
        raise UsageError(f"the sweep root {root} cannot be used: {e}") from None
