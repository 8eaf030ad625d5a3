"""Every sweep file shown in README.md and docs/sweep-format.md is one sweepq reads.

Every ```python block is Python, and every name it imports from sweepq exists
(a renamed callback or method would leave the README promising it).

A ```yaml block is a whole sweep file and must parse (sweepq.spec.sweep.parse_sweep,
as `plan` reads it, without the machine checks: the programs it names need not exist
here). A block that shows only part of a file is fenced ```yaml fragment and must
still be valid YAML.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sweepq.spec.sweep import parse_sweep
from sweepq.spec.yamlload import load_yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "docs/sweep-format.md")
_FENCE = re.compile(r"^```yaml( fragment)?[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def yaml_blocks(doc: str) -> list[tuple[str, bool, str]]:
    """(where, whole file?, text) of each ```yaml block of `doc`, where = "doc:line"."""
    text = (REPO / doc).read_text()
    return [
        (f"{doc}:{text.count(chr(10), 0, m.start()) + 1}", m.group(1) is None, m.group(2))
        for m in _FENCE.finditer(text)
    ]


BLOCKS = [block for doc in DOCS for block in yaml_blocks(doc)]


@pytest.mark.parametrize(("where", "whole", "text"), BLOCKS, ids=[b[0] for b in BLOCKS])
def test_every_yaml_example_is_valid(where: str, whole: bool, text: str) -> None:
    if whole:
        sweep = parse_sweep(text, REPO / "sweeps" / "example.yaml")  # a SpecError names the problem
        assert sweep.cells
    else:
        load_yaml(text, where)


def test_both_forms_are_shown_in_each_document() -> None:
    """The extraction finds the examples (a fence it missed would leave them unchecked)."""
    for doc in DOCS:
        forms = {"wandb" if "method:" in text else "grouped" for _, whole, text in yaml_blocks(doc) if whole}
        assert forms == {"grouped", "wandb"}, doc


def test_an_invalid_example_would_fail() -> None:
    """The W&B command written inline without quotes (as the README once had it) is not YAML."""
    from sweepq.errors import SpecError

    broken = "name: w\nmethod: grid\nprogram: t.py\ncommand: [${env}, ${program}]\nparameters: {lr: {values: [1]}}\n"
    with pytest.raises(SpecError, match="line 4"):
        parse_sweep(broken, REPO / "sweeps" / "example.yaml")


_PY_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
PY_BLOCKS = [
    (f"README.md:{text.count(chr(10), 0, m.start()) + 1}", m.group(1))
    for text in [(REPO / "README.md").read_text()]
    for m in _PY_FENCE.finditer(text)
]


@pytest.mark.parametrize(("where", "code"), PY_BLOCKS, ids=[b[0] for b in PY_BLOCKS])
def test_every_python_example_parses_and_its_sweepq_names_exist(where: str, code: str) -> None:
    import ast
    import importlib

    tree = ast.parse(code, where)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sweepq"):
            module = importlib.import_module(node.module or "")
            for alias in node.names:
                assert hasattr(module, alias.name), f"{where}: {node.module} has no {alias.name}"
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "run":
            from sweepq.run.run import Run

            assert hasattr(Run, node.attr), f"{where}: sweepq.Run has no {node.attr}"


def test_the_integrations_are_shown() -> None:
    shown = "\n".join(code for _, code in PY_BLOCKS)
    assert "sweepq.integrations.lightning" in shown and "sweepq.integrations.transformers" in shown
