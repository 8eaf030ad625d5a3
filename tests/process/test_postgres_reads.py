"""Read commands on a sweep whose queue is on a real PostgreSQL server, from a folder that holds nothing of it.

`--database URL --sweep NAME` stands for the sweep file or the root: `status`, `show`, `attempts`,
`logs`, `best` and `report` answer from any folder of any machine that reaches the server. While
cells run, `status` shows each one's host and the age of its lease (its holder renews it every
`renew_seconds`: a live lease is younger than `expire_seconds`, the only bound used here).
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

from conftest import cli, start, wait_for
from gated_sweep import HANG_GUARD_S, gated_sweep, held

LEASE = "lease: {renew_seconds: 1, expire_seconds: 10}\n"
EXPIRE_S = 10.0
WIDE = {**os.environ, "COLUMNS": "400"}  # every column kept, whatever the terminal


def test_read_commands_answer_from_any_folder_with_the_servers_url_and_the_sweeps_name(
    sweep_dir: Path, postgres_url: str, tmp_path: Path
) -> None:
    spec, root = gated_sweep(sweep_dir, 2, "remote")
    spec.write_text(spec.read_text() + f"database: '{postgres_url}'\n" + LEASE)
    launch = start("launch", str(spec), "--workers", "2", "--no-live", cwd=sweep_dir)
    elsewhere = tmp_path / "elsewhere"  # another machine's folder: no sweep file, no root, no record
    elsewhere.mkdir()
    server = ("--database", postgres_url, "--sweep", "remote")
    try:
        wait_for(lambda: held(root, "1.1", "1.2") or launch.poll() is not None, HANG_GUARD_S, "both cells held")
        assert launch.poll() is None, launch.communicate()[0]
        running = cli("status", *server, cwd=elsewhere, env=WIDE)
        assert running.returncode == 0, running.stderr
        lines = running.stdout.splitlines()
        head = next(line for line in lines if " host " in f" {line} " and "lease age" in line)
        host_at, age_at = head.index("host"), head.index("lease age")
        for cell in ("1.1", "1.2"):
            row = next(line for line in lines if line.split()[:1] == [cell])
            assert "running" in row and "dead" not in row, running.stdout
            assert row[host_at:].split()[0] == socket.gethostname(), running.stdout
            age = re.match(r"\s*(\d+(?:\.\d+)?)s", row[age_at - 3 :])
            assert age is not None and float(age.group(1)) < EXPIRE_S, running.stdout
        for cell in ("1.1", "1.2"):
            (sweep_dir / f"gate-{cell}").unlink()
        output = launch.communicate(timeout=HANG_GUARD_S)[0]
        assert launch.returncode == 0, output
    finally:
        if launch.poll() is None:
            launch.kill()
            launch.wait()

    def read(*args: str) -> str:
        done = cli(*args, *server, cwd=elsewhere, env=WIDE)
        assert done.returncode == 0, f"{args}: {done.stderr}"
        return done.stdout

    assert re.search(r"1\.1\s+a\s+done", read("status")) and re.search(r"1\.2\s+a\s+done", read("status"))
    assert '"state": "done"' in read("show", "1.2", "--json")
    assert read("attempts").count("completed") == 2
    assert "1.1" in read("best") and "completed" in read("report")
    # The attempt's logs are files of the machine that ran it (or of the sweep's storage): named here.
    assert "cells/1.1/attempts/1/stdout.log" in read("logs", "1.1")
    assert not any(elsewhere.iterdir())  # nothing written where it ran


def test_database_and_sweep_are_checked_before_anything_is_read(sweep_dir: Path, postgres_url: str) -> None:
    alone = cli("status", "--database", postgres_url, cwd=sweep_dir)
    assert alone.returncode != 0 and "--database and --sweep go together" in alone.stderr
    unknown = cli("status", "--database", postgres_url, "--sweep", "nothing-here", cwd=sweep_dir)
    assert unknown.returncode != 0 and "holds no sweep named 'nothing-here'" in unknown.stderr
    both = cli("status", str(sweep_dir), "--database", postgres_url, "--sweep", "x", cwd=sweep_dir)
    assert both.returncode != 0 and "leave out SPEC and --root" in both.stderr
    port = postgres_url.rsplit(":", 1)[1].split("/", 1)[0]
    away = cli("status", "--database", postgres_url.replace(f":{port}/", ":1/"), "--sweep", "x", cwd=sweep_dir)
    assert away.returncode != 0 and "cannot be reached" in away.stderr and "Traceback" not in away.stderr
    file = cli("status", "--database", f"sqlite:///{sweep_dir}/sweepq.db", "--sweep", "x", cwd=sweep_dir)
    assert file.returncode != 0 and "PostgreSQL" in file.stderr
