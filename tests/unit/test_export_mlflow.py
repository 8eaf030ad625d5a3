"""`sweepq export mlflow` in process: read back with MLflow's own client from a real sqlite:/// store.

The root is a real queue (SQLite) with real metrics.jsonl files written by the
history writer (a kill and a resume in one cell); the export goes through
MlflowClient into a real MLflow database and is read back with search_runs and
get_metric_history, point for point against the stitched history. MLflow
creates a new store's schema in seconds: it is made once for the module and
copied for each test.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import sweepq.history
from sweepq.cli.main import main
from sweepq.history import CellHistory, stitched
from sweepq.history.mlflow_runs import MAX_PARAM, ms, refusal
from sweepq.layout import CellPaths, RootPaths
from sweepq.queue.records import Outcome
from sweepq.run.history_writer import HistoryWriter
from unit.support import WORKER, Launch, sweep_from

pytest.importorskip("mlflow", reason="export mlflow needs the mlflow extra")
from mlflow import MlflowClient
from mlflow.entities import Run

# MLflow's store still asks SQLAlchemy 2.1 for a loader strategy it deprecated: MLflow's to change, not ours
pytestmark = pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy is deprecated")

NOTES = "n" * (MAX_PARAM + 1)  # one param MLflow cannot hold
SWEEP = f"""\
name: mlf
train: trainers:train
metric: {{name: loss, goal: min}}
retries: {{error: 0}}
params: {{notes: {NOTES}, layers: [2, 3]}}
grid: {{lr: [0.1, 0.2, 0.3], optim: [{{name: sgd, momentum: 0.9, nesterov: true}}]}}
"""
CELLS = ["1.1", "1.2", "1.3"]
LONG = 1200  # 1.2's steps: more points than one MLflow batch holds


def loss(step: int, attempt: int) -> float:
    return 1 / step + attempt / 7


def log(root: Path, cell: str, attempt: int, steps: range, extra: bool = False) -> None:
    w = HistoryWriter(CellPaths(root, cell).metrics(attempt), cell, attempt)
    for s in steps:
        w.append(s, {"loss": loss(s, attempt), "acc": s / 3, **({"top@1": 0.5} if extra else {})})
    w.close()


def build_root(tmp_path: Path, launch: Launch) -> Path:
    """1.1: attempt 1 lost after step 7 (checkpoint at 5), attempt 2 resumed from 5 (logging 5 again) to 9: done.

    1.2: one attempt of LONG steps that failed (also logging `top@1`, a name MLflow refuses); 1.3 queued.
    """
    root = tmp_path / "root"
    store = launch(root, sweep_from(SWEEP, tmp_path))
    plan = [
        ("1.1", None, range(1, 8), "lost"),
        ("1.1", 5, range(5, 10), "completed"),
        ("1.2", None, range(1, LONG + 1), "error"),
    ]
    for cell, start, steps, reason in plan:
        claim = store.claim(cell, WORKER)
        assert claim is not None
        if start is not None:
            store.attempt_started(cell, claim.number, start_step=start, start_checkpoint_sha="abc")
        log(root, cell, claim.number, steps, extra=cell == "1.2")
        if cell == "1.1":
            store.record_checkpoint(cell, 5, path="cells/1.1/checkpoints/step-5", attempt=1)
        store.finish(cell, claim.number, Outcome(reason=reason, end_step=steps[-1]))
    store.close()
    return root


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An MLflow store with its schema made (once: MLflow's migrations take seconds)."""
    db = tmp_path_factory.mktemp("mlflow") / "template.db"
    MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments()
    return db


@pytest.fixture
def tracking(tmp_path: Path, migrated: Path) -> str:
    shutil.copyfile(migrated, tmp_path / "mlflow.db")
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def export(root: Path, *args: str) -> Any:
    return CliRunner().invoke(main, ["export", "mlflow", str(root), *args])


def runs(client: MlflowClient, where: str) -> list[Run]:
    experiment = client.get_experiment_by_name("mlf")
    assert experiment is not None
    return list(client.search_runs([experiment.experiment_id], where, max_results=1000))


def children(client: MlflowClient, parent: str) -> dict[str, Run]:
    found = runs(client, f"tags.`mlflow.parentRunId` = '{parent}'")
    by_cell = {r.data.tags["sweepq.cell"]: r for r in found}
    assert len(by_cell) == len(found), "one run a cell"
    return by_cell


def history_of(client: MlflowClient, run: Run, metric: str) -> list[tuple[int, float, int]]:
    return sorted((m.step, m.value, m.timestamp) for m in client.get_metric_history(run.info.run_id, metric))


def expected(h: CellHistory, metric: str) -> list[tuple[int, float, int]]:
    return [(p.step, p.value, ms(p.time)) for p in h.series[metric].points]


@contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """`folder` read-only where it is (the root keeps its path): a read-only bind mount, else modes without write."""
    if subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True).returncode == 0:
        try:
            subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], check=True)
            yield
        finally:
            subprocess.run(["umount", str(folder)], check=True)
        return
    paths = [folder, *folder.rglob("*")]
    modes = {p: p.stat().st_mode for p in paths}
    try:
        for p in paths:
            p.chmod(modes[p] & ~0o222)
        yield
    finally:
        for p in reversed(paths):
            p.chmod(modes[p])


def test_export_mlflow_reads_back_as_the_stitched_history_and_reruns_without_doubling(
    tmp_path: Path, launch: Launch, tracking: str
) -> None:
    root = build_root(tmp_path, launch)
    histories = {c: stitched(root, c) for c in CELLS}
    with read_only(root):
        first = export(root, "--tracking-uri", tracking)
        second = export(root, "--tracking-uri", tracking)
    points = 2 * (9 + LONG)
    assert first.exit_code == 0, first.output
    assert f"exported {points} points of 3 cells to the MLflow experiment 'mlf' in {tracking}: 3 runs written" in (
        first.stdout
    )
    assert f"view with: mlflow ui --backend-store-uri {tracking}" in first.stdout
    assert "warning: cfg key 'notes' is not in MLflow for 3 cells (1.1, 1.2, 1.3): a value of 6001 characters" in (
        first.stderr
    )
    assert "warning: metric 'top@1' is not in MLflow for cell 1.2: MLflow names hold only" in first.stderr
    assert second.exit_code == 0, second.output
    assert "3 runs" not in second.stdout and "0 runs written, 3 unchanged" in second.stdout

    client = MlflowClient(tracking_uri=tracking)
    (parent,) = runs(client, "tags.`sweepq.kind` = 'sweep'")
    assert parent.info.run_name == "mlf" and parent.info.status == "RUNNING"  # 1.3 is still queued
    assert parent.data.tags["sweepq.states"] == "done: 1, failed: 1, queued: 1"
    cells = children(client, parent.info.run_id)
    assert sorted(cells) == CELLS
    assert len(runs(client, "")) == 4  # the parent and its three children: the second export added none

    cfg = {"optim.name": "sgd", "optim.momentum": "0.9", "optim.nesterov": "true", "layers": "[2,3]"}
    for cell, lr in zip(CELLS, ["0.1", "0.2", "0.3"], strict=True):
        run = cells[cell]
        assert run.data.params == {"lr": lr, **cfg}
        assert run.data.tags["sweepq.left_out"].startswith("cfg key 'notes': a value of 6001 characters")
        assert run.info.run_name == cell and run.data.tags["sweepq.group"] == "mlf"
        for metric in histories[cell].series:
            if metric != "top@1":
                assert history_of(client, run, metric) == expected(histories[cell], metric)
        assert "top@1" not in run.data.metrics

    done, failed, queued = (cells[c] for c in CELLS)
    assert (done.info.status, failed.info.status, queued.info.status) == ("FINISHED", "FAILED", "SCHEDULED")
    assert [s for s, _, _ in history_of(client, done, "loss")] == list(range(1, 10))
    lost = [(p.step, p.value) for t in histories["1.1"].lost_of("loss") for p in t.points]
    assert lost == [(6, loss(6, 1)), (7, loss(7, 1))]
    assert not set(lost) & {(s, v) for s, v, _ in history_of(client, done, "loss")}  # the lost tail is not there
    assert (5, loss(5, 1)) in {(s, v) for s, v, _ in history_of(client, done, "loss")}  # 5 logged again: first kept
    assert {k: v for k, v in done.data.tags.items() if k.startswith("sweepq.") and k != "sweepq.left_out"} == {
        "sweepq.kind": "cell",
        "sweepq.cell": "1.1",
        "sweepq.group": "mlf",
        "sweepq.state": "done",
        "sweepq.attempts": "2",
        "sweepq.reasons": "1: lost, 2: completed",
        "sweepq.lost_values": "4",
        "sweepq.lost": "attempt 1 (lost): 4 values at steps 6-7 not logged: attempt 2 resumed from step 5",
        "sweepq.repeated_values": "2",
        "sweepq.digest": done.data.tags["sweepq.digest"],
    }
    assert failed.data.tags["sweepq.reasons"] == "1: error" and "sweepq.lost" not in failed.data.tags
    assert queued.data.tags["sweepq.attempts"] == "0" and queued.data.metrics == {}

    # the failed cell is retried and runs again from scratch: only its run is rewritten, nothing doubled
    store = launch(root, sweep_from(SWEEP, tmp_path))
    assert store.retry(["1.2"]) == ["1.2"]
    claim = store.claim("1.2", WORKER)
    assert claim is not None
    log(root, "1.2", claim.number, range(1, 4))
    store.finish("1.2", claim.number, Outcome(reason="completed", end_step=3))
    third = export(root, "--tracking-uri", tracking)
    assert third.exit_code == 0, third.output
    assert "exported 24 points of 3 cells" in third.stdout and "1 run written, 2 unchanged" in third.stdout
    after = children(client, parent.info.run_id)
    assert {c: r.info.run_id for c, r in after.items() if c != "1.2"} == {
        c: cells[c].info.run_id for c in ("1.1", "1.3")
    }
    assert (
        after["1.2"].info.status == "FINISHED" and after["1.2"].data.tags["sweepq.reasons"] == "1: error, 2: completed"
    )
    assert after["1.2"].data.tags["sweepq.lost"] == (
        f"attempt 1 (error): {3 * LONG} values at steps 1-{LONG} not logged: attempt 2 started from scratch"
    )
    assert history_of(client, after["1.2"], "loss") == expected(stitched(root, "1.2"), "loss")
    assert len(runs(client, "")) == 4


def test_bad_tracking_stores_are_refused_with_one_paragraph(tmp_path: Path, launch: Launch) -> None:
    root = build_root(tmp_path, launch)
    queue = RootPaths(root).db
    before = hashlib.sha256(queue.read_bytes()).hexdigest()
    (tmp_path / "afile").write_text("x")
    r = export(root, "--tracking-uri", f"sqlite:///{tmp_path / 'afile' / 'm.db'}")
    assert r.exit_code == 2
    assert r.stderr.startswith(
        f"error: cannot use the MLflow tracking store sqlite:///{tmp_path}/afile/m.db: {tmp_path}/afile is a file, "
        "not a folder. "
    )
    assert "Name a store MLflow can open with --tracking-uri: sqlite:///PATH.db" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stdout == ""
    r = export(root, "--tracking-uri", "nosuch://host/x")  # refused by MLflow itself
    assert r.exit_code == 2 and "error: cannot use the MLflow tracking store nosuch://host/x: " in r.stderr
    (tmp_path / "garbage.db").write_text("not a database")
    r = export(root, "--tracking-uri", f"sqlite:///{tmp_path / 'garbage.db'}")
    assert r.exit_code == 2 and "file is not a database. Name a store MLflow can open" in r.stderr
    assert (tmp_path / "garbage.db").read_text() == "not a database"
    r = export(root, "--tracking-uri", f"sqlite:///{queue}")
    assert r.exit_code == 2
    assert (
        f"error: {queue} is this sweep's queue: sweepq export mlflow writes MLflow's runs into a database" in r.stderr
    )
    assert hashlib.sha256(queue.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "garbage.db", "root"]  # nothing written beside


def test_names_mlflow_refuses_are_known_before_writing() -> None:
    from mlflow.exceptions import MlflowException
    from mlflow.utils.validation import _validate_param_name

    for name in ["lr", "optim.lr", "a b", "a:b", "a/b", "a-b_c", "é", "", "/a", "a/", "a//b", "../a", "a/../b", "a@b"]:
        try:
            _validate_param_name(name)
            accepted = True
        except MlflowException:
            accepted = False
        assert (refusal(name) is None) == accepted, name
    assert refusal("x" * 250) is None and refusal("x" * 251) == "a name of 251 characters (MLflow: at most 250)"


def test_without_mlflow_the_export_says_what_to_install(
    tmp_path: Path, launch: Launch, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = build_root(tmp_path, launch)
    for name in ["mlflow", *(m for m in sys.modules if m.startswith("mlflow."))]:
        monkeypatch.setitem(sys.modules, name, None)  # how Python marks a module absent: importing it fails
    monkeypatch.delitem(sys.modules, "sweepq.history.mlflow", raising=False)
    monkeypatch.delattr(sweepq.history, "mlflow", raising=False)
    monkeypatch.chdir(tmp_path)  # where the default store, mlflow.db, would go
    r = export(root)
    assert r.exit_code == 2
    assert r.stderr == "error: sweepq export mlflow needs MLflow: pip install 'sweepq[mlflow]'\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root"]


def test_the_cli_does_not_load_mlflow() -> None:
    code = "import sys, sweepq.cli.main; print('mlflow' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
