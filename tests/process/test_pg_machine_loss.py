"""Two machines of one sweep on a real PostgreSQL server and a folder both mount: one dies, or freezes.

Machine A (root A) is a launch whose two workers train the sweep's two cells (real torch, tests/
trainers.py); each cell waits at its first checkpoint while its gate file exists (gated_sweep.py), so
that A is surely mid-training when it is struck, whatever the machine's speed. Machine B (root B)
joins with two `sweepq worker --database URL --sweep NAME`: nothing to claim, it reaps every half
second. The two roots share nothing but the server and the storage (`storage:` a folder).

- Death: every process of A is SIGKILLed at once. B reclaims both cells within expire + renew + a
  few seconds of A's last sign of life (both times as the attempts table records them), resumes
  each from A's checkpoint in the storage and finishes it bit-exactly (the final weights equal an
  uninterrupted run's), no two attempts of a cell overlapping.
- Freeze: every process of A is SIGSTOPped past its lease; B reaps and resumes the cells and commits
  checkpoints of its own; then A is continued. A's holders find their leases gone and say so, its
  training processes' writes are refused by the fence (no checkpoint of A's attempt lands after the
  thaw, no DONE.json of it anywhere), its worker's close of the attempt is refused (the queue keeps
  B's reaper's `lost`), and the cells end as an uninterrupted run would.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from conftest import cli_json, start, wait_for, write
from gated_sweep import GATED
from pg_machines import attempts, cell_states, expected_w_sum, machine_processes, overlaps, paused
from safetensors.torch import load_file

from sweepq.layout import CellPaths

RENEW_S, EXPIRE_S = 2, 10
FEW_S = 3  # the reaper's poll (0.5 s), the worker's flush (1 s), one claim, on a busy machine
STEPS, EVERY = 40, 10
CELLS = ("1.1", "1.2")

SPEC = """
name: {name}
train: gated:train
database: '{url}'
storage: '{storage}'
lease: {{renew_seconds: {renew}, expire_seconds: {expire}}}
params: {{steps: {steps}, delay: 0.05}}
checkpoint: {{every_steps: {every}}}
retries: {{lost: 3}}
grid: {{seed: [1, 2]}}
"""


@dataclass
class Machines:
    name: str
    url: str
    folder: Path
    storage: Path
    a_root: Path
    b_root: Path
    a: subprocess.Popen[str]
    b: list[subprocess.Popen[str]]

    def open_gates(self) -> None:
        for cell in CELLS:
            (self.folder / f"gate-{cell}").unlink(missing_ok=True)

    def finish(self) -> None:
        outputs = [p.communicate(timeout=300)[0] for p in self.b]
        assert [p.returncode for p in self.b] == [0] * len(self.b), "\n".join(outputs)

    def stored(self, cell: str) -> CellPaths:
        """The cell's place in the shared storage (the same layout as a root's)."""
        return CellPaths(self.storage, cell)

    def manifests(self, cell: str) -> list[tuple[dict, float]]:
        """Every committed checkpoint of `cell` in the storage: (its manifest, when it was written)."""
        found = []
        for m in sorted(self.stored(cell).checkpoints.glob("step-*/manifest.json")):
            found.append((json.loads(m.read_text()), m.stat().st_mtime))
        return found


@pytest.fixture
def machines(sweep_dir: Path, postgres_url: str) -> Iterator[Machines]:
    """A holding both cells at their first checkpoint, B's two workers joined and settled."""
    name = "apart"
    storage = sweep_dir / "shared-storage"
    storage.mkdir()
    write(sweep_dir / "gated.py", GATED)
    for cell in CELLS:
        write(sweep_dir / f"gate-{cell}", "")
    text = SPEC.format(
        name=name, url=postgres_url, storage=storage, renew=RENEW_S, expire=EXPIRE_S, steps=STEPS, every=EVERY
    )
    spec = write(sweep_dir / "apart.yaml", text)
    a_root, b_root = sweep_dir / "machine-a", sweep_dir / "machine-b"
    a = start("launch", str(spec), "--root", str(a_root), "--workers", "2", "--no-live", cwd=sweep_dir)
    m = Machines(name, postgres_url, sweep_dir, storage, a_root, b_root, a, [])
    wait_for(lambda: all(m.stored(c).committed_steps() for c in CELLS) or a.poll() is not None, what="A held")
    assert a.poll() is None, a.communicate()[0]
    for k in (1, 2):
        joined = ("--root", str(b_root), "--database", postgres_url, "--sweep", name, "--name", f"b{k}")
        m.b.append(start("worker", *joined, cwd=sweep_dir))
    wait_for(lambda: (b_root / "database.json").exists(), what="B joined")
    # One full term of B's own before A is struck: a reaper that just connected takes no expired lease
    # for that long (an outage must not turn into reclaims), and the bound below is the lease's alone.
    time.sleep(EXPIRE_S + RENEW_S)
    assert all(p.poll() is None for p in m.b) and a.poll() is None
    yield m


def reference_w(seed: int) -> torch.Tensor:
    torch.manual_seed(seed)
    w = torch.zeros(8)
    for _ in range(STEPS):
        w = w + torch.randn(8) * 1.0
    return w


def check_bit_exact(m: Machines) -> None:
    """Each cell ends as an uninterrupted run would: its result, and its final weights in the storage."""
    status = {c["cell"]: c for c in cli_json("status", "--root", str(m.b_root))}
    for seed, cell in zip((1, 2), CELLS, strict=True):
        assert status[cell]["state"] == "done", status[cell]
        assert status[cell]["metrics"]["w_sum"] == expected_w_sum(seed, STEPS), status[cell]
        final = load_file(str(m.stored(cell).checkpoint(STEPS) / "tensors.safetensors"))["/w"]
        assert torch.equal(final, reference_w(seed)), (cell, final)


def by_cell(m: Machines) -> dict[str, list[dict]]:
    rows: dict[str, list[dict]] = {}
    for r in attempts(m.url, m.name):
        rows.setdefault(r["cell_id"], []).append(r)
    return rows


@pytest.mark.slow
def test_a_machine_killed_mid_training_is_reclaimed_within_its_lease_and_resumed_bit_exactly(
    machines: Machines,
) -> None:
    m = machines
    for p in machine_processes([m.a.pid]):  # a power cut: the launch, its workers, templates and attempts
        p.send_signal(signal.SIGKILL)
    m.a.wait(timeout=60)
    m.open_gates()  # B's attempts train through
    m.finish()

    rows = by_cell(m)
    bound = EXPIRE_S + RENEW_S + FEW_S
    for cell in CELLS:
        first, second = rows[cell]
        assert first["reason"] == "lost" and not first["worker"].startswith("b"), first  # A's, reaped
        assert second["reason"] == "completed" and second["worker"] in ("b1", "b2"), second
        # From A's last sign of life (the end the reaper gave its attempt) to B's attempt: the lease's term.
        gap = (second["started_at"] - first["ended_at"]).total_seconds()
        assert 0 < gap <= bound, f"{cell}: reclaimed {gap:.1f} s after A's last sign of life (bound {bound} s): {rows}"
        assert second["start_step"] == EVERY, second  # resumed from A's checkpoint in the storage
    assert not overlaps(attempts(m.url, m.name))
    check_bit_exact(m)


@pytest.mark.slow
def test_a_frozen_machine_thawed_after_its_cells_moved_on_writes_nothing_that_is_trusted(
    machines: Machines,
) -> None:
    m = machines
    with paused(machine_processes([m.a.pid])):
        m.open_gates()
        # B reaps A's cells once their leases expire, resumes them and commits checkpoints of its own.
        wait_for(
            lambda: all(any(man["attempt"] == 2 for man, _ in m.manifests(c)) for c in CELLS),
            what="B's checkpoints of both cells",
        )
        thawed_at = time.time()
    m.finish()
    out, _ = m.a.communicate(timeout=300)
    assert m.a.returncode == 0, out

    rows = by_cell(m)
    for cell in CELLS:
        first, second = rows[cell]
        assert first["reason"] == "lost" and second["reason"] == "completed", rows[cell]  # A's close refused
        assert second["worker"] in ("b1", "b2") and second["start_step"] == EVERY, second
        # Nothing A's attempt wrote after the thaw is in the storage: the fence refused each commit.
        late = [(man["step"], at) for man, at in m.manifests(cell) if man["attempt"] == 1 and at >= thawed_at]
        assert not late, f"{cell}: checkpoints of the superseded attempt committed after the thaw: {late}"
        for root in (m.a_root, m.b_root, m.storage):  # no DONE.json of A's attempt anywhere
            done = CellPaths(root, cell).done
            assert not done.exists() or json.loads(done.read_text())["attempt"] == 2, done
        # A's training process was refused, and said so in its own log or receipt.
        said = [CellPaths(m.a_root, cell).stderr(1), CellPaths(m.a_root, cell).receipt(1), m.stored(cell).receipt(1)]
        words = "".join(p.read_text() for p in said if p.exists())
        assert "attempt 1 no longer owns the cell" in words, words[-3000:]
    assert cell_states(m.url, m.name) == dict.fromkeys(CELLS, "done")
    assert not overlaps(attempts(m.url, m.name))
    logs = "".join(p.read_text() for p in (m.a_root / ".sweepq" / "logs").glob("worker-*.log"))
    assert "is no longer this worker's" in logs, logs  # A's holders found their leases gone
    check_bit_exact(m)
