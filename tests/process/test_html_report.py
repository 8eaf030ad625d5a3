"""`sweepq report --html FILE`: one offline page, loaded in headless Chromium (Debian's `chromium` package).

The root is a real queue (SQLite) and real metrics.jsonl files written by the
history writer, built through the Store as a sweep leaves them: a cell whose first
attempt was lost and whose second resumed from its checkpoint (a lost tail), a
cell that failed with a traceback, a finished one, a queued one; a cfg value and
the sweep's name hold HTML. Chromium loads the written file once: the DOM it built
(one row per cell, one path per cell in each chart, no element made of a cfg
value), the picture it drew (every cell's colour on screen), and its net log (no
request left the page). A control page that does fetch proves the net-log check
sees a request; the same page with the report's Content-Security-Policy fetches
nothing, and its inline script still sorts the table. The size bound (100 cells x
5 metrics x 2,000 steps under 1 MB) and the many-cells charts are checked on
synthetic roots, in process.
"""

from __future__ import annotations

import http.server
import re
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from browser import chromium, curves_of, dom, kind, needs_chromium, requests_from_the_page, rgb
from click.testing import CliRunner
from PIL import Image
from unit.support import WORKER, FakeClock, launch_store, sweep_from

from sweepq.cli.main import main
from sweepq.history import attempt_log
from sweepq.history import format as history_format
from sweepq.html.charts import LINE_POINTS, TOP
from sweepq.html.gather import gather
from sweepq.html.page import CSP, page
from sweepq.html.reduce import reduce
from sweepq.html.svg import PALETTE
from sweepq.layout import CellPaths
from sweepq.queue.records import Outcome
from sweepq.queue.store import Store
from sweepq.run.history_writer import HistoryWriter

HOSTILE = "<img src=x onerror=alert(1)>"
SWEEP = f"""\
name: "report <b>&amp;</b>"
train: trainers:train
metric: {{name: loss, goal: min}}
retries: {{lost: 1, backoff_seconds: 0}}
grid: {{lr: [0.1, 0.2], note: ["{HOSTILE}", plain]}}
"""
TRACEBACK = 'Traceback (most recent call last):\n  File "train.py", line 9, in train\nValueError: bug at step 3\n'


def build_root(folder: Path) -> Path:
    """1.1: lost after step 8 (checkpoint at 5), resumed from 5 to 12; 1.2: done; 1.3: failed at 3; 1.4 queued."""
    root = folder / "root"
    store = launch_store(root, sweep_from(SWEEP, folder), FakeClock())
    plan = [  # cell, resumed from, steps logged, how it ended
        ("1.1", None, range(1, 9), "lost"),
        ("1.1", 5, range(6, 13), "completed"),
        ("1.2", None, range(1, 13), "completed"),
        ("1.3", None, range(1, 4), "error"),
    ]
    try:
        for cell, start, steps, reason in plan:
            claim = store.claim(cell, WORKER)
            assert claim is not None
            if start is not None:
                store.attempt_started(cell, claim.number, start_step=start, start_checkpoint_sha="abc")
            w = HistoryWriter(CellPaths(root, cell).metrics(claim.number), cell, claim.number)
            lr = claim.cfg["lr"] + int(cell[-1]) / 10  # each cell its own curve
            for s in steps:  # the second attempt logs other values than the lost ones: the tail shows
                w.append(s, {"loss": 1 / s + claim.number / 4 + lr, "acc": s / 12 + lr})
            w.close()
            for k in (5, 10):
                if k <= steps[-1] and (start or 0) < k:
                    store.record_checkpoint(cell, k, path=f"cells/{cell}/checkpoints/step-{k}", attempt=claim.number)
            last = 1 / steps[-1] + claim.number / 4 + lr
            store.progress(cell, claim.number, step=steps[-1], total_steps=12, metrics={"loss": last}, best=last)
            tail = TRACEBACK if reason == "error" else None
            store.finish(cell, claim.number, Outcome(reason=reason, end_step=steps[-1], error_tail=tail))
    finally:
        store.close()
    return root


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_root(tmp_path_factory.mktemp("html"))


def report(out: Path, root: Path, *more: str) -> Any:
    return CliRunner().invoke(main, ["report", "--html", str(out), str(root), *more])


@needs_chromium
def test_the_report_renders_in_chromium_with_every_cell_and_no_request(tmp_path: Path, root: Path) -> None:
    out = tmp_path / "report.html"
    r = report(out, root)
    assert r.exit_code == 0, r.output
    assert re.fullmatch(
        rf"wrote {re.escape(str(out))}: 4 cells, 2 metric chart\(s\), 0\.\d\d MB; it needs no network\n", r.output
    )
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]  # written beside, renamed: nothing else left

    shot, net = tmp_path / "shot.png", tmp_path / "net.json"
    url = out.as_uri()
    seen = dom(
        chromium(
            tmp_path / "profile",
            url,
            "--dump-dom",
            f"--screenshot={shot}",
            "--window-size=1280,2000",
            f"--log-net-log={net}",
        )
    )
    store = Store.open_readonly(root)
    try:
        cells = {c.id: c for c in store.cells()}
    finally:
        store.close()
    # the table: one row per cell, in order, with its state and its cfg values as text
    assert [(row[0], row[1]) for row in seen.rows] == [(c.id, str(c.state)) for c in cells.values()]
    assert [(c.id, str(c.state)) for c in cells.values()] == [
        ("1.1", "done"),
        ("1.2", "done"),
        ("1.3", "failed"),
        ("1.4", "queued"),
    ]
    assert sorted(row[3] for row in seen.rows) == sorted(c.cfg["note"] for c in cells.values())
    assert HOSTILE in {row[3] for row in seen.rows}
    assert "img" not in seen.tags and seen.title == "report <b>&amp;</b> · sweepq report"  # text, never elements
    # the charts: loss, then acc; one curve per cell that logged, 1.1's lost tail beside its curve
    assert len(seen.charts) == 2
    for paths in seen.charts:
        assert curves_of(paths) == ["1.1", "1.2", "1.3"]
        assert [kind(p) for p in paths].count("t") == 1  # the only lost tail: 1.1's first attempt
    # what matters: the parallel coordinates draw a line per cell with a result (1.3 failed, 1.4 has none)
    assert sorted(seen.grid_lines) == ["1.1", "1.2"]
    assert seen.failures == [
        [
            "1.3",
            "failed",
            "error",
            "ValueError: bug at step 3",
            f"sweepq logs 1.3 {root}cells/1.3/attempts/1/stdout.log cells/1.3/attempts/1/stderr.log",
        ]
    ]
    # what it drew: each drawn cell's colour (its swatch in the table alone is 10 x 10 pixels, round-cornered)
    with Image.open(shot) as img:
        picture = img.convert("RGB")
    assert picture.size == (1280, 2000)
    counts = {colour: n for n, colour in picture.getcolors(maxcolors=1 << 24) or []}
    assert len(counts) > 50  # text, lines and shades: not a blank page
    for i in range(4):
        assert counts.get(rgb(PALETTE[i]), 0) >= 60, f"cell {i + 1}'s colour is not on screen"
    assert requests_from_the_page(net, url) == []


CLICK_LOSS = """document.querySelector("#cells-table th[title^='loss']").click()"""


@needs_chromium
def test_the_net_log_check_sees_a_request_and_the_pages_policy_stops_it_but_not_its_script(
    tmp_path: Path, root: Path
) -> None:
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        remote = f"http://127.0.0.1:{server.server_address[1]}/x.png"
        store = Store.open_readonly(root)
        try:
            html = page(gather(store))
            by_loss = sorted((c for c in store.cells() if "loss" in c.metrics), key=lambda c: c.metrics["loss"])
        finally:
            store.close()
        leaky = html.replace("<body>", f'<body><img src="{remote}">', 1)
        control = tmp_path / "control.html"
        control.write_text(leaky.replace(f'<meta http-equiv="Content-Security-Policy" content="{CSP}">', ""))
        chromium(tmp_path / "p1", control.as_uri(), "--dump-dom", f"--log-net-log={tmp_path / 'control.json'}")
        assert requests_from_the_page(tmp_path / "control.json", control.as_uri()) == [remote]
        assert hits == ["/x.png"]

        hits.clear()
        guarded = tmp_path / "guarded.html"
        # the same image under the report's policy, and a click on the loss column: inline scripts still run
        guarded.write_text(leaky.replace("</body>", f"<script>{CLICK_LOSS}</script></body>"))
        shown = chromium(tmp_path / "p2", guarded.as_uri(), "--dump-dom", f"--log-net-log={tmp_path / 'guarded.json'}")
        assert requests_from_the_page(tmp_path / "guarded.json", guarded.as_uri()) == []
        assert hits == []
        assert [row[0] for row in dom(shown).rows] == [c.id for c in by_loss] + ["1.4"]  # 1.4 logged none: last
    finally:
        server.shutdown()
        server.server_close()


# -- size -----------------------------------------------------------------------------------------------------------

CELLS, METRICS, STEPS = 100, 5, 2000


def synthetic_root(folder: Path, cells: int, metrics: int, steps: int) -> Path:
    """`cells` finished cells, each logging `metrics` noisy walks of `steps` steps, a checkpoint every 500 steps.

    Each metrics.jsonl is written in the history's format (its header, then a JSON line a step),
    the queue's rows through the Store, all in one transaction: no training, no thread, no fsync each.
    """
    grid = ", ".join(str(i) for i in range(cells))
    text = f"name: synthetic\ntrain: trainers:train\nmetric: {{name: m0, goal: min}}\ngrid: {{seed: [{grid}]}}\n"
    # one line a step, as format.py specifies it (its encoder would cost seconds for 200,000 lines)
    values = ",".join(f'"m{k}":%.6g' for k in range(metrics))
    line = '{"step":%d,"time":%.6f,"values":{' + values + "}}\n"
    root = folder / "root"
    store = launch_store(root, sweep_from(text, folder), FakeClock())
    rng = np.random.default_rng(0)
    try:
        with store.batch():
            for c in store.cells():
                claim = store.claim(c.id, WORKER)
                assert claim is not None and claim.number == 1
                walks = np.cumsum(rng.normal(size=(metrics, steps)), axis=1) / 10 + np.linspace(3, 0, steps)
                rows = np.column_stack((np.arange(1, steps + 1), 1.7e9 + np.arange(steps), walks.T)).tolist()
                lines = [history_format.header(c.id, 1).decode(), *(line % tuple(row) for row in rows)]
                path = CellPaths(root, c.id).metrics(1)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("".join(lines))
                for k in range(500, steps + 1, 500):
                    store.record_checkpoint(c.id, k, path=f"cells/{c.id}/checkpoints/step-{k}", attempt=1)
                best = float(walks[0].min())
                store.progress(c.id, 1, step=steps, total_steps=steps, metrics={"m0": walks[0, -1]}, best=best)
                store.finish(c.id, 1, Outcome(reason="completed", end_step=steps))
    finally:
        store.close()
    return root


def test_100_cells_of_5_metrics_of_2000_steps_stay_under_1_mb(tmp_path: Path) -> None:
    root = synthetic_root(tmp_path, CELLS, METRICS, STEPS)
    assert [len(p.values) for p in attempt_log(root, "1.100", 1).points] == [METRICS] * STEPS  # as the report reads
    out = tmp_path / "big.html"
    r = report(out, root)
    assert r.exit_code == 0, r.output
    size = out.stat().st_size
    assert size < 1_000_000, f"{size} bytes"
    seen = dom(out.read_text())
    assert len(seen.rows) == CELLS
    assert len(seen.charts) == METRICS
    for paths in seen.charts:
        assert curves_of(paths) == [f"1.{i}" for i in sorted(range(1, CELLS + 1), key=str)]  # every cell drawn
        assert all(len(re.findall(r"-?\d+", p["d"])) // 2 <= LINE_POINTS[1] for p in paths if kind(p) == "c")


def test_with_many_cells_a_chart_draws_the_best_and_a_band(tmp_path: Path) -> None:
    """Above `many` cells (MANY by default) a chart holds the TOP cells by the sweep's metric and the median."""
    store = Store.open_readonly(synthetic_root(tmp_path, 30, 2, 50))
    try:
        text, every = page(gather(store, many=29)), page(gather(store))
        ranked = sorted(store.cells(), key=lambda c: c.best or 0.0)  # goal: min
    finally:
        store.close()
    seen = dom(text)
    assert len(seen.charts) == 2
    for paths in seen.charts:
        assert curves_of(paths) == sorted(c.id for c in ranked[:TOP])
        assert [kind(p) for p in paths if kind(p) in ("band", "median")] == ["band", "median"]
    assert text.count(f"the {TOP} cells with the lowest best m0") == 2
    assert text.count('<i class="sw ') == 2 * TOP  # a legend per chart; no swatch in the table: colours by rank
    assert [len(curves_of(paths)) for paths in dom(every).charts] == [30, 30]
    assert every.count('<i class="sw ') == 30  # every cell drawn: its swatch in the table is its lines' colour


# -- bad input ------------------------------------------------------------------------------------------------------


def test_a_file_that_is_not_a_page_is_refused_and_nothing_is_written(tmp_path: Path, root: Path) -> None:
    spec = tmp_path / "sweep.yaml"
    spec.write_text("name: keep me\n")
    r = report(spec, root)
    assert r.exit_code == 2
    assert f"error: {spec}: sweepq report --html writes an HTML page and replaces FILE whole" in r.output
    assert spec.read_text() == "name: keep me\n"
    r = report(tmp_path / "no" / "r.html", root)
    assert r.exit_code == 2 and f"no folder {tmp_path / 'no'} to write r.html into" in r.output
    r = report(tmp_path / "r.html", root, "--json")
    assert r.exit_code == 2 and "--html writes a page and --json prints JSON: choose one" in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep.yaml"]


def test_a_curve_keeps_the_points_sweepq_plot_keeps() -> None:
    """Each bucket's min and max, as history/plot.py's `downsample` keeps them (there in Python, here in numpy)."""
    plot = pytest.importorskip("sweepq.history.plot", reason="sweepq plot needs the plot extra")
    rng = np.random.default_rng(1)
    for n, limit in [(10, 4), (1999, 160), (5000, 301), (37, 600)]:
        steps, values = np.arange(n, dtype=float) * 3, rng.normal(size=n).cumsum()
        kept_steps, kept_values = reduce(steps, values, limit)
        expected = plot.downsample(steps.tolist(), values.tolist(), limit)
        assert (kept_steps.tolist(), kept_values.tolist()) == expected
        assert len(kept_steps) <= limit
