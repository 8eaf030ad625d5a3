"""A cell of a million logged points, exported and drawn by real `sweepq` processes in bounded memory.

The root is tiny_sweep.py's finished sweep (a real launch: real queue rows, real
checkpoints), copied; cell 1.1's metrics.jsonl is then written again in the history
writer's exact format (format.header, format.encode) with 1,000,000 points of
`loss`, a metric that is not the sweep's (`score`, goal max). Each command runs in
its own process, started and reaped (wait4) by a small one so that its own peak
resident memory is read (`ru_maxrss`): every one stays under PEAK_MB (before the
history was streamed they peaked at 711 MB for export csv, 1,494 MB for
tensorboard, 835 MB for mlflow, 781 MB for plot and 727 MB for report --html;
since, 50, 70, 158, 100 and 68 MB). Then what each wrote is read back a row or an event at
a time: as many values as were logged, the first and last exactly.
"""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import SWEEPQ
from tiny_sweep import finished

from sweepq.history import format as fmt
from sweepq.layout import CellPaths

pytestmark = [
    pytest.mark.process,
    pytest.mark.slow,
    # MLflow's store still asks SQLAlchemy 2.1 for a loader strategy it deprecated: MLflow's to change, not ours
    pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy is deprecated"),
]

POINTS = 1_000_000
PEAK_MB = 300
T0 = 1_700_000_000.0


def loss(step: int) -> float:
    return 1.0 / step + (step % 1000) / 1e6  # falls, with a ripple: its highest is its first point


def time_of(step: int) -> float:
    return T0 + step / 1000


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The root: tiny_sweep's, cell 1.1's history replaced by POINTS points of loss."""
    d = tmp_path_factory.mktemp("big")
    root = d / "root"
    shutil.copytree(finished(tmp_path_factory) / "runs" / "tiny", root)
    with open(CellPaths(root, "1.1").metrics(1), "wb") as f:
        f.write(fmt.header("1.1", 1))
        for start in range(1, POINTS + 1, 10_000):
            lines = (
                fmt.encode(s, time_of(s), {"loss": loss(s)}) for s in range(start, min(start + 10_000, POINTS + 1))
            )
            f.write(("\n".join(line for line in lines if line) + "\n").encode())
    return root


# Measures one command from a small process of its own: a child's ru_maxrss counts the pages it shared with its
# parent until it ran sweepq, and pytest's process grows (MLflow's client reads a million points back into it).
_MEASURE = """
import os, subprocess, sys
with open(sys.argv[1], "wb") as out, open(sys.argv[2], "wb") as err:
    p = subprocess.Popen(sys.argv[4:], stdin=subprocess.DEVNULL, stdout=out, stderr=err)
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
with open(sys.argv[3], "w") as f:
    f.write(f"{p.returncode} {usage.ru_maxrss}")
"""


def peak(tmp: Path, *args: str) -> tuple[int, str, str, float]:
    """Run `sweepq ARGS` in a process of its own: (exit code, stdout, stderr, its peak RSS in MB)."""
    out, err, result = tmp / "peak.out", tmp / "peak.err", tmp / "peak.result"
    subprocess.run([sys.executable, "-c", _MEASURE, str(out), str(err), str(result), *SWEEPQ, *args], check=True)
    code, kib = result.read_text().split()
    return int(code), out.read_text(), err.read_text(), int(kib) / 1024  # Linux counts it in KiB


def events(path: Path) -> Iterator[tuple[str, int, float]]:
    """(tag, step, value) of each scalar of a TensorBoard events file, read one record at a time."""
    from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader

    for event in LegacyEventFileLoader(str(path)).Load():  # as written: simple_value not made a tensor
        for v in event.summary.value:
            if v.HasField("simple_value"):
                yield v.tag, event.step, v.simple_value


def f32(x: float) -> float:
    import struct

    return float(struct.unpack("<f", struct.pack("<f", x))[0])


def test_export_csv_streams_a_million_points(big: Path, tmp_path: Path) -> None:
    code, out, err, mb = peak(tmp_path, "export", "csv", str(tmp_path / "csv"), "--root", str(big), "--cell", "1.1")
    assert code == 0, err
    assert out.startswith(f"wrote {POINTS} logged values of 1 cell (1 attempt) to {tmp_path / 'csv'}")
    assert mb < PEAK_MB, f"export csv peaked at {mb:.0f} MB"
    rows = 0
    with open(tmp_path / "csv" / "metrics.csv", newline="") as f:
        reader = csv.reader(f)
        assert next(reader) == ["cell", "attempt", "step", "name", "value", "time", "status", "reason"]
        for row in reader:
            rows += 1
            if rows == 1:
                assert row == ["1.1", "1", "1", "loss", repr(loss(1)), repr(time_of(1)), "kept", ""]
    assert rows == POINTS
    assert row == ["1.1", "1", str(POINTS), "loss", repr(loss(POINTS)), repr(time_of(POINTS)), "kept", ""]
    with open(tmp_path / "csv" / "attempts.csv", newline="") as f:
        attempts = list(csv.DictReader(f))
    assert [(a["cell"], a["values_logged"], a["values_lost"]) for a in attempts] == [("1.1", str(POINTS), "0")]


def test_export_tensorboard_streams_a_million_points(big: Path, tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    dest = tmp_path / "tb"
    code, out, err, mb = peak(tmp_path, "export", "tensorboard", str(dest), "--root", str(big), "--cell", "1.1")
    assert code == 0, err
    assert out.startswith(f"wrote {POINTS} points of 1 cell to {dest}")
    assert mb < PEAK_MB, f"export tensorboard peaked at {mb:.0f} MB"
    count, first, last = 0, None, None
    for tag, step, value in events(dest / "1.1" / "events.out.tfevents.0000000000.sweepq"):
        assert tag == "loss"  # loss is not the sweep's metric: no best/loss
        count += 1
        first = first or (step, value)
        last = (step, value)
    assert count == POINTS
    assert first == (1, f32(loss(1))) and last == (POINTS, f32(loss(POINTS)))


def test_export_mlflow_streams_a_million_points(big: Path, tmp_path: Path) -> None:
    pytest.importorskip("mlflow", reason="export mlflow needs the mlflow extra")
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    code, out, err, mb = peak(tmp_path, "export", "mlflow", "--root", str(big), "--cell", "1.1", "--tracking-uri", uri)
    assert code == 0, err
    assert out.startswith(f"exported {POINTS} points of 1 cell to the MLflow experiment 'tiny'")
    assert mb < PEAK_MB, f"export mlflow peaked at {mb:.0f} MB"
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("tiny")
    assert experiment is not None
    (run,) = [r for r in client.search_runs([experiment.experiment_id]) if r.data.metrics]
    history = client.get_metric_history(run.info.run_id, "loss")
    assert len(history) == POINTS
    ends = sorted((m.step, m.value, m.timestamp) for m in history)[:: POINTS - 1]
    assert ends == [(1, loss(1), round(time_of(1) * 1000)), (POINTS, loss(POINTS), round(time_of(POINTS) * 1000))]


def test_plot_streams_a_million_points_and_stars_no_best_of_a_loss(big: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    picture = tmp_path / "loss.svg"
    code, out, err, mb = peak(
        tmp_path, "plot", "--root", str(big), "--cells", "1.1", "--metric", "loss", "-o", str(picture)
    )
    assert code == 0, err
    assert out == f"wrote {picture}: loss, 1 cells, 1500 points drawn\n"
    assert mb < PEAK_MB, f"plot peaked at {mb:.0f} MB"
    svg = picture.read_text()
    assert 'id="cell-1.1"' in svg
    # loss is not the sweep's metric (score, goal max): no direction, so no star, no "best" in the legend
    assert "best" not in svg


def test_report_html_streams_a_million_points(big: Path, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    code, out, err, mb = peak(tmp_path, "report", "--root", str(big), "--html", str(page))
    assert code == 0, err
    assert out.startswith(f"wrote {page}: 2 cells, 1 metric chart(s)")
    assert mb < PEAK_MB, f"report --html peaked at {mb:.0f} MB"
    html = page.read_text()
    (path,) = re.findall(r'<path class="c p0" data-cell="1.1" d="([^"]+)"', html)
    drawn = len(re.findall(r"-?[0-9.]+", path)) // 2  # "M x y l dx dy dx dy ...": a pair a point
    assert 2 <= drawn <= 600  # the million points cut to what a line of the chart draws
    assert '<circle class="b' not in html  # loss is not the sweep's metric: no best point is marked
