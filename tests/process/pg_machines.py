"""Machines of one sweep on a real PostgreSQL server, for the process tests in tests/process/test_pg_*.py.

A "machine" is a root folder and the processes started on it; two machines share nothing but the
server (and the storage, where the sweep names one). What the tests judge comes from what the code
recorded: the attempts table read straight from the server (its times are the writers'), each
attempt's metrics.jsonl (its points carry their wall time), the manifests of committed checkpoints.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
from conftest import tree
from services.postgres import PostgresServer

from sweepq.queue import pg_schema

ATTEMPT_COLUMNS = (
    "cell_id",
    "number",
    "worker",
    "host",
    "pid",
    "worker_pid",
    "started_at",
    "ended_at",
    "seen_at",
    "closed_at",
    "start_step",
    "end_step",
    "reason",
    "note",
)


def server_processes(server: PostgresServer) -> list[psutil.Process]:
    """The postmaster and every process it runs (backends, checkpointer, WAL writer...)."""
    assert server.pid is not None
    return tree(server.pid)


@contextmanager
def paused(processes: Iterable[psutil.Process]) -> Iterator[list[psutil.Process]]:
    """SIGSTOP `processes` (parents first, so none starts another meanwhile), SIGCONT them all on leaving."""
    stopped: list[psutil.Process] = []
    try:
        for p in processes:
            try:
                p.send_signal(signal.SIGSTOP)
                stopped.append(p)
            except psutil.NoSuchProcess:
                continue
        yield stopped
    finally:
        for p in stopped:
            try:
                p.send_signal(signal.SIGCONT)
            except psutil.NoSuchProcess:
                continue


def machine_processes(pids: Iterable[int]) -> list[psutil.Process]:
    """Every process of a machine: those started there (launches, workers) and all their descendants."""
    seen: dict[int, psutil.Process] = {}
    for pid in pids:
        for p in tree(pid):
            seen.setdefault(p.pid, p)
    return list(seen.values())


def _connect(url: str) -> Any:
    import psycopg

    return psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://", 1), autocommit=True)


def attempts(url: str, sweep: str) -> list[dict[str, Any]]:
    """Every attempt of `sweep` as the server holds it, by cell then number."""
    schema = pg_schema.quoted(pg_schema.sweep_schema(sweep))
    with _connect(url) as conn:
        rows = conn.execute(
            f"SELECT {', '.join(ATTEMPT_COLUMNS)} FROM {schema}.attempts ORDER BY cell_id, number"
        ).fetchall()
    return [dict(zip(ATTEMPT_COLUMNS, row, strict=True)) for row in rows]


def cell_states(url: str, sweep: str) -> dict[str, str]:
    schema = pg_schema.quoted(pg_schema.sweep_schema(sweep))
    with _connect(url) as conn:
        return dict(conn.execute(f"SELECT id, state FROM {schema}.cells").fetchall())


def events(url: str, sweep: str, kind: str) -> list[tuple[str, Any]]:
    """(cell, detail) of every event of `kind` in the sweep's history."""
    schema = pg_schema.quoted(pg_schema.sweep_schema(sweep))
    with _connect(url) as conn:
        return conn.execute(f"SELECT cell_id, detail FROM {schema}.events WHERE kind = %s", (kind,)).fetchall()


def overlaps(rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Pairs of attempts of one cell whose spans overlap (an attempt still open spans to infinity)."""
    found = []
    by_cell: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_cell.setdefault(r["cell_id"], []).append(r)
    for cell_rows in by_cell.values():
        cell_rows.sort(key=lambda r: r["number"])
        for i, a in enumerate(cell_rows):
            for b in cell_rows[i + 1 :]:
                a_end = a["ended_at"] or datetime.max.replace(tzinfo=a["started_at"].tzinfo)
                b_end = b["ended_at"] or datetime.max.replace(tzinfo=b["started_at"].tzinfo)
                if a["started_at"] < b_end and b["started_at"] < a_end:
                    found.append((a, b))
    return found


def expected_w_sum(seed: int, steps: int) -> float:
    """trainers.train's result computed here in one go: a cell resumed anywhere must match it bit for bit."""
    import torch

    torch.manual_seed(seed)
    w = torch.zeros(8)
    for _ in range(steps):
        w = w + torch.randn(8) * 1.0
    return float(w.sum())


def logged_times(metrics: Path) -> list[tuple[int, float]]:
    """(step, wall time) of every point an attempt logged (its metrics.jsonl; a torn last line is left out)."""
    points = []
    try:
        lines = metrics.read_text().splitlines()
    except FileNotFoundError:
        return []
    for line in lines[1:]:
        try:
            point = json.loads(line)
        except ValueError:
            continue
        points.append((int(point["step"]), float(point["time"])))
    return points
