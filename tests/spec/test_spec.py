"""The grouped sweep form, YAML loading, cell ids and selection (sweepq.spec)."""

from __future__ import annotations

import hashlib
import json
import os
import textwrap

import pytest
from conftest import HERE

from sweepq.errors import SpecError, UsageError
from sweepq.spec.sweep import (
    DEFAULT_RETRIES,
    CellSpec,
    Settings,
    cell_sort_key,
    cfg_hash,
    load_sweep,
    parse_sweep,
    select_cells,
)

DATA = HERE / "data" / "specs"


def parse(text: str, path: str = "sweep.yaml"):
    return parse_sweep(textwrap.dedent(text), path)


def error_of(text: str) -> str:
    with pytest.raises(SpecError) as caught:
        parse(text)
    return str(caught.value)


def cfgs(sweep) -> list[dict]:
    return [cell.cfg for cell in sweep.cells]


# ---------------------------------------------------------------- the example


def test_design_example_expands_to_nine_cells_in_run_order():
    sweep = load_sweep(DATA / "grouped.yaml")
    assert [cell.id for cell in sweep.cells] == ["1.1", "1.2", "1.3", "2.1", "2.2", "2.3", "2.4", "2.5", "2.6"]
    assert [(g.number, g.name) for g in sweep.groups] == [(1, "q1"), (2, "q2")]
    assert sweep.cells[0].cfg == {"epochs": 150, "batch_size": 64, "lr": 0.003}
    assert sweep.cells[3].cfg == {"epochs": 150, "batch_size": 64, "lr": 0.003, "width": 64}
    assert sweep.cells[-1].cfg == {"epochs": 150, "batch_size": 64, "lr": 0.001, "width": 256}
    assert sweep.cells[-1].group == 2 and sweep.cells[-1].index == 6 and sweep.cells[-1].group_name == "q2"
    assert sweep.warnings == []


def test_design_example_settings_and_paths():
    sweep = load_sweep(DATA / "grouped.yaml")
    assert sweep.path == (DATA / "grouped.yaml").absolute()
    assert sweep.root == (DATA / "runs" / "llm-analysis").absolute()
    settings = sweep.settings
    assert settings.name == "llm-analysis"
    assert settings.form == "grouped"
    assert settings.spec_dir == str(DATA.absolute())
    assert settings.train == "sweepq.examples.toy:train"
    assert settings.program is None and settings.command is None
    assert (settings.checkpoint.every_steps, settings.checkpoint.every_seconds) == (200, 300)
    assert settings.checkpoint.auto is False and settings.checkpoint.keep_last == 3
    assert settings.metric is not None
    assert (settings.metric.name, settings.metric.goal) == ("val_acc", "max")
    assert settings.retries.budgets == {**DEFAULT_RETRIES, "lost": 3, "oom": 1, "nan": 2, "error": 0}


def test_settings_round_trip_through_json():
    settings = load_sweep(DATA / "grouped.yaml").settings
    assert Settings.from_json(json.loads(json.dumps(settings.to_json()))) == settings


def test_cells_carry_the_hash_of_their_cfg():
    for cell in load_sweep(DATA / "grouped.yaml").cells:
        assert cell.cfg_hash == cfg_hash(cell.cfg)


# ---------------------------------------------------------------- expansion


def test_merge_order_is_sweep_params_then_group_params_then_grid():
    sweep = parse(
        """
        train: m:f
        params: {epochs: 10, lr: 0.5, optim: {name: sgd, momentum: 0.9}}
        groups:
          - name: a
            params: {epochs: 20, optim: {momentum: 0.8}}
            grid: {lr: [0.1], optim.name: [adam]}
        """
    )
    assert cfgs(sweep) == [{"epochs": 20, "lr": 0.1, "optim": {"name": "adam", "momentum": 0.8}}]


def test_dotted_and_nested_params_address_the_same_path():
    nested = parse("train: m:f\nparams: {optim: {lr: 0.1}}\ngroups: [{name: a}]\n")
    dotted = parse("train: m:f\nparams: {optim.lr: 0.1}\ngroups: [{name: a}]\n")
    assert cfgs(nested) == cfgs(dotted) == [{"optim": {"lr": 0.1}}]


def test_grid_dotted_key_builds_a_nested_cfg():
    sweep = parse("train: m:f\ngrid: {optim.lr: [0.1, 0.2], model.depth.blocks: [2]}\n")
    assert cfgs(sweep) == [
        {"optim": {"lr": 0.1}, "model": {"depth": {"blocks": 2}}},
        {"optim": {"lr": 0.2}, "model": {"depth": {"blocks": 2}}},
    ]


def test_grid_keys_vary_first_slowest_last_fastest_values_in_written_order():
    sweep = parse("train: m:f\ngrid: {b: [3, 1], a: [z, y, x]}\n")
    assert [(c["b"], c["a"]) for c in cfgs(sweep)] == [(3, "z"), (3, "y"), (3, "x"), (1, "z"), (1, "y"), (1, "x")]


def test_group_without_grid_is_one_cell():
    sweep = parse(
        """
        train: m:f
        params: {epochs: 5}
        groups:
          - {name: base}
          - {name: long, params: {epochs: 50}}
        """
    )
    assert [(c.id, c.cfg) for c in sweep.cells] == [("1.1", {"epochs": 5}), ("2.1", {"epochs": 50})]


def test_lists_and_mappings_inside_a_value_list_are_opaque_values():
    sweep = parse("train: m:f\ngrid: {layers: [[64, 64], [128]], opt: [{name: sgd, lr: 0.1}, {name: adam}]}\n")
    assert len(sweep.cells) == 4
    assert sweep.cells[0].cfg == {"layers": [64, 64], "opt": {"name": "sgd", "lr": 0.1}}
    assert sweep.cells[3].cfg == {"layers": [128], "opt": {"name": "adam"}}


def test_cells_do_not_share_mutable_values():
    sweep = parse("train: m:f\nparams: {layers: [1, 2]}\ngrid: {lr: [1, 2]}\n")
    sweep.cells[0].cfg["layers"].append(3)
    assert sweep.cells[1].cfg["layers"] == [1, 2]


def test_top_level_grid_is_one_group_named_after_the_sweep():
    sweep = parse("name: lr-scan\ntrain: m:f\ngrid: {lr: [1, 2]}\n")
    assert [(g.number, g.name) for g in sweep.groups] == [(1, "lr-scan")]
    assert [c.id for c in sweep.cells] == ["1.1", "1.2"]
    assert {c.group_name for c in sweep.cells} == {"lr-scan"}


@pytest.mark.parametrize("name_line", ["", "name: my sweep\n", "name: v1.2\n"])
def test_top_level_grid_group_is_default_without_a_usable_name(name_line):
    sweep = parse(name_line + "train: m:f\ngrid: {lr: [1]}\n")
    assert sweep.groups[0].name == "default"


def test_sweep_name_defaults_to_file_stem():
    assert parse("train: m:f\ngrid: {lr: [1]}\n", "/x/lr-scan.yaml").settings.name == "lr-scan"


def test_ids_are_integer_pairs_and_1_10_runs_after_1_9():
    sweep = parse("train: m:f\ngroups: [{name: a, grid: {seed: [0,1,2,3,4,5,6,7,8,9,10,11]}}, {name: b}]\n")
    ids = [c.id for c in sweep.cells]
    assert ids[8:11] == ["1.9", "1.10", "1.11"]
    assert ids[-1] == "2.1"
    assert sweep.cells[9].cfg == {"seed": 9}
    assert sorted(reversed(ids), key=cell_sort_key) == ids
    assert sorted(ids) != ids  # string order would put 1.10 before 1.2


def test_yaml_1_1_types_like_wandb():
    sweep = parse("train: m:f\ngrid: {flag: [yes, off], lr: [1.0e-3, 1e-3]}\n")
    assert [c["flag"] for c in cfgs(sweep)][::2] == [True, False]
    assert [c["lr"] for c in cfgs(sweep)][:2] == [0.001, "1e-3"]


def test_yaml_merge_keys_are_not_duplicates():
    sweep = parse(
        """
        train: m:f
        params:
          base: &base {lr: 0.1, wd: 0.0}
        groups:
          - name: a
            params:
              opt:
                <<: *base
                lr: 0.2
        """
    )
    assert cfgs(sweep) == [{"base": {"lr": 0.1, "wd": 0.0}, "opt": {"lr": 0.2, "wd": 0.0}}]


def test_empty_params_and_description_are_accepted():
    sweep = parse("train: m:f\ndescription: lr scan\nparams:\ngroups: [{name: a, description: first}]\n")
    assert sweep.description == "lr scan"
    assert sweep.groups[0].description == "first"
    assert cfgs(sweep) == [{}]


# ----------------------------------------------------------------- settings


def test_checkpoint_defaults_are_auto():
    checkpoint = parse("train: m:f\ngrid: {a: [1]}\n").settings.checkpoint
    assert (checkpoint.auto, checkpoint.every_steps, checkpoint.every_seconds) == (True, None, None)
    assert (checkpoint.keep_last, checkpoint.keep_best, checkpoint.overlap) == (3, True, True)


def test_checkpoint_with_one_cadence_is_not_auto():
    checkpoint = parse(
        "train: m:f\ncheckpoint: {every_seconds: 2.5, keep_last: 1, keep_best: false}\ngrid: {a: [1]}\n"
    ).settings.checkpoint
    assert (checkpoint.auto, checkpoint.every_seconds, checkpoint.keep_last, checkpoint.keep_best) == (
        False,
        2.5,
        1,
        False,
    )


def test_checkpoint_overlap_can_be_turned_off_and_survives_the_database_round_trip():
    settings = parse("train: m:f\ncheckpoint: {overlap: false}\ngrid: {a: [1]}\n").settings
    assert settings.checkpoint.overlap is False
    assert Settings.from_json(settings.to_json()).checkpoint.overlap is False


@pytest.mark.parametrize("written, goal", [("max", "max"), ("min", "min"), ("maximize", "max"), ("minimize", "min")])
def test_metric_goal_is_normalised(written, goal):
    metric = parse(f"train: m:f\nmetric: {{name: acc, goal: {written}}}\ngrid: {{a: [1]}}\n").settings.metric
    assert (metric.name, metric.goal) == ("acc", goal)


def test_metric_goal_defaults_to_max():
    assert parse("train: m:f\nmetric: {name: acc}\ngrid: {a: [1]}\n").settings.metric.goal == "max"


def test_retries_keep_defaults_for_unwritten_reasons_and_read_backoff():
    retries = parse(
        "train: m:f\nretries: {nan: 0, timeout: 4, backoff_seconds: 0, backoff_max_seconds: 90}\ngrid: {a: [1]}\n"
    ).settings.retries
    assert retries.budgets == {**DEFAULT_RETRIES, "nan": 0, "timeout": 4}
    assert (retries.backoff_seconds, retries.backoff_max_seconds) == (0, 90)


def test_program_sweep_settings(tmp_path):
    sweep = parse(
        """
        program: scripts/train.py
        interpreter: python3.11
        command: ["${env}", "${interpreter}", "${program}", "--fixed", "${args_json}"]
        max_attempt_seconds: 3600
        data: [data/train, ../shared/val]
        grid: {a: [1]}
        """,
        str(tmp_path / "sweeps" / "s.yaml"),
    )
    settings = sweep.settings
    assert settings.train is None
    assert settings.program == "scripts/train.py"
    assert settings.interpreter == "python3.11"
    assert settings.command == ["${env}", "${interpreter}", "${program}", "--fixed", "${args_json}"]
    assert settings.max_attempt_seconds == 3600
    assert settings.data == [str(tmp_path / "sweeps" / "data" / "train"), str(tmp_path / "shared" / "val")]
    assert sweep.warnings == []


def test_single_data_path_and_default_interpreter(tmp_path):
    settings = parse("program: t.py\ndata: d\ngrid: {a: [1]}\n", str(tmp_path / "s.yaml")).settings
    assert settings.data == [str(tmp_path / "d")]
    assert settings.interpreter == "python"
    assert settings.command is None


def test_relative_path_is_made_absolute_against_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sweep = parse("train: m:f\nroot: out\ngrid: {a: [1]}\n", "sub/s.yaml")
    assert sweep.path == tmp_path / "sub" / "s.yaml"
    assert sweep.settings.spec_dir == str(tmp_path / "sub")
    assert sweep.root == tmp_path / "sub" / "out"


def test_no_root_is_none():
    assert parse("train: m:f\ngrid: {a: [1]}\n").root is None


# ----------------------------------------------------------------- warnings


def test_numeric_looking_plain_string_warns_but_quoted_does_not():
    sweep = parse("train: m:f\nparams: {wd: 1e-4}\ngrid: {lr: [0.1, 1e-3], tag: ['2e5']}\n")
    assert len(sweep.warnings) == 2
    lr_warning = next(w for w in sweep.warnings if "grid.lr" in w)
    assert lr_warning.startswith("sweep.yaml: grid.lr: '1e-3' is a string, not a number")
    assert "0.001" in lr_warning and "quote it" in lr_warning
    assert any(w.startswith("sweep.yaml: params.wd: '1e-4'") for w in sweep.warnings)


def test_identical_cells_in_different_groups_warn():
    sweep = parse("train: m:f\ngroups: [{name: a, grid: {lr: [1, 2]}}, {name: b, grid: {lr: [2, 3]}}]\n")
    assert len(sweep.cells) == 4
    assert sweep.warnings == ["sweep.yaml: cells 1.2 and 2.1 have identical cfgs, so the same training runs twice."]


def test_command_without_args_macro_warns():
    sweep = parse("program: t.py\ncommand: [python, t.py]\ngrid: {a: [1]}\n")
    assert len(sweep.warnings) == 1 and "no args macro" in sweep.warnings[0]


# ------------------------------------------------------------------- errors

ERRORS = {
    "unknown top-level key": (
        "train: m:f\nepochs: 3\ngrid: {a: [1]}\n",
        ["sweep.yaml: epochs: unknown key 'epochs'", "Known keys: name, description, root, params", "params:"],
    ),
    "groups and grid": ("train: m:f\ngrid: {a: [1]}\ngroups: [{name: a}]\n", ["grid:", "groups:", "together"]),
    "empty groups": ("train: m:f\ngroups: []\n", ["sweep.yaml: groups: expected a non-empty list", "name: baseline"]),
    "groups is a mapping": (
        "train: m:f\ngroups: {a: 1}\n",
        ["groups: expected a non-empty list of groups, got the mapping"],
    ),
    "group not a mapping": ("train: m:f\ngroups: [adamw]\n", ["groups[1]: expected a mapping, got the string 'adamw'"]),
    "group unknown key": (
        "train: m:f\ngroups: [{name: a, grids: {}}]\n",
        ["groups[1].grids: unknown key 'grids' in groups[1]", "Known keys: name, description, params, grid"],
    ),
    "duplicate group names": (
        "train: m:f\ngroups: [{name: a}, {name: b}, {name: a}]\n",
        ["sweep.yaml: groups[3].name: the group name 'a' is already used by groups[1]"],
    ),
    "id-like group name": (
        "train: m:f\ngroups: [{name: '2.3'}]\n",
        ["groups[1].name: '2.3' is not a valid group name", "cell id"],
    ),
    "pattern group name": ("train: m:f\ngroups: [{name: 'q*'}]\n", ["'q*' is not a valid group name"]),
    "numeric group name": (
        "train: m:f\ngroups: [{name: 7}]\n",
        ["groups[1].name: expected a string, got the number 7"],
    ),
    "group without name": ("train: m:f\ngroups: [{grid: {a: [1]}}]\n", ["groups[1]: has no `name:`"]),
    "scalar instead of list": (
        "train: m:f\ngrid: {lr: 0.1}\n",
        ["sweep.yaml: grid.lr: expected a list of values, got the number 0.1", "lr: [0.1]"],
    ),
    "scalar in a group grid": (
        "train: m:f\ngroups: [{name: a}, {name: b, grid: {lr: [1], wd: x}}]\n",
        ["sweep.yaml: groups[2].grid.wd: expected a list of values, got the string 'x'", "wd: ['x']"],
    ),
    "mapping in grid": (
        "train: m:f\ngrid: {optim: {lr: [1, 2]}}\n",
        ["grid.optim: a grid value list is needed here, not a mapping", "optim.name"],
    ),
    "empty value list": ("train: m:f\ngrid: {lr: []}\n", ["grid.lr: is an empty list, which gives no cells"]),
    "empty grid": (
        "train: m:f\ngroups: [{name: a, grid: {}}]\n",
        ["groups[1].grid: expected a mapping of parameters", "leave `grid:` out"],
    ),
    "repeated grid value": (
        "train: m:f\ngrid: {lr: [0.1, 0.2, 0.1]}\n",
        ["grid.lr: value 3 (0.1) repeats value 1 (0.1)", "Remove the repeat"],
    ),
    "1 and 1.0 repeat": ("train: m:f\ngrid: {n: [1, 1.0]}\n", ["grid.n: value 2 (1.0) repeats value 1 (1)"]),
    "repeated opaque value": ("train: m:f\ngrid: {l: [[1, 2], [1, 2]]}\n", ["value 2 ([1, 2]) repeats value 1"]),
    "both train and program": (
        "train: m:f\nprogram: t.py\ngrid: {a: [1]}\n",
        ["sweep.yaml: train: both `train:` and `program:`"],
    ),
    "neither train nor program": (
        "grid: {a: [1]}\n",
        ["sweep.yaml: neither `train:` nor `program:`", "train: mypackage.module:train"],
    ),
    "train not a string": ("train: [m, f]\ngrid: {a: [1]}\n", ["train: expected a string, got the list"]),
    "train without colon": (
        "train: pkg.mod.train\ngrid: {a: [1]}\n",
        ["train: 'pkg.mod.train' is not an entry point", "mypackage.module:function"],
    ),
    "train with two colons": ("train: 'a:b:c'\ngrid: {a: [1]}\n", ["'a:b:c' is not an entry point"]),
    "program not a string": (
        "program: 3\ngrid: {a: [1]}\n",
        ["sweep.yaml: program: expected a string, got the number 3", 'program: "3"'],
    ),
    "name not a string": (
        "name: [a]\ntrain: m:f\ngrid: {a: [1]}\n",
        ["sweep.yaml: name: expected a string, got the list"],
    ),
    "command with train": (
        "train: m:f\ncommand: [x]\ngrid: {a: [1]}\n",
        ["command: `command:` only applies to `program:` sweeps"],
    ),
    "command not a list": (
        "program: t.py\ncommand: python t.py\ngrid: {a: [1]}\n",
        ["command: expected a list of tokens"],
    ),
    "command token not a string": (
        "program: t.py\ncommand: [python, 3]\ngrid: {a: [1]}\n",
        ["command: token 2 is the number 3, not a string"],
    ),
    "unknown macro": (
        "program: t.py\ncommand: ['${python}', '${args}']\ngrid: {a: [1]}\n",
        ["command: token 1: unknown macro ${python}", "${interpreter}"],
    ),
    "macro inside token": (
        "program: t.py\ncommand: [python, '--cfg=${args_json}']\ngrid: {a: [1]}\n",
        ["token 2: the macro ${args_json} is inside the longer token", "own"],
    ),
    "more cells than max_cells": (
        "train: m:f\nmax_cells: 5\n"
        "groups: [{name: a, grid: {x: [1, 2, 3]}}, {name: b, grid: {x: [1, 2], y: [1, 2]}}]\n",
        ["sweep.yaml: max_cells: the sweep expands to 7 cells (a: 3, b: 4), more than max_cells (5)", "max_cells: 7"],
    ),
    "default max_cells": (
        "train: m:f\ngrid: {a: " + str(list(range(101))) + ", b: " + str(list(range(100))) + "}\n",
        ["10,100 cells", "max_cells (10,000)"],
    ),
    "max_cells zero": (
        "train: m:f\nmax_cells: 0\ngrid: {a: [1]}\n",
        ["max_cells: expected a whole number of at least 1, got the number 0"],
    ),
    "prefix in one grid": (
        "train: m:f\ngrid: {optim: [sgd], optim.lr: [0.1]}\n",
        ["grid.optim.lr: conflicts with grid.optim"],
    ),
    "grid under a params value": (
        "train: m:f\nparams: {optim: 3}\ngroups: [{name: a, grid: {optim.lr: [0.1]}}]\n",
        ["sweep.yaml: groups[1].grid.optim.lr: conflicts with params.optim", "both a value and a mapping"],
    ),
    "grid over params mapping": (
        "train: m:f\nparams: {optim: {lr: 0.1}}\ngroups: [{name: a, grid: {optim: [1, 2]}}]\n",
        ["groups[1].grid.optim: conflicts with params.optim.lr"],
    ),
    "group params under sweep params": (
        "train: m:f\nparams: {optim: sgd}\ngroups: [{name: a, params: {optim: {lr: 1}}}]\n",
        ["groups[1].params.optim.lr: conflicts with params.optim"],
    ),
    "prefix inside params": (
        "train: m:f\nparams: {optim: 3, optim.lr: 1}\ngrid: {a: [1]}\n",
        ["params.optim.lr: conflicts with params.optim"],
    ),
    "same path twice in params": (
        "train: m:f\nparams: {optim: {lr: 1}, optim.lr: 2}\ngrid: {a: [1]}\n",
        ["params.optim.lr: sets the same parameter as params.optim.lr"],
    ),
    "group params and grid": (
        "train: m:f\ngroups: [{name: a, params: {lr: 1}, grid: {lr: [1, 2]}}]\n",
        ["sweep.yaml: groups[1].grid.lr: is also set in groups[1].params.lr"],
    ),
    "top-level params and grid": (
        "train: m:f\nparams: {lr: 1}\ngrid: {lr: [1, 2]}\n",
        ["grid.lr: is also set in params.lr"],
    ),
    "empty dotted part": (
        "train: m:f\ngrid: {optim..lr: [1]}\n",
        ["grid.optim..lr: has an empty part in its dotted path"],
    ),
    "date value": (
        "train: m:f\ngrid: {day: [2024-01-01]}\n",
        ["grid.day: YAML read datetime.date(2024, 1, 1) as a date", "'2024-01-01'"],
    ),
    "non-string key in a value": (
        "train: m:f\ngrid: {m: [{1: a}]}\n",
        ["grid.m: the key 1 inside the mapping", "is not a string", "Quote the key"],
    ),
    "non-string nested params key": (
        "train: m:f\nparams: {m: {1: a}}\ngrid: {a: [1]}\n",
        ["params.m: the key 1 is not a parameter name"],
    ),
    "non-string params key": ("train: m:f\nparams: {1: a}\ngrid: {a: [1]}\n", ["the key 1 is not a parameter name"]),
    "params not a mapping": (
        "train: m:f\nparams: [a]\ngrid: {a: [1]}\n",
        ["sweep.yaml: params: expected a mapping, got the list"],
    ),
    "checkpoint unknown key": (
        "train: m:f\ncheckpoint: {every: 3}\ngrid: {a: [1]}\n",
        ["checkpoint.every: unknown key 'every' in checkpoint", "every_steps"],
    ),
    "checkpoint zero steps": (
        "train: m:f\ncheckpoint: {every_steps: 0}\ngrid: {a: [1]}\n",
        ["checkpoint.every_steps: expected a whole number of at least 1, got the number 0"],
    ),
    "checkpoint fractional steps": (
        "train: m:f\ncheckpoint: {every_steps: 2.5}\ngrid: {a: [1]}\n",
        ["checkpoint.every_steps: expected a whole number"],
    ),
    "checkpoint negative seconds": (
        "train: m:f\ncheckpoint: {every_seconds: -1}\ngrid: {a: [1]}\n",
        ["checkpoint.every_seconds: expected a number above 0"],
    ),
    "checkpoint keep_last zero": (
        "train: m:f\ncheckpoint: {keep_last: 0}\ngrid: {a: [1]}\n",
        ["checkpoint.keep_last: expected a whole number of at least 1"],
    ),
    "checkpoint keep_best string": (
        "train: m:f\ncheckpoint: {keep_best: 'no'}\ngrid: {a: [1]}\n",
        ["checkpoint.keep_best: expected true or false"],
    ),
    "checkpoint overlap number": (
        "train: m:f\ncheckpoint: {overlap: 1}\ngrid: {a: [1]}\n",
        ["checkpoint.overlap: expected true or false, got the number 1", "overlap: false"],
    ),
    "metric without name": ("train: m:f\nmetric: {goal: max}\ngrid: {a: [1]}\n", ["metric: has no `name:`"]),
    "metric as a string": (
        "train: m:f\nmetric: acc\ngrid: {a: [1]}\n",
        ["metric: expected a mapping, got the string 'acc'", "metric: {name: val_acc, goal: max}"],
    ),
    "metric bad goal": (
        "train: m:f\nmetric: {name: a, goal: up}\ngrid: {a: [1]}\n",
        ["metric.goal: the string 'up' is not a goal", "max, min, maximize, minimize"],
    ),
    "retries preempted": (
        "train: m:f\nretries: {preempted: 2}\ngrid: {a: [1]}\n",
        ["retries.preempted: preempted has no retry budget", "never the cell's fault"],
    ),
    "retries cancelled": (
        "train: m:f\nretries: {cancelled: 2}\ngrid: {a: [1]}\n",
        ["retries.cancelled: cancelled has no retry budget"],
    ),
    "retries completed": (
        "train: m:f\nretries: {completed: 1}\ngrid: {a: [1]}\n",
        ["retries.completed: completed has no retry budget"],
    ),
    "retries unknown": (
        "train: m:f\nretries: {crash: 1}\ngrid: {a: [1]}\n",
        ["retries.crash: unknown key 'crash'", "lost, oom, nan, error, data_error, timeout"],
    ),
    "retries negative": (
        "train: m:f\nretries: {oom: -1}\ngrid: {a: [1]}\n",
        ["retries.oom: expected a whole number of at least 0"],
    ),
    "retries negative backoff": (
        "train: m:f\nretries: {backoff_seconds: -5}\ngrid: {a: [1]}\n",
        ["retries.backoff_seconds: expected a number of at least 0"],
    ),
    "max_attempt_seconds zero": (
        "train: m:f\nmax_attempt_seconds: 0\ngrid: {a: [1]}\n",
        ["max_attempt_seconds: expected a number above 0"],
    ),
    "data not paths": ("train: m:f\ndata: {a: b}\ngrid: {a: [1]}\n", ["data: expected a path or a list of paths"]),
    "root not a string": ("train: m:f\nroot: [a]\ngrid: {a: [1]}\n", ["root: expected a string"]),
    "empty file": ("", ["sweep.yaml: the file is empty"]),
    "not a mapping": ("- a\n- b\n", ["sweep.yaml: a sweep file is a mapping of keys, got the list"]),
    "neither form": ("train: m:f\nparams: {a: 1}\n", ["not a sweep file", "groups:", "method: grid"]),
    "both forms": ("method: grid\ngroups: [{name: a}]\n", ["has both `method:`", "grouped form"]),
}


@pytest.mark.parametrize("text, expected", ERRORS.values(), ids=ERRORS.keys())
def test_invalid_grouped_files_are_refused_with_a_useful_message(text, expected):
    message = error_of(text)
    assert message.startswith("sweep.yaml: ") or message.startswith("sweep.yaml, line ")
    assert "\n" not in message
    for fragment in expected:
        assert fragment in message


def test_duplicate_yaml_key_names_both_lines():
    message = error_of(
        """\
        train: m:f
        groups:
          - name: a
            grid:
              lr: [1, 2]
              lr: [3]
        """
    )
    assert message.startswith("sweep.yaml, line 6, column 7: duplicate key 'lr'")
    assert "first written at line 5, column 7" in message


def test_duplicate_top_level_key_is_an_error():
    assert "duplicate key 'train'" in error_of("train: m:f\ngrid: {a: [1]}\ntrain: n:g\n")


def test_yaml_syntax_error_names_line_and_column():
    message = error_of(
        """\
        train: m:f
        groups:
          - name: a
           grid: {lr: [1]}
        """
    )
    assert message.startswith("sweep.yaml, line 4, column 4: YAML syntax error")
    assert "indentation" in message


def test_yaml_syntax_error_in_flow_collection():
    message = error_of("train: m:f\ngrid: {lr: [1, 2}\n")
    assert message.startswith("sweep.yaml, line 2, column 17: YAML syntax error")


def test_tab_indentation_is_a_syntax_error():
    assert "YAML syntax error" in error_of("train: m:f\ngrid:\n\tlr: [1]\n")


def test_missing_file_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError, match="cannot read the sweep file"):
        load_sweep(tmp_path / "nope.yaml")


# --------------------------------------------------------------------- hashes


def test_cfg_hash_is_sha256_of_canonical_json():
    cfg = {"b": 1, "a": {"y": [1, 2], "x": "s"}}
    canonical = '{"a":{"x":"s","y":[1,2]},"b":1}'
    assert cfg_hash(cfg) == hashlib.sha256(canonical.encode()).hexdigest()


def test_cfg_hash_ignores_key_order_and_tells_json_types_apart():
    assert cfg_hash({"a": 1, "b": 2}) == cfg_hash({"b": 2, "a": 1})
    assert cfg_hash({"a": 1}) != cfg_hash({"a": 1.0})
    assert cfg_hash({"a": 1}) != cfg_hash({"a": True})
    assert cfg_hash({"a": "1"}) != cfg_hash({"a": 1})


# ------------------------------------------------------------------ selection


@pytest.fixture()
def example_cells() -> list[CellSpec]:
    sweep = parse(
        "train: m:f\ngroups: [{name: q1, grid: {a: [1, 2, 3]}}, {name: q2, grid: {a: [4,5,6,7,8,9,10,11,12,13]}}]\n"
    )
    return sweep.cells


def ids(cells):
    return [cell.id for cell in cells]


def test_select_by_id_group_name_and_pattern(example_cells):
    assert ids(select_cells(example_cells, ["2.3"])) == ["2.3"]
    assert ids(select_cells(example_cells, ["q1"])) == ["1.1", "1.2", "1.3"]
    assert ids(select_cells(example_cells, ["*.1"])) == ["1.1", "2.1"]
    assert ids(select_cells(example_cells, ["2.1?"])) == ["2.10"]


def test_selection_is_in_run_order_without_duplicates(example_cells):
    chosen = select_cells(example_cells, ["2.10", "q1", "1.2", "2.9", "1.*"])
    assert ids(chosen) == ["1.1", "1.2", "1.3", "2.9", "2.10"]


def test_selection_sorts_cells_given_out_of_order(example_cells):
    assert ids(select_cells(list(reversed(example_cells)), ["2.*"])) == [f"2.{i}" for i in range(1, 11)]


def test_no_selectors_select_every_cell(example_cells):
    assert ids(select_cells(example_cells, [])) == ids(example_cells)


@pytest.mark.parametrize("selector", ["7.1", "1.4", "adamw", "3.*"])
def test_unknown_selector_names_itself_and_lists_groups(example_cells, selector):
    with pytest.raises(UsageError) as caught:
        select_cells(example_cells, ["1.1", selector])
    message = str(caught.value)
    assert repr(selector) in message
    assert "1 q1 (1.1–1.3)" in message and "2 q2 (2.1–2.10)" in message


def test_bare_group_number_hints_at_the_pattern(example_cells):
    with pytest.raises(UsageError, match=r"write 2\.\*"):
        select_cells(example_cells, ["2"])


def test_cell_sort_key():
    assert cell_sort_key("1.10") == (1, 10)
    assert cell_sort_key("12.3") == (12, 3)
    with pytest.raises(UsageError, match="not a cell id"):
        cell_sort_key("1.x")


def test_spec_error_is_a_usage_error_with_exit_code_2():
    with pytest.raises(UsageError) as caught:
        parse("grid: {a: [1]}\n")
    assert caught.value.exit_code == 2


def test_parse_reads_no_program_file(tmp_path):
    sweep = parse("program: does/not/exist.py\ngrid: {a: [1]}\n", str(tmp_path / "s.yaml"))
    assert sweep.settings.program == "does/not/exist.py"
    assert not os.path.exists(tmp_path / "does")


def test_python_tags_are_refused_by_safe_loading():
    message = error_of("train: m:f\ngrid: {a: [!!python/object:os.system x]}\n")
    assert message.startswith("sweep.yaml, line 2, column 12: unsupported YAML value")
