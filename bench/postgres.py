"""sweepq on PostgreSQL: its claims against a raw claim loop, a machine's death, `status` at scale.

Prints ONE JSON object on stdout (progress goes to stderr); nothing here asserts a time: each figure
has its target and a pass flag, beside the machine's load. It starts its own throwaway server
(tests/services/postgres.py: 127.0.0.1 only, durability off as in the tests) and makes each sweep's
schema with sweepq's migrations.

`claims` (issue 31's targets: at least 0.5 of the raw loop with 1 worker, p99 at most 50 ms with 8).
The reference is a raw loop: each worker a process with one psycopg 3 connection of its own, one
prepared statement a claim, in autocommit,

    UPDATE cells SET state = 'running', attempts = attempts + 1, updated_at = now()
    WHERE id = (SELECT id FROM cells WHERE state = 'queued' AND NOT removed
                ORDER BY group_number, "index" LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING id, attempts

and sweepq's claim is `Store.claim_next` with the lease table's `take`, as a worker claims (one
statement: the pick, the cell, the attempt's row and the cell's lease; queue/claim.py), each worker
a process with its own Store, warmed by one claim (not counted: its first claim compiles the
statement, once in a worker's life). In each round every worker count (1, 8, 32) runs the raw loop and
sweepq's claims for `--seconds`, started together (a barrier), the order alternating; between runs
the claimed cells go back to the queue and their leases are dropped (untimed). claims/s is every
claim over the run's wall time, p50 and p99 the latency of one claim as its worker saw it, and
`double_claims` the (cell, attempt) pairs reported more than once plus the cells whose attempt
count differs from the claims reported (0). The figures are each count's median round, sweepq's
as ratios to the raw loop's.

`renewals`: a lease's renewal (`_TableOwnership.renew`, as the renewal thread makes it) per second
and its latency, with 1, 8 and 32 processes renewing 10 leases each back to back; `connections`:
the server connections one worker process holds (its Store and its lease table), for capacity
planning (docs/scale.md).

`machine_death` (target: at most expire + renew + 2 s). Machine A (a process group of its own)
claims 4 cells and renews their leases from its liveness's thread; machine B runs a worker's loop
(reap, claim, wait the worker's poll when idle) and has been connected longer than a term. A's
group is SIGKILLed at a random moment between two renewals; the figure is the time from the kill
to B's claim of each of A's cells (their attempt 2), against expire + renew. Lease 1 s/5 s
(`--full`: the default 5 s/30 s).

`status` (target: 1 s). `sweepq status --database URL --sweep NAME`, a child process run from a
folder that holds nothing of the sweep, on a sweep of 10,000 cells (`--full`: 100,000) made by the
Store's reconcile of bench/status_scale.py's sweep file, then 60 % done, 1 % failed and 16 running
(8 of them with a live lease) by bulk SQL, each ended attempt's span kept as its end keeps it
(`Store.keep_spans`): best of `--rounds`.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import queue
import random
import signal
import statistics
import subprocess
import sys
import tempfile
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
DEATH = "death"
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


def store_worker(url: str, root: str, seconds: float, barrier: Any, results: Any) -> None:
    """sweepq's claim as a worker makes it: `Store.claim_next` with the lease table's `take` (one statement,
    the lease taken in it: queue/claim.py), on the Store's own engine and pool."""
    from sweepq.queue.database import Database
    from sweepq.queue.leases import TableLiveness
    from sweepq.queue.records import WorkerInfo
    from sweepq.queue.store import Store

    claims: list[tuple[str, int]] = []
    latencies: list[float] = []
    database = Database(url, sweep=SWEEP)
    store = Store.open(Path(root), database=database)
    owners = TableLiveness(database.engine, expire_seconds=3600)
    info = WorkerInfo(f"bench:{os.getpid()}", "bench", os.getpid())
    try:
        # Connected and warm before the start: the first claim of a process builds and compiles its
        # statement (SQLAlchemy, tens of milliseconds, once in a worker's life). Not counted.
        store.claim_next(info, owners.take)
        barrier.wait()
        end = time.perf_counter() + seconds
        while (start := time.perf_counter()) < end:
            got = store.claim_next(info, owners.take)
            latencies.append(time.perf_counter() - start)
            if got is None:
                break  # the queue ran dry: --cells too few for this run
            claims.append((got[0].cell, got[0].number))
    finally:
        store.close()
    results.put((claims, latencies))


def run(
    server: PostgresServer, database: str, schema: str, workers: int, seconds: float, root: str | None = None
) -> dict[str, Any]:
    """One run of `workers` processes: the raw loop, or with `root` sweepq's Store claims."""
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(workers + 1)
    results = ctx.Queue()
    if root is None:
        target: Any = worker
        args: tuple[Any, ...] = (server.dsn(database), schema, seconds, barrier, results)
    else:
        target, args = store_worker, (server.url(database), root, seconds, barrier, results)
    procs = [ctx.Process(target=target, args=args) for _ in range(workers)]
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
        conn.execute(f"DELETE FROM {schema}.leases")  # the Store's claims took leases: their cells are free again
        for table in ("cells", "leases", "attempts"):
            conn.execute(f"VACUUM {schema}.{table}")  # the next run starts without this one's dead rows
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


def machine(url: str, root: str, cells: int, renew: float, expire: float, ready: Any) -> None:
    """A machine that dies: its own process group, `cells` claims as its workers make them, their leases
    renewed from the liveness's thread (the worker's), until the whole group is SIGKILLed."""
    from sweepq.queue.database import Database
    from sweepq.queue.leases import TableLiveness
    from sweepq.queue.records import WorkerInfo
    from sweepq.queue.store import Store

    os.setpgid(0, 0)
    database = Database(url, sweep=DEATH)
    store = Store.open(Path(root), database=database)
    owners = TableLiveness(database.engine, expire, renew_seconds=renew)
    info = WorkerInfo(f"doomed:{os.getpid()}", "doomed", os.getpid())
    held = []
    for _ in range(cells):
        got = store.claim_next(info, owners.take)
        assert got is not None
        held.append(got[0].cell)
    ready.put(held)
    while True:  # training; the leases are renewed by the liveness's thread
        time.sleep(1)


def survivor(url: str, root: str, renew: float, expire: float, poll: float, out: Any, stop: Any) -> None:
    """The machine that lives: a worker's loop (sweepq/worker/loop.py: reap, claim, wait `poll` when idle)."""
    from sweepq.queue.database import Database
    from sweepq.queue.leases import TableLiveness
    from sweepq.queue.reaper import reap
    from sweepq.queue.records import WorkerInfo
    from sweepq.queue.store import Store

    database = Database(url, sweep=DEATH)
    store = Store.open(Path(root), database=database)
    owners = TableLiveness(database.engine, expire, renew_seconds=renew)
    info = WorkerInfo(f"survivor:{os.getpid()}", "survivor", os.getpid())
    owners.owner_alive("-")  # its first statement: its term to settle starts
    out.put(("connected", owners.connected_at.isoformat() if owners.connected_at else None, time.monotonic()))
    while not stop.is_set():
        reap(store, owners=owners)
        got = store.claim_next(info, owners.take)
        if got is not None:
            out.put((got[0].cell, got[0].number, time.monotonic()))
            continue
        time.sleep(poll)
    store.close()


def renewer(url: str, leases: int, seconds: float, barrier: Any, results: Any) -> None:
    """A holder of `leases` leases renewing them one after another, as the renewal thread does (leases.py)."""
    from sweepq.queue.database import Database
    from sweepq.queue.leases import TableLiveness

    database = Database(url, sweep=SWEEP)
    owners = TableLiveness(database.engine, expire_seconds=3600)
    held = [owners.take(f"renew-{os.getpid()}-{i}") for i in range(leases)]
    latencies: list[float] = []
    barrier.wait()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for owned in held:
            assert owned is not None
            start = time.perf_counter()
            assert owned.renew()
            latencies.append(time.perf_counter() - start)
    for owned in held:
        if owned is not None:
            owned.release()
    database.dispose()
    results.put(latencies)


def renewals(server: PostgresServer, url: str, counts: list[int], seconds: float) -> dict[str, Any]:
    """Renewals per second and the latency of one, with 1, 8 and 32 holders of 10 leases each."""
    out: dict[str, Any] = {}
    for holders in counts:
        ctx = mp.get_context("fork")
        barrier, results = ctx.Barrier(holders + 1), ctx.Queue()
        procs = [ctx.Process(target=renewer, args=(url, 10, seconds, barrier, results)) for _ in range(holders)]
        for p in procs:
            p.start()
        barrier.wait()
        t0 = time.perf_counter()
        got = sorted(x for _ in procs for x in results.get(timeout=seconds + 120))
        wall = time.perf_counter() - t0
        for p in procs:
            p.join()
        out[f"{holders}_holders"] = {
            "renewals_per_s": round(len(got) / wall, 1),
            "p50_ms": round(1000 * got[len(got) // 2], 3),
            "p99_ms": round(1000 * got[min(len(got) - 1, int(0.99 * len(got)))], 3),
        }
        log(f"renewals, {holders} holders: {out[f'{holders}_holders']}")
    return out


def connections(server: PostgresServer, url: str) -> dict[str, Any]:
    """The server connections one worker process holds: its Store (claims, reads, writes) and its lease
    table (renewals, the reaper), after a claim, a read, a renewal and a reap, as a worker has them."""
    import psycopg

    from sweepq.queue.database import Database
    from sweepq.queue.leases import TableLiveness
    from sweepq.queue.reaper import reap
    from sweepq.queue.records import WorkerInfo
    from sweepq.queue.store import Store

    def count() -> int:
        with psycopg.connect(server.dsn(url.rsplit("/", 1)[1]), autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid != pg_backend_pid()"
            ).fetchone()
        return int(row[0]) if row else 0

    before = count()
    with tempfile.TemporaryDirectory() as tmp:
        database = Database(url, sweep=SWEEP)
        store = Store.open(Path(tmp), database=database)
        owners = TableLiveness(Database(url, sweep=SWEEP).engine, expire_seconds=30, renew_seconds=None)
        got = store.claim_next(WorkerInfo("w:1", "w", 1), owners.take)
        assert got is not None
        store.progress(got[0].cell, got[0].number, step=1)
        store.cell(got[0].cell)
        got[1].renew()
        reap(store, owners=owners)
        held = count() - before
        got[1].release()
        store.close()
        owners.engine.dispose()
    return {"worker_process": held}


def machine_death(server: PostgresServer, tmp: Path, renew: float, expire: float, cells: int) -> dict[str, Any]:
    """From a machine's death (every process of it SIGKILLed, its leases no longer renewed) to each of its
    cells claimed again by the other machine, against expire + renew (target: at most 2 s more)."""
    from sweepq.queue import reconcile
    from sweepq.queue.database import Database
    from sweepq.queue.store import Store
    from sweepq.spec.sweep import load_sweep
    from sweepq.worker.loop import POLL_S

    url = server.create_database("death")
    spec = tmp / "death.yaml"
    spec.write_text(f"name: {DEATH}\ntrain: trivial:train\ngrid: {{seed: {list(range(cells))}}}\n")
    sweep = load_sweep(spec)
    store = Store.open(tmp / "death-a", create=True, database=Database(url, sweep=DEATH))
    try:
        store.apply_reconcile(sweep.settings, str(spec), lambda have: reconcile.plan(sweep, have, False))
    finally:
        store.close()
    ctx = mp.get_context("fork")
    ready, out, stop = ctx.Queue(), ctx.Queue(), ctx.Event()
    doomed = ctx.Process(target=machine, args=(url, str(tmp / "death-a"), cells, renew, expire, ready))
    doomed.start()
    held = ready.get(timeout=120)
    other = ctx.Process(target=survivor, args=(url, str(tmp / "death-b"), renew, expire, POLL_S, out, stop))
    other.start()
    out.get(timeout=120)
    # The survivor has run longer than a term (settled: an expired lease is then a dead holder's); a
    # machine that joined just now would wait up to one more term (leases.py's rule on reconnection).
    time.sleep(expire + renew * random.random())  # the death falls anywhere between two renewals
    killed = time.monotonic()
    assert doomed.pid is not None
    os.killpg(doomed.pid, signal.SIGKILL)
    doomed.join()
    again: dict[str, float] = {}
    deadline = killed + 10 * expire + 60
    while len(again) < len(held) and time.monotonic() < deadline:
        try:
            cell, number, at = out.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            break
        if cell in held and number == 2:
            again[cell] = at - killed
    stop.set()
    other.join(timeout=30)
    worst = max(again.values()) if len(again) == len(held) else None
    bound = expire + renew
    return {
        "renew_seconds": renew,
        "expire_seconds": expire,
        "worker_poll_seconds": POLL_S,
        "cells_of_the_dead_machine": len(held),
        "seconds_to_running_again": sorted(round(v, 3) for v in again.values()),
        "worst_seconds": None if worst is None else round(worst, 3),
        "expire_plus_renew": bound,
        "over_expire_plus_renew_s": None if worst is None else round(worst - bound, 3),
        "target_over_s": 2.0,
        "pass": worst is not None and worst <= bound + 2.0,
    }


def status_scale(server: PostgresServer, tmp: Path, cells: int, rounds: int) -> dict[str, Any]:
    """`sweepq status --database URL --sweep NAME` from a folder that holds nothing of the sweep, on a
    sweep of `cells` cells in PostgreSQL (made untimed: the Store's reconcile of bench/status_scale.py's
    sweep file, then 60 % done, 1 % failed, 16 running of which 8 hold a live lease, by bulk SQL)."""
    t0 = time.perf_counter()
    url, name = make_status_sweep(server, tmp, cells)
    made_s = time.perf_counter() - t0
    log(f"status: {cells} cells made in {made_s:.1f} s")
    elsewhere = tmp / "elsewhere"  # a folder of another machine: no sweep file, no root
    elsewhere.mkdir()
    argv = [sys.executable, "-m", "sweepq.cli", "status", "--database", url, "--sweep", name]
    env = {**os.environ, "COLUMNS": "200"}
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        done = subprocess.run(argv, cwd=elsewhere, env=env, capture_output=True, text=True)
        times.append(time.perf_counter() - started)
        if done.returncode != 0:
            raise SystemExit(f"bench: {' '.join(argv)} exited {done.returncode}:\n{done.stderr}")
    best = min(times)
    return {
        "cells": cells,
        "made_seconds": round(made_s, 1),
        "seconds": round(best, 3),
        "all_seconds": [round(t, 3) for t in times],
        "target_s": 1.0,
        "pass": best <= 1.0,
    }


def make_status_sweep(server: PostgresServer, tmp: Path, cells: int) -> tuple[str, str]:
    """The status figure's sweep (its docstring says what it holds): its database URL and its name."""
    import psycopg
    from status_scale import sweep_text

    from sweepq.queue import reconcile
    from sweepq.queue.database import Database
    from sweepq.queue.pg_schema import quoted, sweep_schema
    from sweepq.queue.store import Store
    from sweepq.spec.sweep import load_sweep

    url = server.create_database("status")
    spec = tmp / "status.yaml"
    spec.write_text(sweep_text(cells))
    sweep = load_sweep(spec)
    name = sweep.settings.name
    store = Store.open(tmp / "status-root", create=True, database=Database(url, sweep=name))
    try:
        store.apply_reconcile(sweep.settings, str(spec), lambda have: reconcile.plan(sweep, have, False))
    finally:
        store.close()
    s = quoted(sweep_schema(name))
    with psycopg.connect(server.dsn(url.rsplit("/", 1)[1]), autocommit=True) as conn:
        conn.execute(
            f"UPDATE {s}.cells SET state = CASE WHEN \"index\" % 100 < 60 THEN 'done' "
            f"WHEN \"index\" % 100 = 60 THEN 'failed' ELSE state END, "
            'attempts = CASE WHEN "index" % 100 <= 60 THEN 1 ELSE 0 END, '
            "metrics = CASE WHEN \"index\" % 100 < 60 THEN json_build_object('score', random()) END, "
            'last_reason = CASE WHEN "index" % 100 < 60 THEN \'completed\' WHEN "index" % 100 = 60 '
            "THEN 'error' END, finished_at = CASE WHEN \"index\" % 100 <= 60 THEN now() at time zone 'utc' END"
        )
        conn.execute(
            f"UPDATE {s}.cells SET state = 'running', attempts = 1 WHERE id IN "
            f"(SELECT id FROM {s}.cells WHERE state = 'queued' ORDER BY group_number, \"index\" LIMIT 16)"
        )
        conn.execute(
            f"INSERT INTO {s}.attempts (cell_id, number, worker, host, started_at, start_step, reason, ended_at, "
            "closed_at, end_step, wall_seconds) SELECT id, 1, 'w:1', 'node-1', now() at time zone 'utc' - interval "
            "'1 hour', 0, CASE WHEN state = 'running' THEN NULL ELSE last_reason END, CASE WHEN state = 'running' "
            "THEN NULL ELSE finished_at END, CASE WHEN state = 'running' THEN NULL ELSE finished_at END, "
            f"CASE WHEN state = 'running' THEN NULL ELSE 200 END, 3600 FROM {s}.cells WHERE attempts = 1"
        )
        conn.execute(
            f"INSERT INTO {s}.leases (cell_id, token, expires_at, renewed_at, host) SELECT id, md5(id), "
            f"now() + interval '1 hour', now(), 'node-' || (\"index\" % 2) FROM {s}.cells WHERE state = 'running' "
            'ORDER BY "index" LIMIT 8'
        )
    store = Store.open(tmp / "status-root", database=Database(url, sweep=name))
    try:
        store.keep_spans()  # what each attempt's end (Store.finish) keeps of it, for all at once
    finally:
        store.close()
    with psycopg.connect(server.dsn(url.rsplit("/", 1)[1]), autocommit=True) as conn:
        for table in ("cells", "attempts", "leases"):
            conn.execute(f"VACUUM ANALYZE {s}.{table}")
    return url, name


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--cells", type=int, default=20_000, help="queued cells (more than one run claims)")
    ap.add_argument("--seconds", type=float, default=1.0, help="length of one run")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every worker count (order alternating)")
    ap.add_argument("--workers", default=",".join(map(str, WORKERS)), help="worker counts, comma-separated")
    ap.add_argument("--full", action="store_true", help="the issue's sizes: 100,000 cells, its 5 s/30 s lease")
    ap.add_argument("--lease", default=None, help="renew,expire seconds of the machine-death figure (1,5; --full 5,30)")
    ap.add_argument("--status-cells", type=int, default=None, help="the status figure's cells (10,000; --full 100,000)")
    ap.add_argument("--only", default="claims,renewals,death,status", help="figures to run, comma-separated")
    args, ignored = ap.parse_known_args()  # `make bench BENCH_ARGS=...` also passes the other benchmarks' flags
    if ignored:
        log(f"ignoring {' '.join(ignored)} (another benchmark's)")
    only = set(args.only.split(","))
    lease = args.lease or ("5,30" if args.full else "1,5")
    status_cells = args.status_cells or (100_000 if args.full else 10_000)
    counts = [int(w) for w in args.workers.split(",")]
    t0 = time.perf_counter()
    out: dict[str, Any] = {
        "benchmark": "postgresql: sweepq's claims against a raw claim loop, a machine's death, status at scale",
        "cells": args.cells,
        "seconds_per_run": args.seconds,
        "rounds": args.rounds,
        "statement": " ".join(CLAIM.format(s="cells_schema").split()),
        "host": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "machine_load_before": load(),
    }
    with PostgresServer() as server, tempfile.TemporaryDirectory(prefix="sweepq-bench-pg-") as tmp:
        import psycopg

        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            version = conn.execute("SHOW server_version").fetchone()
        out["server"] = {
            "version": version[0] if version else None,
            "start_seconds": round(server.start_seconds or 0, 2),
        }
        log(f"server up in {server.start_seconds:.2f} s; {args.cells} cells")
        if "claims" in only:
            out["claims"] = claims(server, Path(tmp), counts, args)
        if "renewals" in only:
            url = server.create_database("renewals")
            make_sweep(url, 10)
            out["renewals"] = renewals(server, url, counts, args.seconds)
            out["connections"] = connections(server, url)
            log(f"connections: {out['connections']}")
        if "death" in only:
            renew, expire = (float(x) for x in lease.split(","))
            out["machine_death"] = machine_death(server, Path(tmp), renew, expire, cells=4)
            log(f"machine death: {out['machine_death']}")
        if "status" in only:
            out["status"] = status_scale(server, Path(tmp), status_cells, args.rounds)
            log(f"status: {out['status']}")
    out["machine_load_after"] = load()
    out["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out, indent=1))
    return 0


def claims(server: PostgresServer, tmp: Path, counts: list[int], args: Any) -> dict[str, Any]:
    """Each worker count's raw loop and sweepq's claims, interleaved in every round; the figures are each
    count's median round, sweepq's as ratios to the raw loop's median."""
    url = server.create_database("bench")
    database = url.rsplit("/", 1)[1]
    schema = make_sweep(url, args.cells)
    root = str(tmp / "claims-root")
    Path(root).mkdir()
    rounds: dict[tuple[str, int], list[dict[str, Any]]] = {(k, w): [] for w in counts for k in ("raw", "sweepq")}
    for r in range(args.rounds):
        for w in counts if r % 2 == 0 else counts[::-1]:
            for kind in ("raw", "sweepq") if r % 2 == 0 else ("sweepq", "raw"):
                got = run(server, database, schema, w, args.seconds, None if kind == "raw" else root)
                rounds[kind, w].append(got)
                log(f"round {r + 1}/{args.rounds}, {kind}, {w} workers: {got}")

    def median(runs: list[dict[str, Any]]) -> dict[str, Any]:
        middle = sorted(runs, key=lambda f: f["claims_per_s"] or 0)[len(runs) // 2]
        return {
            **middle,
            "claims_per_s_rounds": [f["claims_per_s"] for f in runs],
            "p99_ms_median_of_rounds": statistics.median(f["p99_ms"] or 0 for f in runs),
            "double_claims": sum(f["double_claims"] for f in runs),
        }

    figures: dict[str, Any] = {}
    for w in counts:
        raw, mine = median(rounds["raw", w]), median(rounds["sweepq", w])
        ratio = round(mine["claims_per_s"] / raw["claims_per_s"], 3) if raw["claims_per_s"] else None
        p99 = mine["p99_ms_median_of_rounds"]
        figures[f"{w}_workers"] = {
            "raw": raw,
            "sweepq": mine,
            "claims_ratio": ratio,
            "p99_ratio": round(p99 / raw["p99_ms_median_of_rounds"], 3) if raw["p99_ms_median_of_rounds"] else None,
        }
        if w == 1:
            figures["1_workers"].update(target_ratio=0.5, pass_=ratio is not None and ratio >= 0.5)
        if w == 8:
            figures["8_workers"].update(target_p99_ms=50.0, pass_=p99 <= 50.0)
    for f in figures.values():
        if "pass_" in f:
            f["pass"] = f.pop("pass_") and f["sweepq"]["double_claims"] == 0
    return figures


if __name__ == "__main__":
    sys.exit(main())
