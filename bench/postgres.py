"""The PostgreSQL claim reference: a raw `UPDATE … FOR UPDATE SKIP LOCKED` loop with 1, 8 and 32 workers.

What the server itself can do, on the same machine and schema that sweepq's claims will run on
(issue 31's targets compare sweepq's claims with it: at least 0.5 of this rate with 1 worker, p99
under 50 ms with 8). It starts its own throwaway server (tests/services/postgres.py: 127.0.0.1 only,
durability off as in the tests), creates one sweep's schema with sweepq's migrations (the claim
index included), and inserts the cells with plain SQL. Prints ONE JSON object on stdout (progress
goes to stderr); nothing here asserts a time.

Each worker is a process with one psycopg 3 connection of its own, looping for `--seconds`: one
statement a claim, in autocommit (its own transaction),

    UPDATE cells SET state = 'running', attempts = attempts + 1, updated_at = now()
    WHERE id = (SELECT id FROM cells WHERE state = 'queued' AND NOT removed
                ORDER BY group_number, "index" LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING id, attempts

The workers start together (a barrier); claims/s is every claim over the run's wall time, p50 and
p99 the latency of one claim as its worker saw it, and `double_claims` the (cell, attempt) pairs
reported more than once plus the cells whose attempt count differs from the claims reported (0).
Between runs the claimed cells go back to the queue (untimed). `--rounds` repeats the whole set
(1, 8, 32, then 32, 8, 1, ...); the figures are each count's median round.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the throwaway server of the tests
sys.path.insert(0, str(REPO / "bench"))

from benchlib import load, log  # noqa: E402
from services.postgres import PostgresServer  # noqa: E402

SWEEP = "bench"
WORKERS = (1, 8, 32)
CLAIM = """
UPDATE {s}.cells SET state = 'running', attempts = attempts + 1, updated_at = now()
WHERE id = (SELECT id FROM {s}.cells WHERE state = 'queued' AND NOT removed
            ORDER BY group_number, "index" LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id, attempts
"""


def make_sweep(url: str, cells: int) -> str:
    """One sweep's schema at head (sweepq's migrations), `cells` queued cells; returns the quoted schema."""
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import create_engine, text

    from sweepq.queue.database import migrations_dir
    from sweepq.queue.pg_schema import execution_options, quoted, sweep_schema

    engine = create_engine(url)
    try:
        with engine.connect() as conn, conn.begin():
            conn.execution_options(**execution_options(SWEEP))
            cfg = Config()
            cfg.set_main_option("script_location", str(migrations_dir()))
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
        schema = quoted(sweep_schema(SWEEP))
        with engine.begin() as conn:
            conn.execute(
                text(
                    f"INSERT INTO {schema}.cells (id, group_number, index, group_name, cfg, cfg_hash, state, "
                    "attempts, budget_base, cancel_requested, removed, created_at, updated_at) "
                    "SELECT '1.' || i, 1, i, 'g', CAST('{}' AS json), md5(i::text), 'queued', 0, 0, false, false, "
                    "now(), now() FROM generate_series(1, :n) AS i"
                ),
                {"n": cells},
            )
            conn.execute(text(f"ANALYZE {schema}.cells"))
    finally:
        engine.dispose()
    return schema


def worker(dsn: str, schema: str, seconds: float, barrier: Any, results: Any) -> None:
    import psycopg

    claims: list[tuple[str, int]] = []
    latencies: list[float] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        statement = CLAIM.format(s=schema)
        conn.execute("SELECT 1")  # connected and warm before the start
        barrier.wait()
        end = time.perf_counter() + seconds
        while (start := time.perf_counter()) < end:
            row = conn.execute(statement, prepare=True).fetchone()
            latencies.append(time.perf_counter() - start)
            if row is None:
                break  # the queue ran dry: --cells too few for this run
            claims.append((row[0], row[1]))
    results.put((claims, latencies))


def run(server: PostgresServer, database: str, schema: str, workers: int, seconds: float) -> dict[str, Any]:
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(workers + 1)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=worker, args=(server.dsn(database), schema, seconds, barrier, results))
        for _ in range(workers)
    ]
    for p in procs:
        p.start()
    barrier.wait()
    t0 = time.perf_counter()
    gathered = [results.get(timeout=seconds + 120) for _ in procs]
    wall = time.perf_counter() - t0
    for p in procs:
        p.join()
    claims = [c for cs, _ in gathered for c in cs]
    latencies = sorted(x for _, ls in gathered for x in ls)
    import psycopg

    with psycopg.connect(server.dsn(database), autocommit=True) as conn:
        rows = conn.execute(f"SELECT id, attempts FROM {schema}.cells WHERE state = 'running'").fetchall()
        counts: dict[str, int] = {cell: attempts for cell, attempts in rows}
        conn.execute(f"UPDATE {schema}.cells SET state = 'queued' WHERE state = 'running'")
        conn.execute(f"VACUUM {schema}.cells")  # the next run starts without this one's dead rows
    # Nothing is released during a run: a cell reported twice was claimed twice. And the database must
    # count every claim reported: a cell's attempts (growing across runs) equal its highest reported attempt.
    reported = Counter(cell for cell, _ in claims)
    doubles = sum(n - 1 for n in reported.values() if n > 1)
    highest: dict[str, int] = {}
    for cell, attempt in claims:
        highest[cell] = max(highest.get(cell, 0), attempt)
    mismatched = len([cell for cell in reported if counts.get(cell) != highest[cell]])
    return {
        "claims": len(claims),
        "claims_per_s": round(len(claims) / wall, 1) if wall > 0 else None,
        "p50_ms": round(1000 * latencies[len(latencies) // 2], 3) if latencies else None,
        "p99_ms": round(1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))], 3)
        if latencies
        else None,
        "double_claims": doubles + mismatched,
        "wall_s": round(wall, 3),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--cells", type=int, default=20_000, help="queued cells (more than one run claims)")
    ap.add_argument("--seconds", type=float, default=1.0, help="length of one run")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every worker count (order alternating)")
    ap.add_argument("--workers", default=",".join(map(str, WORKERS)), help="worker counts, comma-separated")
    args, ignored = ap.parse_known_args()  # `make bench BENCH_ARGS=...` also passes the other benchmarks' flags
    if ignored:
        log(f"ignoring {' '.join(ignored)} (another benchmark's)")
    counts = [int(w) for w in args.workers.split(",")]
    t0 = time.perf_counter()
    out: dict[str, Any] = {
        "benchmark": "postgresql raw claims (the reference for sweepq's claims)",
        "cells": args.cells,
        "seconds_per_run": args.seconds,
        "rounds": args.rounds,
        "statement": " ".join(CLAIM.format(s="cells_schema").split()),
        "host": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "machine_load_before": load(),
    }
    with PostgresServer() as server:
        import psycopg

        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            version = conn.execute("SHOW server_version").fetchone()
        out["server"] = {
            "version": version[0] if version else None,
            "start_seconds": round(server.start_seconds or 0, 2),
        }
        log(f"server up in {server.start_seconds:.2f} s; {args.cells} cells")
        url = server.create_database("bench")
        database = url.rsplit("/", 1)[1]
        schema = make_sweep(url, args.cells)
        rounds: dict[int, list[dict[str, Any]]] = {w: [] for w in counts}
        for r in range(args.rounds):
            for w in counts if r % 2 == 0 else counts[::-1]:
                rounds[w].append(run(server, database, schema, w, args.seconds))
                log(f"round {r + 1}/{args.rounds}, {w} workers: {rounds[w][-1]}")
    figures = {}
    for w, runs in rounds.items():
        median = sorted(runs, key=lambda f: f["claims_per_s"] or 0)[len(runs) // 2]
        figures[f"{w}_workers"] = {
            **median,
            "claims_per_s_rounds": [f["claims_per_s"] for f in runs],
            "p99_ms_median_of_rounds": statistics.median(f["p99_ms"] or 0 for f in runs),
            "double_claims": sum(f["double_claims"] for f in runs),
        }
    out["figures"] = figures
    out["machine_load_after"] = load()
    out["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
