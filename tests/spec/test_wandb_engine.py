"""Real W&B sweep files from public repositories, run through W&B's own engine and through sweepq.

For every grid sweepq accepts, the runs (their order and values) equal those of W&B's grid
code (PyPI `sweeps`), and the command lines equal those W&B's agent (PyPI `wandb`) builds:
the file's own command, every args macro (`${args}`, `${args_no_hyphens}`,
`${args_no_boolean_flags}`, `${args_no_equals}`, `${args_json}`, `${args_append_hydra}`,
`${args_override_hydra}`) and the args JSON file. Every other file is refused with one
paragraph that names the reason. The table `CASES` says what W&B and sweepq each do with
every file; tests/data/wandb/SOURCES.md says where each comes from.

The engine runs in its own virtualenv, .venv-wandb (`make wandb-engine`), through
tests/wandb_engine/expand.py, in one subprocess for all the files.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from click.testing import CliRunner
from conftest import HERE, REPO_ROOT

from sweepq.cli.main import main
from sweepq.errors import SpecError
from sweepq.spec.command import args_json, render_command
from sweepq.spec.sweep import load_sweep

DATA = HERE / "data" / "wandb"
ENGINE = HERE / "wandb_engine" / "expand.py"
ENGINE_PYTHON = REPO_ROOT / ".venv-wandb" / "bin" / "python"
ARGS_JSON_FILE = "<args_json_file>"  # as expand.py names the agent's args JSON file


@dataclasses.dataclass(frozen=True)
class Refused:
    """A file sweepq refuses: what W&B does with it, and fragments of sweepq's message."""

    wandb: str  # "samples" (not a grid), "runs" (W&B runs the grid), "fails" (its agent fails), "refuses"
    fragments: tuple[str, ...]


def method_refused(method: str) -> Refused:
    return Refused(
        "samples",
        (
            f"method: {method!r} is not supported: sweepq runs grid sweeps only, every cell known in advance. "
            "Write method: grid and give each parameter a list of values, or run this sweep with W&B's agent.",
        ),
    )


SAME = None  # W&B runs the grid; sweepq runs the same cells with the same command lines
CASES: dict[str, Refused | None] = {
    "wandb-examples-grid-hyperband.yaml": SAME,
    "wandb-examples-bool.yaml": SAME,
    "wandb-sweeps-grid.yaml": SAME,
    "wandb-sweeps-nested.yaml": SAME,
    "asthera-bachelor.yaml": SAME,
    "gdcbf.yaml": SAME,
    "llm-bci.yaml": SAME,
    "peruvian-sign-language.yaml": SAME,
    "fisher-edl.yaml": SAME,
    "emoreccom.yaml": SAME,
    "torch-wandb-boilerplate.yaml": SAME,
    "flexible-probing.yaml": SAME,
    "alexnet-tiny-imagenet.yaml": SAME,
    "nsl-project.yaml": SAME,
    "yaib.yaml": SAME,
    "dronet-patrolling.yaml": SAME,
    "gridworld-qlearning.yaml": SAME,
    "ml-boilerplate.yaml": SAME,
    "saliency-aware-cf.yaml": SAME,
    "constructed-macros.yaml": SAME,  # written for this test: the Hydra macros, ${args_json_file}, ${envvar:NAME}
    # W&B silently minimizes a goal it does not know; sweepq refuses it.
    "platalea.yaml": Refused("runs", ("metric.goal: the string 'hello world wrt wandb sweep function' is not a goal",)),
    "fed-scrub.yaml": Refused("fails", ("program: is missing", "wandb.agent(function=...)", "program: train.py")),
    "fgnn-on-datasets.yaml": Refused("fails", ("program: is missing",)),
    # PyYAML, which W&B reads with, keeps the second `values:` silently.
    "gloves.yaml": Refused("runs", ("line 13, column 5: duplicate key 'values'",)),
    "tabdiff.yaml": Refused("refuses", ("arguments: unknown key 'arguments'",)),
    "birdsong.yaml": method_refused("random"),
    "nrp-template.yaml": method_refused("bayes"),
    "magma.yaml": method_refused("bayes"),
    "rl-vs-bo.yaml": method_refused("random"),
    "minimal-hydra.yaml": method_refused("bayes"),
    "dear.yaml": method_refused("bayes"),
    "nli-lstm.yaml": method_refused("bayes"),
    "cross-validation.yaml": method_refused("random"),
}
GRIDS = [name for name, case in CASES.items() if case is SAME]
# 4,320 and 10,000 cells: plan's table alone takes seconds there; the comparison below covers them.
PLANNED = [name for name in GRIDS if name not in ("nsl-project.yaml", "saliency-aware-cf.yaml")]
REFUSED = [name for name, case in CASES.items() if case is not SAME]


_ENGINES: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def _no_stray_processes():
    """As conftest's, but W&B's engine runs on in the background from one test to the next."""
    yield
    spared: set[int] = set()
    for process in _ENGINES:
        try:
            engine_process = psutil.Process(process.pid)
            spared |= {engine_process.pid, *(child.pid for child in engine_process.children(recursive=True))}
        except psutil.NoSuchProcess:
            pass
    for child in psutil.Process().children(recursive=True):
        if child.pid not in spared:
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass


@pytest.fixture(scope="module")
def engine_run() -> Iterator[subprocess.Popen[str]]:
    """W&B's engine on every file, in one subprocess started at once (the plan tests run meanwhile)."""
    if not ENGINE_PYTHON.exists():
        pytest.fail(
            f"W&B's engine is not installed ({ENGINE_PYTHON.relative_to(REPO_ROOT)} is missing), and this test "
            "compares sweepq with it. Run `make wandb-engine` (it builds .venv-wandb once; `make test` does it too)."
        )
    files = [str(DATA / name) for name in CASES]
    process = subprocess.Popen(
        [str(ENGINE_PYTHON), str(ENGINE), *files], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    _ENGINES.append(process)
    yield process
    _ENGINES.remove(process)
    if process.poll() is None:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def engine(engine_run: subprocess.Popen[str]) -> dict[str, Any]:
    """What W&B's engine makes of every file, by file name."""
    out, err = engine_run.communicate(timeout=600)
    assert engine_run.returncode == 0, f"W&B's engine failed:\n{err[-3000:]}"
    return {Path(path).name: result for path, result in json.loads(out).items()}


def test_the_table_names_every_file_and_enough_of_them(engine_run):
    assert sorted(CASES) == sorted(path.name for path in DATA.glob("*.yaml"))
    assert len(GRIDS) >= 15 and len(CASES) >= 20


# ------------------------------------------------------------------------ grids


@pytest.mark.parametrize("name", PLANNED)
def test_plan_shows_every_grid(name, tmp_path, monkeypatch):
    sweep = load_sweep(DATA / name)
    spec = _runnable_copy(name, sweep, tmp_path, monkeypatch)
    planned = CliRunner().invoke(main, ["plan", str(spec), "--json"])
    assert planned.exit_code == 0, planned.stderr
    rows = json.loads(planned.stdout)
    assert [row["cfg"] for row in rows] == [cell.cfg for cell in sweep.cells]
    # The commands plan shows are those compared with W&B's agent's below.
    shown = [[ARGS_JSON_FILE if token.endswith("args.json") else token for token in row["command"]] for row in rows]
    assert shown == [_render(sweep.settings, cell.cfg, shown=True) for cell in sweep.cells]
    table = CliRunner().invoke(main, ["plan", str(spec)])
    assert table.exit_code == 0, table.stderr
    assert f"{len(rows)} cells in 1 group(s)" in table.stdout


def _runnable_copy(name: str, sweep: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file in a folder beside its program, with every command it names on PATH (empty scripts)."""
    spec = tmp_path / name
    shutil.copyfile(DATA / name, spec)
    settings = sweep.settings
    if settings.program is not None:
        _script(tmp_path / settings.program)
    bin_dir = tmp_path / "bin"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    argv = render_command(settings, sweep.cells[0].cfg, args_json_file=ARGS_JSON_FILE, environ=os.environ)
    for token in argv:
        if token and not token.startswith("-") and "/" not in token and shutil.which(token) is None:
            _script(bin_dir / token)
    return spec


def _script(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize("name", GRIDS)
def test_sweepq_runs_the_grid_as_wandb_does(name, engine):
    wandb = engine[name]
    assert "runs" in wandb, f"W&B does not run {name} as a grid: {wandb}"
    sweep = load_sweep(DATA / name)
    ours = [_canonical(cell.cfg) for cell in sweep.cells]
    theirs = [_canonical(run) for run in wandb["runs"]]
    assert ours == theirs, _diff(f"{name}: runs", theirs, ours)
    problems: list[str] = []
    for index, built in sorted((int(index), built) for index, built in wandb["commands"].items()):
        cfg = sweep.cells[index].cfg
        for macro, expanded in built["macros"].items():
            command = dataclasses.replace(sweep.settings, command=[f"${{{macro}}}"])
            problems += _compare(f"run {index}: ${{{macro}}}", expanded, _render(command, cfg))
        if "argv" in built:
            problems += _compare(f"run {index}: command", built["argv"], _render(sweep.settings, cfg))
        if "args_json_file" in built:
            problems += _compare(f"run {index}: args JSON file", [built["args_json_file"]], [args_json(cfg, "wandb")])
    shown = "\n".join(problems[:8]) + (f"\n… and {len(problems) - 8} more" if len(problems) > 8 else "")
    assert not problems, f"{name}: sweepq's command lines differ from W&B's agent's:\n{shown}"


def _canonical(cfg: dict[str, Any]) -> str:
    # JSON tells 1, 1.0 and true apart, as the program does.
    return json.dumps(cfg, sort_keys=True)


def _render(settings: Any, cfg: dict[str, Any], shown: bool = False) -> list[str]:
    return render_command(settings, cfg, args_json_file=ARGS_JSON_FILE, environ=os.environ, shown=shown)


def _compare(what: str, theirs: list[str], ours: list[str]) -> list[str]:
    return [] if theirs == ours else [_diff(what, theirs, ours)]


def _diff(what: str, theirs: list[str], ours: list[str]) -> str:
    lines = difflib.unified_diff(theirs, ours, "W&B", "sweepq", lineterm="", n=1)
    return f"{what}:\n" + "\n".join(lines)


# ---------------------------------------------------------------------- refused


def _what_wandb_does(result: dict[str, Any]) -> str:
    if "method" in result:
        return "samples"
    if "refused" in result:
        return "refuses"
    built = [command for command in result["commands"].values() if "macros" in command]
    if any("failed" in command for command in built):
        return "fails"
    return "runs" if any("argv" in command for command in built) else "?"


@pytest.mark.parametrize("name", REFUSED)
def test_sweepq_refuses_with_one_paragraph(name, engine, tmp_path):
    case = CASES[name]
    assert case is not None
    assert _what_wandb_does(engine[name]) == case.wandb
    with pytest.raises(SpecError) as caught:
        load_sweep(DATA / name)
    for fragment in case.fragments:
        assert fragment in str(caught.value)
    spec = tmp_path / name
    shutil.copyfile(DATA / name, spec)
    for args in (["plan", str(spec)], ["plan", str(spec), "--json"]):
        refused = CliRunner().invoke(main, args)
        assert refused.exit_code == 2 and refused.stdout == ""
        assert refused.stderr == f"error: {caught.value}\n".replace(str(DATA / name), str(spec))
