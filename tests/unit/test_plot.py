"""`sweepq plot`'s drawing: the downsampler, and pictures whose pixels show one curve per cell."""

from __future__ import annotations

import math
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytest.importorskip("matplotlib", reason="sweepq plot's extra: pip install 'sweepq[plot]'")

import numpy as np
from click.testing import CliRunner
from matplotlib.colors import to_rgb
from matplotlib.image import imread

from sweepq.cli.main import main
from sweepq.cli.plot_commands import NEEDS_MATPLOTLIB, choose_metric, group_by
from sweepq.errors import UsageError
from sweepq.history.plot import PALETTE, downsample, draw_cells, draw_groups, lighter
from sweepq.history.records import AttemptInfo, CellHistory, CheckpointMark, LostTail, Point, Series
from unit.support import Launch
from unit.test_history import finished_root


def _points(steps: range, f: float, attempt: int = 1) -> tuple[Point, ...]:
    return tuple(Point(s, 0.0, math.sin(s / 40) * f + f, attempt, i + 2) for i, s in enumerate(steps))


def _cell(cell: str, f: float, lost: bool = False) -> CellHistory:
    tails: tuple[LostTail, ...] = ()
    if lost:  # attempt 1 ran on to 300, attempt 2 resumed from 100
        tails = (LostTail(cell, 1, "lost", "loss", tuple(Point(s, 0.0, 5 * f, 1, s) for s in range(101, 300))),)
        curve = _points(range(0, 101), f) + _points(range(101, 400), f, attempt=2)
    else:
        curve = _points(range(0, 400), f)
    return CellHistory(
        cell,
        (AttemptInfo(1, "completed", 0, False),),
        {"loss": Series(cell, "loss", curve)},
        lost=tails,
        checkpoints=(CheckpointMark(100, 1, "committed"), CheckpointMark(250, 1, "superseded")),
    )


def _pixels_near(img: np.ndarray, colour: str, tol: float = 0.06) -> int:
    rgb = np.array(to_rgb(colour))
    return int((np.abs(img[..., :3] - rgb).max(axis=-1) < tol).sum())


def test_downsample_keeps_every_point_of_a_short_curve() -> None:
    assert downsample([1, 2, 3], [0.5, 0.1, 0.9]) == ([1, 2, 3], [0.5, 0.1, 0.9])


def test_downsample_keeps_each_buckets_min_and_max() -> None:
    n = 100_000
    steps = list(range(n))
    values = [math.sin(i / 500) for i in steps]
    values[31_337], values[77_001] = 50.0, -50.0  # spikes one point wide
    xs, ys = downsample(steps, values)
    assert len(xs) <= 1500
    assert xs == sorted(xs)
    assert 50.0 in ys and -50.0 in ys
    buckets = 750
    for b in range(buckets):
        lo, hi = b * n // buckets, (b + 1) * n // buckets
        kept = [y for x, y in zip(xs, ys, strict=True) if lo <= x < hi]
        assert min(kept) == min(values[lo:hi]) and max(kept) == max(values[lo:hi])


def test_a_png_shows_one_curve_per_cell_in_its_colour(tmp_path: Path) -> None:
    out = tmp_path / "curves.png"
    pic = draw_cells([_cell("1.1", 1.0), _cell("1.2", 2.0), _cell("1.3", 3.0)], "loss", "min", out)
    assert (pic.curves, pic.points) == (3, 1200)
    img = imread(out)
    for colour in PALETTE[:3]:
        assert _pixels_near(img, colour) > 300, colour
    assert _pixels_near(img, PALETTE[3]) == 0  # a fourth cell's colour: no fourth curve
    assert list(tmp_path.iterdir()) == [out]  # no temporary file left beside it


def test_a_lost_tail_is_drawn_dashed_in_a_lighter_shade(tmp_path: Path) -> None:
    shade = lighter(PALETTE[0])
    counts = {}
    for lost in (False, True):
        out = tmp_path / f"lost-{lost}.png"
        draw_cells([_cell("1.1", 1.0, lost=lost)], "loss", None, out)
        counts[lost] = _pixels_near(imread(out), shade, tol=0.02)
    assert counts[True] > 3 * counts[False] + 200, counts  # the curve's anti-aliased edges pass through the shade too


def test_an_svg_has_one_group_per_cell_and_per_lost_tail(tmp_path: Path) -> None:
    out = tmp_path / "curves.svg"
    draw_cells([_cell("1.1", 1.0, lost=True), _cell("2.1", 2.0)], "loss", "min", out)
    ids = {g.get("id") for g in ET.parse(out).getroot().iter("{http://www.w3.org/2000/svg}g")}
    assert {"cell-1.1", "cell-2.1", "lost-1.1-1", "checkpoints-1.1"} <= ids
    assert "lost-2.1-1" not in ids


def test_grouped_by_a_cfg_key_draws_one_mean_curve_per_value(tmp_path: Path) -> None:
    cells = [_cell("1.1", 1.0), _cell("1.2", 2.0), _cell("1.3", 3.0)]
    groups = group_by(cells, {"1.1": {"lr": 0.1}, "1.2": {"lr": 0.1}, "1.3": {"lr": 0.01}}, "lr")
    assert {k: [h.cell for h in v] for k, v in groups.items()} == {"0.1": ["1.1", "1.2"], "0.01": ["1.3"]}
    out = tmp_path / "by.png"
    assert draw_groups(groups, "loss", "lr", out).curves == 2
    img = imread(out)
    assert _pixels_near(img, PALETTE[0]) > 300 and _pixels_near(img, PALETTE[1]) > 300
    assert _pixels_near(img, PALETTE[2]) == 0
    with pytest.raises(UsageError, match="no cell has the cfg key 'width'; the keys are: lr"):
        group_by(cells, {"1.1": {"lr": 0.1}}, "width")


def test_the_metric_is_the_one_asked_else_the_sweeps_else_the_first_logged(tmp_path: Path) -> None:
    cells = [_cell("1.1", 1.0).metrics]  # each cell's metrics, in first-logged order
    assert choose_metric(cells, None, "val_acc", tmp_path) == "loss"
    assert choose_metric(cells, "loss", None, tmp_path) == "loss"
    with pytest.raises(UsageError, match="no cell logged a metric named 'acc'; the metrics logged are: loss"):
        choose_metric(cells, "acc", None, tmp_path)
    with pytest.raises(UsageError, match="no metric history"):
        choose_metric([CellHistory("1.1", (), {}).metrics], None, None, tmp_path)


def test_the_command_on_a_finished_root_only_reads_it(tmp_path: Path, launch: Launch) -> None:
    root = finished_root(tmp_path, launch)  # 1.1: attempt 1 lost after step 7, attempt 2 resumed from 5
    before = sorted((p, p.stat().st_mtime_ns, p.stat().st_size) for p in root.rglob("*"))
    out = tmp_path / "pics"
    out.mkdir()

    def plot(*args: str) -> tuple[int, str]:
        r = CliRunner().invoke(main, ["plot", str(root), *args])
        return r.exit_code, r.output

    assert plot("-o", str(out / "c.png")) == (0, f"wrote {out / 'c.png'}: loss, 1 cells, 12 points drawn\n")
    assert plot("--by", "lr", "-o", str(out / "by.svg"))[0] == 0
    code, said = plot("--metric", "acc", "-o", str(out / "x.png"))
    assert code == 2 and "no cell logged a metric named 'acc'; the metrics logged are: loss, epoch" in said
    code, said = plot("--cells", "1.2", "-o", str(out / "x.png"))
    assert code == 2 and f"no metric history in {root} for these cells" in said
    code, said = plot("-o", str(out / "x.jpg"))
    assert code == 2 and "sweepq plot writes .png or .svg pictures" in said
    assert sorted(p.name for p in out.iterdir()) == ["by.svg", "c.png"]  # nothing of the refused ones
    assert sorted((p, p.stat().st_mtime_ns, p.stat().st_size) for p in root.rglob("*")) == before


def test_without_matplotlib_the_command_says_how_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sweepq.history

    monkeypatch.delitem(sys.modules, "sweepq.history.plot")  # imported afresh, as in a new process
    monkeypatch.delattr(sweepq.history, "plot")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what Python's import does where it is not installed
    r = CliRunner().invoke(main, ["plot", str(tmp_path), "-o", str(tmp_path / "c.png")])
    assert (r.exit_code, r.output) == (2, f"error: {NEEDS_MATPLOTLIB}\n")
    assert NEEDS_MATPLOTLIB == "sweepq plot needs matplotlib: pip install 'sweepq[plot]'"
    assert list(tmp_path.iterdir()) == []


def test_only_a_metric_with_a_goal_gets_a_best_point(tmp_path: Path) -> None:
    """A loss that is not the sweep's metric has no direction: neither the picture nor the page marks its highest."""
    from types import SimpleNamespace
    from typing import Any, cast

    from sweepq.html.charts import collect
    from sweepq.spec.sweep import Metric

    cell = _cell("1.1", 1.0)
    points = cell.series["loss"].points
    lowest = min(points, key=lambda p: p.value)
    for goal, words in (("min", f"1.1  best {lowest.value:.4g} at step {lowest.step}"), (None, None)):
        out = tmp_path / f"{goal}.svg"
        draw_cells([cell], "loss", goal, out)
        legend = [line.strip() for line in out.read_text().splitlines() if line.strip().startswith("<!-- 1.1")]
        assert legend == [f"<!-- {words or '1.1'} -->"]  # matplotlib writes each text as a comment beside its glyphs
    cells = cast(Any, [SimpleNamespace(id="1.1", best=None)])
    (sweeps,) = collect([cell], cells, Metric("loss", "min")).charts
    assert sweeps.lines[0].best == (float(lowest.step), lowest.value)
    (other,) = collect([cell], cells, Metric("score", "max")).charts  # loss is not the sweep's metric
    assert other.goal is None and other.lines[0].best is None
    (none,) = collect([cell], cells, None).charts  # a sweep without a metric: no direction at all
    assert none.lines[0].best is None
