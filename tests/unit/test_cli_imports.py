"""A CLI that answers at once: `--help` from the table of commands, and nothing heavy on a read command's path.

Structural checks, not timings: which modules a fresh interpreter has loaded after a command.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

import sweepq.cli
from sweepq.cli.lazy import short_help
from sweepq.cli.main import COMMANDS, main
from sweepq.queue.records import Outcome
from sweepq.queue.states import Reason
from sweepq.queue.store import Store
from unit.support import WORKER

# Never on a read command's path: each costs from a tenth of a second to seconds to import.
HEAVY = ("torch", "numpy", "psutil", "alembic", "matplotlib", "tensorboard", "mlflow")

# Runs each command line with the `sweepq` group in one fresh interpreter and reports, after each, its
# exit code and which modules had been loaded by then (a module loaded once stays: later lines see it too).
PROBE = """
import json, sys
from click.testing import CliRunner
from sweepq.cli.main import main
report = []
for args in json.loads(sys.argv[1]):
    r = CliRunner().invoke(main, args)
    report.append({"args": args, "code": r.exit_code, "output": r.output, "modules": sorted(sys.modules)})
print(json.dumps(report))
"""


def probe(*command_lines: list[str], cwd: Path) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(command_lines)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "120"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report: list[dict[str, Any]] = json.loads(done.stdout)
    return report


def loaded(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return sorted({m.split(".")[0] for m in modules} & set(names))


def import_every_command() -> None:
    """Every module of commands, named in the table or not (a command missing from it would be unreachable)."""
    folder = Path(sweepq.cli.__file__).parent
    for module in sorted(
        {f"sweepq.cli.{p.stem}" for p in folder.glob("*_commands.py")} | {lazy.module for lazy in COMMANDS.values()}
    ):
        importlib.import_module(module)


def test_the_table_names_every_command_with_its_own_help() -> None:
    import_every_command()
    assert sorted(main.commands) == sorted(COMMANDS), "a command is missing from (or extra in) cli/main.py's COMMANDS"
    for name, lazy in COMMANDS.items():
        command = main.commands[name]
        assert command.callback is not None and command.callback.__module__ == lazy.module, name
        for limit in (20, 45, 60, 94, 400):  # what `--help` shows at any terminal width
            assert short_help(lazy.summary, limit) == command.get_short_help_str(limit), (
                f"{name}: COMMANDS's summary is not the first sentence of its help"
            )


def test_help_lists_the_commands_without_importing_them(tmp_path: Path) -> None:
    (fresh, unknown) = probe(["--help"], ["stauts"], cwd=tmp_path)
    assert fresh["code"] == 0
    imported = [m for m in fresh["modules"] if m.startswith("sweepq.cli.") and m.endswith("_commands")]
    assert imported == []
    assert loaded(fresh["modules"], ("sqlalchemy", "rich", "yaml", *HEAVY)) == []
    import_every_command()
    every = CliRunner().invoke(main, ["--help"], env={"COLUMNS": "120"})  # every command imported: click's own list
    assert fresh["output"] == every.output
    assert unknown["code"] == 2 and "No such command 'stauts'" in unknown["output"]
    if hasattr(click.exceptions, "NoSuchCommand"):  # click >= 8.4 suggests a name
        assert "Did you mean 'status'?" in unknown["output"]


@pytest.fixture
def root(store: Store) -> Path:
    """A root with a finished cell, a failed one and queued ones (closed: the probe opens it afresh)."""
    for cell, reason in (("1.1", Reason.COMPLETED), ("1.2", Reason.ERROR)):
        won = store.claim(cell, WORKER)
        assert won is not None
        store.progress(cell, won.number, step=10, total_steps=10, metrics={"val_acc": 0.5}, best=0.5, best_step=10)
        store.record_checkpoint(cell, 10, path=f"cells/{cell}/checkpoints/step-10", metrics={"val_acc": 0.5})
        store.finish(cell, won.number, Outcome(reason=str(reason), end_step=10, wall_seconds=1.0))
    store.close()
    return store.root


def test_read_commands_load_nothing_heavy(root: Path, tmp_path: Path) -> None:
    r = str(root)
    lines = [
        ["status", "--help"],
        ["status", "--root", r],
        ["status", "--json", "--root", r],
        ["show", "1.1", "--root", r],
        ["show", "1.1", "--json", "--root", r],
        ["attempts", "--root", r],
        ["best", "--root", r],
        ["report", "--root", r],
        ["report", "--json", "--root", r],
        ["logs", "1.1", "--root", r],
        ["export", "csv", str(tmp_path / "csv"), "--root", r],
    ]
    report = probe(*lines, cwd=tmp_path)
    for line in report:
        assert line["code"] == 0, f"{line['args']}: {line['output']}"
        assert loaded(line["modules"], HEAVY) == [], f"after sweepq {' '.join(line['args'])}"
    status = report[1]
    assert "1.1" in status["output"] and "done" in status["output"] and "failed" in status["output"]
    help_only = report[0]["modules"]
    assert loaded(help_only, ("sqlalchemy",)) == [], "`status --help` opens no database"
    # status, show, attempts, best, report and logs read through sqlite3 alone (queue/opening.py)
    for line in report[1:-1]:
        assert loaded(line["modules"], ("sqlalchemy", "yaml")) == [], f"after sweepq {' '.join(line['args'])}"
    assert "1.1" in report[3]["output"] and "step-10" in report[3]["output"]
    assert "1.1" in report[6]["output"] and "step-10" in report[6]["output"]  # best: the checkpoint that holds it
    assert "sqlalchemy" in report[-1]["modules"]  # the probe can see it: `export` still reads through the Store


def test_a_launch_on_a_current_root_loads_no_migration_environment(root: Path, tmp_path: Path) -> None:
    """Alembic only when a migration must run: a current root is opened for writing without it."""
    code = (
        "import sys; from pathlib import Path; from sweepq.queue.store import Store;"
        f"Store.open(Path({str(root)!r})).close(); print('alembic' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
