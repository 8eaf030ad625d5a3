"""Run's checkpoints of files another library wrote: `Run.resume_path` and `Run.commit_files`.

The same bookkeeping as a state checkpoint (fencing, superseding an abandoned
timeline, retention, the messages the worker records), with the bytes kept
as the library wrote them (checkpoint/files.py). The copy is made on the
training thread: the library just wrote the files synchronously, and may
delete or rewrite them as soon as control returns to it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweepq.checkpoint import files
from sweepq.checkpoint.manifest import CheckpointCorrupt
from sweepq.wire.messages import Fresh

if TYPE_CHECKING:
    from sweepq.run.run import Run


def resume(run: Run) -> Path | None:
    """The newest verified files checkpoint (within a rollback's limit), reported as the attempt's start."""
    max_step = run._committed.rollback_limit(run._spec.nan_step)
    for step in run._checkpoints.steps():
        if max_step is not None and step > max_step:
            continue
        try:
            found = files.verified(run._checkpoints, step)
        except CheckpointCorrupt as e:
            run._report_corrupt(step, e.why, run._checkpoints.quarantine(step))
            continue
        run._committed.supersede_after(found.step, "abandoned: the attempt resumed from an earlier step")
        run._resumed_from(found.step, found.manifest_sha256, found.path, found.manifest, max_step is not None)
        return found.path
    run._channel.send(Fresh(rollback=max_step is not None, none_verified=bool(run.corrupt)))
    return None


def commit(run: Run, step: int, given: Path | dict[str, Path], metrics: dict[str, Any]) -> bool:
    sources = files.sources_of(given)
    run.last_step = max(run.last_step, step)
    if metrics:
        run._check_finite(step, metrics)
        run._track_best(step, metrics)
    if step <= run._cadence.last_scheduled:
        return False
    t0 = time.perf_counter()
    run._writer.flush()  # a state checkpoint in flight commits first: commits stay in step order
    run._committed.supersede_after(step - 1, "abandoned: training restarted from an earlier step")
    run._history.sync()  # the points up to this step are on the disk before it commits
    run._after_commit(files.write_files_checkpoint(run._checkpoints, step, sources, run._meta(metrics)))
    run._cadence.last_scheduled = step
    run._cadence.paused(time.perf_counter() - t0)
    run._send_log()  # progress shown at least up to the step kept (logs otherwise wait for the next log call)
    return True
