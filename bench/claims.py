"""The claim benchmark: how fast workers take cells, against SQLite's own limit on the same file.

`make bench` runs it at the smoke size (10,000 cells, a few seconds); `--full` runs
100,000 cells and longer rounds. Prints ONE JSON object on stdout (progress goes
to stderr). Nothing here asserts a time: each figure carries its target and a
pass flag, with the machine's load beside it (other processes share these cores).

Five ways of claiming, each from 1 and from 8 processes at once, on five copies of
one root (the same cells, schema, indexes and SQLite recipe: WAL, synchronous=FULL):
- `raw`, the reference: Python's sqlite3 on one connection a process, a loop of
  `BEGIN IMMEDIATE`, one `UPDATE cells SET state='running', attempts=attempts+1
  WHERE id = (SELECT id ... state='queued' ORDER BY group_number, index LIMIT 1)
  RETURNING id, attempts`, `COMMIT`: what the database itself can do.
- `raw_turns`: the same loop, each claim first taking its turn on a file lock as sweepq's claimers do
  (open, `flock`, and close after the commit): what the database can do when claimers take turns,
  so that `ratio_vs_raw_turns` tells the cost of fairness (the raw loop lets one process keep the
  lock) from the cost of sweepq's own work;
- `raw_owned`: `raw_turns` plus what the contract adds to any claim of a cell whose folder does not
  exist yet: the folder made (`mkdir`), opened and locked before the commit (a running cell's lock is
  its proof of life, so no reader may see the claim before the lock is held). The floor of a first
  claim on this file system; `ratio_vs_raw_owned` is sweepq's first claim against it;
- `sweepq`: what a worker does to get its next cell, `Store.claim_next` with the root's
  `Liveness.take` (its turn on the claim lock, the claim, the cell folder made and locked before
  the commit, the attempt row), then the ownership released (there is no training). Every claimed
  cell is claimed for the first time in its run: between runs the folders made are moved aside
  (untimed), as a sweep's cells have none before their first attempt. This is the judged figure;
- `sweepq_again`: the same on a root whose cells' folders already exist, as when a cell is resumed
  or retried: the claim opens and locks the folder without making it.

A round runs each of the ten for a fixed time (`--seconds`); the processes are
started once, before the rounds, and start each run together. Figures: claims a
second (one over the median, across rounds, of a run's seconds a claim), `ratio`
= sweepq's rate over raw's at the same process count (target >= 0.5), the
latency of one claim as its process saw it (p50, p99 over every counted claim;
target p99 < 20 ms with 8 processes; `fair_queue_ms` beside it is 8 times the
1-process p50, what waiting behind the 7 others costs when every claim takes
its turn), and `double_claims`: after the run, from the database and what every
process reported, the (cell, attempt number) pairs taken more than once, plus
the cells whose attempt count in the database differs from the claims reported
of them (target 0). Between runs the claimed cells are put back in the queue
and the folders made in the run moved aside, then the disk synced and left idle
(untimed); attempt numbers keep counting, so every claim of a cell has its own.
Cells are inserted with plain SQL (planning 100,000 cells is another benchmark's
figure).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import multiprocessing as mp
import os
import platform
import shutil
import socket
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchlib import interleave, load, log  # bench/ is on sys.path: the scripts run from it

from sweepq.queue import liveness
from sweepq.queue.records import WorkerInfo
from sweepq.queue.store import Store

REPO = Path(__file__).resolve().parents[1]
TARGET_RATIO = 0.5
TARGET_P99_MS = 20.0
PROCESSES = (1, 8)
HOWS = ("raw", "raw_turns", "raw_owned", "sweepq", "sweepq_again")  # the ways of claiming (the module's docstring)
STORES = ("sweepq", "sweepq_again")  # the ways that claim through sweepq's Store
FRESH = ("raw_owned", "sweepq")  # the ways whose claims make each cell's folder
RAW_CLAIM = (
    "UPDATE cells SET state = 'running', attempts = attempts + 1, updated_at = ? WHERE id = "
    "(SELECT id FROM cells WHERE state = 'queued' AND removed = 0 ORDER BY group_number, \"index\" LIMIT 1) "
    "RETURNING id, attempts"
)
Report = tuple[int, float, list[float], list[tuple[str, int]], bool]  # claims, span, latencies, won, ran out


# -- the roots ----------------------------------------------------------------------------------------


def make_roots(tmp: Path, cells: int, ahead: int) -> dict[str, Path]:
    """Copies of one migrated root holding `cells` queued cells, one for each way of claiming; in the
    `sweepq_again` root the first `ahead` cells have their folders already (made here, untimed)."""
    first = tmp / "sweepq"
    Store.open(first, create=True).close()
    db = first / "sweepq.db"
    now = time.strftime("%Y-%m-%d %H:%M:%S.000000", time.gmtime())
    rows = [(f"1.{i}", 1, i, "g", "{}", "h", "queued", 0, 0, 0, 0, now, now) for i in range(1, cells + 1)]
    con = sqlite3.connect(db, isolation_level=None)
    try:
        con.execute("BEGIN")
        con.execute(
            "INSERT INTO sweep (id, name, spec_path, settings, created_at, updated_at) "
            "VALUES (1, 'b', NULL, '{}', ?, ?)",
            (now, now),
        )
        con.executemany(
            'INSERT INTO cells (id, group_number, "index", group_name, cfg, cfg_hash, state, attempts, '
            "budget_base, cancel_requested, removed, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            rows,
        )
        con.execute("COMMIT")
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the copies below must hold every cell
    finally:
        con.close()
    roots = {"sweepq": first}
    shutil.copytree(first, tmp / "sweepq_again")
    roots["sweepq_again"] = tmp / "sweepq_again"
    owners = liveness.for_root(roots["sweepq_again"])
    for i in range(1, ahead + 1):  # the folders first attempts made
        owner = owners.take(f"1.{i}")
        assert owner is not None
        owner.release()
    for how in ("raw", "raw_turns", "raw_owned"):
        roots[how] = tmp / how
        (roots[how] / "cells").mkdir(parents=True)
        shutil.copyfile(db, roots[how] / "sweepq.db")
    return roots


def requeue(root: Path, fresh: bool) -> None:
    """Put the cells claimed so far back in the queue (between runs, untimed); attempt numbers stay.

    `fresh`: the folders the claims made are moved out of the way, so that the next run's claims make
    theirs. Moved, not removed: this VM's file system discards freed blocks at each journal commit,
    and removing thousands of folders between runs made the next run's `mkdir` 2-3 times slower."""
    con = sqlite3.connect(root / "sweepq.db", isolation_level=None, timeout=60)
    try:
        con.execute("UPDATE cells SET state = 'queued' WHERE state = 'running'")
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # each run starts with an empty log
    finally:
        con.close()
    if fresh and (root / "cells").exists():
        (root / "cells").rename(root / f"cells.{time.monotonic_ns()}")
        (root / "cells").mkdir()
    os.sync()  # the checkpoint and the moves land on nobody's clock
    time.sleep(0.1)  # and the disk finishes what it does after the sync returns


# -- the claiming processes ---------------------------------------------------------------------------


class Claimer:
    """One claiming process's side: its connections, opened once, and one timed run at a time."""

    def __init__(self) -> None:
        self.cons: dict[str, sqlite3.Connection] = {}  # the raw ways', one connection each
        self.turns: dict[str, str] = {}  # the raw ways' turn files
        self.cells = Path()  # raw_owned's cell folders
        self.stores: dict[str, tuple[Store, liveness.Liveness]] = {}
        self.info = WorkerInfo(worker=f"bench:{os.getpid()}", host=socket.gethostname(), pid=os.getpid())

    def open(self, roots: dict[str, Path]) -> None:
        self.cons = {how: self.connect(roots[how] / "sweepq.db") for how in ("raw", "raw_turns", "raw_owned")}
        self.turns = {how: str(roots[how] / "claim.lock") for how in ("raw_turns", "raw_owned")}
        self.cells = roots["raw_owned"] / "cells"
        self.stores = {how: (Store.open(roots[how]), liveness.for_root(roots[how])) for how in STORES}

    @staticmethod
    def connect(db: Path) -> sqlite3.Connection:
        con = sqlite3.connect(db, isolation_level=None, timeout=60)
        for pragma in ("journal_mode=WAL", "busy_timeout=60000", "synchronous=FULL"):  # as the Store's engine
            con.execute(f"PRAGMA {pragma}")
        return con

    def claim_raw(self, how: str = "raw", own: bool = False) -> tuple[str, int] | None:
        con = self.cons[how]
        con.execute("BEGIN IMMEDIATE")
        row = con.execute(RAW_CLAIM, (time.strftime("%Y-%m-%d %H:%M:%S"),)).fetchone()
        folder = None
        if own and row is not None:  # the cell's folder made and locked before the commit
            (self.cells / row[0]).mkdir()
            folder = os.open(self.cells / row[0], os.O_RDONLY | os.O_DIRECTORY)
            fcntl.flock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        con.execute("COMMIT")
        if folder is not None:
            os.close(folder)
        return None if row is None else (row[0], row[1])

    def claim_in_turn(self, how: str) -> tuple[str, int] | None:
        fd = os.open(self.turns[how], os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return self.claim_raw(how, own=how == "raw_owned")
        finally:
            os.close(fd)

    def claim_sweepq(self, how: str) -> tuple[str, int] | None:
        store, owners = self.stores[how]
        won = store.claim_next(self.info, owners.take)
        if won is None:
            return None
        claim, owner = won
        owner.release()  # the attempt would run here
        return claim.cell, claim.number

    def run(self, how: str, start_at: float, stop_at: float) -> Report:
        claim: Callable[[], tuple[str, int] | None]
        if how == "raw":
            claim = self.claim_raw
        elif how in STORES:
            claim = partial(self.claim_sweepq, how)
        else:
            claim = partial(self.claim_in_turn, how)
        latencies: list[float] = []
        won: list[tuple[str, int]] = []
        time.sleep(max(0.0, start_at - time.monotonic()))
        now = time.monotonic()
        while now < stop_at:
            t = time.perf_counter()
            got = claim()
            latencies.append(time.perf_counter() - t)
            if got is None:
                return len(won), time.monotonic() - start_at, latencies, won, True
            won.append(got)
            now = time.monotonic()
        return len(won), now - start_at, latencies, won, False


def serve(conn: Connection) -> None:
    """A claiming process: does what the pipe says until told to stop (or the pipe closes)."""
    claimer = Claimer()
    while True:
        try:
            cmd = conn.recv()
        except EOFError:
            return
        if cmd[0] == "stop":
            return
        if cmd[0] == "open":
            claimer.open(cmd[1])
            conn.send("open")
        else:
            conn.send(claimer.run(*cmd[1:]))


class Pool:
    """Claiming processes started once (forked before anything is opened here), told what to run."""

    def __init__(self, n: int) -> None:
        ctx = mp.get_context("fork")
        self.pipes: list[Connection] = []
        self.procs = []
        for _ in range(n):
            mine, theirs = ctx.Pipe()
            p = ctx.Process(target=serve, args=(theirs,), daemon=True)
            p.start()
            theirs.close()
            self.pipes.append(mine)
            self.procs.append(p)

    def open(self, roots: dict[str, Path]) -> None:
        for pipe in self.pipes:
            pipe.send(("open", roots))
        for pipe in self.pipes:
            assert pipe.recv() == "open"

    def run(self, how: str, n: int, seconds: float) -> list[Report]:
        start_at = time.monotonic() + 0.05
        for pipe in self.pipes[:n]:
            pipe.send(("run", how, start_at, start_at + seconds))
        return [pipe.recv() for pipe in self.pipes[:n]]

    def close(self) -> None:
        for pipe in self.pipes:
            pipe.send(("stop",))
        for p in self.procs:
            p.join(timeout=30)


# -- the figures --------------------------------------------------------------------------------------


def measure(
    pool: Pool, roots: dict[str, Path], seconds: float, rounds: int
) -> tuple[dict[str, list[float]], dict[str, dict[str, Any]]]:
    """Interleaved rounds of the ten runs (five ways, 1 and 8 processes); seconds a claim per round,
    and every claim's latency and report."""
    seen: dict[str, dict[str, Any]] = {}

    def run(how: str, n: int) -> Callable[[int], float]:
        mine = seen[f"{how}_{n}"] = {"latencies": [], "won": [], "ran_out": False}

        def method(r: int) -> float:
            requeue(roots[how], fresh=how in FRESH)
            reports = pool.run(how, n, seconds)
            claims, span = sum(x[0] for x in reports), max(x[1] for x in reports)
            if r >= 1:  # interleave's warm-up round is round 0
                mine["latencies"] += [t for x in reports for t in x[2]]
            mine["won"] += [w for x in reports for w in x[3]]  # every claim, for the double-claim check
            mine["ran_out"] |= any(x[4] for x in reports)
            return span / max(1, claims)

        return method

    methods = {f"{how}_{n}": run(how, n) for n in PROCESSES for how in HOWS}
    return interleave(methods, rounds, "claims"), seen


def double_claims(root: Path, won: list[tuple[str, int]], attempt_rows: bool) -> dict[str, int]:
    """What the database and the claimers' reports say was taken twice (or not as reported)."""
    pairs = Counter(won)
    per_cell = Counter(cell for cell, _ in won)
    con = sqlite3.connect(f"file:{root / 'sweepq.db'}?mode=ro", uri=True)
    try:
        counts = dict(con.execute("SELECT id, attempts FROM cells WHERE attempts > 0").fetchall())
        twice_in_db = 0
        if attempt_rows:
            q = "SELECT count(*) FROM (SELECT 1 FROM attempts GROUP BY cell_id, number HAVING count(*) > 1)"
            twice_in_db = con.execute(q).fetchone()[0]
            rows = set(con.execute("SELECT cell_id, number FROM attempts").fetchall())
            twice_in_db += len(set(pairs) ^ rows)  # a claim reported with no attempt row, or the reverse
    finally:
        con.close()
    mismatched = sum(1 for cell in set(counts) | set(per_cell) if counts.get(cell, 0) != per_cell.get(cell, 0))
    return {
        "claims": len(won),
        "taken_twice": sum(c - 1 for c in pairs.values() if c > 1) + twice_in_db,
        "cells_not_as_reported": mismatched,
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def rate(times: dict[str, list[float]], key: str) -> float:
    return 1 / statistics.median(times[key])


def figures(
    times: dict[str, list[float]], seen: dict[str, dict[str, Any]], roots: dict[str, Path], ahead: int
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in PROCESSES:
        per_s = {how: rate(times, f"{how}_{n}") for how in HOWS}
        fig: dict[str, Any] = {"processes": n, **{f"{how}_per_s": round(per_s[how]) for how in HOWS}}
        fig |= {
            "ratio": round(per_s["sweepq"] / per_s["raw"], 3),  # a first claim: its folder made
            "target": TARGET_RATIO,
            "pass": per_s["sweepq"] / per_s["raw"] >= TARGET_RATIO,
            "ratio_vs_raw_owned": round(per_s["sweepq"] / per_s["raw_owned"], 3),
            "raw_owned_vs_raw": round(per_s["raw_owned"] / per_s["raw"], 3),
            "again_ratio": round(per_s["sweepq_again"] / per_s["raw"], 3),  # its folder there already
            "again_vs_raw_turns": round(per_s["sweepq_again"] / per_s["raw_turns"], 3),
        }
        for how in HOWS:
            lat = seen[f"{how}_{n}"]["latencies"]
            fig[f"{how}_p50_ms"] = round(percentile(lat, 0.50) * 1e3, 2)
            fig[f"{how}_p99_ms"] = round(percentile(lat, 0.99) * 1e3, 2)
            fig[f"{how}_max_ms"] = round(max(lat) * 1e3, 1)
        if n > 1:
            fig["p99_target_ms"] = TARGET_P99_MS
            fig["pass_p99"] = max(fig["sweepq_p99_ms"], fig["sweepq_again_p99_ms"]) < TARGET_P99_MS
            fig["fair_queue_ms"] = round(n * percentile(seen["sweepq_1"]["latencies"], 0.50) * 1e3, 2)
        if any(seen[f"{how}_{n}"]["ran_out"] for how in HOWS):
            fig["note"] = "a run ran out of cells: use more --cells or fewer --seconds"
        beyond = sum(1 for cell, _ in seen[f"sweepq_again_{n}"]["won"] if int(cell.split(".")[1]) > ahead)
        if beyond:
            fig["again_note"] = f"{beyond} claims of sweepq_again were of cells without a folder: raise `ahead`"
        out[f"claims_{n}_process{'es' if n > 1 else ''}"] = fig
    checks = {
        how: double_claims(
            roots[how], [w for n in PROCESSES for w in seen[f"{how}_{n}"]["won"]], attempt_rows=how in STORES
        )
        for how in HOWS
    }
    bad = sum(c["taken_twice"] + c["cells_not_as_reported"] for c in checks.values())
    out["double_claims"] = {**checks, "target": 0, "pass": bad == 0}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="100,000 cells, longer and more rounds")
    ap.add_argument("--cells", type=int, default=None, help="cells in the root (10,000 smoke, 100,000 full)")
    ap.add_argument("--seconds", type=float, default=None, help="length of one run (0.25 s smoke, 2 s full)")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds (3 smoke, 7 full)")
    ap.add_argument(
        "--dir", type=Path, default=REPO / ".bench", help="where the roots go (their disk sets the figures)"
    )
    args, ignored = ap.parse_known_args()  # `make bench BENCH_ARGS=...` also passes the other benchmarks' flags
    if ignored:
        log(f"ignoring {' '.join(ignored)} (another benchmark's)")
    cells = args.cells or (100_000 if args.full else 10_000)
    seconds = args.seconds or (2.0 if args.full else 0.25)
    rounds = args.rounds or (7 if args.full else 3)
    t0 = time.perf_counter()
    args.dir.mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="claims-", dir=args.dir))
    out: dict[str, Any] = {
        "benchmark": "sweepq claims",
        "mode": "full" if args.full else "smoke",
        "cells": cells,
        "seconds_per_run": seconds,
        "rounds": rounds,
        "method": "medians of seconds a claim over interleaved rounds (order alternating) after an uncounted "
        "warm-up round; raw and sweepq measured in the same run; see the docstring",
        "host": {"cpus": os.cpu_count(), "sqlite": sqlite3.sqlite_version, "python": platform.python_version()},
        "machine_load_before": load(),
    }
    pool = None
    try:
        log(f"making five roots of {cells} cells in {tmp}")
        ahead = min(cells, int(8_000 * seconds))  # more than a run claims: raw claims about 5,000 a second here
        roots = make_roots(tmp, cells, ahead)
        pool = Pool(max(PROCESSES))
        pool.open(roots)
        times, seen = measure(pool, roots, seconds, rounds)
        out["figures"] = figures(times, seen, roots, ahead)
        out["machine_load_after"] = load()
        judged = {k: v for k, v in out["figures"].items() if "pass" in v}
        failed = [k for k, v in judged.items() if not v["pass"]] + [
            f"{k} p99" for k, v in judged.items() if v.get("pass_p99") is False
        ]
        out["failed"] = sorted(failed)
        out["all_pass"] = not failed
    finally:
        if pool is not None:
            pool.close()
        shutil.rmtree(tmp, ignore_errors=True)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
