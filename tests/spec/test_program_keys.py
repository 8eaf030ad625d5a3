"""Programs as users write them: `resume_args:`, `inputs:`, `python -m ${program}`, Hydra apps, and a
value with keys inside it (`db: mysql` with `db.user`) in the grouped form.

The Hydra overrides are read back by Hydra's own override parser (hydra-core, the real library).
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from hydra.core.override_parser.overrides_parser import OverridesParser

from sweepq.cli.main import main
from sweepq.errors import SpecError
from sweepq.layout import CellPaths
from sweepq.program.launch import STARTED_NAME, link_inputs, note_started, ran_here_before
from sweepq.spec.command import render_command
from sweepq.spec.hydra import HYDRA_COMMAND, hydra_value, is_hydra_app
from sweepq.spec.preflight import preflight
from sweepq.spec.sweep import Sweep, load_sweep
from sweepq.wire.attempt_spec import AttemptSpec

HYDRA_APP = """\
import hydra


@hydra.main(version_base=None, config_path="conf", config_name="config")
def my_app(cfg):
    print(cfg)
"""


def sweep_in(folder: Path, text: str, name: str = "s.yaml") -> Sweep:
    (folder / name).write_text(textwrap.dedent(text))
    return load_sweep(folder / name)


def error_in(folder: Path, text: str) -> str:
    with pytest.raises(SpecError) as caught:
        sweep_in(folder, text)
    return str(caught.value)


def command_of(sweep: Sweep, cell: int = 0, resume_args: list[str] | None = None) -> list[str]:
    c = sweep.cells[cell]
    return render_command(
        sweep.settings,
        c.cfg,
        args_json_file="args.json",
        environ={},
        cell_dir="CELL",
        output_dir="OUT",
        resume_args=resume_args or [],
    )


# ------------------------------------------------------- a value with keys inside it


GROUP_CHOICE = """
name: s
program: app.py
grid: {db: [mysql, postgresql], db.user: [alice, bob]}
"""


def test_a_program_sweep_sets_a_group_choice_and_a_key_inside_it(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text("print(1)\n")
    sweep = sweep_in(tmp_path, GROUP_CHOICE)
    assert [c.cfg for c in sweep.cells] == [
        {"db": "mysql", "db.user": "alice"},
        {"db": "mysql", "db.user": "bob"},
        {"db": "postgresql", "db.user": "alice"},
        {"db": "postgresql", "db.user": "bob"},
    ]
    # What every args macro prints is the override Hydra users write, never `db.name=`.
    assert command_of(sweep)[-2:] == ["--db=mysql", "--db.user=alice"]
    # The same paths from params, a nested mapping and a deeper value: one dotted key beside the value.
    sweep = sweep_in(
        tmp_path,
        """
        name: s
        program: app.py
        params: {model: {db: {user: root, port: 1}}}
        grid: {model.db: [mysql], model.db.user.x: [1]}
        """,
    )
    assert sweep.cells[0].cfg == {"model": {"db": "mysql", "db.user": "root", "db.port": 1, "db.user.x": 1}}


def test_a_train_sweep_still_refuses_a_value_with_keys_inside_it(tmp_path: Path) -> None:
    text = GROUP_CHOICE.replace("program: app.py", "train: mod:train")
    message = error_in(tmp_path, text)
    assert "one path can't be both a value and a mapping" in message
    assert "A `program:` sweep may have both" in message


# ------------------------------------------------------------------------ Hydra


@pytest.mark.parametrize(
    "value",
    [None, True, False, 0, -2, 0.1, 1e-05, "mysql", "1", "true", "null", "1e3", "a b", "it's", "x\"y'z", "a\\",
     "a,b", "+x", "~y", "", "/data/x.bin", "a=b", [1, "x y", None], {"a": 1, "b c": "d"}, [], {}, "é"],
)  # fmt: skip
def test_args_hydra_values_read_back_by_hydra_as_the_same_value(value: object) -> None:
    override = OverridesParser.create().parse_override(f"key={hydra_value(value)}")
    assert override.value() == value and type(override.value()) is type(value)


def test_a_hydra_app_gets_overrides_and_its_cells_own_run_dir_by_default(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(HYDRA_APP)
    sweep = sweep_in(tmp_path, GROUP_CHOICE + "params: {lr: 0.1, note: a b, tag: null}\n")
    assert sweep.settings.command == list(HYDRA_COMMAND)
    assert command_of(sweep, 3)[2:] == [
        "app.py",
        "db=postgresql",
        "db.user=bob",
        "lr=0.1",
        "note='a b'",
        "tag=null",
        "hydra.run.dir=OUT",
    ]


def test_a_command_handing_a_hydra_app_hyphen_flags_is_refused(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(HYDRA_APP)
    message = error_in(tmp_path, GROUP_CHOICE + "command: [python, '${program}', '${args}']\n")
    assert "app.py is a Hydra app" in message and "refuses --key=value" in message
    assert "${args_hydra}" in message and "hydra.run.dir=${output_dir}" in message
    # Other programs keep W&B's default, and a Hydra app keeps a command that suits it.
    (tmp_path / "plain.py").write_text("import hydra  # imported, but no @hydra.main\n")
    assert sweep_in(tmp_path, GROUP_CHOICE.replace("app.py", "plain.py")).settings.command is None
    written = GROUP_CHOICE + "command: [python, '${program}', '${args_no_hyphens}']\n"
    sweep = sweep_in(tmp_path, written)
    assert sweep.settings.command == ["python", "${program}", "${args_no_hyphens}"]
    # ... with a word on its run folder, until the command names one.
    assert any("without hydra.run.dir every attempt writes into a new outputs/" in w for w in sweep.warnings)
    run_dir = written.replace("]\n", ", 'hydra.run.dir=${output_dir}']\n")
    assert sweep_in(tmp_path, run_dir).warnings == []


def test_hydra_apps_are_recognised_by_their_decorator(tmp_path: Path) -> None:
    app = tmp_path / "a.py"
    for source, expected in [
        (HYDRA_APP, True),
        ("from hydra import main\n\n@main(config_path=None)\ndef f(cfg): ...\n", True),
        ("import hydra\n# @hydra.main in a comment is not code\n", False),
        ("def main(): ...\n\n@main\ndef f(): ...\n", False),
    ]:
        app.write_text(source)
        assert is_hydra_app(str(app)) is expected, source
    assert is_hydra_app(str(tmp_path / "missing.py")) is False


# ---------------------------------------------------------------- resume_args


RESUMING = """
name: s
program: train.py
resume_args: [--init_from=resume]
groups:
  - name: a
    grid: {lr: [0.1]}
  - name: b
    grid: {lr: [0.2]}
    resume_args: [--resume, "--from=${output_dir}/ckpt.pt"]
"""


def test_resume_args_of_the_sweep_or_the_group_go_at_the_end_or_where_the_macro_is(tmp_path: Path) -> None:
    sweep = sweep_in(tmp_path, RESUMING)
    a, b = sweep.cells
    assert sweep.settings.resume_args_of(a.id) == ["--init_from=resume"]
    assert sweep.settings.resume_args_of(b.id) == ["--resume", "--from=${output_dir}/ckpt.pt"]
    assert command_of(sweep, 0)[-1] == "--lr=0.1"  # a first attempt: nothing added
    resumed = command_of(sweep, 1, sweep.settings.resume_args_of(b.id))
    assert resumed[-3:] == ["--lr=0.2", "--resume", "--from=OUT/ckpt.pt"]
    placed = sweep_in(tmp_path, RESUMING + "command: [python, '${program}', '${resume_args}', '${args}']\n")
    assert command_of(placed, 0, ["--init_from=resume"])[1:] == ["train.py", "--init_from=resume", "--lr=0.1"]
    assert command_of(placed, 0)[1:] == ["train.py", "--lr=0.1"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("resume_args: --resume", "expected a non-empty list of arguments"),
        ("resume_args: []", "expected a non-empty list of arguments"),
        ('resume_args: ["${args}"]', "belongs in `command:`"),
        ('resume_args: ["${nope}"]', "unknown macro"),
    ],
)
def test_bad_resume_args_are_refused(tmp_path: Path, text: str, expected: str) -> None:
    message = error_in(tmp_path, f"name: s\nprogram: train.py\ngrid: {{lr: [1]}}\n{text}\n")
    assert "s.yaml: resume_args: " in message and expected in message


def test_resume_args_only_apply_to_programs(tmp_path: Path) -> None:
    assert "only applies to `program:` sweeps" in error_in(
        tmp_path, "name: s\ntrain: m:train\ngrid: {lr: [1]}\nresume_args: [--resume]\n"
    )
    grouped = "name: s\ntrain: m:train\ngroups: [{name: a, grid: {lr: [1]}, resume_args: [--resume]}]\n"
    assert "groups[1].resume_args: `resume_args:` only applies" in error_in(tmp_path, grouped)


def test_an_attempt_resumes_where_an_earlier_attempt_of_its_cell_started_its_program(tmp_path: Path) -> None:
    sweep = sweep_in(tmp_path, RESUMING)
    paths = CellPaths(tmp_path / "root", "1.1")

    def attempt(number: int) -> AttemptSpec:
        paths.attempt_dir(number).mkdir(parents=True, exist_ok=True)
        return AttemptSpec(str(paths.root), "1.1", number, {}, "", {})

    assert not ran_here_before(attempt(1), sweep.settings, paths)
    assert not ran_here_before(attempt(2), sweep.settings, paths)  # attempt 1 never started its program
    note_started(attempt(2), sweep.settings, paths)
    assert json.loads((paths.attempt_dir(2) / STARTED_NAME).read_text()) == {"workdir": "output"}
    assert ran_here_before(attempt(3), sweep.settings, paths) and ran_here_before(attempt(5), sweep.settings, paths)
    # The same cell, now run in the sweep's folder: attempt 2's files are in its output folder, not here.
    elsewhere = sweep_in(tmp_path, RESUMING + "workdir: sweep\n")
    assert not ran_here_before(attempt(3), elsewhere.settings, paths)


# ---------------------------------------------------------------------- inputs


def test_inputs_are_linked_into_the_working_folder_under_their_names(tmp_path: Path) -> None:
    (tmp_path / "data" / "tiny").mkdir(parents=True)
    (tmp_path / "configurator.py").write_text("x = 1\n")
    sweep = sweep_in(tmp_path, "name: s\nprogram: t.py\ngrid: {lr: [1]}\ninputs: [configurator.py, data/tiny]\n")
    assert sweep.settings.inputs == ["configurator.py", os.path.join("data", "tiny")]
    work = tmp_path / "work"
    work.mkdir()
    for _ in range(2):  # a retry finds its links in place
        link_inputs(sweep.settings.inputs, str(tmp_path), str(work))
        assert (work / "configurator.py").read_text() == "x = 1\n"
        assert os.readlink(work / "data" / "tiny") == str(tmp_path / "data" / "tiny")
    (work / "configurator.py").unlink()
    (work / "configurator.py").write_text("the program's own\n")
    with pytest.raises(SpecError, match="something of that name is there already"):
        link_inputs(sweep.settings.inputs, str(tmp_path), str(work))
    assert (work / "configurator.py").read_text() == "the program's own\n"


@pytest.mark.parametrize(
    ("value", "expected"),
    [("[/etc/passwd]", "is not a path inside the sweep file's folder"), ("[../x]", "is not a path inside"),
     ("[a, ./a]", "is listed twice"), ("[1]", "expected a path or a list of paths")],
)  # fmt: skip
def test_bad_inputs_are_refused(tmp_path: Path, value: str, expected: str) -> None:
    assert expected in error_in(tmp_path, f"name: s\nprogram: t.py\ngrid: {{lr: [1]}}\ninputs: {value}\n")


def test_launch_refuses_a_missing_input(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text("print(1)\n")
    sweep = sweep_in(tmp_path, "name: s\nprogram: t.py\ngrid: {lr: [1]}\ninputs: [data]\n")
    with pytest.raises(SpecError, match=r"s.yaml: inputs: 'data' cannot be found"):
        preflight(sweep, "s.yaml", check_entry=True)


# ------------------------------------------------------------- -m module


MODULE = """
name: s
program: {program}
command: ["${{env}}", "${{interpreter}}", -m, "${{program}}", "${{args}}"]
grid: {{lr: [1]}}
"""


def test_a_module_program_is_checked_as_a_module(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "app").mkdir(parents=True)
    (tmp_path / "pkg" / "train.py").write_text("print(1)\n")
    (tmp_path / "pkg" / "app" / "__main__.py").write_text("print(1)\n")
    for program in ("pkg.train", "pkg.app", "json.tool"):  # a file, a package's __main__, the standard library
        sweep = sweep_in(tmp_path, MODULE.format(program=program))
        assert preflight(sweep, "s.yaml", check_entry=True).commands["1.1"][-3:-1] == ["-m", program]
    for program, hint in [("pkg.trian", "Fix the module name"), ("pkg/train.py", "write program: pkg.train")]:
        sweep = sweep_in(tmp_path, MODULE.format(program=program))
        with pytest.raises(SpecError) as caught:
            preflight(sweep, "s.yaml", check_entry=True)
        message = str(caught.value)
        assert f"program: {program!r} is run as a module (python -m) but cannot be found" in message
        assert hint in message


# ------------------------------------------------------------------------- plan


def test_plan_names_the_command_of_a_wandb_file_without_a_program(tmp_path: Path) -> None:
    """A W&B file may run a command of its own (`command: [bash, run.sh]`): plan named it "None"."""
    spec = tmp_path / "sweep.yaml"
    spec.write_text("method: grid\ncommand: [bash, run.sh, '${args}']\nparameters: {lr: {values: [0.1]}}\n")
    # As wide as the line: the root is tmp_path's, long enough to wrap at 80 columns.
    planned = CliRunner().invoke(main, ["plan", str(spec)], env={"COLUMNS": "400"})
    assert planned.exit_code == 0, planned.output
    first = planned.output.splitlines()[0]
    assert "None" not in first and first.endswith("runs bash run.sh ${args}")


def test_plan_warns_of_a_missing_module_or_input_and_launch_refuses_it(tmp_path: Path) -> None:
    """plan previews a sweep where its code may not be: what launch refuses, it says, and goes on."""
    for extra, expected in [("", "'tools.trian' is run as a module"), ("inputs: [data]\n", "inputs: 'data'")]:
        spec = tmp_path / "s.yaml"
        spec.write_text(MODULE.format(program="tools.trian") + extra)
        planned = CliRunner().invoke(main, ["plan", str(spec)])
        assert planned.exit_code == 0 and "warning:" in planned.output and expected in planned.output
        launched = CliRunner().invoke(main, ["launch", str(spec), "--no-live"])
        assert launched.exit_code == 2 and expected in launched.output
        assert not (tmp_path / "runs").exists()
