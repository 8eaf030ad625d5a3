"""Chaos: SIGKILL random sweepq processes at random moments, relaunch until done, compare with a clean run.

Seeded (SWEEPQ_CHAOS_SEED, default 7) so that a failure replays. Kills land on
the launch process, a worker, a training process, or the whole tree at once.
Among the events are also a training process SIGSTOPped while another worker
reaps and claims, and every lock-looking file deleted before another worker
comes: neither may ever let two processes train one cell (the trainers check).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import random
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import psutil
import pytest
from conftest import REPO_ROOT, cli, cli_json, start, tree, wait_for, wait_gone, write

from sweepq.layout import CellPaths

KILLS = 10


def small_bundled_sweep(folder: Path) -> Path:
    """The bundled sweep, made small: a few seconds per cell, several checkpoints each."""
    text = (REPO_ROOT / "sweeps" / "llm-analysis.yaml").read_text()
    text = text.replace("root: ../runs/llm-analysis", "root: runs/chaos")
    text = text.replace(
        "params: {epochs: 150, batch_size: 64, width: 32}",
        "params: {epochs: 8, batch_size: 64, n_train: 512, n_val: 256, width: 32, step_delay: 0.04}",
    )
    text = text.replace("params: {epochs: 150}", "params: {epochs: 8}")
    text = text.replace(
        "checkpoint: {every_steps: 200, every_seconds: 30, keep_last: 3}", "checkpoint: {every_steps: 7, keep_last: 3}"
    )
    text = text.replace(
        "retries: {lost: 3, oom: 1, nan: 2, error: 0}", "retries: {lost: 100, oom: 0, nan: 0, error: 0}"
    )
    assert "step_delay" in text and "lost: 100" in text and "every_steps: 7" in text
    return write(folder / "chaos.yaml", text)


def final_tensors_sha(root: Path, cell: str) -> str:
    done = json.loads((root / "cells" / cell / "DONE.json").read_text())
    data = (root / "cells" / cell / done["checkpoint"] / "tensors.safetensors").read_bytes()
    return hashlib.sha256(data).hexdigest()


@pytest.mark.slow
def test_random_sigkills_then_relaunch_until_done(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("SWEEPQ_CHAOS_SEED", "7")))
    clean_dir, chaos_dir = tmp_path / "clean", tmp_path / "chaos"
    clean_dir.mkdir()
    chaos_dir.mkdir()
    clean_spec, chaos_spec = small_bundled_sweep(clean_dir), small_bundled_sweep(chaos_dir)
    clean = cli("launch", str(clean_spec), cwd=clean_dir, timeout=600)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    clean_root, root = clean_dir / "runs" / "chaos", chaos_dir / "runs" / "chaos"

    kills: list[str] = []
    launch = None
    while len(kills) < KILLS:
        if launch is None or launch.poll() is not None:
            assert launch is None or launch.returncode != 0, f"the sweep finished after only {kills}"
            launch = start("launch", str(chaos_spec), "--no-live", cwd=chaos_dir)
        # Strike while something trains (a launch may first wait for the previous
        # generation's graceful stop), at a random moment of its training.
        wait_for(functools.partial(_training_or_ended, launch), timeout=120, what="a training process")
        time.sleep(rng.uniform(0.2, 3.0))
        if launch.poll() is not None:
            continue  # it ended meanwhile (checked at the top)
        procs = tree(launch.pid)
        runners = [p for p in procs if _is(p, "sweepq.attempt")]
        workers = [p for p in procs if _is(p, " worker ")]
        victim_kind = _owed(kills, runners) or rng.choice(
            ["training", "training", "worker", "launch", "everything", "sigstop", "locks"]
        )
        if victim_kind in ("sigstop", "locks"):
            kills.append(f"{victim_kind}:{_meddle(victim_kind, root, runners, rng)}")
            continue
        if victim_kind == "training" and runners:
            victims = [rng.choice(runners)]
        elif victim_kind == "worker" and workers:
            victims = [rng.choice(workers)]
        elif victim_kind == "everything":
            victims = procs
        else:
            victims, victim_kind = [psutil.Process(launch.pid)], "launch"
        for v in victims:
            try:
                v.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        kills.append(f"{victim_kind}:{len(victims)}@{len(procs)}")
        if victim_kind in ("launch", "everything") or not victims:
            launch.wait(timeout=60)
            wait_gone([p.pid for p in procs], timeout=60)  # workers stop (or die) with their launch
            launch = None
    if launch is not None:
        launch.wait(timeout=300)
    for _ in range(5):  # relaunch until the sweep is done
        final = cli("launch", str(chaos_spec), cwd=chaos_dir, timeout=600)
        if final.returncode == 0:
            break
    assert final.returncode == 0, final.stdout + final.stderr

    status = cli_json("status", "--root", str(root))
    assert {c["state"] for c in status} == {"done"}
    corrupt_events = 0
    for c in status:
        cell = c["cell"]
        shown = cli_json("show", cell, "--root", str(root))
        attempts = shown["attempts"]
        assert [a["reason"] for a in attempts].count("completed") == 1, (cell, attempts)
        assert attempts[-1]["reason"] == "completed"
        spans = sorted((_t(a["started_at"]), _t(a["ended_at"])) for a in attempts)
        for (_, end), (next_start, _) in itertools.pairwise(spans):
            assert end <= next_start, f"attempts of {cell} overlap"
        # no checkpoint that fails its manifest was ever loaded: every resume names a known manifest
        known = {k["manifest_sha256"] for k in shown["checkpoints"] if k["state"] != "corrupt"}
        for a in attempts:
            if a["start_step"]:
                assert a["start_checkpoint_sha"] in known, (cell, a)
        corrupt_events += sum(e["kind"] == "checkpoint_corrupt" for e in shown["history"])
        assert len(list(CellPaths(root, cell).dir.glob("DONE.json"))) == 1
        # the same final weights (and optimizer, loader, RNG state) and metrics as the clean run
        assert final_tensors_sha(root, cell) == final_tensors_sha(clean_root, cell), (cell, kills)
        clean_done = json.loads((clean_root / "cells" / cell / "DONE.json").read_text())
        assert shown["done"]["metrics"] == clean_done["metrics"], cell
    assert corrupt_events == 0
    assert len(kills) >= 10
    assert any(k.startswith("sigstop:1") for k in kills) and any(k.startswith("locks") for k in kills), kills
    resumed = [a for a in cli_json("attempts", "--root", str(root)) if a["start_step"] > 0]
    assert resumed, f"no kill landed mid-training ({kills}); the test proved nothing"


def _owed(kills: list[str], runners: list[psutil.Process]) -> str | None:
    """Every run meddles at least once each way (a stopped trainer, deleted locks); the rest is drawn."""
    if len(kills) >= 2 and runners and not any(k.startswith("sigstop:1") for k in kills):
        return "sigstop"
    if len(kills) >= 5 and not any(k.startswith("locks") for k in kills):
        return "locks"
    return None


def _meddle(kind: str, root: Path, runners: list[psutil.Process], rng: random.Random) -> int:
    """Stop a trainer, or delete every lock-looking file, while another worker reaps and claims."""
    stopped = [rng.choice(runners)] if kind == "sigstop" and runners else []
    if kind == "locks":
        for f in root.rglob("*lock*"):
            if f.is_file():
                f.unlink(missing_ok=True)
    _signal(stopped, signal.SIGSTOP)
    other = start("worker", "--root", str(root))
    try:
        time.sleep(rng.uniform(1.0, 3.0))  # its reap and claims happen meanwhile (or not: then nothing to check)
    finally:
        _signal(stopped, signal.SIGCONT)
        other.send_signal(signal.SIGTERM)  # it leaves gracefully, as a preempted worker does
        other.communicate(timeout=120)
    return len(stopped)


def _signal(procs: list[psutil.Process], sig: int) -> None:
    for p in procs:
        try:
            p.send_signal(sig)
        except psutil.NoSuchProcess:
            pass


def _training_or_ended(launch: subprocess.Popen[str]) -> bool:
    return launch.poll() is not None or any(_is(p, "sweepq.attempt") for p in tree(launch.pid))


def _is(p: psutil.Process, needle: str) -> bool:
    try:
        return needle in " " + " ".join(p.cmdline()) + " "
    except psutil.NoSuchProcess:
        return False


def _t(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))
