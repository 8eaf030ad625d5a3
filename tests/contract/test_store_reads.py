"""The questions read commands ask (queries.py's text, reads.py), answered alike on every queue database.

status, show, attempts, best and report read through `Reads`, whose SQL is written once in
SQLite's dialect and run on a server through server_text.py. One sweep's history (a cell run to
completion with a checkpoint, progress and usage, a cell running) and every question about it,
with the answers a SQLite file gives, over every entry of STORE_BACKENDS.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from unit.support import SWEEP_YAML, T0, WORKER, FakeClock, sweep_from

from sweepq.queue import reconcile
from sweepq.queue.database import Database
from sweepq.queue.records import Outcome
from sweepq.queue.states import CellState
from sweepq.queue.store import Store


@pytest.fixture
def store(tmp_path: Path, store_database: Callable[[], Database]) -> Iterator[Store]:
    clock = FakeClock()
    s = Store.open(tmp_path / "root", create=True, clock=clock, database=store_database())
    sweep = sweep_from(SWEEP_YAML, tmp_path)
    s.apply_reconcile(sweep.settings, str(sweep.path), lambda existing: reconcile.plan(sweep, existing, False))
    first = s.claim("1.1", WORKER)
    assert first is not None
    s.attempt_usage("1.1", 1, {"gpu_util": 0.5})
    s.progress("1.1", 1, step=10, total_steps=100, metrics={"val_acc": 0.5}, best=0.5, best_step=10)
    clock.advance(30)
    s.record_checkpoint("1.1", 50, path="cells/1.1/checkpoints/step-50", metrics={"val_acc": 0.7}, attempt=1)
    clock.advance(30)
    s.finish("1.1", 1, Outcome(reason="completed", end_step=100, wall_seconds=60.0))
    assert s.claim("1.2", WORKER) is not None
    try:
        yield s
    finally:
        s.close()


def test_status_questions_answer_alike(store: Store) -> None:
    census = store.census(listed=2)
    assert census.counts == {CellState.DONE: 1, CellState.RUNNING: 1, CellState.QUEUED: 11}
    assert census.first[CellState.QUEUED] == ["1.3", "1.4"] and census.removed == 0
    assert store.unsettled() == 12
    assert store.running() == [("1.2", 1)]
    assert [c.id for c in store.cells_in([CellState.RUNNING, CellState.DONE])] == ["1.1", "1.2"]
    assert [c.id for c in store.best_done("max", 5)] == ["1.1"]
    listed = {row.id: row for row in store.cell_listing()}
    assert listed["1.1"].state == "done" and json.loads(listed["1.1"].metrics) == {"val_acc": 0.5}
    assert listed["1.1"].removed is False and json.loads(listed["1.1"].cfg) == store.cell("1.1").cfg
    assert store.usage_texts() == {"1.1": '{"gpu_util": 0.5}'}  # the text as stored, on every backend
    assert store.usages(["1.1"]) == {"1.1": {"gpu_util": 0.5}}


def test_history_questions_answer_alike(store: Store) -> None:
    (attempt,) = store.last_attempts(["1.1"])
    assert (attempt.cell, attempt.number, attempt.reason) == ("1.1", 1, "completed")
    assert attempt.started_at == T0 and attempt.ended_at == T0 + timedelta(seconds=60)
    assert [a.cell for a in store.attempts()] == ["1.1", "1.2"]
    (checkpoint,) = store.checkpoints("1.1")
    assert (checkpoint.step, checkpoint.metrics, checkpoint.created_at) == (
        50,
        {"val_acc": 0.7},
        T0 + timedelta(seconds=30),
    )
    assert list(store.checkpoints_in("committed")) == ["1.1"]
    assert store.checkpoint_times() == {("1.1", 1, 50): T0 + timedelta(seconds=30)}


def test_the_forecast_reads_alike(store: Store) -> None:
    cells = {c.id: c for c in store.forecast_cells()}
    (seen,) = cells["1.1"].attempts
    assert seen.started_at == T0 and seen.first is not None and seen.first.step == 50
    forecast = store.forecast(2)
    assert forecast.complete and forecast.began == T0
    assert forecast.ends_at is not None and forecast.ends_at > T0 + timedelta(seconds=60)


def test_a_read_commands_reader_answers_as_the_store(store: Store) -> None:
    """What read commands open instead of the Store, without SQLAlchemy: sqlite3 on a file (opening.Reader),
    psycopg on a server (server_text.ServerReader); the same Reads, the same answers."""
    from sweepq.queue.opening import Reader
    from sweepq.queue.server_text import ServerReader

    database = store.database
    if database.is_server:
        assert database.sweep is not None
        url = database.url.render_as_string(hide_password=False)
        where = database.describe()
        reader: Reader | ServerReader = ServerReader.open(store.root, url, database.sweep, where, store.clock)
    else:
        reader = Reader.open(store.root, store.clock)
    try:
        assert reader.census(listed=2) == store.census(listed=2)
        assert reader.cells() == store.cells() and reader.running() == store.running()
        assert reader.attempts() == store.attempts() and reader.checkpoints("1.1") == store.checkpoints("1.1")
        assert reader.settings() == store.settings()
        assert reader.forecast(2).ends_at == store.forecast(2).ends_at
    finally:
        reader.close()


def test_an_ended_attempts_span_is_kept_and_forgotten_when_what_it_came_from_changes(store: Store) -> None:
    """The forecast's span of an ended attempt is kept on its row (queue/queries.py), on every backend: an
    hour's microseconds too (more than 32 bits), and forgotten when a checkpoint of the attempt changes."""
    from sqlalchemy import select

    from sweepq.queue.schema import AttemptRow

    def span(cell: str) -> tuple[int | None, int | None]:
        with store.tx.read() as s:
            row = s.execute(
                select(AttemptRow.span_steps, AttemptRow.span_micros).where(AttemptRow.cell_id == cell)
            ).one()
        return row[0], row[1]

    steps, micros = span("1.1")
    assert steps is not None and micros is not None and micros > 0
    assert store.claim("1.3", WORKER) is not None
    clock = store.clock
    assert isinstance(clock, FakeClock)
    clock.advance(3600)
    store.record_checkpoint("1.3", 40, path="cells/1.3/checkpoints/step-40", attempt=1)
    clock.advance(3600)
    store.finish("1.3", 1, Outcome(reason="completed", end_step=80, wall_seconds=7200.0))
    long_steps, long_micros = span("1.3")
    assert long_steps is not None and long_micros is not None and long_micros > 2**31
    store.record_checkpoint("1.1", 60, path="cells/1.1/checkpoints/step-60", attempt=1)  # what 1.1's came from
    assert span("1.1")[0] is None and span("1.3") == (long_steps, long_micros)
    assert store.keep_spans() == 1 and span("1.1")[0] is not None
