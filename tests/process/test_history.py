"""Metric history through a reboot: kill -9 of every process mid-training, the same launch again, one honest curve,
and every way of looking at it.

Two cells train the same deterministic walk, 1.2 at twice 1.1's scale (lr 2 vs 1:
a power of two, so 1.2's every value is exactly twice 1.1's, and their curves do
not hide each other in a picture). Cell 1.1 is frozen (SIGSTOP) once it has
committed a checkpoint and its history file holds points past it; cell 1.2 runs
to the end undisturbed; then the whole tree gets SIGKILL and the same launch runs
again. Each cell's stitched curve has every step once and equals, exactly, what
1.2 logged uninterrupted, scaled (the RNG is restored from the checkpoint); the
killed attempt's points after its checkpoint are its lost tail, marked `lost`.
Then every view of that history is read back with its own reader: `export csv`
holds every value of every attempt's file exactly; TensorBoard's event reader and
MLflow's client read the exported runs with each kept point; `plot`'s pixels show
each cell's curve; the HTML report renders in headless Chromium with a row and a
curve per cell and makes no request; the status table fits 80 columns.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import signal
import struct
from pathlib import Path

import psutil
import pytest
from browser import CHROMIUM, chromium, curves_of, dom, kind, requests_from_the_page
from click.testing import CliRunner
from conftest import cli, db_rows, kill_tree, start, trainer_of, wait_for, wait_gone, write

from sweepq.cli.main import main
from sweepq.history import CellHistory, attempt_log, stitched
from sweepq.layout import CellPaths
from sweepq.queue.store import Store

STEPS = 40
# Two cells train the same walk (same seed), 1.2 at twice the scale: 1.2 runs undisturbed, the reference.
SPEC = f"""
name: hist
train: trainers:train
root: runs/hist
metric: {{name: loss, goal: min}}
params: {{steps: {STEPS}, delay: 0.03, seed: 7}}
checkpoint: {{every_steps: 10, keep_last: 10}}
grid: {{lr: [1.0, 2.0]}}
"""
KILLED, WHOLE = "1.1", "1.2"
# MLflow's own store, under SQLAlchemy 2.1
pytestmark = pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy is deprecated")


def raw_values(root: Path, cell: str, attempt: int) -> list[tuple[str, int, int, str, float, float]]:
    """Every value of an attempt's file, read here line by line (not with sweepq's reader): whole lines only."""
    text = CellPaths(root, cell).metrics(attempt).read_text()
    out = []
    for line in text.split("\n")[1:-1]:  # the header; what follows the last newline
        d = json.loads(line)
        out += [(cell, attempt, d["step"], k, float(v), d["time"]) for k, v in d["values"].items()]
    return out


def test_killed_mid_training_then_relaunched_keeps_one_curve_and_the_lost_tail(sweep_dir: Path) -> None:
    spec = write(sweep_dir / "hist.yaml", SPEC)
    root = sweep_dir / "runs" / "hist"
    first = start("launch", str(spec), "--workers", "2", "--no-live", cwd=sweep_dir)
    frozen: list[tuple[int, int]] = []  # (newest committed step, newest step in the history file)

    def killed_cell_past_a_checkpoint_and_the_other_done() -> bool:
        assert first.poll() is None, first.communicate()[0]
        trainer = None if frozen else trainer_of(first.pid, KILLED)
        if trainer is not None:
            with contextlib.suppress(psutil.NoSuchProcess):
                trainer.send_signal(signal.SIGSTOP)  # nothing commits or writes while we look
                committed = CellPaths(root, KILLED).committed_steps()
                logged = [p.step for p in attempt_log(root, KILLED, 1).points]
                if committed and logged and logged[-1] > committed[0]:
                    frozen.append((committed[0], logged[-1]))
                else:
                    trainer.send_signal(signal.SIGCONT)
        return bool(frozen) and db_rows(root, f"select state from cells where id = '{WHOLE}'") == [("done",)]

    wait_for(killed_cell_past_a_checkpoint_and_the_other_done, timeout=120, what="1.1 frozen, 1.2 done")
    wait_gone(kill_tree(first.pid))  # the reboot: every process at once
    r = cli("launch", str(spec), "--workers", "1", "--no-live", cwd=sweep_dir)
    assert r.returncode == 0, r.stdout + r.stderr

    (checkpoint, last_logged), cells = frozen[0], (KILLED, WHOLE)
    store = Store.open_readonly(root)
    try:
        assert [store.cell(c).cfg["lr"] for c in cells] == [1.0, 2.0]
        assert sorted((a.cell, a.number, a.reason, a.start_step) for a in store.attempts()) == [
            (KILLED, 1, "lost", 0),
            (KILLED, 2, "completed", checkpoint),
            (WHOLE, 1, "completed", 0),
        ]
        killed, whole = (stitched(root, c, store) for c in cells)
    finally:
        store.close()
    doubled = [(s, v) for _, _, s, _, v, _ in raw_values(root, WHOLE, 1)]  # logged uninterrupted, at lr 2
    expected = [(s, v / 2) for s, v in doubled]
    assert [s for s, _ in expected] == list(range(1, STEPS + 1))
    assert [(p.step, p.value) for p in killed.series["loss"].points] == expected  # each step once, exact values
    assert [(p.step, p.value) for p in whole.series["loss"].points] == doubled
    for h in (killed, whole):
        assert h.repeated == () and h.damaged == {}
    assert [(a, pts[0].step, pts[-1].step) for a, pts in killed.series["loss"].segments()] == [
        (1, 1, checkpoint),
        (2, checkpoint + 1, STEPS),
    ]
    (tail,) = killed.lost
    assert (tail.attempt, tail.reason, tail.metric) == (1, "lost", "loss")
    assert [(p.step, p.value) for p in tail.points] == expected[checkpoint:last_logged]  # the same walk, lost
    assert whole.lost == ()

    out = sweep_dir / "export"
    exported_now = CliRunner().invoke(main, ["export", "csv", str(out), str(root)])  # in this process: no start-up
    assert exported_now.exit_code == 0, exported_now.output
    with open(out / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    exported = sorted(
        (r["cell"], int(r["attempt"]), int(r["step"]), r["name"], float(r["value"]), float(r["time"])) for r in rows
    )
    files = [(KILLED, 1), (KILLED, 2), (WHOLE, 1)]
    assert exported == sorted(v for cell, n in files for v in raw_values(root, cell, n))
    lost = [(int(r["step"]), r["reason"]) for r in rows if r["status"] == "lost"]
    assert [r["cell"] for r in rows if r["status"] == "lost"] == [KILLED] * len(lost)
    assert lost == [(s, "lost") for s in range(checkpoint + 1, last_logged + 1)]
    for cell in cells:
        kept = [int(r["step"]) for r in rows if r["cell"] == cell and r["status"] == "kept"]
        assert sorted(kept) == list(range(1, STEPS + 1))

    histories = {KILLED: killed, WHOLE: whole}
    views = sweep_dir / "views"
    tensorboard_reads_back(root, views / "tb", histories)
    mlflow_reads_back(root, views, histories)
    plot_shows_each_curve(root, views / "curves.png")
    html_report_renders(root, views, histories)
    r = cli("status", str(root), env=os.environ | {"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    assert max(len(line) for line in r.stdout.splitlines()) <= 80, r.stdout
    assert [line.split()[0] for line in r.stdout.splitlines() if line.startswith("1.")] == [KILLED, WHOLE]


def tensorboard_reads_back(root: Path, out: Path, histories: dict[str, CellHistory]) -> None:
    """Each cell's TensorBoard run holds its kept points (as float32) and nothing of its lost tail."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    exported = CliRunner().invoke(main, ["export", "tensorboard", str(out), str(root)])
    assert exported.exit_code == 0, exported.output
    for cell, h in histories.items():
        (folder,) = [p for p in out.iterdir() if p.is_dir() and p.name.startswith(cell)]
        acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
        acc.Reload()
        points = [(e.step, e.value) for e in acc.Scalars("loss")]
        assert points == [(p.step, f32(p.value)) for p in h.series["loss"].points]


def mlflow_reads_back(root: Path, out: Path, histories: dict[str, CellHistory]) -> None:
    """One parent run, one child per cell (its cfg as params), each with its kept points exactly."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{out / 'mlflow.db'}"
    out.mkdir(parents=True, exist_ok=True)
    exported = CliRunner().invoke(main, ["export", "mlflow", str(root), "--tracking-uri", uri])
    assert exported.exit_code == 0, exported.output
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("hist")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = {
        r.data.tags["sweepq.cell"]: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id
    }
    assert sorted(children) == sorted(histories) and len(runs) == 3
    for cell, h in histories.items():
        run = children[cell]
        assert float(run.data.params["lr"]) == (1.0 if cell == KILLED else 2.0)
        got = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, "loss"))
        assert got == [(p.step, p.value) for p in h.series["loss"].points]


def plot_shows_each_curve(root: Path, out: Path) -> None:
    """`sweepq plot`'s picture holds each cell's colour along a curve (its line, not a legend swatch alone)."""
    import numpy as np
    from matplotlib.colors import to_rgb
    from matplotlib.image import imread

    from sweepq.history.plot import PALETTE

    drawn = CliRunner().invoke(main, ["plot", str(root), "--metric", "loss", "-o", str(out)])
    assert drawn.exit_code == 0, drawn.output
    img = imread(str(out))[..., :3]
    for i, cell in enumerate((KILLED, WHOLE)):
        near = (np.abs(img - np.array(to_rgb(PALETTE[i]))).max(axis=-1) < 0.06).sum()
        assert near > 500, f"{cell}: {near} pixels of its colour"


def html_report_renders(root: Path, out: Path, histories: dict[str, CellHistory]) -> None:
    """In headless Chromium: a row per cell with its state, a curve per cell, the lost tail, no request."""
    if CHROMIUM is None:
        pytest.skip("needs Debian's chromium package (make test installs it)")
    page = out / "report.html"
    written = CliRunner().invoke(main, ["report", "--html", str(page), str(root)])
    assert written.exit_code == 0, written.output
    net = out / "net.json"
    seen = dom(chromium(out / "profile", page.as_uri(), "--dump-dom", f"--log-net-log={net}"))
    assert [(row[0], row[1]) for row in seen.rows] == [(KILLED, "done"), (WHOLE, "done")]
    (loss,) = seen.charts
    assert curves_of(loss) == sorted(histories)
    assert [kind(p) for p in loss].count("t") == 1  # 1.1's lost tail, dashed
    assert sorted(seen.grid_lines) == sorted(histories)
    assert requests_from_the_page(net, page.as_uri()) == []


def f32(x: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", x))[0])  # as TensorBoard stores a scalar
