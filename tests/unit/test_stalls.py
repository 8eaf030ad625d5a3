"""A running cell that stopped making progress is said so, past a threshold from its own cadence (injected clock)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from sweepq.cli import render
from sweepq.cli.main import main
from sweepq.queue.reads import ENV_STALL_SECONDS, STALL_SECONDS
from sweepq.queue.states import CellState
from sweepq.queue.store import Store
from unit.support import T0, WORKER, FakeClock
from unit.test_render import STORY, VAL_ACC, cell, text


@pytest.fixture(autouse=True)
def _default_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_STALL_SECONDS, raising=False)


def running(store: Store, clock: FakeClock, cell_id: str, steps: int, seconds: float, start_step: int = 0) -> None:
    """Claim `cell_id` now; it reports `steps` steps `seconds` later (from `start_step`)."""
    assert store.claim(cell_id, WORKER) is not None
    number = store.cell(cell_id).attempts
    store.attempt_started(cell_id, number, start_step=start_step)
    clock.advance(seconds)
    store.progress(cell_id, number, step=start_step + steps)


def test_a_silent_cell_is_told_after_the_floor(store: Store, clock: FakeClock) -> None:
    running(store, clock, "1.1", steps=10, seconds=10)  # a step a second: 3 steps are far below the floor
    clock.advance(STALL_SECONDS)
    assert store.stalls() == {}
    clock.advance(1)
    assert store.stalls() == {"1.1": STALL_SECONDS + 1}


def test_a_slow_cell_is_given_three_of_its_steps(store: Store, clock: FakeClock) -> None:
    running(store, clock, "1.2", steps=2, seconds=200, start_step=40)  # 100 s a step (resumed at 40)
    clock.advance(300)
    assert store.stalls() == {}
    clock.advance(1)
    assert store.stalls() == {"1.2": 301}


def test_a_cell_that_never_reported_counts_from_its_start(store: Store, clock: FakeClock) -> None:
    assert store.claim("1.3", WORKER) is not None
    clock.advance(STALL_SECONDS + 5)
    assert store.stalls() == {"1.3": STALL_SECONDS + 5}


def test_a_clock_set_back_is_no_silence(store: Store, clock: FakeClock) -> None:
    running(store, clock, "1.1", steps=10, seconds=10)
    clock.advance(-3600)
    assert store.stalls() == {}


def test_the_floor_is_configurable(store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_STALL_SECONDS, "5")
    running(store, clock, "1.1", steps=10, seconds=10)
    clock.advance(6)
    assert store.stalls() == {"1.1": 6}
    monkeypatch.setenv(ENV_STALL_SECONDS, "not a number")  # the default, not a traceback
    assert store.stalls() == {}


def test_status_says_no_progress_for_n_minutes() -> None:
    shown = text(render.status_table(STORY, VAL_ACC, stalls={"2.3": 725.0}, etas={"2.3": 4000.0}), width=160)
    (line,) = [x for x in shown.splitlines() if x.startswith("2.3 ")]
    assert line.rstrip().endswith("no progress for 12 min")
    assert "no progress" not in shown.replace(line, "")


def test_status_names_the_full_disk_of_an_interrupted_cell() -> None:
    words = "disk full on tmpfs (/mnt/scratch, 0 B free)"
    waiting = replace(cell("1.1", CellState.INTERRUPTED, last_reason="disk_full"), retry_after=T0)
    shown = text(render.status_table([waiting], None, notes={"1.1": words}, now=T0), width=160)
    assert "disk_full" in shown and f"retry due; {words}" in shown


def test_the_ages_people_read() -> None:
    assert [render.fmt_age(s) for s in (45, 725, 5400, 12600)] == ["45 s", "12 min", "1.5 h", "3.5 h"]


def test_status_json_has_the_seconds_without_progress(store: Store, clock: FakeClock) -> None:
    running(store, clock, "1.1", steps=10, seconds=10)  # at T0, long ago for the real clock status reads
    result = CliRunner().invoke(main, ["status", "--root", str(store.root), "--json"], catch_exceptions=False)
    rows = {r["cell"]: r for r in json.loads(result.output)}
    assert rows["1.1"]["no_progress_seconds"] > STALL_SECONDS
    assert rows["1.2"]["no_progress_seconds"] is None and "no_progress_seconds" in rows["2.2"]
