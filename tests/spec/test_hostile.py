"""Hostile sweep files: each refused with one paragraph naming the problem and where, before anything is written.

YAML bombs are refused by the limits of sweepq.spec.limits, which the tests show
are what stops them (the line where the expansion crossed the limit moves when
the limit is raised); what the machine must allow (the root, the program, the
command lines exec takes) is checked by sweepq.spec.preflight.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from sweepq.errors import SpecError, UsageError
from sweepq.spec import limits
from sweepq.spec.preflight import MAX_ARG_BYTES, preflight
from sweepq.spec.sweep import load_sweep, parse_sweep


def parse(text: str, path: str = "sweep.yaml"):
    return parse_sweep(textwrap.dedent(text), path)


def error_of(text: str, path: str = "sweep.yaml") -> str:
    with pytest.raises(SpecError) as caught:
        parse(text, path)
    message = str(caught.value)
    assert "\n" not in message  # one paragraph
    return message


def nested(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


# ------------------------------------------------------------------ nesting


def test_values_nested_1000_deep_are_refused_with_the_limit_and_the_place():
    message = error_of(f"train: m:f\nparams: {{a: {nested(1000)}}}\ngrid: {{s: [1]}}\n")
    assert message.startswith("sweep.yaml, line 2, column ")
    assert f"nested more than {limits.MAX_DEPTH} deep" in message


def test_nesting_up_to_the_limit_is_read():
    # The file's mapping, params, a's list: 3 levels before the value's own.
    sweep = parse(f"train: m:f\nparams: {{a: {nested(limits.MAX_DEPTH - 3)}}}\ngrid: {{s: [1]}}\n")
    assert json.dumps(sweep.cells[0].cfg).count("[") == limits.MAX_DEPTH - 3


def test_depth_reached_through_aliases_counts_too():
    # Each anchor is 30 deep on its own; an alias nests the previous one inside.
    lines = ["train: m:f", "grid: {s: [1]}", "params:", f"  a0: &a0 {nested(30)}"]
    lines += [f"  a{n}: &a{n} {'[' * 30}*a{n - 1}{']' * 30}" for n in range(1, 5)]
    message = error_of("\n".join(lines) + "\n")
    assert "aliases expanded" in message and "line 7," in message  # a3: 2 + 4 * 30 levels


# ------------------------------------------------------------------ numbers


def test_a_5000_digit_integer_is_refused_without_converting_it():
    message = error_of(f"train: m:f\nparams: {{a: {'9' * 5000}}}\ngrid: {{s: [1]}}\n")
    assert message.startswith("sweep.yaml, line 2, column 13: the whole number 999999999999…999999 (5,000 characters)")
    assert "out of range" in message and "64 bits" in message


@pytest.mark.parametrize("written", [str(2**63), str(-(2**63) - 1), "0b1" + "0" * 64, "0x" + "f" * 17])
def test_integers_outside_64_bits_are_refused(written):
    assert "out of range" in error_of(f"train: m:f\nparams: {{a: {written}}}\ngrid: {{s: [1]}}\n")


def test_integers_at_the_64_bit_bounds_are_kept():
    sweep = parse(f"train: m:f\nparams: {{hi: {2**63 - 1}, lo: {-(2**63)}, u: 1_000}}\ngrid: {{s: [1]}}\n")
    assert sweep.cells[0].cfg == {"hi": 2**63 - 1, "lo": -(2**63), "u": 1000, "s": 1}


@pytest.mark.parametrize("written", [".nan", ".NaN", ".inf", "-.inf", "+.Inf", "1.0e+999"])
def test_non_finite_floats_are_refused_where_they_are_written(written):
    message = error_of(f"train: m:f\ngroups:\n  - name: a\n    grid: {{lr: [0.1, {written}]}}\n")
    assert message.startswith("sweep.yaml, line 4, column 22: ")
    assert "finite numbers only" in message and "no NaN or infinity" in message


def test_non_finite_floats_are_refused_in_settings_and_wandb_files_too():
    assert "finite" in error_of("train: m:f\nmax_attempt_seconds: .inf\ngrid: {s: [1]}\n")
    assert "finite" in error_of("method: grid\nprogram: t.py\nparameters: {lr: {values: [.nan]}}\n")


def test_quoted_nan_stays_text():
    assert parse("train: m:f\nparams: {a: '.nan'}\ngrid: {s: [1]}\n").cells[0].cfg["a"] == ".nan"


# ------------------------------------------------------------------ names


@pytest.mark.parametrize("name", ['"q1\\n"', '"q\\x1b[2J"', '"q\\u2028"'])
def test_group_names_with_a_newline_or_control_character_are_refused(name):
    message = error_of(f"train: m:f\ngroups:\n  - name: {name}\n    grid: {{s: [1]}}\n")
    assert "groups[1].name" in message and "not a valid group name" in message


def test_a_group_name_ending_in_a_newline_through_a_block_scalar_is_refused():
    assert "not a valid group name" in error_of("train: m:f\ngroups:\n  - name: |\n      q1\n    grid: {s: [1]}\n")


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('train: m:f\nparams: {"a\\tb": 1}\ngrid: {s: [1]}\n', "params: the parameter name 'a\\tb'"),
        ('train: m:f\ngrid: {"lr\\n": [1]}\n', "grid: the parameter name 'lr\\n'"),
        ('train: m:f\nparams: {a: [{"k\\r": 1}]}\ngrid: {s: [1]}\n', "params.a: the key 'k\\r'"),
        ('name: "s\\n"\ntrain: m:f\ngrid: {s: [1]}\n', "name: the sweep name 's\\n'"),
    ],
)
def test_cfg_keys_and_the_sweep_name_with_control_characters_are_refused(text, where):
    message = error_of(text)
    assert f"sweep.yaml: {where} contains the control character" in message


def test_wandb_parameter_names_ending_in_a_newline_are_refused():
    message = error_of('method: grid\nprogram: t.py\nparameters: {"lr\\n": {values: [1]}}\n')
    assert message.startswith("sweep.yaml: parameters.lr\\n: 'lr\\n' is not a parameter name W&B accepts")


def test_nul_in_a_path_is_refused():
    assert "NUL byte" in error_of('train: m:f\nroot: "runs/a\\0b"\ngrid: {s: [1]}\n')
    assert "NUL byte" in error_of('program: "t\\0.py"\ngrid: {s: [1]}\n')


# ------------------------------------------------------------------ YAML bombs


def laughs(levels: int = 9) -> str:
    """The classic "billion laughs": 9 levels of 9 aliases, 9**9 strings once expanded."""
    names = "abcdefghijklmnopqrstuvwxyz"
    lines = ['  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, levels):
        name, previous = names[level], names[level - 1]
        lines.append(f"  {name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
    return "train: m:f\ngrid: {s: [1]}\nparams:\n" + "\n".join(lines) + "\n"


def expanded(level: int) -> int:
    """Values held by the anchor of `level` (0 is a: a list and its 9 strings)."""
    return 10 if level == 0 else 1 + 9 * expanded(level - 1)


def crossing_line(limit: int) -> int:
    """The line of the first anchor whose expansion holds more than `limit` values."""
    level = next(level for level in range(9) if expanded(level) > limit)
    return 4 + level


def test_billion_laughs_is_refused_at_the_alias_level_that_crosses_the_limit():
    text = laughs()
    assert len(text) < 700
    message = error_of(text)
    line = crossing_line(limits.DEFAULT_MAX_NODES)
    assert message.startswith(f"sweep.yaml, line {line}, column 6: with its aliases expanded, this value holds more")
    assert f"{limits.DEFAULT_MAX_NODES:,} values" in message and "SWEEPQ_MAX_YAML_NODES=" in message


def test_the_node_limit_is_what_stops_the_expansion(monkeypatch):
    for limit in (1_000, 1_000_000):
        monkeypatch.setenv(limits.ENV_MAX_NODES, str(limit))
        message = error_of(laughs())
        assert f"line {crossing_line(limit)}," in message and f"more than {limit:,} values" in message


def test_raising_the_node_limit_reads_a_larger_expansion(monkeypatch):
    monkeypatch.setenv(limits.ENV_MAX_NODES, "1000")
    assert f"line {crossing_line(1000)}," in error_of(laughs(levels=4))
    monkeypatch.setenv(limits.ENV_MAX_NODES, "10000")
    sweep = parse(laughs(levels=4))
    assert json.dumps(sweep.cells[0].cfg).count("lol") == 9 + 9**2 + 9**3 + 9**4


def test_an_alias_inside_its_own_anchor_is_refused():
    message = error_of("train: m:f\ngrid: {s: [1]}\nparams:\n  a: &a [1, *a]\n")
    assert "line 4, column 13" in message and "contains it" in message


def test_a_document_with_more_nodes_than_the_limit_is_refused_as_it_is_read(monkeypatch):
    monkeypatch.setenv(limits.ENV_MAX_NODES, "1000")
    items = ",".join(["1"] * 2000)
    message = error_of(f"train: m:f\ngrid: {{s: [1]}}\nparams: {{a: [{items}]}}\n")
    assert "the file holds more than 1,000 values" in message and "SWEEPQ_MAX_YAML_NODES=10000" in message


def test_a_bad_limit_in_the_environment_is_refused(monkeypatch):
    monkeypatch.setenv(limits.ENV_MAX_NODES, "lots")
    with pytest.raises(UsageError, match="SWEEPQ_MAX_YAML_NODES='lots' is not a whole number"):
        parse("train: m:f\ngrid: {s: [1]}\n")


def test_a_50_mb_file_is_refused_by_its_size_before_it_is_read(tmp_path):
    big = tmp_path / "big.yaml"
    with big.open("wb") as file:
        file.truncate(50 * 1024 * 1024)  # NUL bytes: any parse would fail on the first one
    with pytest.raises(SpecError) as caught:
        load_sweep(big)
    message = str(caught.value)
    assert f"the file is {50 * 1024 * 1024:,} bytes, more than the {limits.DEFAULT_MAX_BYTES:,}" in message
    assert "SWEEPQ_MAX_SWEEP_BYTES=" in message


def test_a_file_whose_size_says_nothing_is_read_no_further_than_the_limit(monkeypatch):
    monkeypatch.setenv(limits.ENV_MAX_BYTES, "1000")
    with pytest.raises(SpecError, match="/dev/zero: the file is more than 1,000 bytes"):
        load_sweep("/dev/zero")


def test_text_over_the_size_limit_is_refused(monkeypatch):
    monkeypatch.setenv(limits.ENV_MAX_BYTES, "100")
    assert "more than the 100 sweepq reads" in error_of("train: m:f\ngrid: {s: [1]}\n# " + "é" * 60 + "\n")


def many_cells(levels: int) -> str:
    """The laughs of `levels` levels under params, and a group of 4 * 5 * 5 = 100 cells."""
    shared = laughs(levels).split("params:\n", 1)[1]
    grid = "{x: [0, 1, 2, 3], y: [0, 1, 2, 3, 4], z: [1, 2, 3, 4, 5]}"
    return f"train: m:f\nparams:\n{shared}groups:\n  - name: g\n    grid: {grid}\n"


def test_shared_values_copied_into_many_cells_are_refused(monkeypatch):
    # Within the node limit in the file, but every cell's cfg holds a copy of params.
    message = error_of(many_cells(levels=5))
    per_cell = sum(expanded(level) for level in range(5)) + 3  # params, and one value per grid key
    assert f"the sweep's 100 cells would hold {100 * per_cell:,} values in all" in message
    assert f"more than the {limits.DEFAULT_MAX_VALUES:,} sweepq builds" in message
    assert "SWEEPQ_MAX_SWEEP_VALUES=" in message
    per_cell = sum(expanded(level) for level in range(3)) + 3
    monkeypatch.setenv(limits.ENV_MAX_VALUES, str(100 * per_cell - 1))
    assert f"would hold {100 * per_cell:,} values" in error_of(many_cells(levels=3))
    monkeypatch.setenv(limits.ENV_MAX_VALUES, str(100 * per_cell))
    assert len(parse(many_cells(levels=3)).cells) == 100


# ------------------------------------------------------------------ the root


def sweep_file(folder: Path, body: str) -> Path:
    path = folder / "s.yaml"
    path.write_text(textwrap.dedent(body))
    return path


def preflight_error(path: Path, root: str | None = None, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(UsageError) as caught:
        preflight(load_sweep(path), path.name, root, environ if environ is not None else dict(os.environ))
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_root_that_is_a_loop_of_symbolic_links_is_refused(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    spec = sweep_file(tmp_path, "train: m:f\nroot: a\ngrid: {s: [1]}\n")
    message = preflight_error(spec)
    assert message.startswith(f"s.yaml: root: the sweep root {tmp_path / 'a'} cannot be used: it is a loop")
    assert "a/sub" in preflight_error(spec, root=str(tmp_path / "a" / "sub"))  # --root, below the loop
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "s.yaml"]


@pytest.mark.parametrize("root", ["/", "."])
def test_a_folder_that_is_neither_empty_nor_a_sweep_root_is_refused(tmp_path, root):
    spec = sweep_file(tmp_path, f"train: m:f\nroot: '{root}'\ngrid: {{s: [1]}}\n")
    message = preflight_error(spec)
    assert "is a folder that is neither empty nor a sweep root (it has no sweepq.db)" in message


def test_an_empty_folder_a_sweep_root_and_a_new_folder_are_roots(tmp_path):
    spec = sweep_file(tmp_path, "train: m:f\nroot: r\ngrid: {s: [1]}\n")
    sweep = load_sweep(spec)
    root = tmp_path.resolve() / "r"
    assert preflight(sweep, "s.yaml").root == root  # new
    root.mkdir()
    assert preflight(sweep, "s.yaml").root == root  # empty
    (root / "cells").mkdir()
    assert "neither empty nor a sweep root" in preflight_error(spec)
    (root / "sweepq.db").write_bytes(b"")
    assert preflight(sweep, "s.yaml").root == root  # a sweep root
    (tmp_path / "elsewhere").symlink_to(root)
    assert preflight(sweep, "s.yaml", root=str(tmp_path / "elsewhere")).root == root


# ------------------------------------------------------------------ command lines and the program


@pytest.fixture
def program_dir(tmp_path: Path) -> Path:
    (tmp_path / "t.py").write_text("print('hi')\n")
    return tmp_path


def spec_error(path: Path, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(SpecError) as caught:
        preflight(load_sweep(path), path.name, environ=environ if environ is not None else dict(os.environ))
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_nul_byte_in_an_argument_is_refused_naming_the_cell_and_value(program_dir):
    spec = sweep_file(program_dir, 'program: t.py\nparams: {note: "a\\0b"}\ngrid: {s: [1, 2]}\n')
    message = spec_error(spec)
    assert message.startswith("s.yaml: cell 1.1: argument 4 of its command ('--note=a\\x00b') contains a NUL byte")
    assert "It holds the cfg value note" in message
    assert sorted(p.name for p in program_dir.iterdir()) == ["s.yaml", "t.py"]


def test_an_argument_over_max_arg_strlen_is_refused(program_dir):
    spec = sweep_file(program_dir, f"program: t.py\ngrid: {{s: [1]}}\nparams: {{blob: {'y' * 200_000}}}\n")
    message = spec_error(spec)
    assert "argument 4 of its command ('--blob=yyy" in message and "is 200,007 bytes" in message
    assert f"more than the {MAX_ARG_BYTES:,} Linux passes in one argument (MAX_ARG_STRLEN)" in message
    assert "cfg value blob" in message and "${args_json_file}" in message


def test_an_argument_just_under_the_bound_passes(program_dir):
    value = "y" * (MAX_ARG_BYTES - len("--blob="))
    spec = sweep_file(program_dir, f"program: t.py\ngrid: {{s: [1]}}\nparams: {{blob: {value}}}\n")
    assert len(preflight(load_sweep(spec), "s.yaml").commands["1.1"][3]) == MAX_ARG_BYTES


def test_a_command_line_over_a_mib_in_all_is_refused(program_dir):
    command = ", ".join(["python", "t.py", *["'${args}'"] * 11])  # 11 times --v=zzz… (100,004 bytes)
    spec = sweep_file(
        program_dir, f"program: t.py\ncommand: [{command}]\nparams: {{v: {'z' * 100_000}}}\ngroups: [{{name: g}}]\n"
    )
    message = spec_error(spec)
    assert message.startswith(f"s.yaml: cell 1.1: its command line is {12 + 11 * 100_005:,} bytes, more than the")


def test_an_envvar_value_too_long_is_refused_without_showing_it(program_dir):
    spec = sweep_file(program_dir, "program: t.py\ncommand: [python, t.py, '--k=${envvar:BIG}']\ngrid: {s: [1]}\n")
    message = spec_error(spec, {**os.environ, "BIG": "S" * 200_000})
    assert "('--k=***')" in message and "SSS" not in message and "${envvar:NAME} value" in message


def test_a_missing_program_is_refused(program_dir):
    message = spec_error(sweep_file(program_dir, "program: trian.py\ngrid: {s: [1]}\n"))
    assert message.startswith(f"s.yaml: program: 'trian.py' cannot be found (no file {program_dir / 'trian.py'}")
    message = spec_error(sweep_file(program_dir, "method: grid\nprogram: sub/t.py\nparameters: {a: {value: 1}}\n"))
    assert "program: 'sub/t.py' cannot be found" in message


def test_a_program_found_beside_the_file_or_on_path_is_accepted(program_dir, tmp_path_factory):
    assert preflight(load_sweep(sweep_file(program_dir, "program: t.py\ngrid: {s: [1]}\n")), "s.yaml").commands
    tools = tmp_path_factory.mktemp("bin")
    (tools / "mytool").write_text("#!/bin/sh\n")
    (tools / "mytool").chmod(0o755)
    spec = sweep_file(program_dir, "program: mytool\ncommand: ['${program}', '${args}']\ngrid: {s: [1]}\n")
    environ = {**os.environ, "PATH": f"{tools}{os.pathsep}{os.environ.get('PATH', '')}"}
    assert preflight(load_sweep(spec), "s.yaml", environ=environ).commands["1.1"] == ["mytool", "--s=1"]
    assert "no file of that name on PATH" in spec_error(spec)  # without that PATH


def test_an_executable_exec_cannot_start_is_refused(program_dir):
    spec = sweep_file(program_dir, "program: t.py\ninterpreter: pythn\ngrid: {s: [1]}\n")
    assert spec_error(spec).startswith("s.yaml: interpreter: 'pythn' cannot be found (no file of that name on PATH)")
    spec = sweep_file(program_dir, "program: t.py\ncommand: ['${program}', '${args}']\ngrid: {s: [1]}\n")
    assert "a command without a '/' is looked up on PATH: write ./t.py" in spec_error(spec)
    spec = sweep_file(program_dir, "program: t.py\ncommand: [./t.py, '${args}']\ngrid: {s: [1]}\n")
    assert "command: './t.py' is a file, but not executable" in spec_error(spec)
    (program_dir / "t.py").chmod(0o755)
    assert preflight(load_sweep(spec), "s.yaml").commands["1.1"] == ["./t.py", "--s=1"]


# ------------------------------------------------------------------ secrets


SECRET_COMMAND = (
    "command: ['${env}', '${interpreter}', '${program}', '--token=${envvar:TOK}', '${envvar:TOK}', '${args}']\n"
)


def test_envvar_values_are_shown_as_stars_in_plan_commands(program_dir):
    for body in (
        f"program: t.py\n{SECRET_COMMAND}grid: {{s: [1]}}\n",
        f"method: grid\nprogram: t.py\n{SECRET_COMMAND}parameters: {{s: {{values: [1]}}}}\n",
    ):
        checked = preflight(load_sweep(sweep_file(program_dir, body)), "s.yaml", environ={**os.environ, "TOK": "s3"})
        assert checked.commands["1.1"][3:5] == ["--token=***", "***"]
        assert "s3" not in json.dumps(checked.commands)


def test_a_program_is_started_with_the_real_value_and_sweepq_writes_only_stars(program_dir, monkeypatch):
    from sweepq.layout import CellPaths
    from sweepq.program.launch import prepare
    from sweepq.wire.attempt_spec import AttemptSpec

    monkeypatch.setenv("TOK", "s3cr3t-value")
    sweep = load_sweep(sweep_file(program_dir, f"program: t.py\n{SECRET_COMMAND}grid: {{s: [1]}}\n"))
    cell = sweep.cells[0]
    root = program_dir / "root"
    spec = AttemptSpec(str(root), cell.id, 1, cell.cfg, cell.cfg_hash, sweep.settings.to_json())
    launch = prepare(spec, sweep.settings, CellPaths(root, cell.id))
    assert launch.argv[3:5] == ["--token=***", "***"]  # what stdout.log and messages show
    assert launch.popen_argv()[-3:-1] == ["--token=s3cr3t-value", "s3cr3t-value"]  # only what exec gets
    assert launch.env["TOK"] == "s3cr3t-value"  # the program's environment keeps it, as it was given
    for written in root.rglob("*"):
        if written.is_file():
            assert b"s3cr3t" not in written.read_bytes(), written


def test_python_is_the_interpreter_running_sweepq_whatever_the_path(program_dir):
    spec = sweep_file(program_dir, "program: t.py\ngrid: {s: [1]}\n")
    assert preflight(load_sweep(spec), "s.yaml", environ={"PATH": ""}).commands["1.1"][:3] == [
        "/usr/bin/env",
        "python",
        "t.py",
    ]
