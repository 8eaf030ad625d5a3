"""The bundled example's cells leave nothing but their own words in stderr.log.

torchdata 0.11's StatefulDataLoader calls torch.set_vital, which torch deprecated: every cell
of `make run` used to carry its UserWarning in stderr.log, where a reader looks for what went
wrong. The example silences that one message where it builds its loader (and nowhere else).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import cli, write

pytestmark = pytest.mark.process

SPEC = """
name: example
train: sweepq.examples.llm_analysis:train
root: runs/example
params: {epochs: 1, batch_size: 64, n_train: 128, n_val: 64, width: 16, lr: 0.003}
metric: {name: val_acc, goal: max}
grid: {seed: [1]}
"""


def test_a_bundled_cell_writes_no_warning_to_stderr(tmp_path: Path) -> None:
    spec = write(tmp_path / "example.yaml", SPEC)
    r = cli("launch", str(spec), "--workers", "1", "--no-live", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1.1 done" in r.stdout
    cell = tmp_path / "runs" / "example" / "cells" / "1.1"
    assert (cell / "DONE.json").is_file()
    assert (cell / "attempts" / "1" / "stderr.log").read_text() == ""
