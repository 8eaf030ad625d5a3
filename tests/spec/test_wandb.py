"""W&B grid sweep files: validation, W&B's expansion order, de-duplication, warnings."""

from __future__ import annotations

import dataclasses
import json
import random
import textwrap

import pytest
from conftest import HERE

from sweepq.errors import SpecError
from sweepq.spec.command import args_json, render_command
from sweepq.spec.sweep import DEFAULT_MAX_CELLS, load_sweep, parse_sweep

DATA = HERE / "data" / "specs"


def parse(text: str, path: str = "sweep.yaml"):
    return parse_sweep(textwrap.dedent(text), path)


def grid(parameters: str, extra: str = "") -> str:
    """A W&B grid file around a `parameters:` block written in flow style."""
    return f"method: grid\nprogram: train.py\n{extra}parameters: {parameters}\n"


def cfgs(sweep) -> list[dict]:
    return [cell.cfg for cell in sweep.cells]


def error_of(text: str) -> str:
    with pytest.raises(SpecError) as caught:
        parse(text)
    return str(caught.value)


# --------------------------------------------------------------- a full file


def test_fixture_file_order_metadata_and_settings():
    sweep = load_sweep(DATA / "wandb_grid.yaml")
    # names sorted at each level: augment, depth, epochs, optimizer.{lr, momentum, name};
    # product over the varying ones, the last (optimizer.name) fastest; run_cap 10 of 24.
    assert len(sweep.cells) == 10
    assert sweep.cells[0].cfg == {
        "augment": True,
        "depth": 1,
        "epochs": 30,
        "optimizer": {"lr": 0.1, "momentum": 0.9, "name": "sgd"},
    }
    assert sweep.cells[1].cfg["optimizer"] == {"lr": 0.1, "momentum": 0.9, "name": "adam"}
    assert sweep.cells[2].cfg["optimizer"]["lr"] == 0.01
    assert sweep.cells[4].cfg["depth"] == 2
    assert sweep.cells[9].cfg == {
        "augment": True,
        "depth": 3,
        "epochs": 30,
        "optimizer": {"lr": 0.1, "momentum": 0.9, "name": "adam"},
    }
    assert sweep.warnings == [
        "{}: run_cap: 10 of 24 cells kept (run_cap keeps the first 10 in W&B's grid order).".format(
            DATA / "wandb_grid.yaml"
        )
    ]
    assert (sweep.project, sweep.entity, sweep.description) == ("vision", "lab", "depth and optimiser grid")
    settings = sweep.settings
    assert (settings.form, settings.name, settings.program, settings.train) == (
        "wandb",
        "resnet-grid",
        "train.py",
        None,
    )
    assert settings.metric is not None
    assert (settings.metric.name, settings.metric.goal) == ("val_loss", "min")
    assert settings.command is None and settings.interpreter == "python"
    assert settings.checkpoint.auto is True
    assert [(g.number, g.name) for g in sweep.groups] == [(1, "resnet-grid")]
    assert [c.id for c in sweep.cells][-2:] == ["1.9", "1.10"]


# ---------------------------------------------------------------- expansion


def test_parameter_names_are_sorted_and_the_last_varies_fastest():
    sweep = parse(grid("{b: {values: [1, 2]}, a: {values: [x, y, z]}}"))
    assert [(c["a"], c["b"]) for c in cfgs(sweep)] == [("x", 1), ("x", 2), ("y", 1), ("y", 2), ("z", 1), ("z", 2)]


def test_sorting_is_by_code_point_like_python():
    sweep = parse(grid("{b: {values: [1, 2]}, B: {values: [3, 4]}, _c: {value: 0}}"))
    assert [(c["B"], c["b"]) for c in cfgs(sweep)] == [(3, 1), (3, 2), (4, 1), (4, 2)]


def test_values_keep_written_order():
    sweep = parse(grid("{lr: {values: [0.3, 0.1, 0.2]}}"))
    assert [c["lr"] for c in cfgs(sweep)] == [0.3, 0.1, 0.2]


def test_constants_join_every_cell_without_multiplying():
    sweep = parse(grid("{epochs: {value: 5}, lr: {values: [1, 2]}, tag: {distribution: constant, value: [a, b]}}"))
    assert cfgs(sweep) == [{"epochs": 5, "lr": 1, "tag": ["a", "b"]}, {"epochs": 5, "lr": 2, "tag": ["a", "b"]}]


def test_only_constants_make_one_cell():
    assert cfgs(parse(grid("{a: {value: 1}, b: {value: null}}"))) == [{"a": 1, "b": None}]


def test_nested_parameters_are_sorted_per_level_and_visited_in_place():
    sweep = parse(
        grid(
            "{z: {values: [1, 2]}, "
            "opt: {parameters: {wd: {values: [0, 1]}, lr: {values: [0.1, 0.2]}}}, "
            "a: {values: [true, false]}}"
        )
    )
    # order of the product: a, opt.lr, opt.wd, z (last fastest)
    assert len(sweep.cells) == 16
    assert cfgs(sweep)[0] == {"a": True, "opt": {"lr": 0.1, "wd": 0}, "z": 1}
    assert cfgs(sweep)[1] == {"a": True, "opt": {"lr": 0.1, "wd": 0}, "z": 2}
    assert cfgs(sweep)[2] == {"a": True, "opt": {"lr": 0.1, "wd": 1}, "z": 1}
    assert cfgs(sweep)[4] == {"a": True, "opt": {"lr": 0.2, "wd": 0}, "z": 1}
    assert cfgs(sweep)[-1] == {"a": False, "opt": {"lr": 0.2, "wd": 1}, "z": 2}


def test_deeply_nested_parameters():
    sweep = parse(grid("{model: {parameters: {enc: {parameters: {depth: {values: [2, 4]}}}, act: {value: relu}}}}"))
    assert cfgs(sweep) == [
        {"model": {"act": "relu", "enc": {"depth": 2}}},
        {"model": {"act": "relu", "enc": {"depth": 4}}},
    ]


def test_dotted_names_stay_flat_keys():
    sweep = parse(grid("{optim.lr: {values: [0.1, 0.2]}, optim: {value: sgd}}"))
    assert cfgs(sweep) == [{"optim": "sgd", "optim.lr": 0.1}, {"optim": "sgd", "optim.lr": 0.2}]


@pytest.mark.parametrize(
    "spec, values",
    [
        ("{min: 1, max: 4}", [1, 2, 3, 4]),
        ("{distribution: int_uniform, min: -2, max: 0}", [-2, -1, 0]),
        ("{min: 0, max: 1}", [0, 1]),
    ],
)
def test_int_uniform_expands_min_to_max_inclusive(spec, values):
    assert [c["n"] for c in cfgs(parse(grid(f"{{n: {spec}}}")))] == values


def test_mixed_types_and_opaque_values():
    sweep = parse(grid("{v: {values: [1, '1', true, null, [1, 2], {k: v}, 0.5, text]}}"))
    assert [c["v"] for c in cfgs(sweep)] == [1, "1", True, None, [1, 2], {"k": "v"}, 0.5, "text"]
    assert sweep.warnings == []


def test_booleans_and_yaml_1_1_spellings():
    # YAML 1.1 reads `no` and `On` as booleans, as W&B does, so `On` repeats `true`.
    sweep = parse(grid("{flag: {values: [true, no, On]}}"))
    assert [c["flag"] for c in cfgs(sweep)] == [True, False]
    assert len(sweep.warnings) == 1 and "true repeats true" in sweep.warnings[0]


# ------------------------------------------------------------ de-duplication


def test_repeated_value_is_dropped_with_a_warning():
    sweep = parse(grid("{lr: {values: [0.1, 0.2, 0.1]}, b: {values: [x, y]}}"))
    assert [(c["b"], c["lr"]) for c in cfgs(sweep)] == [("x", 0.1), ("x", 0.2), ("y", 0.1), ("y", 0.2)]
    assert len(sweep.warnings) == 1
    assert sweep.warnings[0].startswith("sweep.yaml: parameters.lr.values: 0.1 repeats 0.1")


def test_1_and_1_0_count_as_one_value_at_the_first_place_with_the_last_spelling():
    sweep = parse(grid("{n: {values: [1, 2, 1.0]}}"))
    cells = cfgs(sweep)
    assert [c["n"] for c in cells] == [1.0, 2]
    assert isinstance(cells[0]["n"], float)
    assert "1.0 repeats 1" in sweep.warnings[0]


@pytest.mark.parametrize("values", ["[1, true]", "[1, '1']", "[[1.0], [1]]", "[0, false]", "[null, 'null']"])
def test_values_wandb_tells_apart_are_kept(values):
    sweep = parse(grid(f"{{v: {{values: {values}}}}}"))
    assert len(sweep.cells) == 2
    assert sweep.warnings == []


def test_repeated_mappings_with_other_key_order_are_one_value():
    sweep = parse(grid("{v: {values: [{a: 1, b: 2}, {b: 2, a: 1}]}}"))
    assert len(sweep.cells) == 1 and len(sweep.warnings) == 1


# ------------------------------------------------------------------- run_cap


def test_run_cap_keeps_a_prefix_with_a_warning():
    sweep = parse(grid("{a: {values: [1, 2, 3]}, b: {values: [1, 2, 3, 4]}}", "run_cap: 4\n"))
    assert [(c["a"], c["b"]) for c in cfgs(sweep)] == [(1, 1), (1, 2), (1, 3), (1, 4)]
    assert sweep.warnings == [
        "sweep.yaml: run_cap: 4 of 12 cells kept (run_cap keeps the first 4 in W&B's grid order)."
    ]


@pytest.mark.parametrize("cap", [12, 100])
def test_run_cap_at_or_above_the_grid_size_keeps_all_silently(cap):
    sweep = parse(grid("{a: {values: [1, 2, 3]}, b: {values: [1, 2, 3, 4]}}", f"run_cap: {cap}\n"))
    assert len(sweep.cells) == 12 and sweep.warnings == []


def test_run_cap_on_a_huge_range_does_not_enumerate_it():
    # 2 * 10**18 + 2 cells: no machine enumerates them, so returning at all proves the cap is lazy.
    sweep = parse(grid("{a: {values: [x, y]}, n: {min: 0, max: 1000000000000000000}}", "run_cap: 3\n"))
    assert [(c["a"], c["n"]) for c in cfgs(sweep)] == [("x", 0), ("x", 1), ("x", 2)]


def test_grid_larger_than_the_limit_is_refused_unless_capped():
    text = grid("{a: {min: 1, max: 101}, b: {min: 1, max: 100}}")
    message = error_of(text)
    assert message.startswith("sweep.yaml: parameters: the grid has 10,100 cells")
    assert f"run_cap: {DEFAULT_MAX_CELLS}" in message
    assert len(parse(grid("{a: {min: 1, max: 101}, b: {min: 1, max: 100}}", "run_cap: 50\n")).cells) == 50


# ------------------------------------------------------------ metadata & misc


def test_defaults_name_from_file_stem_and_goal_minimize():
    sweep = parse(grid("{a: {value: 1}}", "metric: {name: loss}\n"), "/somewhere/lr_scan.yaml")
    assert sweep.settings.name == "lr_scan"
    assert sweep.groups[0].name == "default"
    assert sweep.settings.metric.goal == "min"
    assert sweep.root is None and sweep.project is None


def test_maximize_goal_and_ignored_metric_keys():
    sweep = parse(grid("{a: {value: 1}}", "metric: {name: acc, goal: maximize, impute: worst}\n"))
    assert (sweep.settings.metric.name, sweep.settings.metric.goal) == ("acc", "max")


def test_api_version_and_kind_are_ignored_and_controller_warns():
    sweep = parse(grid("{a: {value: 1}}", "apiVersion: v1\nkind: sweep\ncontroller: {type: local}\n"))
    assert sweep.warnings == ["sweep.yaml: controller: ignored: sweepq runs the grid itself, with no W&B controller."]


def test_command_tokens_are_kept_unrendered_with_numbers_as_text():
    sweep = parse(
        grid("{a: {value: 1}}", "command: ['${env}', '${interpreter}', '${program}', --epochs, 10, '${args}']\n")
    )
    assert sweep.settings.command == ["${env}", "${interpreter}", "${program}", "--epochs", "10", "${args}"]
    assert sweep.warnings == []


def test_command_without_program_macro_needs_no_program():
    sweep = parse("method: grid\ncommand: [bash, run.sh, '${args_no_hyphens}']\nparameters: {a: {value: 1}}\n")
    assert sweep.settings.program is None


def test_command_without_args_macro_warns():
    sweep = parse(grid("{a: {value: 1}}", "command: ['${interpreter}', '${program}']\n"))
    assert len(sweep.warnings) == 1
    assert sweep.warnings[0].startswith("sweep.yaml: command: no args macro")


def test_numeric_looking_strings_warn():
    sweep = parse(grid("{lr: {values: [1e-3, 0.01]}, wd: {value: 5e-4}, tag: {value: '1e5'}}"))
    assert [c["lr"] for c in cfgs(sweep)] == ["1e-3", 0.01]
    assert len(sweep.warnings) == 2
    assert sweep.warnings[0].startswith("sweep.yaml: parameters.lr.values: '1e-3' is a string, not a number")
    assert sweep.warnings[1].startswith("sweep.yaml: parameters.wd.value: '5e-4' is a string")


# ------------------------------------------------------------------- errors

ERRORS = {
    "method random": (
        "method: random\nprogram: t.py\nparameters: {a: {values: [1]}}\n",
        ["sweep.yaml: method: 'random' is not supported", "method: grid"],
    ),
    "method bayes": (
        "method: bayes\nprogram: t.py\nparameters: {a: {values: [1]}}\n",
        ["method: 'bayes' is not supported"],
    ),
    "method not a string": (
        "method: [grid]\nprogram: t.py\nparameters: {a: {values: [1]}}\n",
        ["method: expected a string, got the list"],
    ),
    "uniform": (
        grid("{lr: {distribution: uniform, min: 0.0, max: 1.0}}"),
        ["parameters.lr.distribution: uniform samples values at random", "values: [...]"],
    ),
    "log_uniform_values": (
        grid("{lr: {distribution: log_uniform_values, min: 0.0001, max: 0.1}}"),
        ["log_uniform_values samples values at random"],
    ),
    "normal": (grid("{x: {distribution: normal, mu: 0, sigma: 1}}"), ["parameters.x.distribution: normal samples"]),
    "beta": (grid("{x: {distribution: beta, a: 1, b: 2}}"), ["beta samples"]),
    "categorical with probabilities distribution": (
        grid("{x: {distribution: categorical_w_probabilities, values: [1], probabilities: [1]}}"),
        ["categorical_w_probabilities samples"],
    ),
    "unknown distribution": (
        grid("{x: {distribution: fancy, values: [1]}}"),
        ["unknown distribution 'fancy'", "categorical, constant, int_uniform"],
    ),
    "probabilities": (
        grid("{x: {values: [1, 2], probabilities: [0.5, 0.5]}}"),
        ["parameters.x.probabilities: `probabilities` shapes random sampling"],
    ),
    "mu": (grid("{x: {values: [1], mu: 0}}"), ["parameters.x.mu:"]),
    "sigma": (grid("{x: {values: [1], sigma: 1}}"), ["parameters.x.sigma:"]),
    "q": (grid("{x: {min: 1, max: 4, q: 1}}"), ["parameters.x.q:"]),
    "empty values": (grid("{x: {values: []}}"), ["parameters.x.values: is an empty list"]),
    "scalar values": (
        grid("{x: {values: 0.1}}"),
        ["parameters.x.values: expected a list, got the number 0.1", "values: [0.1]"],
    ),
    "value and values": (grid("{x: {value: 1, values: [1, 2]}}"), ["parameters.x: has both `value` and `values`"]),
    "parameter not a mapping": (
        grid("{x: 0.1}"),
        ["parameters.x: a parameter is a mapping, got the number 0.1", "x: {value: ...}"],
    ),
    "parameter is a list": (
        grid("{x: [1, 2]}"),
        ["parameters.x: a parameter is a mapping, got the list [1, 2]", "x: {values: [...]}"],
    ),
    "nested parameter not a mapping": (
        grid("{opt: {parameters: {lr: 0.1}}}"),
        ["parameters.opt.parameters.lr: a parameter is a mapping"],
    ),
    "nested parameter with extra keys": (
        grid("{opt: {parameters: {lr: {value: 1}}, value: 2}}"),
        ["parameters.opt: a nested parameter holds only `parameters:`"],
    ),
    "empty nested parameters": (
        grid("{opt: {parameters: {}}}"),
        ["parameters.opt.parameters: expected a non-empty mapping"],
    ),
    "min not less than max": (grid("{x: {min: 4, max: 2}}"), ["parameters.x: min 4 is not less than max 2"]),
    "min equals max": (grid("{x: {min: 3, max: 3}}"), ["min 3 is not less than max 3"]),
    "float bounds": (
        grid("{x: {min: 0.1, max: 1}}"),
        ["parameters.x: min 0.1 and max 1 are not both integers", "continuous uniform", "refuses a float with an"],
    ),
    "int_uniform with floats": (
        grid("{x: {distribution: int_uniform, min: 1.0, max: 3}}"),
        ["int_uniform needs whole numbers"],
    ),
    "only min": (grid("{x: {min: 1}}"), ["parameters.x: needs both min and max"]),
    "no values at all": (grid("{x: {distribution: categorical}}"), ["parameters.x: gives no values"]),
    "values with constant distribution": (
        grid("{x: {distribution: constant, values: [1]}}"),
        ["constant does not go with values"],
    ),
    "unknown parameter key": (grid("{x: {values: [1], default: 2}}"), ["parameters.x.default: unknown key 'default'"]),
    "bad parameter name": (grid("{'my lr': {values: [1]}}"), ["'my lr' is not a parameter name W&B accepts"]),
    "metric target": (
        grid("{x: {value: 1}}", "metric: {name: acc, goal: maximize, target: 0.99}\n"),
        ["sweep.yaml: metric.target:", "Remove target"],
    ),
    "metric goal max": (
        grid("{x: {value: 1}}", "metric: {name: acc, goal: max}\n"),
        ["metric.goal: the string 'max' is not a goal", "maximize, minimize"],
    ),
    "metric unknown key": (
        grid("{x: {value: 1}}", "metric: {name: acc, mode: max}\n"),
        ["metric.mode: unknown key 'mode'"],
    ),
    "metric without name": (grid("{x: {value: 1}}", "metric: {goal: minimize}\n"), ["metric: has no `name:`"]),
    "scheduler": (
        grid("{x: {value: 1}}", "scheduler: {num_workers: 2}\n"),
        ["sweep.yaml: scheduler: W&B Launch schedulers are not supported"],
    ),
    "job": (grid("{x: {value: 1}}", "job: a/b/job:v0\n"), ["sweep.yaml: job: W&B Launch jobs are not supported"]),
    "image_uri": (grid("{x: {value: 1}}", "image_uri: repo/img\n"), ["sweep.yaml: image_uri:"]),
    "unknown top-level key": (
        grid("{x: {value: 1}}", "max_runs: 4\n"),
        ["sweep.yaml: max_runs: unknown key 'max_runs'", "run_cap"],
    ),
    "program not a string": (
        "method: grid\nprogram: [a.py]\nparameters: {x: {value: 1}}\n",
        ["sweep.yaml: program: expected a string, got the list"],
    ),
    "name not a string": (
        grid("{x: {value: 1}}", "name: 42\n"),
        ["sweep.yaml: name: expected a string, got the number 42"],
    ),
    "missing parameters": ("method: grid\nprogram: t.py\n", ["a W&B grid sweep needs `parameters:`"]),
    "empty parameters": (
        "method: grid\nprogram: t.py\nparameters: {}\n",
        ["sweep.yaml: parameters: expected a non-empty mapping"],
    ),
    "run_cap zero": (grid("{x: {value: 1}}", "run_cap: 0\n"), ["run_cap: expected a whole number of at least 1"]),
    "unknown macro": (
        grid("{x: {value: 1}}", "command: ['${env}', '${python}', '${program}', '${args}']\n"),
        ["sweep.yaml: command: token 2: unknown macro ${python}", "W&B would drop it"],
    ),
    "macro inside a token": (
        grid("{x: {value: 1}}", "command: ['${program}', '--x=${x}']\n"),
        ["command: token 2: the macro ${x} is inside the longer token '--x=${x}'"],
    ),
    "envvar name W&B's agent does not expand": (
        grid("{x: {value: 1}}", "command: ['${program}', '${envvar:my_token}']\n"),
        [
            "sweep.yaml: command: token 2: W&B's agent expands ${envvar:NAME} only where NAME is capital letters, "
            "digits and _, so it would drop the token. Name the variable in capitals: export MY_TOKEN=... and "
            "write ${envvar:MY_TOKEN}."
        ],
    ),
    "envvar name W&B's agent does not expand, inside a token": (
        grid("{x: {value: 1}}", "command: ['${program}', '--home=${envvar:Home}/x']\n"),
        ["command: token 2: W&B's agent", "so it would pass ${envvar:Home} to the program as written"],
    ),
    "command not a list": (
        grid("{x: {value: 1}}", "command: python train.py\n"),
        ["command: expected a list of tokens"],
    ),
    "command token a mapping": (grid("{x: {value: 1}}", "command: [{a: 1}]\n"), ["command: token 1 is the mapping"]),
    "date value": (
        grid("{d: {values: [2024-05-01]}}"),
        ["parameters.d.values: YAML read datetime.date(2024, 5, 1) as a date"],
    ),
}


@pytest.mark.parametrize("text, expected", ERRORS.values(), ids=ERRORS.keys())
def test_invalid_wandb_files_are_refused_with_a_useful_message(text, expected):
    message = error_of(text)
    assert message.startswith("sweep.yaml: ")
    assert "\n" not in message
    for fragment in expected:
        assert fragment in message


def test_wandb_yaml_syntax_error_has_line_and_column():
    message = error_of("method: grid\nprogram: t.py\nparameters:\n  lr: {values: [0.1, 0.2}\n")
    assert message.startswith("sweep.yaml, line 4, column 25: YAML syntax error")


def test_wandb_duplicate_parameter_is_an_error():
    message = error_of("method: grid\nprogram: t.py\nparameters:\n  lr: {values: [1]}\n  lr: {values: [2]}\n")
    assert message.startswith("sweep.yaml, line 5, column 3: duplicate key 'lr'")


# ------------------------------------------------------------ method first


@pytest.mark.parametrize("method", ["bayes", "random"])
@pytest.mark.parametrize(
    "extra",
    [
        "early_terminate: {type: hyperband, min_iter: 3}\n",
        "scheduler: {num_workers: 2}\nearly_terminate: {type: hyperband, min_iter: 3}\n",
        "max_runs: 4\n",
    ],
)
def test_the_method_is_checked_before_any_other_key(method, extra):
    text = (
        f"method: {method}\nprogram: t.py\n{extra}parameters: {{lr: {{distribution: uniform, min: 0.0, max: 0.1}}}}\n"
    )
    assert error_of(text) == (
        f"sweep.yaml: method: {method!r} is not supported: sweepq runs grid sweeps only, every cell known in "
        "advance. Write method: grid and give each parameter a list of values, or run this sweep with W&B's agent."
    )


# ------------------------------------------------------------ early_terminate


def test_a_grid_with_early_terminate_runs_every_cell_with_a_warning():
    sweep = parse(grid("{lr: {values: [0.1, 0.01]}}", "early_terminate: {type: hyperband, min_iter: 3}\n"))
    assert [c["lr"] for c in cfgs(sweep)] == [0.1, 0.01]
    assert sweep.warnings == [
        "sweep.yaml: early_terminate: ignored: sweepq never stops a cell early, it runs every cell to its end "
        "(W&B's agent would stop runs that fall behind)."
    ]


# ----------------------------------------------------------------- q_uniform

# What W&B's own grid gives a q_uniform parameter. W&B's engine (wandb/sweeps,
# src/sweeps/grid_search.py, grid_search_next_runs) turns it into the categorical
# values `np.arange(min, max, q).tolist()`, with `q` defaulting to 1.0 (its
# schema.json, param_quniform). These lists were captured by running that engine:
# `sweeps` 0.3.0 from PyPI (numpy 1.26.4) in a throwaway virtualenv, calling
# grid_search_next_runs(runs, {"method": "grid", "parameters": {"x": {"distribution":
# "q_uniform", ...}}}) until it returned None, and pasted here unchanged (numpy
# 2.4.6's arange gives the same lists).
WANDB_Q_UNIFORM = [
    ("{min: 0, max: 10, q: 2}", [0, 2, 4, 6, 8]),
    ("{min: 0, max: 10, q: 3}", [0, 3, 6, 9]),
    (
        "{min: 0, max: 1, q: 0.1}",
        [0.0, 0.1, 0.2, 0.30000000000000004, 0.4, 0.5, 0.6000000000000001, 0.7000000000000001, 0.8, 0.9],
    ),
    (
        "{min: -1, max: 1, q: 0.3}",
        [
            -1.0,
            -0.7,
            -0.3999999999999999,
            -0.09999999999999987,
            0.20000000000000018,
            0.5000000000000002,
            0.8000000000000003,
        ],
    ),
    (
        "{min: 0.1, max: 0.9, q: 0.07}",
        [
            0.1,
            0.17,
            0.24000000000000002,
            0.31000000000000005,
            0.38,
            0.45000000000000007,
            0.52,
            0.5900000000000001,
            0.66,
            0.7300000000000001,
            0.8,
            0.87,
        ],
    ),
    ("{min: 0, max: 3}", [0.0, 1.0, 2.0]),
    ("{min: 1, max: 2, q: 0.25}", [1.0, 1.25, 1.5, 1.75]),
    ("{min: 0.1, max: 0.4, q: 0.1}", [0.1, 0.2, 0.30000000000000004, 0.4]),  # max itself, by rounding
    ("{min: 0, max: 0.3, q: 0.1}", [0.0, 0.1, 0.2]),
    ("{min: 0.0, max: 1.0e-323, q: 1.0e+300}", [0.0]),  # (max - min) / q underflows: numpy still gives min
    # Values that round to the same float: W&B runs each once (yaml_hash).
    (
        "{min: 9007199254740990.0, max: 9007199254740998.0, q: 1.0}",
        [9007199254740990.0, 9007199254740991.0, 9007199254740992.0, 9007199254740994.0, 9007199254740996.0],
    ),
]


@pytest.mark.parametrize("spec, expected", WANDB_Q_UNIFORM, ids=[spec for spec, _ in WANDB_Q_UNIFORM])
def test_q_uniform_is_enumerated_exactly_as_wandbs_grid_does(spec, expected):
    sweep = parse(grid(f"{{x: {{distribution: q_uniform, {spec[1:]}}}"))
    got = [c["x"] for c in cfgs(sweep)]
    assert got == expected
    assert [type(v) for v in got] == [type(v) for v in expected]  # 0 and 0.0 print differently in ${args}
    assert [repr(v) for v in got] == [repr(v) for v in expected]


def test_q_uniform_takes_its_place_in_wandbs_order():
    # Captured from W&B's engine as above (grid_search_next_runs with validate=False:
    # sweeps 0.3.0's SweepConfig validation drops nested parameters).
    sweep = parse(
        grid(
            "{b: {values: [x, y]}, a: {distribution: q_uniform, min: 0, max: 1, q: 0.5}, "
            "opt: {parameters: {wd: {distribution: q_uniform, min: 0, max: 0.3, q: 0.1}}}}"
        )
    )
    assert [(c["a"], c["b"], c["opt"]["wd"]) for c in cfgs(sweep)] == [
        (0.0, "x", 0.0), (0.0, "x", 0.1), (0.0, "x", 0.2), (0.0, "y", 0.0), (0.0, "y", 0.1), (0.0, "y", 0.2),
        (0.5, "x", 0.0), (0.5, "x", 0.1), (0.5, "x", 0.2), (0.5, "y", 0.0), (0.5, "y", 0.1), (0.5, "y", 0.2),
    ]  # fmt: skip
    assert sweep.warnings == []


def test_q_uniform_without_q_warns_that_its_values_are_floats():
    sweep = parse(grid("{n: {distribution: q_uniform, min: 2, max: 4}}"))
    assert [c["n"] for c in cfgs(sweep)] == [2.0, 3.0]
    assert sweep.warnings == [
        "sweep.yaml: parameters.n.q: not given, so W&B's default q: 1.0 applies and every value is a float "
        "(2.0, 3.0, ...), as in W&B. Write q: 1 for whole numbers."
    ]


def test_q_uniform_values_that_round_to_one_float_are_one_cell_with_a_warning():
    sweep = parse(grid("{x: {distribution: q_uniform, min: 9007199254740990.0, max: 9007199254740998.0, q: 1.0}}"))
    assert len(sweep.cells) == 5
    assert sweep.warnings == [
        "sweep.yaml: parameters.x: 3 of the 8 values from min 9007199254740990.0 by q 1.0 repeat (q is below the "
        "float precision there); W&B runs each value once, and so does sweepq. Use a larger q."
    ]


@pytest.mark.parametrize(
    "spec, first",
    [("{min: 0, max: 1000000000000, q: 3}", [0, 3, 6]), ("{min: 0.5, max: 1.0e+12, q: 0.5}", [0.5, 1.0, 1.5])],
)
def test_a_huge_q_uniform_under_run_cap_is_computed_lazily(spec, first):
    sweep = parse(grid(f"{{x: {{distribution: q_uniform, {spec[1:]}}}", "run_cap: 3\n"))
    assert [c["x"] for c in cfgs(sweep)] == first
    assert sweep.warnings[0].startswith("sweep.yaml: run_cap: 3 of ")


def test_q_uniform_matches_numpy_arange_on_many_ranges():
    """W&B's grid calls np.arange(min, max, q).tolist(); numpy is the oracle where it is installed."""
    np = pytest.importorskip("numpy", reason="numpy (the arithmetic W&B's grid uses) is not installed")
    chance = random.Random(15)
    checked = 0
    while checked < 200:
        # Thousandths, so that repr never writes e-notation (which YAML 1.1 reads as text).
        low, high = (kind(chance.randint(-50_000, 50_000) / 1000) for kind in chance.choices([int, float], k=2))
        q = chance.choice([int, float])(chance.choice([0.1, 0.07, 0.3, 0.013, 2.5, 1, 3, 7]))
        if not (low < high and q > 0) or (high - low) / q > 1000:
            continue
        sweep = parse(grid(f"{{x: {{distribution: q_uniform, min: {low!r}, max: {high!r}, q: {q!r}}}}}"))
        expected = np.arange(low, high, q).tolist()
        assert [repr(c["x"]) for c in cfgs(sweep)] == [repr(v) for v in expected], (low, high, q)
        checked += 1


QU = "{x: {distribution: q_uniform, %s}}"
Q_UNIFORM_ERRORS = {
    "min not less than max": (
        QU % "min: 1.5, max: 1.5, q: 0.1",
        "sweep.yaml: parameters.x: min 1.5 is not less than max 1.5. Make min smaller than max (max is excluded).",
    ),
    "q zero": (
        QU % "min: 0, max: 1, q: 0",
        "sweep.yaml: parameters.x.q: q 0 is not above 0. Write the step between values, e.g. q: 0.1.",
    ),
    "no max": (
        QU % "min: 0, q: 0.1",
        "sweep.yaml: parameters.x: q_uniform needs both min and max. Write min: 0, max: 1, q: 0.25 (W&B's grid "
        "tries min, min + q, ... below max).",
    ),
    "min a YAML 1.1 string": (
        QU % "min: 1e-3, max: 1.0, q: 0.1",
        "sweep.yaml: parameters.x.min: expected a number, got the string '1e-3'. Write a number (YAML 1.1, which "
        "sweepq and W&B read, needs a dot and a signed exponent in a float: 1.0e-3).",
    ),
    "q a boolean": (
        QU % "min: 0, max: 1, q: true",
        "sweep.yaml: parameters.x.q: expected a number, got the boolean true. Write a number.",
    ),
    "with values": (
        QU % "min: 0, max: 1, values: [1]",
        "sweep.yaml: parameters.x.values: unknown key 'values' in parameters.x. Known keys: distribution, min, "
        "max, q. Check the spelling or remove it.",
    ),
    "span beyond the largest float": (
        QU % "min: -1.0e+308, max: 1.0e+308, q: 1.0e+307",
        "sweep.yaml: parameters.x: max - min (1e+308 - -1e+308) is beyond the largest float, so W&B's grid "
        "(numpy.arange) cannot count its values. Use a narrower range.",
    ),
    "more values than can be counted": (
        QU % "min: 0, max: 1.0e+300, q: 1.0e-300",
        "sweep.yaml: parameters.x: min 0 to max 1e+300 by q 1e-300 gives about inf values, more than a grid can "
        "count. Use a larger q or a narrower range.",
    ),
    # W&B's grid gives [1.6585414440470254e+308, 1.7049253409854556e+308, 1.7513092379238857e+308, inf]
    # here (captured as above): a run with x = inf, which no cfg can hold.
    "reaches infinity": (
        QU % "min: 1.6585414440470254e+308, max: 1.7976931348623157e+308, q: 4.638389693843009e+306",
        "sweep.yaml: parameters.x: min 1.6585414440470254e+308 to max 1.7976931348623157e+308 by q "
        "4.638389693843009e+306 reaches infinity in W&B's arithmetic (numpy.arange), and a cfg holds finite "
        "numbers only. Use a smaller max.",
    ),
    "repeats beyond the cell limit": (
        QU % "min: 0.5, max: 1.0e+16, q: 1",
        "sweep.yaml: parameters.x: min 0.5 to max 1e+16 by q 1 gives 10,000,000,000,000,000 values, more than "
        "sweepq's limit of 10,000 cells, so near the float precision that some may repeat. Use a larger q or a "
        "narrower range.",
    ),
    "q without q_uniform": (
        "{x: {min: 0, max: 10, q: 2}}",
        "sweep.yaml: parameters.x.q: `q` goes with distribution: q_uniform only (W&B refuses it here). Add "
        "distribution: q_uniform to step from min by q (max excluded), or remove q.",
    ),
}


@pytest.mark.parametrize("text, expected", Q_UNIFORM_ERRORS.values(), ids=Q_UNIFORM_ERRORS.keys())
def test_q_uniform_that_wandbs_grid_cannot_enumerate_is_refused(text, expected):
    assert error_of(grid(text)) == expected


@pytest.mark.parametrize("distribution", ["q_log_uniform_values", "q_normal", "q_log_normal", "q_beta", "uniform"])
def test_distributions_wandbs_grid_refuses_are_refused_for_that_reason(distribution):
    text = grid(f"{{x: {{distribution: {distribution}, min: 1, max: 10, q: 1}}}}")
    assert error_of(text) == (
        f"sweep.yaml: parameters.x.distribution: {distribution} samples values at random, and W&B's grid refuses "
        "it too: a grid enumerates categorical, constant, int_uniform and q_uniform parameters only. List the "
        "values to try: values: [...] (or int_uniform with integer min and max, or q_uniform with min, max and q)."
    )


# ------------------------------------------------------------ no program


@pytest.mark.parametrize(
    "command, runs",
    [
        ("", "W&B's default command runs ${program}"),
        ("command: ['${env}', '${program}']\n", "the command runs ${program}"),
    ],
)
def test_a_grid_without_program_says_how_to_run_it(command, runs):
    assert error_of(f"method: grid\n{command}parameters: {{x: {{value: 1}}}}\n") == (
        f"sweep.yaml: program: is missing, but {runs}: a W&B grid without program: is run by "
        "wandb.agent(function=...), which sweepq does not call. Add one line, program: train.py, naming the script "
        "that calls your function (it gets the cell's values as flags, --lr=0.01: parse them and pass them to "
        "wandb.init(config=...)), or use sweepq's grouped form with train: module:function, where the function is "
        "called as train(cfg, run)."
    )


def test_the_one_line_the_message_shows_makes_the_file_run():
    sweep = parse("method: grid\nprogram: train.py\nparameters: {x: {values: [1, 2]}}\n")
    assert sweep.settings.program == "train.py" and len(sweep.cells) == 2


# ------------------------------------------------------------ non-finite values


@pytest.mark.parametrize(
    "parameters, written",
    [
        ("{a: {values: [.nan]}}", ".nan"),
        ("{a: {value: .inf}}", ".inf"),
        ("{a: {values: [{b: -.inf}]}}", "-.inf"),
        ("{a: {distribution: q_uniform, min: -.inf, max: 1}}", "-.inf"),
    ],
)
def test_non_finite_values_in_a_wandb_file_are_refused_where_written(parameters, written):
    text = grid(parameters)
    column = text.splitlines()[2].index(written) + 1
    assert error_of(text) == (
        f"sweep.yaml, line 3, column {column}: {written} reads as {float(written.replace('.', ''))}, and a sweep "
        "holds finite numbers only (cfgs are JSON, which has no NaN or infinity). Write a finite number, or quote "
        f"it ('{written}') to pass the text."
    )


def test_plan_json_on_wandb_files_never_crashes_on_non_finite_values(tmp_path):
    from click.testing import CliRunner

    from sweepq.cli.main import main

    (tmp_path / "train.py").write_text("")
    spec = tmp_path / "nan.yaml"
    spec.write_text("method: grid\nprogram: train.py\nparameters: {a: {values: [.nan, 1.0]}}\n")
    refused = CliRunner().invoke(main, ["plan", str(spec), "--json"])
    assert refused.exit_code == 2 and refused.stdout == ""
    assert refused.stderr.startswith("error: ") and refused.stderr.count("\n") == 1
    assert "finite numbers only" in refused.stderr

    spec = tmp_path / "q.yaml"
    spec.write_text(
        "method: grid\nprogram: train.py\nparameters: {a: {distribution: q_uniform, min: 0, max: 0.4, q: 0.1}}\n"
    )
    planned = CliRunner().invoke(main, ["plan", str(spec), "--json"])
    assert planned.exit_code == 0, planned.stderr
    rows = json.loads(planned.stdout, parse_constant=lambda name: pytest.fail(f"{name} in plan --json"))
    assert [row["cfg"]["a"] for row in rows] == [0.0, 0.1, 0.2, 0.30000000000000004]
    assert rows[3]["command"][-1] == "--a=0.30000000000000004"


# ------------------------------------------------- command lines, as W&B's agent builds them


def command_lines(text: str, *tokens: str) -> list[list[str]]:
    """Every cell's command line, the file's own or one made of `tokens`."""
    sweep = parse(text)
    settings = dataclasses.replace(sweep.settings, command=list(tokens)) if tokens else sweep.settings
    return [render_command(settings, cell.cfg, args_json_file="/a.json", environ={}) for cell in sweep.cells]


# Captured from W&B's agent (wandb 0.31.0, create_sweep_command_args) on W&B's own nested example
# (wandb/sweeps, examples/nested-params/sweep-nested-cli.yaml), its first run.
NESTED = """\
method: grid
program: train-nested-cli.py
command: ['${env}', '${interpreter}', '${program}', '${args_override_hydra}', '${args_append_hydra}']
parameters:
  batch_size: {values: [32, 64]}
  optimizer:
    parameters:
      lr: {values: [0.001, 0.0001]}
      nadam: {parameters: {beta: {values: [0.9, 0.95]}}}
"""


def test_hydra_macros_expand_as_wandbs_agent_does():
    first = command_lines(NESTED)[0]
    assert first == [
        "/usr/bin/env",
        "python",
        "train-nested-cli.py",
        "++batch_size=32",
        "++optimizer={'lr': 0.001, 'nadam': {'beta': 0.9}}",
        "+batch_size=32",
        "+optimizer={'lr': 0.001, 'nadam': {'beta': 0.9}}",
    ]


def test_hydra_macros_in_the_grouped_form_override_each_leaf():
    sweep = parse_sweep(
        "name: g\nprogram: t.py\ncommand: ['${program}', '${args_override_hydra}']\n"
        "grid: {optim.lr: [0.1], optim.name: [sgd]}\n",
        "g.yaml",
    )
    argv = render_command(sweep.settings, sweep.cells[0].cfg, args_json_file="/a.json", environ={})
    assert argv == ["t.py", "++optim.lr=0.1", "++optim.name=sgd"]


def test_whole_number_floats_reach_the_program_as_ints_as_from_wandbs_server():
    # W&B's server re-encodes a run's values (Go float64): 1.0 reaches the agent as 1, at any
    # depth, mapping keys sorted; from 1e21 on Go writes an exponent and the value stays a float.
    text = grid("{x: {values: [1.0, 2.5]}, d: {value: {b: 2.0, a: [1.0, 0.5]}}, big: {value: 1.0e+21}}")
    sweep = parse(text)
    assert sweep.cells[0].cfg == {"big": 1e21, "d": {"b": 2.0, "a": [1.0, 0.5]}, "x": 1.0}  # the file's values
    assert isinstance(sweep.cells[0].cfg["x"], float)
    assert [argv[3:] for argv in command_lines(text)] == [
        ["--big=1e+21", "--d={'a': [1, 0.5], 'b': 2}", "--x=1"],
        ["--big=1e+21", "--d={'a': [1, 0.5], 'b': 2}", "--x=2.5"],
    ]
    assert command_lines(text, "${args_json}")[0] == ['{"big": 1e+21, "d": {"a": [1, 0.5], "b": 2}, "x": 1}']
    assert args_json(sweep.cells[0].cfg, "wandb") == '{"big": 1e+21, "d": {"a": [1, 0.5], "b": 2}, "x": 1}'
    assert command_lines(text, "${args_flat}")[0] == ["--big=1e+21", "--d.a=[1, 0.5]", "--d.b=2", "--x=1"]


def test_the_grouped_form_keeps_pythons_spelling():
    sweep = parse_sweep("name: g\nprogram: t.py\ngrid: {x: [2.0]}\n", "g.yaml")
    assert render_command(sweep.settings, sweep.cells[0].cfg, args_json_file="/a.json", environ={})[-1] == "--x=2.0"
    assert args_json(sweep.cells[0].cfg) == '{"x": 2.0}'


def test_envvar_names_wandbs_agent_expands_are_accepted():
    text = grid("{x: {value: 1}}", "command: ['${program}', '--key=${envvar:WANDB_API_KEY_2}', '${args}']\n")
    sweep = parse(text)
    argv = render_command(sweep.settings, sweep.cells[0].cfg, args_json_file="/a", environ={"WANDB_API_KEY_2": "k"})
    assert argv == ["train.py", "--key=k", "--x=1"]
