"""A program cell's attempt reads the cell's checkpoints as it may trust them (checkpoint/witnessed.py).

A superseded attempt's commit that landed after the queue closed it (no row of the queue vouches for
it) is hidden from every read of the attempt that owns the cell now: from the checkpoint its program
resumes ($SWEEPQ_RESUME_CHECKPOINT), from the newest step its receipt reports, and from the checkpoint
DONE.json names. Real files in a real folder; the attempt's own code paths, in process.
"""

from __future__ import annotations

import json
from pathlib import Path

from sweepq.attempt.main import _write_done
from sweepq.checkpoint import storage
from sweepq.checkpoint.manifest import FORMAT
from sweepq.layout import CellPaths
from sweepq.program.launch import resume_checkpoint, trusted_checkpoints
from sweepq.program.supervisor import ProgramRun
from sweepq.queue.records import Outcome
from sweepq.queue.states import Reason
from sweepq.spec.types import Settings
from sweepq.wire.attempt_spec import AttemptSpec


def commit(paths: CellPaths, step: int, attempt: int) -> str:
    """Commit `step` as attempt `attempt`'s writer would; the manifest's sha256."""
    staged = storage.for_cell(paths, None).stage(step)
    written = staged.write({"state.bin": [memoryview(f"step {step}".encode())]})
    files = {name: {"sha256": sha, "size": size} for name, (sha, size) in written.items()}
    m = {"format": FORMAT, "kind": "files", "step": step, "created_at": "2026-11-28T12:00:00Z", "files": files}
    assert staged.commit((json.dumps({**m, "attempt": attempt}, sort_keys=True) + "\n").encode())
    return storage.for_cell(paths, None).read_manifest(step)[1]


def test_a_late_commit_of_a_superseded_attempt_is_in_no_read_of_the_program_cells_attempt(tmp_path: Path) -> None:
    paths = CellPaths(tmp_path / "root", "1.1")
    paths.dir.mkdir(parents=True)
    sha8 = commit(paths, 8, attempt=1)  # closed with attempt 1: the queue's row vouches for it
    commit(paths, 12, attempt=1)  # landed after the close: no row
    settings = Settings(name="s", form="grouped", spec_dir=str(tmp_path), program="p.py")
    spec = AttemptSpec(
        root=str(paths.root), cell="1.1", attempt=2, cfg={}, cfg_hash="h", settings=settings.to_json(),
        witnessed=[[8, 1, sha8]],
    )  # fmt: skip
    assert storage.for_cell(paths, None).steps() == [12, 8]  # both are sound commits

    assert trusted_checkpoints(spec, paths).steps() == [8]
    assert resume_checkpoint(spec, paths).endswith("step-8")
    run = ProgramRun.from_report(paths, {}, trusted_checkpoints(spec, paths))
    assert run.last_step == 8 and (run.newest_committed() or (None,))[0] == 8

    for reported in (run, None):  # a program that reported its outcome, and one that did not
        _write_done(spec, reported, Outcome(reason=Reason.COMPLETED))
        done = json.loads(paths.done.read_text())
        assert (done["attempt"], done["checkpoint"]) == (2, "checkpoints/step-8"), done
