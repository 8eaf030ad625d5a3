"""Expanding grids into cells from text laid out once (sweepq.spec.expand), held to nesting and hashing each cfg."""

from __future__ import annotations

import copy
import itertools
import json
import textwrap
from typing import Any

from click.testing import CliRunner

from sweepq.spec.expand import LISTED_REPEATS, Grid, Slot, expand
from sweepq.spec.read import SpecContext
from sweepq.spec.sweep import GroupSpec, cfg_hash, parse_sweep

# Values JSON and str.format treat specially: braces, escapes, key order, numbers at their edges.
AXES: list[list[Any]] = [
    [0.1, -0.0, 1e21, 1e-300, 2**62, True, None, "{}", "}{0}", "é\u2028"],
    [{"z": 1, "a": {"y": [2, {"b": 1, "a": 0}], "b": 3}}, [3, {"d": 1, "c": 2}], {}],
    [1, 1.0],
]
PATHS: dict[tuple[str, ...], Any] = {
    ("epochs",): 3,
    ("model", "width"): 64,
    ("model", "{depth}"): Slot(0),  # beside a constant under the same mapping, in the file's order
    ("opt",): [1, [2, {"b": 1, "a": 2}]],  # a constant list: every cell gets its own copy
    ("lr",): Slot(2),
    ("λ", "a{0}"): Slot(1),
    ("empty",): {},
}


def nest(flat: dict[tuple[str, ...], Any]) -> dict[str, Any]:
    """A cfg as nesting each cell's values one by one gave it, a deep copy of every value."""
    cfg: dict[str, Any] = {}
    for path, value in flat.items():
        node = cfg
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = copy.deepcopy(value)
    return cfg


def reference(paths: dict[tuple[str, ...], Any], axes: list[list[Any]]) -> list[dict[str, Any]]:
    """Each cell's cfg, built the slow way."""
    return [
        nest({p: c[v.axis] if isinstance(v, Slot) else v for p, v in paths.items()}) for c in itertools.product(*axes)
    ]


def containers(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [value, *(c for v in value.values() for c in containers(v))]
    if isinstance(value, list):
        return [value, *(c for v in value for c in containers(v))]
    return []


def test_cells_are_what_nesting_and_hashing_each_cfg_gives():
    cells = expand(SpecContext("s.yaml"), [Grid(GroupSpec(2, "g"), PATHS, AXES)])
    expected = reference(PATHS, AXES)
    assert len(cells) == len(expected) == 60
    assert [c.cfg for c in cells] == expected
    # the same keys in the same order (the file's, not sorted), and the same types (1 and 1.0, True and 1)
    assert [json.dumps(c.cfg) for c in cells] == [json.dumps(cfg) for cfg in expected]
    assert [c.cfg_hash for c in cells] == [cfg_hash(cfg) for cfg in expected]
    assert [(c.id, c.group, c.index, c.group_name) for c in cells[:2]] == [("2.1", 2, 1, "g"), ("2.2", 2, 2, "g")]
    assert cells[-1].id == "2.60"


def test_no_two_cells_share_a_list_or_a_mapping():
    cells = expand(SpecContext("s.yaml"), [Grid(GroupSpec(1, "g"), PATHS, AXES)])
    seen: dict[int, str] = {}
    for cell in cells:
        for container in containers(cell.cfg):
            assert seen.setdefault(id(container), cell.id) == cell.id
    cells[0].cfg["opt"][1].append(3)
    assert cells[1].cfg["opt"] == [1, [2, {"b": 1, "a": 2}]]


def test_a_prefix_of_a_huge_axis_encodes_only_what_it_keeps():
    # A billion values: laid out up front, this would not finish.
    grid = Grid(GroupSpec(1, "g"), {("a",): Slot(0), ("b",): Slot(1)}, [range(10**9), [0.5, "x"]], limit=3)
    cells = expand(SpecContext("s.yaml"), [grid])
    assert [c.cfg for c in cells] == [{"a": 0, "b": 0.5}, {"a": 0, "b": "x"}, {"a": 1, "b": 0.5}]
    assert [c.cfg_hash for c in cells] == [cfg_hash(c.cfg) for c in cells]


def test_repeated_cfgs_are_named_up_to_a_limit_then_counted():
    many = LISTED_REPEATS + 5
    values = list(range(many))
    text = f"train: m:f\ngroups: [{{name: a, grid: {{s: {values}}}}}, {{name: b, grid: {{s: {values}}}}}]\n"
    warnings = parse_sweep(text, "sweep.yaml").warnings
    assert len(warnings) == LISTED_REPEATS + 1
    assert warnings[0] == "sweep.yaml: cells 1.1 and 2.1 have identical cfgs, so the same training runs twice."
    assert warnings[-1] == (
        f"sweep.yaml: 5 more cells repeat an earlier cell's cfg ({many} in all): their training runs twice too."
    )


def test_plan_json_lists_one_cell_a_line(tmp_path):
    from sweepq.cli.main import main

    spec = tmp_path / "s.yaml"
    spec.write_text(
        textwrap.dedent("""\
        train: m:f
        params: {epochs: 2, model: {width: 8}}
        grid: {lr: [0.1, 0.01], model.depth: [1, 2, 3]}
        """)
    )
    planned = CliRunner().invoke(main, ["plan", str(spec), "--json"])
    assert planned.exit_code == 0, planned.stderr
    lines = planned.stdout.splitlines()
    assert (lines[0], lines[-1], len(lines)) == ("[", "]", 6 + 2)
    rows = [json.loads(line.strip().rstrip(",")) for line in lines[1:-1]]
    assert rows == json.loads(planned.stdout)
    assert [row["cell"] for row in rows] == [f"1.{i}" for i in range(1, 7)]
    assert rows[5]["cfg"] == {"epochs": 2, "model": {"width": 8, "depth": 3}, "lr": 0.01}
    assert rows[5]["cfg_hash"] == cfg_hash(rows[5]["cfg"])


def test_a_scalar_counts_as_the_same_value_exactly_when_yaml_writes_it_alike():
    """value_identity's shortcut for scalars agrees with its definition, the YAML text (W&B's yaml_hash)."""
    import yaml

    from sweepq.spec.read import value_identity

    def by_yaml(value: object) -> str:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return yaml.safe_dump(value, default_flow_style=True, sort_keys=True)

    values: list[object] = [0, 1, 1.0, -0.0, True, False, None, "1", "1.0", "true", "", 0.1, "0.1", 1e300, 10**300]
    values += [float("inf"), float("nan"), "null", "~", "yes", 2.5, [1], [1.0], {"a": 1}, "a", "A"]
    pairs = [(a, b) for a in values for b in values]
    assert [value_identity(a) == value_identity(b) for a, b in pairs] == [by_yaml(a) == by_yaml(b) for a, b in pairs]
