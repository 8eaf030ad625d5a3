"""The grid analysis (sweepq/analysis/): means and shares checked by hand, its picture, its text, `report --grid`."""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.cells import cell_len

from sweepq.analysis.grid import GridAnalysis, analyse, best_level, goal_of, nothing_to_analyse
from sweepq.analysis.parallel import TITLES_MAX, colour, parallel_svg
from sweepq.cli import render
from sweepq.cli.grid_view import WhatMatters, section
from sweepq.cli.main import main
from sweepq.queue.records import CellRecord, Outcome
from sweepq.queue.states import CellState
from sweepq.results.report import by_reason
from sweepq.spec.types import Metric
from unit.support import WORKER, Launch, sweep_from
from unit.test_render import BLANK_CELL

MAX = Metric("acc", "max")
MIN = Metric("acc", "min")
SVG = "{http://www.w3.org/2000/svg}"

# A 2x3 factorial with an interaction: a=1 gives 2 whatever b; a=2 gives 2, 4, 6 for b = x, y, z.
# Grand mean 3. Sums of squares: total 14; a: 3*(2-3)^2 + 3*(4-3)^2 = 6; b: 2*((2-3)^2 + 0 + (4-3)^2) = 4.
FACTORIAL = [(1, "x", 2.0), (1, "y", 2.0), (1, "z", 2.0), (2, "x", 2.0), (2, "y", 4.0), (2, "z", 6.0)]


def cell(i: int, cfg: dict[str, Any], best: float | None, group: int = 1, **fields: Any) -> CellRecord:
    fields.setdefault("state", CellState.DONE)
    return replace(
        BLANK_CELL, id=f"{group}.{i}", group=group, index=i, group_name=f"g{group}", cfg=cfg, best=best, **fields
    )


def factorial(changes: dict[str, dict[str, Any]] | None = None) -> list[CellRecord]:
    """FACTORIAL as cells (a nested as `opt.a`, a key that never varies beside); `changes` by cell id."""
    cells = [cell(i, {"opt": {"a": a}, "b": b, "fixed": 7}, v) for i, (a, b, v) in enumerate(FACTORIAL, start=1)]
    return [replace(c, **(changes or {}).get(c.id, {})) for c in cells]


def levels(a: GridAnalysis, key: str) -> list[tuple[Any, float, float, int]]:
    effect = next(k for k in a.keys if k.key == key)
    return [(v.value, v.mean, v.std, v.n) for v in effect.levels]


def test_marginal_means_and_shares_of_a_full_2x3_factorial_by_hand() -> None:
    [a] = analyse(factorial(), MAX)
    assert (a.group, a.metric, a.goal, a.cells, a.expected, a.full, a.note) == (None, "acc", "max", 6, 6, True, None)
    assert [k.key for k in a.keys] == ["opt.a", "b"]  # ranked: 6/14 before 4/14; `fixed` never varies
    opt_a, b = a.keys
    assert opt_a.share == pytest.approx(6 / 14) and b.share == pytest.approx(4 / 14)
    assert opt_a.spread == pytest.approx(2.0) and b.spread == pytest.approx(2.0)
    assert levels(a, "opt.a") == [(1, 2.0, 0.0, 3), (2, 4.0, pytest.approx(math.sqrt(8 / 3)), 3)]
    assert levels(a, "b") == [("x", 2.0, 0.0, 2), ("y", 3.0, 1.0, 2), ("z", 4.0, 2.0, 2)]
    assert [(r.cell, r.cfg, r.value) for r in a.rows][-1] == ("1.6", {"opt.a": 2, "b": "z"}, 6.0)
    assert (best_level(opt_a, a.goal).value, best_level(b, a.goal).value) == (2, "z")


def test_min_goal_marks_the_lowest_mean_and_ranks_the_same() -> None:
    [a] = analyse(factorial(), MIN)
    assert a.goal == "min" and [k.key for k in a.keys] == ["opt.a", "b"]
    assert [best_level(k, "min").value for k in a.keys] == [1, "x"]
    assert a.to_json()["keys"][1]["best"] == "x"


def test_ranking_follows_the_share_not_the_order_of_the_sweep() -> None:
    # b now moves the metric most: values 1, 5, 9 per b, a adds 0 or 1.
    cells = [
        cell(i, {"a": a, "b": b}, b * 4 - 3 + a)
        for i, (a, b) in enumerate([(0, 1), (0, 2), (0, 3), (1, 1), (1, 2), (1, 3)], 1)
    ]
    [a] = analyse(cells, MAX)
    assert [k.key for k in a.keys] == ["b", "a"]
    assert a.keys[0].share == pytest.approx(64 / 65.5) and a.keys[1].share == pytest.approx(1.5 / 65.5)


def test_a_partial_grid_gives_means_over_what_is_there_and_says_so() -> None:
    # 1.6 (a=2, z: 6) has no value yet: a=1 -> 2 (3 cells), a=2 -> 2, 4 -> 3 (2 cells); grand mean 2.4.
    # Total SS 4*0.16 + 1.6^2 = 3.2; a: 3*0.16 + 2*0.36 = 1.2; b: 2*0.16 + 2*0.36 + 0.16 = 1.2: a tie, sweep order.
    [a] = analyse(factorial({"1.6": {"best": None, "state": CellState.RUNNING}}), MAX)
    assert (a.cells, a.expected, a.full) == (5, 6, False)
    assert [k.key for k in a.keys] == ["opt.a", "b"]
    assert [k.share for k in a.keys] == [pytest.approx(0.375), pytest.approx(0.375)]
    assert levels(a, "opt.a") == [(1, 2.0, 0.0, 3), (2, 3.0, 1.0, 2)]
    assert levels(a, "b")[2] == ("z", 2.0, 0.0, 1)
    assert a.note == (
        "1 of 6 cells has no value yet: means over the 5 that do; not a full grid (5 of 6 combinations have a "
        "value): each key's share is its own and may overlap another's"
    )


def test_failed_cells_and_non_finite_values_are_left_out_and_counted() -> None:
    cells = factorial(
        {
            "1.4": {"state": CellState.FAILED},  # its early best is not a result
            "1.5": {"best": math.nan},
            "1.6": {"best": None, "state": CellState.QUEUED},
        }
    )
    [a] = analyse(cells, MAX)
    assert [r.cell for r in a.rows] == ["1.1", "1.2", "1.3"] and not a.full
    assert a.note is not None and a.note.startswith(
        "3 of 6 cells are left out (1 with no value yet, 1 failed or cancelled, 1 non-finite): means over the 3 others"
    )
    assert levels(a, "opt.a") == [(1, 2.0, 0.0, 3)]  # a level with no value is not listed
    assert all(k.share == 0.0 for k in a.keys)  # every value is 2: nothing to explain


def test_cells_that_never_formed_a_product_are_not_a_full_grid() -> None:
    [a] = analyse([cell(1, {"a": 1, "b": "x"}, 1.0), cell(2, {"a": 2, "b": "y"}, 3.0)], MAX)
    assert (a.cells, a.expected, a.full) == (2, 4, False)
    assert a.note == (
        "not a full grid (2 of 4 combinations have a value): each key's share is its own and may overlap another's"
    )


def test_a_named_metric_uses_its_last_value_and_its_goal_from_its_name() -> None:
    cells = [
        cell(1, {"lr": 0.1}, 0.9, metrics={"train/loss": 0.5, "acc": 0.8}),
        cell(2, {"lr": 0.2}, 0.7, metrics={"train/loss": "nan"}),  # the queue keeps non-finite values as text
        cell(3, {"lr": 0.3}, 0.6, metrics={"train/loss": 0.25}),
    ]
    [a] = analyse(cells, MAX, "train/loss")
    assert (a.metric, a.goal) == ("train/loss", "min")
    assert [(r.cell, r.value) for r in a.rows] == [("1.1", 0.5), ("1.3", 0.25)]
    assert "1 non-finite" in (a.note or "")
    [b] = analyse(cells, MAX)
    assert [r.value for r in b.rows] == [0.9, 0.7, 0.6]  # the default: each cell's best of the sweep's metric
    assert goal_of("acc", MIN) == "min" and goal_of("val_error_rate", None) == "min" and goal_of("bleu", MIN) == "max"


def test_each_group_is_its_own_grid_with_its_own_keys() -> None:
    cells = [
        cell(1, {"lr": 0.1, "wd": 0}, 1.0),
        cell(2, {"lr": 0.2, "wd": 0}, 2.0),
        cell(1, {"lr": 0.1, "wd": 0.1}, 5.0, group=2),
        cell(2, {"lr": 0.1, "wd": 0.2}, 7.0, group=2),
        cell(1, {"lr": 0.5}, 3.0, group=3),  # nothing varies in group 3: no analysis
    ]
    found = analyse(cells, MAX)
    assert [(a.group, [k.key for k in a.keys], a.cells) for a in found] == [("g1", ["lr"], 2), ("g2", ["wd"], 2)]
    assert levels(found[1], "wd") == [(0.1, 5.0, 0.0, 1), (0.2, 7.0, 0.0, 1)]


def test_lists_and_mappings_are_levels_told_apart_by_their_json() -> None:
    cells = [
        cell(1, {"layers": [64, 64], "extra": {}, "scale": 1}, 1.0),
        cell(2, {"layers": [128], "extra": {}, "scale": 1.0}, 2.0),
        cell(3, {"layers": [64, 64], "extra": {"k": [1]}, "scale": 1}, 3.0),
        cell(4, {"layers": [128], "extra": {"k": [1]}, "scale": 1.0}, 4.0),
    ]
    [a] = analyse(cells, MAX)
    # `extra` is {} in two cells and holds `k` in the others: flattened as the tables flatten, two keys
    assert [(k.key, k.share) for k in a.keys] == [("extra", 0.8), ("extra.k", 0.8), ("layers", 0.2), ("scale", 0.2)]
    assert levels(a, "layers") == [([64, 64], 2.0, 1.0, 2), ([128], 3.0, 1.0, 2)]
    assert [v[0] for v in levels(a, "scale")] == [1, 1.0] and [type(v[0]) for v in levels(a, "scale")] == [int, float]
    assert [v[0] for v in levels(a, "extra.k")] == [None, [1]]  # absent from two cells: the value None there
    json.dumps([x.to_json() for x in analyse(cells, MAX)], allow_nan=False)


def test_nothing_to_analyse_says_why_in_one_line() -> None:
    same = [cell(1, {"lr": 0.1}, 1.0), cell(1, {"lr": 0.1}, 2.0, group=2)]
    assert analyse(same, MAX) == []
    assert nothing_to_analyse(same, MAX) == "nothing to analyse: no cfg key varies between the cells of a group"
    queued = [cell(i, {"lr": i}, None, state=CellState.QUEUED) for i in (1, 2)]
    assert nothing_to_analyse(queued, MAX) == "nothing to analyse yet: no cell has a value of acc"
    logged = [cell(1, {"lr": 1}, None, metrics={"loss": 1.0}), cell(2, {"lr": 2}, None)]
    assert analyse(logged, None) == []
    assert nothing_to_analyse(logged, None) == (
        "nothing to analyse: the sweep names no metric; pass --metric NAME (logged: loss)"
    )


# -- the picture -------------------------------------------------------------------------------------------


def big_grid(n_lr: int, n_seed: int) -> list[CellRecord]:
    cells = []
    for i in range(n_lr * n_seed):
        lr, seed = 10 ** (-5 + i // n_seed * 0.1), i % n_seed
        cells.append(
            cell(i + 1, {"lr": lr, "seed": seed, "name": "a<&>\"b'"}, -((math.log10(lr) + 3) ** 2) + seed / 1e3)
        )
    cells[-1] = replace(cells[-1], cfg=cells[-1].cfg | {"name": "other"})
    return cells


def polylines(svg: str) -> list[list[tuple[int, int]]]:
    root = ET.fromstring(svg)
    return [
        [tuple(int(n) for n in p.split(",")) for p in line.attrib["points"].split()]  # type: ignore[misc]
        for line in root.iter(f"{SVG}polyline")
    ]


def test_parallel_coordinates_draw_one_line_per_cell_best_on_top_with_nothing_fetched() -> None:
    [a] = analyse(factorial(), MAX)
    svg = parallel_svg(a)
    root = ET.fromstring(svg)
    lines = polylines(svg)
    assert len(lines) == a.cells and all(len(p) == len(a.keys) + 1 for p in lines)
    axes = [e for e in root.iter(f"{SVG}line") if e.attrib["x1"] == e.attrib["x2"]]
    assert len(axes) == len(a.keys) + 1
    assert sorted({p[-1][1] for p in lines}, reverse=True)[0] == lines[0][-1][1]  # the worst value lowest, first
    assert lines[-1][-1][1] == min(p[-1][1] for p in lines)  # the best (6.0) highest, drawn last
    assert "href" not in svg and "http" not in svg.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert not list(root.iter(f"{SVG}script")) and not list(root.iter(f"{SVG}image"))
    texts = " ".join(t.text or "" for t in root.iter(f"{SVG}text"))
    assert "opt.a" in texts and "43% of variance" in texts and "higher is better" in texts
    assert colour(0) == "#440154" and colour(1) == "#fde725"


def test_parallel_coordinates_stay_small_at_ten_thousand_cells() -> None:
    [a] = analyse(big_grid(100, 100), MAX)
    svg = parallel_svg(a)
    assert len(polylines(svg)) == 10_000 > TITLES_MAX and "<title>1.1:" not in svg
    assert len(svg.encode()) < 80 * 10_000, len(svg.encode())  # integer points, one colour per group of lines
    assert "a&lt;&amp;&gt;" in svg  # a value's text escaped (it parsed above)
    small = parallel_svg(analyse(big_grid(10, 10), MAX)[0])
    assert "<title>1.1:" in small and len(small.encode()) < 40_000


# -- the text ----------------------------------------------------------------------------------------------

FACTORIAL_TEXT = """\
What matters for acc (higher is better): 6 cells, a full grid
key    share  spread  value     mean ± std  n  best
opt.a  42.9%   2.000  1      2.000 ± 0.000  3
                      2      4.000 ± 1.633  3  ◀
b      28.6%   2.000  x      2.000 ± 0.000  2
                      y      3.000 ± 1.000  2
                      z      4.000 ± 2.000  2  ◀
"""


def text(renderable: Any, width: int) -> str:
    return "\n".join(line.rstrip() for line in render.to_text(renderable, width).splitlines()) + "\n"


def test_what_matters_as_text_fits_80_columns_and_narrower() -> None:
    view = section(factorial(), MAX, None)[1]
    assert text(view, 80) == FACTORIAL_TEXT
    cells = [
        cell(i, {"model": {"name": f"meta-llama/Llama-3.2-{i}B-Instruct"}, "lr": 10.0**-i}, 1 / i) for i in range(1, 16)
    ]
    for width in (80, 50):
        shown = text(section(cells, MAX, None)[1], width)
        assert max(map(cell_len, shown.splitlines())) <= width, shown
        assert "mean ± std" in shown and "more values between the best and the worst" in shown
    partial = text(section(factorial({"1.1": {"best": None}}), MAX, None)[1], 80)
    assert "1 of 6 cells has no value yet" in partial and max(map(cell_len, partial.splitlines())) <= 80
    assert text(WhatMatters([], "nothing to analyse yet: no cell has a value of acc"), 80) == (
        "What matters: nothing to analyse yet: no cell has a value of acc\n"
    )


# -- the command, on a real root ---------------------------------------------------------------------------

SWEEP = """\
name: grid
train: trainers:train
metric: {name: acc, goal: max}
grid: {lr: [0.1, 0.2], wd: [0, 1, 2]}
"""


def build_root(tmp_path: Path, launch: Launch) -> Path:
    """Five of six cells done with a best value (lr 0.2 adds 1, wd adds 2 per step); 1.6 queued."""
    root = tmp_path / "root"
    store = launch(root, sweep_from(SWEEP, tmp_path))
    for c in store.cells()[:5]:
        claim = store.claim(c.id, WORKER)
        assert claim is not None
        acc = (c.cfg["lr"] == 0.2) + 2 * c.cfg["wd"]
        store.progress(c.id, claim.number, step=3, metrics={"acc": acc, "loss": 1 / (1 + acc)}, best=acc, best_step=3)
        store.finish(c.id, claim.number, Outcome(reason="completed", end_step=3, wall_seconds=60.0))
    store.close()
    return root


def test_report_grid_json_and_text_and_report_json_unchanged(tmp_path: Path, launch: Launch) -> None:
    root = build_root(tmp_path, launch)
    runner = CliRunner()

    def ran(*args: str, code: int = 0) -> str:
        result = runner.invoke(main, ["report", *args, "--root", str(root)], env={"COLUMNS": "80"})
        assert result.exit_code == code, result.output
        return result.output

    from sweepq.queue.store import Store

    store = Store.open_readonly(root)
    try:
        rows = by_reason(store.attempts())
        cells = store.cells(include_removed=False)
    finally:
        store.close()
    assert ran("--json") == json.dumps(rows, indent=2) + "\n"  # the contract: the rows per reason, nothing else
    assert ran("--json", "--metric", "loss") == ran("--json")
    grid = json.loads(ran("--grid", "--json"))
    assert grid == json.loads(json.dumps([a.to_json() for a in analyse(cells, MAX)]))
    [g] = grid
    assert (g["cells"], g["expected"], g["full"], [k["key"] for k in g["keys"]]) == (5, 6, False, ["wd", "lr"])
    assert [(v["value"], v["mean"], v["n"]) for v in g["keys"][0]["levels"]] == [(0, 0.5, 2), (1, 2.5, 2), (2, 4.0, 1)]
    assert g["keys"][0]["best"] == 2 and g["note"].startswith("1 of 6 cells has no value yet")

    only = ran("--grid")
    assert only.startswith("What matters for acc (higher is better): 5 cells, a partial grid\n")
    assert "reason" not in only and max(map(cell_len, only.splitlines())) <= 80
    both = ran()
    assert both.index("completed") < both.index("What matters for acc") and both.endswith(only)
    loss = json.loads(ran("--grid", "--json", "--metric", "loss"))
    assert loss[0]["goal"] == "min" and loss[0]["keys"][0]["best"] == 2

    err = runner.invoke(main, ["report", "--grid", "--metric", "los", "--root", str(root)])
    assert err.exit_code == 2 and err.stdout == ""
    assert re.fullmatch(
        r"error: --metric los: no cell has logged a metric of that name \(logged: acc, loss\)\. Name one of "
        r"those, or leave --metric out for the sweep's metric, acc\.\n",
        err.stderr,
    ), err.stderr


def test_report_says_in_one_line_when_nothing_can_be_analysed(tmp_path: Path, launch: Launch) -> None:
    root = tmp_path / "root"
    launch(root, sweep_from(SWEEP, tmp_path)).close()
    result = CliRunner().invoke(main, ["report", "--grid", "--root", str(root)])
    assert (
        result.exit_code == 0 and result.output == "What matters: nothing to analyse yet: no cell has a value of acc\n"
    )
    result = CliRunner().invoke(main, ["report", "--grid", "--json", "--root", str(root)])
    assert result.exit_code == 0 and json.loads(result.output) == []
