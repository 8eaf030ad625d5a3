"""Every sweep file shown in README.md and the documentation (docs/) is one sweepq reads.

Every ```python block is Python, and every name it imports from sweepq exists
(a renamed callback or method would leave the manual promising it). Every `$ sweepq ...`
command shown is a command sweepq has, with options it takes.

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
# The README and every page of the site, read from the files as they are: a page added to docs/ is checked too.
DOCS = ("README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").rglob("*.md")))
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


def forms(docs: tuple[str, ...]) -> set[str]:
    return {"wandb" if "method:" in text else "grouped" for doc in docs for _, whole, text in yaml_blocks(doc) if whole}


def test_the_examples_are_found_where_they_are_shown() -> None:
    """The extraction finds the examples (a fence it missed would leave them unchecked): the README shows the
    grouped form, the format reference both forms, the W&B how-to W&B's, the pages that teach by example some."""
    assert forms(("README.md",)) == {"grouped"}
    assert forms(("docs/sweep-format.md",)) == {"grouped", "wandb"}
    assert forms(("docs/howto/wandb.md",)) == {"wandb"}
    for page in ("docs/guide/sweep-files.md", "docs/howto/own-script.md", "docs/howto/hydra.md"):
        assert forms((page,)) == {"grouped"}, page


def test_an_invalid_example_would_fail() -> None:
    """The W&B command written inline without quotes (as the README once had it) is not YAML."""
    from sweepq.errors import SpecError

    broken = "name: w\nmethod: grid\nprogram: t.py\ncommand: [${env}, ${program}]\nparameters: {lr: {values: [1]}}\n"
    with pytest.raises(SpecError, match="line 4"):
        parse_sweep(broken, REPO / "sweeps" / "example.yaml")


_PY_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
PY_BLOCKS = [
    (f"{doc}:{text.count(chr(10), 0, m.start()) + 1}", m.group(1))
    for doc in DOCS
    for text in [(REPO / doc).read_text()]
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
            from sweepq import Run

            assert hasattr(Run, node.attr), f"{where}: sweepq.Run has no {node.attr}"


def test_the_integrations_are_shown() -> None:
    shown: dict[str, str] = {}
    for where, code in PY_BLOCKS:
        shown[where.split(":")[0]] = shown.get(where.split(":")[0], "") + code
    assert "sweepq.integrations.lightning" in shown["docs/howto/lightning.md"]
    assert "sweepq.integrations.transformers" in shown["docs/howto/hugging-face.md"]
    assert "def train(cfg: dict, run: sweepq.Run)" in shown["README.md"]


# A command shown as typed at a prompt, in any fenced block: `$ sweepq NAME [SUB] ARGS...  # comment`.
_SHOWN = re.compile(r"^[ \t]*\$ sweepq (.*)$", re.MULTILINE)
COMMANDS_SHOWN = [
    (f"{doc}:{text.count(chr(10), 0, m.start()) + 1}", m.group(1))
    for doc in DOCS
    for text in [(REPO / doc).read_text()]
    for m in _SHOWN.finditer(text)
]


def test_commands_are_shown() -> None:
    assert {line.split()[0] for _, line in COMMANDS_SHOWN} >= {"launch", "status", "show", "best", "plan", "report"}


@pytest.mark.parametrize(("where", "line"), COMMANDS_SHOWN, ids=[c[0] for c in COMMANDS_SHOWN])
def test_every_command_shown_exists_with_its_options(where: str, line: str) -> None:
    """A renamed command or option would leave the manual showing one that sweepq refuses."""
    import shlex

    import click

    from sweepq.cli.main import main

    words = shlex.split(line, comments=True)
    ctx = click.Context(main)
    command = main.get_command(ctx, words[0])
    assert command is not None, f"{where}: sweepq has no command {words[0]!r}"
    if isinstance(command, click.Group):  # `export csv ...`: the subcommand's options
        command = command.get_command(ctx, words[1])
        assert command is not None, f"{where}: sweepq {words[0]} has no command {words[1]!r}"
    options = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    for word in words[1:]:
        if word.startswith("-") and not word.lstrip("-").replace(".", "").isdigit():
            assert word.split("=")[0] in options, f"{where}: sweepq {words[0]} has no option {word}"


def test_the_readme_is_short_and_states_the_two_commands() -> None:
    """A newcomer's five minutes: the README stays short, its two commands are the ones CI runs."""
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    assert "\nmake run     #" in readme and "\nmake test    #" in readme
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert "make test" in ci and "make docs" in ci


@pytest.mark.parametrize("doc", DOCS)
def test_no_page_names_a_machine(doc: str) -> None:
    """The manual speaks of the project: no absolute path of a machine it was written on."""
    text = (REPO / doc).read_text()
    assert not re.search(r"(?<![\w.])/(home|root|work|tmp/pytest)/", text), doc


def shown_output(doc: str, command: str) -> str:
    """The lines a page shows under `$ <command>` (a comment after it allowed), up to the next prompt or the fence."""
    lines = (REPO / doc).read_text().splitlines()
    (start,) = [i for i, line in enumerate(lines) if re.fullmatch(rf"\$ {re.escape(command)}( +#.*)?", line)]
    out: list[str] = []
    for line in lines[start + 1 :]:
        if line.startswith(("$ ", "```")):
            break
        out.append(line)
    return "\n".join(out).rstrip("\n") + "\n"


# (page, command as shown, the folder it runs in: a folder of the repository, or None for the page's own sweep
# file written beside its program, as a reader would save them: the page's ```python block that starts with
# `# <program>`, else an empty file). A page shows that folder as <here>.
PLANS = [
    ("docs/guide/sweep-files.md", "sweepq plan sweeps/llm-analysis.yaml", "."),
    ("docs/howto/wandb.md", "sweepq plan wandb-grid.yaml", "sweeps"),
    ("docs/howto/hydra.md", "sweepq plan hydra-sweep.yaml", None),
]


@pytest.mark.parametrize(("doc", "command", "folder"), PLANS, ids=[f"{p[0]}:{p[1]}" for p in PLANS])
def test_a_plan_shown_is_what_plan_prints(
    doc: str, command: str, folder: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`plan` touches nothing, so the output a page shows can be printed again here and compared whole."""
    from click.testing import CliRunner

    from sweepq.cli.main import main

    if folder is None:
        ((_, _, text),) = [b for b in yaml_blocks(doc) if b[1]]
        (tmp_path / command.split()[-1]).write_text(text)
        program = parse_sweep(text, tmp_path / "x.yaml").settings.program
        assert program
        sources = [
            code for where, code in PY_BLOCKS if where.startswith(f"{doc}:") and code.startswith(f"# {program}\n")
        ]
        (tmp_path / program).write_text("".join(sources))
        monkeypatch.chdir(tmp_path)
    else:
        monkeypatch.chdir(REPO / folder)
    monkeypatch.delenv("COLUMNS", raising=False)
    result = CliRunner().invoke(main, command.split()[1:])
    assert result.exit_code == 0, result.output
    printed = result.stdout.replace(str(tmp_path.resolve()), "<here>")
    assert printed == shown_output(doc, command), f"{doc}: `{command}` prints otherwise now; show what it prints"


# architecture.md is the map of the tree and is kept with it; the other pages name a module now and then.
PAGES_NAMING_MODULES = [doc for doc in DOCS if doc != "docs/architecture.md"]


@pytest.mark.parametrize("doc", PAGES_NAMING_MODULES)
def test_every_module_a_page_names_exists(doc: str) -> None:
    """A module moved or renamed would leave the page pointing readers at nothing."""
    named = re.findall(r"`(sweepq/[\w/]+\.py)`", (REPO / doc).read_text())
    assert [path for path in named if not (REPO / path).is_file()] == [], doc
