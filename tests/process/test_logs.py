"""A failed cell says why in `launch` and `status` and points to `sweepq logs`; every read command takes the sweep file.

One launch of two program cells: 1.1 prints a line and raises, 2.1 prints a line and
waits for a gate file, so that `sweepq logs --follow` is seen following a live attempt
to its end.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import SWEEPQ, start, wait_for, write
from tiny_sweep import sweepq_many

PROGRAM = """
import json, os, sys, time
cfg = json.load(open(os.environ["SWEEPQ_CFG_FILE"]))
print("hello from", os.environ["SWEEPQ_CELL"], flush=True)
if cfg.get("gate"):
    while not os.path.exists(cfg["gate"]):
        time.sleep(0.05)
    print("after the gate", flush=True)
    sys.exit(0)
print("about to fail", file=sys.stderr, flush=True)
raise ValueError(f"bug at step {cfg['fail_at']}")
"""

SPEC = """
name: logs
program: cell.py
root: runs/logs
groups:
  - name: bad
    params: {fail_at: 7}
  - name: gated
    params: {gate: GATE}
"""


def test_a_failure_is_explained_and_its_logs_are_one_command_away(tmp_path: Path) -> None:
    write(tmp_path / "cell.py", PROGRAM)
    gate = tmp_path / "gate"
    spec = write(tmp_path / "logs.yaml", SPEC.replace("GATE", str(gate)))
    root = tmp_path / "runs" / "logs"
    launch = start("launch", str(spec), "--workers", "2", "--no-live", cwd=tmp_path)
    try:
        gated = root / "cells" / "2.1" / "attempts" / "1"
        # Claimed (the worker writes attempt.json after the claim): the follow starts while the attempt does.
        wait_for(lambda: (gated / "attempt.json").exists(), what="2.1 to be claimed")
        follow = subprocess.Popen(
            [*SWEEPQ, "logs", "2.1", str(spec), "--follow"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        seen = _read_until(follow, "hello from 2.1")
        assert seen.startswith(f"==> {(gated / 'stdout.log').relative_to(tmp_path)} <==\n"), seen
        assert follow.poll() is None, "the attempt runs: --follow must wait for it"
        gate.touch()
        rest, err = follow.communicate(timeout=120)
        assert follow.returncode == 0, err
        assert "after the gate" in rest  # written after the follow started, printed before it ended
        out, _ = launch.communicate(timeout=300)
    finally:
        launch.kill()
    assert launch.returncode == 1, out  # a cell failed
    line = next(x for x in out.splitlines() if x.startswith("1.1 failed"))
    assert line == "1.1 failed  (last: error: ValueError: bug at step 7)  logs: sweepq logs 1.1 runs/logs", out

    ran = sweepq_many(
        {
            "status": ["status", str(spec)],
            "logs": ["logs", "1.1", str(spec)],
            "swapped": ["logs", str(spec), "1.1", "--stderr"],
            "stdout": ["logs", "1.1", "--stdout"],
            "no attempt 2": ["logs", "1.1", str(spec), "--attempt", "2"],
            "show": ["show", "1.1", str(spec), "--json"],
            "show root": ["show", "2.1", "."],
            "attempts": ["attempts", str(spec), "--json"],
            "report": ["report", str(spec), "--json"],
            "best": ["best", str(spec), "--json"],
            "missing": ["report", str(tmp_path / "typo.yaml")],
            "retry": ["retry", "1.1", str(spec)],
            "cancel": ["cancel", str(spec), "bad"],
            "two places": ["retry", "1.1", str(spec), str(root)],
        },
        cwd=root,  # inside the root: `logs` with no place finds it there
    )
    status = ran["status"].stdout
    assert ran["status"].code == 0 and "ValueError: bug at step 7 (see sweepq logs 1.1)" in status, status

    logs = ran["logs"].stdout
    assert ran["logs"].code == 0, ran["logs"].stderr
    out_header, err_header = (f"==> cells/1.1/attempts/1/{n}.log <==" for n in ("stdout", "stderr"))
    assert logs.index(out_header) < logs.index("hello from 1.1") < logs.index(err_header), logs
    assert logs.index(err_header) < logs.index("about to fail") < logs.index("ValueError: bug at step 7"), logs
    assert logs.rstrip().endswith("ValueError: bug at step 7")  # in stderr.log: not repeated from the receipt
    assert ran["swapped"].stdout.startswith("about to fail\nTraceback") and "==>" not in ran["swapped"].stdout
    assert "hello from 1.1" in ran["stdout"].stdout and "Traceback" not in ran["stdout"].stdout
    assert ran["no attempt 2"].code == 2 and "cell 1.1 has no attempt 2 (its attempts: 1)" in ran["no attempt 2"].stderr

    for name in ("show", "show root", "attempts", "report", "best"):
        assert ran[name].code == 0, (name, ran[name].stderr)
    assert '"state": "failed"' in ran["show"].stdout and "gated" in ran["show root"].stdout
    assert ran["missing"].code == 2 and "typo.yaml: cannot read the sweep file" in ran["missing"].stderr
    assert ran["retry"].code == 0 and "requeued: 1.1" in ran["retry"].stdout
    assert ran["cancel"].code == 0 and "cancelled: 1.1" in ran["cancel"].stdout
    assert ran["two places"].code == 2 and "takes one sweep file or root" in ran["two places"].stderr


def _read_until(proc: subprocess.Popen[str], text: str) -> str:
    """What `proc` printed up to the line holding `text` (it must print it)."""
    assert proc.stdout is not None
    seen = ""
    while text not in seen:
        line = proc.stdout.readline()
        assert line, f"the output ended before {text!r}: {seen!r}"
        seen += line
    return seen
