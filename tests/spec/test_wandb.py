"""W&B grid sweep files: validation, W&B's expansion order, de-duplication, warnings."""

from __future__ import annotations

import textwrap
import time

import pytest
from conftest import HERE

from sweepq.errors import SpecError
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
    started = time.monotonic()
    sweep = parse(grid("{a: {values: [x, y]}, n: {min: 0, max: 1000000000}}", "run_cap: 3\n"))
    assert time.monotonic() - started < 2
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
    "q_uniform": (grid("{n: {distribution: q_uniform, min: 0, max: 10, q: 2}}"), ["q_uniform samples"]),
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
        ["parameters.x: min 0.1 and max 1 are not both integers", "continuous uniform"],
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
    "early_terminate": (
        grid("{x: {value: 1}}", "early_terminate: {type: hyperband, min_iter: 3}\n"),
        ["sweep.yaml: early_terminate: sweepq runs every cell", "Remove early_terminate"],
    ),
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
    "missing program": (
        "method: grid\nparameters: {x: {value: 1}}\n",
        ["sweep.yaml: program: is missing, but the command runs ${program}"],
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
