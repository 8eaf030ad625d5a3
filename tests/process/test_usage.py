"""A real launch: the worker samples its training process tree, and the receipt and `show --json` keep the figures.

A program cell, so that what is sampled is the attempt process's child (and no torch start-up
slows the test): the program holds HOLD_MIB and burns BURN_CPU_S of CPU time, which, on one
thread, takes at least that long: past one and a half sampling periods, so two samples at least.
This machine has no GPU: NVML's answers come from a fake `pynvml` module on the launch's
PYTHONPATH (two GPUs; `--gpus 1` gives the cell the second), the CPU figures are real.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from conftest import cli, cli_json, db_rows, write

from sweepq.worker.usage import SAMPLE_S
from sweepq.worker.usage_text import usage_cell

HOLD_MIB = 32
BURN_CPU_S = 1.5 * SAMPLE_S
PROGRAM = """
import argparse, time
p = argparse.ArgumentParser()
p.add_argument("--hold_mib", type=int)
p.add_argument("--burn", type=float)
args, _ = p.parse_known_args()
held = b"x" * (args.hold_mib * 2**20)
end = time.process_time() + args.burn
while time.process_time() < end:
    pass
"""
FAKE_NVML = """
from types import SimpleNamespace
class NVMLError(Exception):
    pass
UTIL, USED = {0: 5, 1: 63}, {0: 1 << 30, 1: 21 << 30}
def nvmlInit(): pass
def nvmlShutdown(): pass
def nvmlDeviceGetCount(): return 2
def nvmlDeviceGetHandleByIndex(i): return i
def nvmlDeviceGetUtilizationRates(h): return SimpleNamespace(gpu=UTIL[h], memory=0)
def nvmlDeviceGetMemoryInfo(h): return SimpleNamespace(total=80 << 30, free=(80 << 30) - USED[h], used=USED[h])
"""
SPEC = f"""
name: used
program: hog.py
root: runs/used
params: {{hold_mib: {HOLD_MIB}, burn: {BURN_CPU_S}}}
grid: {{seed: [1]}}
"""


def test_receipt_and_show_keep_cpu_gpu_and_memory(tmp_path: Path) -> None:
    write(tmp_path / "hog.py", PROGRAM)
    (tmp_path / "nvml").mkdir()
    write(tmp_path / "nvml" / "pynvml.py", FAKE_NVML)
    spec = write(tmp_path / "used.yaml", SPEC)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path / "nvml"), os.environ.get("PYTHONPATH")])),
    }
    r = cli("launch", str(spec), "--no-live", "--gpus", "1", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    root = tmp_path / "runs" / "used"
    receipt = json.loads((root / "cells" / "1.1" / "attempts" / "1" / "receipt.json").read_text())
    used = receipt["usage"]
    assert receipt["reason"] == "completed"
    assert used["samples"] >= 2 and used["seconds"] >= SAMPLE_S
    assert used["cpu_percent_mean"] > 0 and used["cpu_percent_p95"] > 0
    assert used["rss_peak_bytes"] >= HOLD_MIB * 2**20 > 10 * 10**6  # the program's memory: the tree is summed
    assert used["gpu_devices"] == ["1"]  # the cell's GPU only (CUDA_VISIBLE_DEVICES=1)
    assert used["gpu_percent_mean"] == used["gpu_percent_p95"] == 63.0 and used["gpu_memory_peak_bytes"] == 21 << 30
    assert used["low_gpu"] is None and "latest" not in used  # the final figures, not a live look
    assert usage_cell(used) == "gpu 63% 21.0GiB"

    shown = cli_json("show", "1.1", "--root", str(root))
    (attempt,) = shown["attempts"]
    assert attempt["usage"] == used
    ((stored,),) = db_rows(root, "select usage from attempts")
    assert json.loads(stored) == used
