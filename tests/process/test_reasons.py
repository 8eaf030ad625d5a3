"""Real training processes driven into each termination reason: receipts, budgets, back-off, rollback."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
import yaml
from conftest import HERE, cli, cli_json, write

from sweepq.run.fingerprint import file_sha256

SPEC = """
name: reasons
train: trainers:train
root: runs/reasons
params: {steps: 40}
checkpoint: {every_steps: 5, keep_last: 3}
metric: {name: score, goal: max}
max_attempt_seconds: 20   # far above what the other cells need, even on a busy machine
retries: {error: 1, nan: 1, oom: 1, data_error: 0, timeout: 1, backoff_seconds: 2, backoff_max_seconds: 10}
groups:
  - name: error          # 1.1: a deterministic bug, retried once after a back-off, then failed
    params: {fail_at: 12, fail: error}
  - name: nan            # 2.1: NaN at step 23 in attempt 1 only: rolled back, then completes
    params: {nan_at: 23, nan_attempts: 1}
  - name: oom            # 3.1: MemoryError every time: oom, one retry, failed
    params: {fail_at: 7, fail: memory}
  - name: data           # 4.1: DataError: no budget, failed at once
    params: {fail_at: 3, fail: data}
  - name: slow           # 5.1: never ends by itself: timeout twice, failed
    params: {steps: 100000, delay: 0.05}
  - name: fine           # 6.1: completes
"""
LIMIT = yaml.safe_load(SPEC)["max_attempt_seconds"]


def parse(t: str) -> datetime:
    return datetime.fromisoformat(t.replace("Z", "+00:00"))


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    d = tmp_path_factory.mktemp("reasons")
    (d / "trainers.py").write_text((HERE / "trainers.py").read_text())
    spec = write(d / "reasons.yaml", SPEC)
    r = cli("launch", str(spec), "--workers", "2", cwd=d, timeout=400)
    root = d / "runs" / "reasons"
    shows = {
        c["cell"]: cli_json("show", c["cell"], "--root", str(root)) for c in cli_json("status", "--root", str(root))
    }
    return root, {"launch": r, "show": shows, "dir": d}


def reasons(show: dict) -> list[str]:
    return [a["reason"] for a in show["attempts"]]


def test_launch_reports_failure(swept: tuple[Path, dict]) -> None:
    _, s = swept
    assert s["launch"].returncode == 1, s["launch"].stdout + s["launch"].stderr
    states = {c: v["state"] for c, v in s["show"].items()}
    assert states == {"1.1": "failed", "2.1": "done", "3.1": "failed", "4.1": "failed", "5.1": "failed", "6.1": "done"}


def test_error_is_retried_once_after_backoff_with_traceback_in_receipt(swept: tuple[Path, dict]) -> None:
    _, s = swept
    show = s["show"]["1.1"]
    assert reasons(show) == ["error", "error"] and show["last_reason"] == "error"
    first, second = show["attempts"]
    assert "ValueError: bug at step 12" in first["error_tail"] and "Traceback" in first["error_tail"]
    waited = (parse(second["started_at"]) - parse(first["ended_at"])).total_seconds()
    assert waited >= 2.0  # backoff_seconds
    assert second["start_step"] == 10  # a retry resumes from the newest checkpoint
    assert first["exit_code"] == 1 and first["exit_signal"] is None


def test_receipt_fields(swept: tuple[Path, dict]) -> None:
    _, s = swept
    (a,) = s["show"]["6.1"]["attempts"]
    assert a["reason"] == "completed" and a["start_step"] == 0 and a["end_step"] == 40
    assert (
        a["host"] and a["worker"].startswith(a["host"]) and a["pid"] and a["worker_pid"] and a["pid"] != a["worker_pid"]
    )
    assert a["gpus"] == [] and a["gpu_seconds"] == 0.0 and a["wall_seconds"] > 0
    assert 30 * 2**20 < a["peak_memory_bytes"] < 8 * 2**30
    assert {"python", "torch", "sweepq"} <= set(a["environment"])
    assert a["code_fingerprint"]["sha256"] == file_sha256(s["dir"] / "trainers.py")
    assert a["exit_code"] == 0


def test_nan_rolls_back_to_the_checkpoint_before_the_bad_interval(swept: tuple[Path, dict]) -> None:
    _, s = swept
    show = s["show"]["2.1"]
    assert reasons(show) == ["nan", "completed"]
    bad, retry = show["attempts"]
    assert "non-finite loss" in bad["note"] and bad["end_step"] == 23
    # checkpoints 5..20 existed; the interval that went bad started at 20: resume from 15
    assert retry["nan_step"] == 23 and retry["start_step"] == 15


def test_memory_error_is_oom_and_spends_its_budget(swept: tuple[Path, dict]) -> None:
    _, s = swept
    show = s["show"]["3.1"]
    assert reasons(show) == ["oom", "oom"] and show["last_reason"] == "oom"
    assert "MemoryError" in show["attempts"][0]["error_tail"]


def test_data_error_has_no_budget(swept: tuple[Path, dict]) -> None:
    _, s = swept
    show = s["show"]["4.1"]
    assert reasons(show) == ["data_error"]
    assert "DataError: corrupt shard at step 3" in show["attempts"][0]["error_tail"]


def test_timeout_checkpoints_then_retries_from_there(swept: tuple[Path, dict]) -> None:
    _, s = swept
    show = s["show"]["5.1"]
    assert reasons(show) == ["timeout", "timeout"]
    first, second = show["attempts"]
    assert 0 < first["end_step"] == second["start_step"] < second["end_step"] < 100_000
    for a in show["attempts"]:
        # The worker stops an attempt once the limit has passed since it started the process;
        # the receipt counts from that same instant, so it exceeds the limit, and it lies
        # within the attempt row's span (claimed before the start, closed after the receipt).
        assert LIMIT < a["wall_seconds"] <= (parse(a["ended_at"]) - parse(a["started_at"])).total_seconds()
    assert "timeout by sweepq" in first["note"]


def test_report_sums_the_receipts(swept: tuple[Path, dict]) -> None:
    root, _ = swept
    attempts = cli_json("attempts", "--root", str(root))
    rows = {r["reason"]: r for r in cli_json("report", "--root", str(root))}
    for reason, row in rows.items():
        mine = [a for a in attempts if a["reason"] == reason]
        assert row["attempts"] == len(mine)
        assert row["wall_hours"] == pytest.approx(sum(a["wall_seconds"] for a in mine) / 3600)
        assert row["gpu_hours"] == pytest.approx(sum(a["gpu_seconds"] for a in mine) / 3600)
    assert set(rows) == {"completed", "nan", "error", "oom", "data_error", "timeout"}
    assert rows["nan"]["steps_lost"] == 23 - 15  # recomputed after the rollback
    newest_first = [a["started_at"] for a in attempts]
    assert newest_first == sorted(newest_first, reverse=True)
    only = cli_json("attempts", "--root", str(root), "--reason", "timeout", "--cell", "slow")
    assert [a["cell"] for a in only] == ["5.1", "5.1"]


def test_retry_gives_a_fresh_budget_and_reset_moves_files_aside(swept: tuple[Path, dict]) -> None:
    root, _ = swept
    r = cli("retry", "data", "--root", str(root))
    assert r.returncode == 0 and "requeued: 4.1" in r.stdout
    assert cli_json("show", "4.1", "--root", str(root))["state"] == "queued"
    r = cli("retry", "2.1", "--root", str(root))
    assert r.returncode == 1 and "2.1 not requeued: it is done" in r.stderr
    own = root / "cells" / "2.1" / "output" / "last.ckpt"  # a program's own checkpoint, as Lightning leaves it
    own.parent.mkdir()
    own.write_bytes(b"lightning state")
    r = cli("reset", "2.1", "--root", str(root))
    assert r.returncode == 0 and "reset: 2.1" in r.stdout
    assert not (root / "cells" / "2.1" / "DONE.json").exists()
    assert not own.parent.exists()  # nothing left for the program to resume from
    moved = list((root / "attic" / "2.1").glob("*/DONE.json"))
    assert len(moved) == 1 and list((root / "attic" / "2.1").glob("*/checkpoints/step-*"))
    assert (moved[0].parent / "output" / "last.ckpt").read_bytes() == b"lightning state"
    show = cli_json("show", "2.1", "--root", str(root))
    assert show["state"] == "queued" and show["step"] is None and len(show["attempts"]) == 2
    assert {"retry", "reset", "moved_to_attic"} & {e["kind"] for e in show["history"]} == {"reset", "moved_to_attic"}
    r = cli("cancel", "2.*", "--root", str(root))
    assert r.returncode == 0 and "cancelled: 2.1" in r.stdout
    best = cli_json("best", "--root", str(root))
    assert (
        best[0]["rank"] == 1 and best[0]["cell"] == "6.1" and best[0]["checkpoint"].startswith("cells/6.1/checkpoints/")
    )
