"""Does `train: module:function` name a function that exists? Answered without importing anything.

A typo in `train:` used to start every cell and fail each one. Importing the
user's module to check would run its top-level code (often torch and data
loading: seconds) in `plan`, which must stay import-free. So the module's file
is found the way the import system would find it (the sweep file's folder
first, then sys.path), and its source is read: the function must be bound at
the top level (a def, a class, an assignment or an import). A module that
makes its names dynamically (a module `__getattr__`, `from x import *`) is
given the benefit of the doubt.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import sys
from pathlib import Path


def train_entry_problem(train: str, spec_dir: str) -> str | None:
    """Why `train` (module:function) cannot be what a cell runs, or None when it looks right."""
    module, _, function = train.partition(":")
    found = find_module_file(module, spec_dir)
    if found is None:
        return (
            f"module {module!r} cannot be found (not in the sweep file's folder {spec_dir} nor on "
            "Python's path): check the spelling, or install the package that provides it"
        )
    if found.suffix != ".py":
        return None  # a compiled module: nothing to read
    try:
        tree = ast.parse(found.read_bytes(), filename=str(found))
    except (OSError, SyntaxError, ValueError) as e:
        return f"module {module!r} ({found}) cannot be read: {e}"
    names, dynamic = _top_level_names(tree)
    if function in names or dynamic:
        return None
    near = difflib.get_close_matches(function, sorted(names), n=1)
    return f"module {module!r} ({found}) defines no {function!r}" + (f": did you mean {near[0]!r}?" if near else "")


def find_module_file(module: str, spec_dir: str) -> Path | None:
    """The file `import module` would load, found without running any of it."""
    parts = module.split(".")
    if not all(p.isidentifier() for p in parts):
        return None
    for base in [spec_dir, *sys.path]:
        hit = _in_folder(Path(base or "."), parts)
        if hit is not None:
            return hit
    try:  # a namespace or zipped package, or one an import hook provides: asking the top level imports nothing
        top = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError):
        return None
    if top is None:
        return None
    if len(parts) == 1:
        return Path(top.origin) if top.origin else None
    for location in top.submodule_search_locations or []:  # an editable install's package, say
        hit = _in_folder(Path(location), parts[1:])
        if hit is not None:
            return hit
    return None


def _in_folder(base: Path, parts: list[str]) -> Path | None:
    folder = base.joinpath(*parts[:-1])
    for candidate in (folder / parts[-1] / "__init__.py", folder / f"{parts[-1]}.py"):
        if candidate.is_file():
            return candidate
    return None


def _top_level_names(tree: ast.Module) -> tuple[set[str], bool]:
    """(names bound at the module's top level, also under if/try/with; whether it may make more at run time)."""
    names: set[str] = set()
    dynamic = False
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                dynamic = dynamic or alias.name == "*"
                names.add((alias.asname or alias.name).split(".")[0])
        else:  # the statements under an if, try, with or loop bind top-level names too
            for field in ("body", "orelse", "finalbody"):
                pending.extend(getattr(node, field, None) or [])
            for handler in getattr(node, "handlers", None) or []:
                pending.extend(handler.body)
    return names, dynamic or "__getattr__" in names
