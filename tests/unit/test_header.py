"""The header above the status table (cli/header.py) and the rate column, as golden text; the launch's live
view with its header, from a real queue."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from rich.console import Console, Group

from sweepq.cli import header, launch_lock, render
from sweepq.cli.launch import Launcher
from sweepq.cli.read_commands import status_workers
from sweepq.cli.terminal import Terminal
from sweepq.queue import liveness
from sweepq.queue.forecast.model import CellForecast, Forecast
from sweepq.queue.states import CellState
from sweepq.queue.store import Store
from unit.support import T0, WORKER, FakeClock
from unit.test_render import STORY, VAL_ACC, cell, text

FORECAST = Forecast(
    now=T0,
    workers=2,
    ends_at=T0 + timedelta(seconds=510),
    complete=True,
    why="",
    startup_seconds=12.0,
    began=T0 - timedelta(seconds=725),
    last_end=None,
    cells={
        "1.1": CellForecast(1 / 41.25, None),
        "2.2": CellForecast(None, T0 + timedelta(seconds=400)),
        "2.3": CellForecast(3.2, T0 + timedelta(seconds=4000)),
        "2.4": CellForecast(None, T0 + timedelta(seconds=50)),
    },
)

HEADER_80 = """\
eta 8m30s · elapsed 12m05s · 2 workers
2 queued · 2 running · 1 interrupted · 2 done
"""


def test_the_header_at_80_columns() -> None:
    assert text(header.header(STORY, FORECAST, FORECAST.began, live=True), width=80) == HEADER_80


def test_the_header_on_one_line_when_it_fits() -> None:
    shown = text(header.header(STORY, FORECAST, FORECAST.began, live=True), width=120)
    assert shown == "eta 8m30s · elapsed 12m05s · 2 workers · 2 queued · 2 running · 1 interrupted · 2 done\n"


def test_a_narrow_header_wraps_between_parts_never_inside_one() -> None:
    shown = text(header.header(STORY, FORECAST, FORECAST.began, live=True), width=30)
    assert shown == "eta 8m30s · elapsed 12m05s\n2 workers\n2 queued · 2 running\n1 interrupted · 2 done\n"


def test_a_lower_bound_says_at_least_and_why() -> None:
    bound = replace(FORECAST, complete=False, why="length")
    shown = text(header.header(STORY, bound, bound.began, live=True), width=80)
    assert shown.splitlines()[0] == "eta at least 8m30s (length unknown) · elapsed 12m05s · 2 workers"
    stalled = replace(FORECAST, complete=False, why="stalled")
    shown = text(header.header(STORY, stalled, stalled.began, live=True), width=80)
    assert shown.splitlines()[0] == "eta at least 8m30s (a cell stalled) · elapsed 12m05s · 2 workers"


def test_no_speed_measured_yet_and_no_worker_running() -> None:
    unknown = replace(FORECAST, ends_at=None, complete=False, why="rate", workers=1, began=None)
    shown = text(header.header(STORY, unknown, None, live=False), width=80)
    assert shown.splitlines()[0] == "eta unknown (speed not measured yet) · not running: eta for 1 worker"


def test_a_settled_sweep_says_how_long_it_took() -> None:
    done = [cell("1.1", CellState.DONE), cell("1.2", CellState.DONE), cell("1.3", CellState.FAILED)]
    settled = replace(FORECAST, ends_at=None, last_end=T0 + timedelta(seconds=3600 + 194), began=T0)
    assert text(header.header(done, settled, settled.began, live=False), width=80) == "took 1h03m · 2 done · 1 failed\n"


def test_the_rates_people_read() -> None:
    shown = [render.fmt_rate(r) for r in (1234.5, 123.4, 41.25, 2.5, 0.3125, None)]
    assert shown == ["1234 steps/s", "123 steps/s", "41.2 steps/s", "2.50 steps/s", "3.20 s/step", ""]
    assert [render.fmt_rate(r, short=True) for r in (41.25, 0.3125)] == ["41.2/s", "3.20s/st"]


STATUS_80 = """\
eta 8m30s · elapsed 12m05s · 2 workers
2 queued · 2 running · 1 interrupted · 2 done
cell  group  state        progress    eta  val_acc    best  attempts  reason
1.1   q1     done             100%          0.6512    0.66         1  completed
2.1   q2     done             100%          0.7045  0.7045         1  completed
2.2   q2     interrupted       55%  6m40s     0.61    0.62         1  lost
2.3   q2     running           28%  1h06m                          2  preempted
2.4   q2     running            1%  50.0s                          1
2.5   q2     queued                                                1  oom
2.6   q2     queued
2.5: retry due
hidden: rate, step, epoch (a wider terminal or --json shows them)

7 cells: 2 queued, 2 running, 1 interrupted, 2 done
"""


def test_the_status_view_at_80_columns_keeps_eta_before_rate() -> None:
    etas, rates = header.per_cell(FORECAST, STORY)
    view = Group(
        header.header(STORY, FORECAST, FORECAST.began, live=True),
        render.status_table(STORY, VAL_ACC, etas=etas, rates=rates, now=T0),
    )
    shown = text(view, width=80)
    assert shown == STATUS_80
    assert max(len(line) for line in shown.splitlines()) <= 80
    wide = text(view, width=160)
    assert "41.2 steps/s" in wide and "3.20 s/step" in wide  # measured speeds, done or running


def test_the_launch_view_has_the_header(store: Store, clock: FakeClock, tmp_path: Path) -> None:
    console = Console(width=100, file=open(tmp_path / "out", "w"), color_system=None)  # noqa: SIM115
    launcher = Launcher(store.root, 2, [], console, live=False, terminal=Terminal())
    launcher.started_at = clock() - timedelta(seconds=75)
    shown = text(launcher._view(store, VAL_ACC), width=100)
    console.file.close()
    first = shown.splitlines()[0]
    assert first.startswith("eta unknown (speed not measured yet) · elapsed 1m15s · not running: eta for 1 worker")
    assert "13 queued" in shown


def test_status_counts_the_live_launch_workers_else_the_running_cells(store: Store) -> None:
    assert status_workers(store) == (1, False)  # nothing runs: what a relaunch would take at the least
    with launch_lock.held(store.root, "sweep.yaml", 1.0, workers=3):
        assert launch_lock.holder(store.root).workers == 3  # type: ignore[union-attr]
        assert status_workers(store) == (3, True)
    owners = liveness.for_root(store.root)
    held = [owners.take(cid) for cid in ("1.1", "1.2")]
    for cid in ("1.1", "1.2"):
        assert store.claim(cid, WORKER) is not None
    assert status_workers(store) == (2, True)  # workers started by hand: each running cell has a live owner
    for ownership in held:
        assert ownership is not None
        ownership.release()
    assert status_workers(store) == (1, False)  # a launch killed with its workers: nothing runs them now
