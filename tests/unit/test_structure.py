"""The architecture as a test: no import cycles, a public API that stays light.

Modules are sized by their concept, not by a line count: there is no cap on a module's length."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import sweepq

PACKAGE = Path(sweepq.__file__).resolve().parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_time_imports(
    tree: ast.Module, in_functions: bool = False, type_checking: bool = False
) -> list[ast.Import | ast.ImportFrom]:
    """Imports that can run; inside functions and under `if TYPE_CHECKING:` only when asked."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.append(node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if in_functions:
                    visit(node.body)
            elif isinstance(node, ast.If) and _is_type_checking(node.test):
                if type_checking:
                    visit(node.body)
                visit(node.orelse)
            else:
                for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                    children = getattr(node, field, None)
                    if isinstance(children, list):
                        for child in children:
                            visit(child.body if isinstance(child, (ast.ExceptHandler, ast.match_case)) else [child])

    visit(tree.body)
    return found


def _known(name: str) -> str | None:
    """The sweepq module that importing `name` runs last: itself, else its nearest package."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, in_functions: bool = False, type_checking: bool = False) -> set[str]:
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    edges: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in import_time_imports(tree, in_functions, type_checking):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:  # relative: resolved against this module's package
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            # `from sweepq.pkg import module` imports sweepq.pkg.module; `from m import name` imports m.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        edges.update(t for name in targets if name.startswith("sweepq") and (t := _known(name)) and t != module)
    return edges


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each as a closed path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(_cycle_through(graph, set(component)))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def _cycle_through(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """One concrete cycle inside a strongly connected component, for the message."""
    start = min(component)
    path, seen = [start], {start}
    while True:
        nxt = sorted(w for w in graph[path[-1]] if w in component)
        back = [w for w in nxt if w in seen]
        if back:
            return [*path[path.index(back[0]) :], back[0]]
        path.append(nxt[0])
        seen.add(nxt[0])


PLANTED = """
import a
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    import b
else:
    import c
def f():
    import d
class K:
    import e
try:
    import g
except ImportError:
    import h
"""


def test_only_import_time_imports_count() -> None:
    found = import_time_imports(ast.parse(PLANTED))
    names = [n.names[0].name if isinstance(n, ast.Import) else n.module for n in found]
    assert names == ["a", "typing", "c", "e", "g", "h"]
    found = import_time_imports(ast.parse(PLANTED), in_functions=True)
    assert [n.names[0].name if isinstance(n, ast.Import) else n.module for n in found] == [
        "a",
        "typing",
        "c",
        "d",
        "e",
        "g",
        "h",
    ]
    found = import_time_imports(ast.parse(PLANTED), in_functions=True, type_checking=True)
    assert [n.names[0].name if isinstance(n, ast.Import) else n.module for n in found] == [
        "a",
        "typing",
        "b",
        "c",
        "d",
        "e",
        "g",
        "h",
    ]


def test_the_import_graph_sees_the_package() -> None:
    assert {"sweepq", "sweepq.queue.store", "sweepq.cli.main", "sweepq.spec.sweep"} <= set(MODULES)
    assert {"sweepq.errors", "sweepq.spec.types"} <= imports_of("sweepq.queue.reconcile")
    assert imports_of("sweepq.queue.states") == {"sweepq.errors"}


def test_cycle_finder_finds_a_planted_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert find_cycles(graph) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize(
    ("in_functions", "type_checking"),
    [(False, False), (True, False), (True, True)],
    ids=["module-level", "with-function-level", "with-type-checking"],
)
def test_no_import_cycles(in_functions: bool, type_checking: bool) -> None:
    """Not even through an import inside a function or under `if TYPE_CHECKING:`: a lazy import that
    closes a cycle is still a cycle, and so is a type annotation's (the two modules are one concept)."""
    graph = {m: imports_of(m, in_functions, type_checking) for m in MODULES}
    cycles = find_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


PROBE = """
import json, sys
import sweepq.cli.main
cli_imports_torch = "torch" in sys.modules
# What the attempt process of a program cell runs before and after its program: no torch either.
from sweepq.attempt import main as attempt
from sweepq.run import fingerprint
from sweepq.run import metrics
from sweepq.program import supervisor as program
attempt.gpus_seen(), attempt.peak_memory(), fingerprint.environment(), metrics.plain({"loss": 1.0})
supervisor_imports_torch = "torch" in sys.modules
import sweepq
api = {name: f"{getattr(sweepq, name).__module__}.{getattr(sweepq, name).__qualname__}" for name in sweepq.__all__
       if name != "__version__"}
print(json.dumps({"cli_imports_torch": cli_imports_torch, "supervisor_imports_torch": supervisor_imports_torch,
                  "api": api}))
"""


@pytest.fixture(scope="module")
def fresh_interpreter() -> dict[str, object]:
    """One fresh interpreter for both checks: the CLI's imports, then the public names (which need torch)."""
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_cli_does_not_import_torch(fresh_interpreter: dict[str, object]) -> None:
    assert fresh_interpreter["cli_imports_torch"] is False


def test_a_program_cells_supervisor_does_not_import_torch(fresh_interpreter: dict[str, object]) -> None:
    """The attempt process of a `program:` cell only watches its program: loading torch would cost it ~2 CPU-s."""
    assert fresh_interpreter["supervisor_imports_torch"] is False


def test_public_api_resolves(fresh_interpreter: dict[str, object]) -> None:
    api = fresh_interpreter["api"]
    assert isinstance(api, dict)
    assert sorted(api) == ["DataError", "NonFiniteLoss", "Run"]
    assert all(path.startswith("sweepq.") and path.endswith(f".{name}") for name, path in api.items())
    with pytest.raises(AttributeError):
        _ = sweepq.NoSuchName


def every_import(module: str) -> set[str]:
    """Every sweepq module that `module` names in an import, wherever it stands: at the top, in a function,
    under `if TYPE_CHECKING:` (which layer a module belongs to is what it knows of, not only what it runs)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    named: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            named.update(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names)
    return {name for name in named if name.startswith("sweepq")}


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@pytest.mark.parametrize(
    ("lower", "upper"),
    [("sweepq.html", "sweepq.cli"), ("sweepq.results", "sweepq.cli"), ("sweepq.results", "sweepq.html")],
)
def test_the_results_vocabulary_lies_below_both_views(lower: str, upper: str) -> None:
    """The page and the terminal both import the results' vocabulary (sweepq.results) downward: the page
    imports nothing of the terminal, and the vocabulary nothing of either."""
    layer = [m for m in MODULES if _under(m, lower)]
    assert len(layer) > 1, f"no modules found under {lower}"
    assert "sweepq.results.params" in every_import("sweepq.html.sections")  # the walk sees what is imported
    wrong = {m: t for m in layer if (t := sorted(n for n in every_import(m) if _under(n, upper)))}
    assert not wrong, f"{lower} imports {upper}: {wrong}"
