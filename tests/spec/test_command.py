"""Command macro rendering for subprocess cells (sweepq.command)."""

from __future__ import annotations

import json
from typing import Literal

import pytest

from sweepq.errors import SpecError
from sweepq.spec.command import (
    DEFAULT_COMMAND,
    args_json,
    check_command,
    command_uses_args,
    flat_items,
    render_command,
)
from sweepq.spec.sweep import Settings, parse_sweep

CFG = {
    "lr": 1e-05,
    "flag": True,
    "off": False,
    "none": None,
    "layers": [64, 32],
    "optim": {"name": "sgd", "beta": {"b1": 0.9}},
    "tag": "a b",
}


def settings(form: Literal["grouped", "wandb"] = "wandb", command: list[str] | None = None, **extra) -> Settings:
    return Settings(name="s", form=form, spec_dir="/specs", program="train.py", command=command, **extra)


def render(form: Literal["grouped", "wandb"], *command: str, cfg=CFG, environ=None, **extra) -> list[str]:
    return render_command(
        settings(form, list(command) or None, **extra),
        cfg,
        args_json_file="/cells/1.1/args.json",
        environ=environ or {},
    )


# ------------------------------------------------------------------ W&B form


def test_default_command_renders_like_the_wandb_agent():
    assert render("wandb") == [
        "/usr/bin/env",
        "python",
        "train.py",
        "--flag=True",
        "--layers=[64, 32]",
        "--lr=1e-05",
        "--none=None",
        "--off=False",
        "--optim={'beta': {'b1': 0.9}, 'name': 'sgd'}",  # keys sorted, as the agent receives them
        "--tag=a b",
    ]


def test_default_command_constant():
    assert DEFAULT_COMMAND == ("${env}", "${interpreter}", "${program}", "${args}")


def test_args_no_hyphens():
    assert render("wandb", "${args_no_hyphens}", cfg={"b": 1, "a": 0.5}) == ["a=0.5", "b=1"]


def test_args_no_boolean_flags_keeps_true_as_bare_flag_and_drops_false():
    assert render("wandb", "${args_no_boolean_flags}", cfg={"x": True, "y": False, "z": 0, "n": None}) == [
        "--n=None",
        "--x",
        "--z=0",
    ]


def test_args_no_equals_gives_two_tokens_per_parameter():
    assert render("wandb", "${args_no_equals}", cfg={"b": "two", "a": 1}) == ["--a", "1", "--b", "two"]


def test_args_json_is_one_token_holding_the_cfg():
    argv = render("wandb", "prog", "${args_json}")
    assert len(argv) == 2 and json.loads(argv[1]) == CFG


def test_args_json_file_is_the_given_path():
    assert render("wandb", "prog", "--config", "${args_json_file}") == ["prog", "--config", "/cells/1.1/args.json"]


def test_args_flat_flattens_nested_mappings_in_wandb_form():
    assert render("wandb", "${args_flat}", cfg={"optim": {"lr": 0.1, "beta": {"b2": 0.99}}, "a.b": 1, "z": [1]}) == [
        "--a.b=1",
        "--optim.beta.b2=0.99",
        "--optim.lr=0.1",
        "--z=[1]",
    ]


def test_interpreter_and_env_macros():
    assert render("wandb", "${env}", "${interpreter}", "-u", "${program}") == [
        "/usr/bin/env",
        "python",
        "-u",
        "train.py",
    ]


def test_literal_tokens_pass_through_unchanged():
    assert render("wandb", "bash", "-c", "echo $HOME {x}", cfg={}) == ["bash", "-c", "echo $HOME {x}"]


def test_empty_cfg_gives_no_flags():
    assert render("wandb", "${program}", "${args}", cfg={}) == ["train.py"]


# -------------------------------------------------------------- grouped form


def test_grouped_args_are_one_flag_per_leaf_path():
    assert render("grouped", "${args}") == [
        "--flag=True",
        "--layers=[64, 32]",
        "--lr=1e-05",
        "--none=None",
        "--off=False",
        "--optim.beta.b1=0.9",
        "--optim.name=sgd",
        "--tag=a b",
    ]


def test_grouped_args_equal_args_flat():
    assert render("grouped", "${args}") == render("grouped", "${args_flat}")


def test_grouped_no_hyphens_and_no_boolean_flags_use_paths():
    cfg = {"opt": {"nesterov": True, "decay": False, "lr": 0.1}}
    assert render("grouped", "${args_no_hyphens}", cfg=cfg) == ["opt.decay=False", "opt.lr=0.1", "opt.nesterov=True"]
    assert render("grouped", "${args_no_boolean_flags}", cfg=cfg) == ["--opt.lr=0.1", "--opt.nesterov"]


def test_grouped_args_json_is_nested():
    argv = render("grouped", "${args_json}", cfg={"optim": {"lr": 0.1}})
    assert argv == ['{"optim": {"lr": 0.1}}']


def test_grouped_custom_interpreter():
    assert render("grouped", interpreter="python3.12", cfg={"a": 1}) == [
        "/usr/bin/env",
        "python3.12",
        "train.py",
        "--a=1",
    ]


def test_flat_items_keeps_empty_mappings_as_leaves():
    assert flat_items({"a": {}, "b": {"c": []}}) == [("a", {}), ("b.c", [])]


def test_args_json_matches_json_of_cfg():
    assert json.loads(args_json({"b": [1, 2.5], "a": None})) == {"b": [1, 2.5], "a": None}


# ---------------------------------------------------------------- envvars


def test_envvar_whole_token_and_inside_a_token():
    argv = render(
        "wandb",
        "${envvar:PY}",
        "--data=${envvar:DATA}/train:${envvar:DATA}",
        cfg={},
        environ={"PY": "python3", "DATA": "/d"},
    )
    assert argv == ["python3", "--data=/d/train:/d"]


def test_unset_envvar_is_an_error_naming_it():
    with pytest.raises(SpecError) as caught:
        render("wandb", "--data=${envvar:DATA_DIR}", cfg={}, environ={"OTHER": "x"})
    assert "DATA_DIR" in str(caught.value) and "not set" in str(caught.value)


def test_empty_envvar_value_is_kept():
    assert render("wandb", "${envvar:E}", cfg={}, environ={"E": ""}) == [""]


# ----------------------------------------------------------------- refusals


def test_program_macro_without_program_is_an_error():
    with pytest.raises(SpecError, match=r"\$\{program\}"):
        render_command(
            Settings(name="s", form="wandb", spec_dir="/", program=None, command=None),
            {},
            args_json_file="/a.json",
            environ={},
        )


@pytest.mark.parametrize("token", ["${foo}", "${ARGS}", "${envvar}", "${envvar:}", "${}"])
def test_render_refuses_unknown_whole_token_macros(token):
    with pytest.raises(SpecError, match="unknown macro"):
        render("wandb", "${program}", token, cfg={})


@pytest.mark.parametrize(
    "tokens, position, fragment",
    [
        (["${program}", "${nope}"], 2, "unknown macro ${nope}"),
        (["--lr=${args}"], 1, "the macro ${args} is inside the longer token"),
        (["x${program}"], 1, "${program} is inside"),
        (["${env}", "--a=${envvar:A}${lr}"], 2, "${lr} is inside"),
    ],
)
def test_check_command_reports_position_and_problem(tokens, position, fragment):
    problems = check_command(tokens)
    assert len(problems) == 1
    assert problems[0].position == position
    assert fragment in problems[0].problem


@pytest.mark.parametrize(
    "tokens",
    [
        list(DEFAULT_COMMAND),
        [
            "${env}",
            "${interpreter}",
            "${program}",
            "${args_no_hyphens}",
            "${args_no_boolean_flags}",
            "${args_json}",
            "${args_json_file}",
            "${args_flat}",
            "${args_no_equals}",
        ],
        ["${envvar:HOME}", "--x=${envvar:A_1}", "plain", "$HOME", "{args}", "$args"],
    ],
)
def test_check_command_accepts_valid_templates(tokens):
    assert check_command(tokens) == []


@pytest.mark.parametrize(
    "tokens, uses",
    [
        (list(DEFAULT_COMMAND), True),
        (["${program}", "${args_json_file}"], True),
        (["${program}", "${args_flat}"], True),
        (["${env}", "${interpreter}", "${program}"], False),
        (["python", "train.py", "--args=${envvar:X}"], False),
    ],
)
def test_command_uses_args(tokens, uses):
    assert command_uses_args(tokens) is uses


# -------------------------------------------------------------- end to end


def test_program_sweep_renders_its_first_cell():
    sweep = parse_sweep(
        "program: train.py\nparams: {optim: {name: sgd}}\ngrid: {optim.lr: [0.1, 0.01], seed: [1]}\n",
        "/specs/s.yaml",
    )
    cell = sweep.cells[1]
    argv = render_command(sweep.settings, cell.cfg, args_json_file="/r/cells/1.2/cfg.json", environ={})
    assert argv == ["/usr/bin/env", "python", "train.py", "--optim.lr=0.01", "--optim.name=sgd", "--seed=1"]


def test_wandb_sweep_renders_nested_values_as_dict_str():
    sweep = parse_sweep(
        "method: grid\nprogram: t.py\ncommand: ['${program}', '${args}', '${args_flat}']\n"
        "parameters: {opt: {parameters: {lr: {values: [0.1]}}}, b: {value: true}}\n",
        "/specs/w.yaml",
    )
    argv = render_command(sweep.settings, sweep.cells[0].cfg, args_json_file="/a.json", environ={})
    assert argv == ["t.py", "--b=True", "--opt={'lr': 0.1}", "--b=True", "--opt.lr=0.1"]
