"""Metric history in process: the stitching rule, the file format, the writer, and `export csv` on a read-only root.

Stitching is checked on constructed attempts (what each logged, where each
started); the writer on real files and its real thread; the export on a root
made by the Store and then mounted read-only.
"""

from __future__ import annotations

import csv
import math
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sweepq.cli.main import main
from sweepq.history import (
    AttemptInfo,
    CellHistory,
    Logged,
    attempt_log,
    read_attempt,
    stitch,
    stitched,
)
from sweepq.layout import CellPaths
from sweepq.queue.records import Outcome
from sweepq.run import history_writer
from sweepq.run.history_writer import HistoryWriter
from unit.support import WORKER, Launch, sweep_from


def logged(steps: range | list[int], attempt: int, **extra: float) -> list[Logged]:
    """Points of `loss` = attempt * 100 + step (so that a value tells who logged it), plus constant extras."""
    return [Logged(s, 1000.0 + s, {"loss": attempt * 100.0 + s, **extra}, line=i + 2) for i, s in enumerate(steps)]


def curve(h: CellHistory, metric: str = "loss") -> list[tuple[int, int]]:
    """(step, attempt) of each point of the curve."""
    return [(p.step, p.attempt) for p in h.series[metric].points]


def assert_each_value_once(h: CellHistory, logs: dict[int, list[Logged]]) -> None:
    seen = sorted((p.attempt, p.line, m) for m, p, _, _ in h.every_value())
    assert seen == sorted((n, pt.line, m) for n, pts in logs.items() for pt in pts for m in pt.values)
    for s in h.series.values():
        assert s.steps == sorted(set(s.steps)), "a step twice on a curve"


# -- the stitching rule --------------------------------------------------------------------------------


def test_a_resume_supersedes_what_the_earlier_attempt_logged_after_its_checkpoint() -> None:
    logs = {1: logged(range(1, 14), 1), 2: logged(range(11, 21), 2)}
    attempts = [AttemptInfo(1, "lost", 0, False), AttemptInfo(2, "completed", 10, True)]
    h = stitch("1.1", attempts, logs)
    assert curve(h) == [(s, 1) for s in range(1, 11)] + [(s, 2) for s in range(11, 21)]
    assert h.series["loss"].values[9:11] == [110.0, 211.0]  # attempt 1's step 10, then attempt 2's 11
    (tail,) = h.lost
    assert (tail.attempt, tail.reason, tail.metric) == (1, "lost", "loss")
    assert [p.step for p in tail.points] == [11, 12, 13] and [p.value for p in tail.points] == [111.0, 112.0, 113.0]
    assert [(a, [p.step for p in pts]) for a, pts in h.series["loss"].segments()] == [
        (1, list(range(1, 11))),
        (2, list(range(11, 21))),
    ]
    assert_each_value_once(h, logs)


def test_a_rollback_then_a_fresh_start_each_supersede_by_their_own_start() -> None:
    logs = {
        1: logged(range(1, 31), 1),  # nan at 30; checkpoints up to 20
        2: logged(range(11, 16), 2),  # rolled back to step 10, then preempted at 15
        3: logged(range(1, 6), 3),  # no checkpoint left: from scratch
    }
    attempts = [AttemptInfo(1, "nan", 0, False), AttemptInfo(2, "preempted", 10, True), AttemptInfo(3, None, 0, False)]
    h = stitch("1.1", attempts, logs)
    assert curve(h) == [(s, 3) for s in range(1, 6)]
    tails = {(t.attempt, t.reason): [p.step for p in t.points] for t in h.lost}
    assert tails == {(1, "nan"): list(range(1, 31)), (2, "preempted"): list(range(11, 16))}
    assert_each_value_once(h, logs)


def test_an_attempt_that_logged_nothing_supersedes_nothing() -> None:
    """It died before its first log (maybe before it even restored): where it started says nothing."""
    logs = {1: logged(range(1, 13), 1), 3: logged(range(11, 15), 3)}
    attempts = [
        AttemptInfo(1, "lost", 0, False),
        AttemptInfo(2, "lost", 0, False),
        AttemptInfo(3, "completed", 10, True),
    ]
    h = stitch("1.1", attempts, logs)
    assert curve(h) == [(s, 1) for s in range(1, 11)] + [(s, 3) for s in range(11, 15)]
    assert [(t.attempt, [p.step for p in t.points]) for t in h.lost] == [(1, [11, 12])]


def test_a_step_logged_again_stays_once_on_the_curve() -> None:
    one = logged([1, 2, 2, 3], 1)  # the same attempt logs step 2 twice: its last value counts
    one[2] = Logged(2, 1.0, {"loss": 999.0}, line=one[2].line)
    logs = {1: one, 2: logged([3, 4], 2)}  # resumed from 3 and logs 3 again: the first 3 stays
    h = stitch("1.1", [AttemptInfo(1, "preempted", 0, False), AttemptInfo(2, "completed", 3, True)], logs)
    assert curve(h) == [(1, 1), (2, 1), (3, 1), (4, 2)]
    assert h.series["loss"].values[1] == 999.0
    assert sorted((p.attempt, p.step, p.value) for _, p in h.repeated) == [(1, 2, 102.0), (2, 3, 203.0)]
    assert h.lost == ()
    assert_each_value_once(h, logs)


def test_metrics_are_curves_of_their_own_under_the_same_rule() -> None:
    logs = {1: logged(range(1, 6), 1, acc=0.5), 2: logged(range(4, 8), 2)}
    h = stitch("1.1", [AttemptInfo(1, "lost", 0, False), AttemptInfo(2, "completed", 3, True)], logs)
    assert h.metrics == ["loss", "acc"]
    assert curve(h, "acc") == [(1, 1), (2, 1), (3, 1)]
    assert {(t.metric, tuple(p.step for p in t.points)) for t in h.lost} == {("loss", (4, 5)), ("acc", (4, 5))}
    assert [t.metric for t in h.lost_of("acc")] == ["acc"]


# -- the file ----------------------------------------------------------------------------------------------


def test_the_writer_round_trips_values_exactly_and_a_torn_last_line_is_ignored(tmp_path: Path) -> None:
    path = CellPaths(tmp_path, "1.1").metrics(2)
    w = HistoryWriter(path, "1.1", 2)
    sent = [(s, {"loss": 1 / (s + 3), "n": s, "odd": math.inf if s == 2 else -0.0, "tag": "x"}) for s in range(5)]
    for step, values in sent:
        w.append(step, values)
    w.append(9, {"note": "words only"})  # nothing numeric: no line
    w.close()
    log = read_attempt(path, 2)
    assert [(p.step, p.values) for p in log.points] == [
        (s, {k: v for k, v in d.items() if k != "tag"}) for s, d in sent
    ]
    assert math.copysign(1, log.points[0].values["odd"]) == -1.0  # -0.0 stays -0.0
    assert [p.line for p in log.points] == [2, 3, 4, 5, 6] and not log.torn and log.damaged == 0
    assert path.read_text().splitlines()[0] == '{"format": "sweepq.metrics", "version": 1, "cell": "1.1", "attempt": 2}'

    whole = path.read_bytes()
    path.write_bytes(whole + b'{"step":5,"time":1.0,"values":{"loss":0.12')  # killed mid-write
    torn = read_attempt(path, 2)
    assert torn.points == log.points and torn.torn and torn.damaged == 0
    lines = whole.split(b"\n")
    path.write_bytes(b"\n".join([*lines[:3], b"{garbage", *lines[3:]]))
    damaged = read_attempt(path, 2)
    assert [p.step for p in damaged.points] == [0, 1, 2, 3, 4] and damaged.damaged == 1 and not damaged.torn


def test_appends_after_close_continue_the_same_file(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    w = HistoryWriter(path, "1.1", 1)
    w.append(1, {"loss": 1.0})
    w.close()
    w.append(2, {"loss": 2.0})
    w.close()
    assert [p.step for p in read_attempt(path, 1).points] == [1, 2]
    assert path.read_text().count('"format"') == 1


def run_with_fence(root: Path, fence: Any) -> Any:
    from sweepq.run.run import Run
    from sweepq.spec.sweep import CheckpointPolicy, Settings
    from sweepq.wire.attempt_spec import AttemptSpec

    policy = CheckpointPolicy(every_steps=5, auto=False, keep_last=100, keep_best=False)
    settings = Settings(name="s", form="grouped", spec_dir=".", train="m:f", checkpoint=policy)
    spec = AttemptSpec(root=str(root), cell="1.1", attempt=1, cfg={}, cfg_hash="h", settings=settings.to_json())
    return Run(spec, None, fence)


def test_the_history_up_to_a_checkpoint_is_on_disk_before_it_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The background thread never writes here (its interval is an hour): only the sync before a commit can."""
    import torch

    monkeypatch.setattr(history_writer, "INTERVAL", 3600.0)
    seen_at_commit: dict[str, list[int]] = {}

    def fence(what: str) -> None:  # asked just before the commit's rename
        seen_at_commit[what] = [p.step for p in attempt_log(tmp_path, "1.1", 1).points]

    run = run_with_fence(tmp_path, fence)
    state = {"w": torch.zeros(4), "step": 0}
    for step in range(1, 13):
        run.log(step, loss=float(step))
        run.checkpoint(state, step)
    run._writer.flush()
    # The commit runs on the writer thread while training goes on: later points may be there too.
    assert sorted(seen_at_commit) == ["the commit of checkpoint step 10", "the commit of checkpoint step 5"]
    for step in (5, 10):
        assert seen_at_commit[f"the commit of checkpoint step {step}"][:step] == list(range(1, step + 1))
    run.close(completed=False)
    assert [p.step for p in attempt_log(tmp_path, "1.1", 1).points] == list(range(1, 13))


def test_a_non_finite_loss_is_kept_before_it_ends_the_attempt(tmp_path: Path) -> None:
    from conftest import make_run

    from sweepq.run.errors import NonFiniteLoss

    run = make_run(tmp_path)
    run.log(1, loss=0.5)
    with pytest.raises(NonFiniteLoss):
        run.log(2, loss=float("nan"), acc=0.25)
    run.close(completed=False)
    points = attempt_log(tmp_path, "1.1", 1).points
    assert [p.step for p in points] == [1, 2]
    assert math.isnan(points[1].values["loss"]) and points[1].values["acc"] == 0.25


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs (as root) that the test can fill."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"a full disk needs a small tmpfs (mount as root): {made.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "--lazy", str(mnt)], check=True)  # lazy: a failed test may hold the file


def test_a_full_disk_delays_the_history_and_never_fails_training(tiny_disk: Path, capfd: pytest.CaptureFixture) -> None:
    path = tiny_disk / "attempts" / "1" / "metrics.jsonl"
    w = HistoryWriter(path, "1.1", 1)
    w.append(1, {"loss": 1.0})
    w.sync()
    filler = tiny_disk / "filler"
    with open(filler, "wb", buffering=0) as f:  # every block left
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
    for step in range(2, 2000):
        w.append(step, {"loss": float(step), "acc": step / 7})
    w.sync()  # refused: kept in memory, said once
    w.sync()
    err = capfd.readouterr().err
    assert err.count("sweepq warning: 1.1 attempt 1: the metric history could not be written") == 1
    assert "No space left on device" in err
    log = read_attempt(path, 1)
    assert [p.step for p in log.points] == [1] and not log.torn  # cut back to whole lines
    filler.unlink()
    w.close()
    log = read_attempt(path, 1)
    assert [p.step for p in log.points] == list(range(1, 2000)) and not log.torn and log.damaged == 0


# -- reading through the queue, and the CSV export on a read-only root -----------------------------------

SWEEP = """\
name: hist
train: trainers:train
metric: {name: loss, goal: min}
grid: {lr: [0.1, 0.2], opt: [{name: sgd, momentum: 0.9}]}
"""


def finished_root(tmp_path: Path, launch: Launch) -> Path:
    """Cell 1.1: attempt 1 lost after step 7 (checkpoint at 5), attempt 2 resumed from 5 and completed at 9."""
    root = tmp_path / "root"
    store = launch(root, sweep_from(SWEEP, tmp_path))
    for number, (start, steps, reason) in enumerate([(None, range(1, 8), "lost"), (5, range(6, 10), "completed")], 1):
        claim = store.claim("1.1", WORKER)
        assert claim is not None and claim.number == number
        if start is not None:
            store.attempt_started("1.1", number, start_step=start, start_checkpoint_sha="abc")
        w = HistoryWriter(CellPaths(root, "1.1").metrics(number), "1.1", number)
        for s in steps:
            w.append(s, {"loss": 1 / s, "epoch": s / 4})
        w.close()
        store.record_checkpoint("1.1", 5, path="cells/1.1/checkpoints/step-5", attempt=1)
        store.finish("1.1", number, Outcome(reason=reason, end_step=steps[-1]))
    store.close()
    return root


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_stitched_reads_the_attempts_the_queue_knows(tmp_path: Path, launch: Launch) -> None:
    root = finished_root(tmp_path, launch)
    h = stitched(root, "1.1")
    assert curve(h) == [(s, 1) for s in range(1, 6)] + [(s, 2) for s in range(6, 10)]
    assert [(t.attempt, t.reason, t.metric, [p.step for p in t.points]) for t in h.lost] == [
        (1, "lost", "loss", [6, 7]),
        (1, "lost", "epoch", [6, 7]),
    ]
    assert [(c.step, c.attempt, c.state) for c in h.checkpoints] == [(5, 1, "committed")]
    assert stitched(root, "1.2").series == {}


def test_export_csv_on_a_read_only_root(tmp_path: Path, launch: Launch) -> None:
    root = finished_root(tmp_path, launch)
    mnt = tmp_path / "ro"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("a read-only root needs a tmpfs remounted read-only (mount as root)")
    try:
        shutil.copytree(root, mnt / "root")
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        before = sorted((p, p.stat().st_mtime_ns, p.stat().st_size) for p in (mnt / "root").rglob("*"))
        outs = [tmp_path / "out1", tmp_path / "out1", tmp_path / "out2" / "deeper"]
        results = [CliRunner().invoke(main, ["export", "csv", str(d), str(mnt / "root")]) for d in outs]
        after = sorted((p, p.stat().st_mtime_ns, p.stat().st_size) for p in (mnt / "root").rglob("*"))
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
    for r in results:
        assert r.exit_code == 0, r.output
    assert "wrote 22 logged values of 2 cells (2 attempts)" in results[0].output
    assert before == after
    for name in ("metrics.csv", "attempts.csv", "cells.csv"):
        assert (outs[0] / name).read_bytes() == (outs[2] / name).read_bytes()
    assert sorted(p.name for p in outs[0].iterdir()) == ["attempts.csv", "cells.csv", "metrics.csv"]

    metrics = read_csv(outs[0] / "metrics.csv")
    assert [(r["attempt"], r["step"], r["name"], r["status"], r["reason"]) for r in metrics[10:16]] == [
        ("1", "6", "epoch", "lost", "lost"),
        ("1", "6", "loss", "lost", "lost"),
        ("1", "7", "epoch", "lost", "lost"),
        ("1", "7", "loss", "lost", "lost"),
        ("2", "6", "epoch", "kept", ""),
        ("2", "6", "loss", "kept", ""),
    ]
    assert [float(r["value"]) for r in metrics if r["name"] == "loss"] == [1 / s for s in [*range(1, 8), *range(6, 10)]]
    attempts = read_csv(outs[0] / "attempts.csv")
    assert [
        (a["attempt"], a["reason"], a["start_step"], a["resumed"], a["values_logged"], a["values_lost"])
        for a in attempts
    ] == [
        ("1", "lost", "0", "false", "14", "4"),
        ("2", "completed", "5", "true", "8", "0"),
    ]
    cells = read_csv(outs[0] / "cells.csv")
    assert [(c["cell"], c["state"], c["cfg.lr"], c["cfg.opt.name"], c["cfg.opt.momentum"]) for c in cells] == [
        ("1.1", "done", "0.1", "sgd", "0.9"),
        ("1.2", "queued", "0.2", "sgd", "0.9"),
    ]


def test_export_csv_refuses_a_file_for_a_folder(tmp_path: Path, launch: Launch) -> None:
    root = finished_root(tmp_path, launch)
    target = tmp_path / "taken"
    target.write_text("mine")
    r = CliRunner().invoke(main, ["export", "csv", str(target), str(root)])
    assert r.exit_code == 2
    assert f"error: {target} is a file: sweepq export csv writes three files into a folder, name a folder" in r.output
    assert target.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["root", "taken"]
    r = CliRunner().invoke(main, ["export", "csv", str(tmp_path / "new"), str(tmp_path / "no-root")])
    assert r.exit_code == 2 and "error: " in r.output
    assert not (tmp_path / "new").exists()  # a refused export makes no folder
