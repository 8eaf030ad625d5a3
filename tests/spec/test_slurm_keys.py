"""`slurm:` in the sweep file (spec/slurm.py), and the exit-code contract as docs/scale.md shows it."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import yaml

from sweepq.errors import SpecError
from sweepq.slurm.exits import EXIT_DONE, EXIT_FAILED, EXIT_REQUEUE
from sweepq.spec.slurm import SlurmOptions
from sweepq.spec.sweep import parse_sweep

BASE = """\
name: s
train: m:f
grid: {lr: [1, 2]}
"""
SCALE_DOC = Path(__file__).resolve().parents[2] / "docs" / "scale.md"


def parse(extra: str):
    return parse_sweep(BASE + textwrap.dedent(extra), "sweep.yaml")


def test_slurm_options_are_read() -> None:
    assert parse("").slurm is None
    sweep = parse(
        """\
        slurm:
          partition: gpu
          time: "1-00:00:00"
          gpus_per_task: 1
          cpus_per_task: 8
          mem: 32G
          account: lab
          qos: normal
          additional: {constraint: a100, exclude: node7}
        """
    )
    assert sweep.slurm == SlurmOptions(
        partition="gpu",
        time="1-00:00:00",
        gpus_per_task=1,
        cpus_per_task=8,
        mem="32G",
        account="lab",
        qos="normal",
        additional={"constraint": "a100", "exclude": "node7"},
    )
    assert parse("slurm: {time: 240, mem: 4096}\n").slurm == SlurmOptions(time=240, mem="4096")


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ("slurm: gpu\n", "slurm: expected a mapping"),
        ("slurm: {partiton: gpu}\n", "unknown key 'partiton' in slurm"),
        ("slurm: {partition: 'a b'}\n", "slurm.partition: expected a name"),
        ("slurm: {time: -5}\n", "slurm.time: expected a time limit"),
        ("slurm: {time: '4 hours'}\n", "slurm.time: expected a time limit"),
        ("slurm: {gpus_per_task: 1.5}\n", "slurm.gpus_per_task: expected a whole number"),
        ("slurm: {cpus_per_task: 0}\n", "slurm.cpus_per_task: expected a whole number"),
        ("slurm: {mem: lots}\n", "slurm.mem: expected a memory size"),
        ("slurm: {additional: {signal: 'USR1@60'}}\n", "slurm.additional.signal: sweepq sets this option itself"),
        ("slurm: {additional: {'--gres': 'gpu:1'}}\n", "is not an sbatch option's long name"),
        ("slurm: {additional: {constraint: [a, b]}}\n", "slurm.additional.constraint: expected a text or a number"),
    ],
)
def test_bad_slurm_options_are_refused_by_name(extra: str, words: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse(extra)
    assert words in str(caught.value)


def _kubernetes_manifest() -> dict:
    text = SCALE_DOC.read_text()
    section = text[text.index("### Kubernetes") :]
    (block,) = re.findall(r"```yaml fragment\n(.*?)```", section, re.S)  # not a sweep file: a fragment
    return yaml.safe_load(block)


def test_the_kubernetes_example_acts_on_the_workers_exit_codes() -> None:
    job = _kubernetes_manifest()
    spec = job["spec"]
    assert job["kind"] == "Job" and spec["completionMode"] == "Indexed"
    assert spec["template"]["spec"]["restartPolicy"] == "Never"  # podFailurePolicy requires it
    (container,) = spec["template"]["spec"]["containers"]
    assert container["command"][:3] == ["sweepq", "worker", "--scheduled"]
    by_code = {
        code: rule["action"]
        for rule in spec["podFailurePolicy"]["rules"]
        if "onExitCodes" in rule
        for code in rule["onExitCodes"]["values"]
        if rule["onExitCodes"]["containerName"] == container["name"] and rule["onExitCodes"]["operator"] == "In"
    }
    assert by_code == {EXIT_REQUEUE: "Ignore", EXIT_FAILED: "FailIndex"}
    assert EXIT_DONE == 0  # a pod that exits 0 completes its index: no rule for it


def test_the_documented_table_matches_the_constants() -> None:
    rows = re.findall(r"^\|\s*(\d+)\s*\|", SCALE_DOC.read_text(), re.M)
    assert [int(r) for r in rows] == [EXIT_DONE, EXIT_REQUEUE, EXIT_FAILED]
    assert f"RequeueExit={EXIT_REQUEUE}" in SCALE_DOC.read_text()
