"""The training process of one attempt: `python -m sweepq.execution.attempt <attempt.json>`.

Started by a worker with the cell's locked descriptor (so the lock lives as
long as this process) and a channel to report on. It runs `train(cfg, run)`
in-process, or the user's program as a child, tells how the attempt ended
(by the rules of sweepq.outcome), writes DONE.json on completion and always a receipt file, then exits.
If its worker died meanwhile (it then got SIGTERM from the kernel), it closes
its own attempt in the database before exiting, so the receipt is written
before the last process of the sweep is gone.
"""

from __future__ import annotations

from sweepq.execution import signals

if __name__ == "__main__":
    # First thing, before the imports below load torch (a second or more): a
    # SIGTERM during start-up must be a preemption, not a death.
    signals.install()

import importlib
import os
import resource
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from sweepq.checkpoint import marker, storage
from sweepq.checkpoint.fenced import FenceCheck, FencedStorage
from sweepq.evidence import Evidence, Witness
from sweepq.execution import fingerprint, program
from sweepq.execution.attempt_spec import AttemptSpec
from sweepq.execution.channel import Channel
from sweepq.execution.diskfull import Reserve, disk_error, guard_streams, write_receipt
from sweepq.execution.errors import raised
from sweepq.execution.messages import Ended, Started
from sweepq.execution.metrics import plain
from sweepq.execution.procs import die_with_parent, orphaned
from sweepq.execution.run import Run
from sweepq.layout import CellPaths
from sweepq.outcome import EXIT_PREEMPTED, decide
from sweepq.queue import liveness
from sweepq.queue.fence import Fence, Fenced
from sweepq.queue.records import Outcome
from sweepq.queue.states import Reason
from sweepq.spec.sweep import Settings

EXIT_CODES = {Reason.COMPLETED: 0, Reason.PREEMPTED: EXIT_PREEMPTED}  # EX_TEMPFAIL: "run me again"


def gpus_seen() -> list[dict[str, Any]]:
    import torch

    if not torch.cuda.is_available():
        return []
    return [{"index": i, "name": torch.cuda.get_device_name(i)} for i in range(torch.cuda.device_count())]


def peak_memory() -> tuple[int, int | None]:
    import torch

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    gpu = None
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        gpu = sum(torch.cuda.max_memory_allocated(i) for i in range(torch.cuda.device_count()))
    return rss, gpu


def import_entry(train: str, spec_dir: str) -> Any:
    """Import `module:function` with the sweep file's folder first on sys.path."""
    module_name, _, func_name = train.partition(":")
    if spec_dir not in sys.path:
        sys.path.insert(0, spec_dir)
    module = importlib.import_module(module_name)
    func = getattr(module, func_name, None)
    if not callable(func):
        raise AttributeError(f"{module_name} has no function {func_name!r} (from train: {train})")
    return func


def run_train(
    spec: AttemptSpec, settings: Settings, channel: Channel, fence: FenceCheck | None = None
) -> tuple[Outcome, Run | None]:
    run: Run | None = None
    try:
        func = import_entry(settings.train or "", settings.spec_dir)
        run = Run(spec, channel, fence)
        result = func(dict(spec.cfg), run)
    except BaseException as e:
        if run is not None:
            _close_quietly(run)
        return _judged(run, raised=raised(e)), run
    outcome = _judged(run, finished=True, metrics=_metrics(result))
    if outcome.reason != Reason.COMPLETED:
        failed = _close_quietly(run)  # a full disk refused the emergency checkpoint: say so
        if failed is not None and disk_error(failed) is not None:
            return _judged(run, raised=raised(failed)), run
        return outcome, run
    try:
        run.close(completed=True)  # the final checkpoint: its failure is the attempt's
    except Exception as e:
        traceback.print_exc()
        return _judged(run, raised=raised(e)), run
    return outcome, run


def _judged(run: Run | None, **seen: Any) -> Outcome:
    """How training ended, by the rules of sweepq.outcome (Witness.TRAINING)."""
    total = run.total_steps if run is not None else None
    outcome = decide(
        Evidence(
            Witness.TRAINING,
            nan_step=run.nan_step if run is not None else None,
            reached_end=run is not None and total is not None and run.last_step >= total,
            step=run.last_step if run is not None else None,
            total_steps=total,
            stop_requested=signals.requested(),
            stop_signal=signals.first_signal(),
            **seen,
        )
    )
    assert outcome is not None  # training evidence always has a verdict
    return outcome


def _close_quietly(run: Run) -> Exception | None:
    try:
        run.close(completed=False)
    except Exception as e:
        traceback.print_exc()
        return e
    return None


def _metrics(result: Any) -> dict[str, Any] | None:
    if result is None:
        return None
    if isinstance(result, dict):
        return plain(result)
    return {"result": str(result)}


def finish_done(spec: AttemptSpec, run: Run | program.ProgramRun | None, outcome: Outcome, fence: Fence) -> Outcome:
    """The marker goes down after the final checkpoint and before anyone tells the database.

    Fenced: an attempt that lost its cell meanwhile writes no marker, and its
    outcome says why (its receipt is its own; the queue already moved on).
    """
    try:
        fence.check("DONE.json")
    except Fenced as e:
        print(f"sweepq: {e}", file=sys.stderr, flush=True)
        return _judged(run if isinstance(run, Run) else None, raised=raised(e))
    _write_done(spec, run, outcome)
    return outcome


def _write_done(spec: AttemptSpec, run: Run | program.ProgramRun | None, outcome: Outcome) -> None:
    paths = CellPaths(Path(spec.root), spec.cell)
    newest = run.newest_committed() if run is not None else None
    newest_step = newest[0] if newest else _newest_on_disk(paths)
    marker.write_done(
        paths,
        cfg_hash=spec.cfg_hash,
        metrics=outcome.metrics,
        checkpoint_step=newest_step,
        attempt=spec.attempt,
        step=run.last_step if run is not None else newest_step,
        epoch=run.epoch if run is not None else None,
        best=run.best if run is not None else None,
        best_step=run.best_step if run is not None else None,
    )


def _newest_on_disk(paths: CellPaths) -> int | None:
    steps = paths.committed_steps()
    return steps[0] if steps else None


def close_as_orphan(spec: AttemptSpec, outcome: Outcome) -> None:
    """Our worker is gone: record our own receipt in the database."""
    from sweepq.queue.reaper import finish_attempt
    from sweepq.queue.store import Store

    store = Store.open(Path(spec.root))
    try:
        finish_attempt(store, spec.cell, spec.attempt, outcome)
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    signals.install()
    guard_streams()  # its logs are on the sweep's disk: a full one must not raise from a print
    spec = AttemptSpec.load(Path(argv[0]))
    die_with_parent(spec.worker_pid)
    # Before anything of the cell is touched: never a second writer.
    owner = liveness.for_root(Path(spec.root)).inherit(spec.cell)
    if owner is None:
        raise liveness.OwnershipLost(f"started without the ownership of cell {spec.cell} (only a worker starts this)")
    fence = Fence(Path(spec.root), spec.cell, spec.attempt, owner)
    settings = Settings.from_json(spec.settings)
    paths = CellPaths(Path(spec.root), spec.cell)
    channel = Channel.from_env()
    reserve = Reserve.beside(paths.receipt(spec.attempt))  # room for the receipt should the disk fill up
    FencedStorage(storage.for_cell(paths), fence.check).clean_partial()
    started_here = time.monotonic()  # when the worker did not say when it started us
    gpus = gpus_seen()
    spec.fingerprints = {
        "code": fingerprint.code(settings.train, settings.program, settings.spec_dir),
        "data": fingerprint.data(settings.data),
    }
    channel.send(
        Started(
            pid=os.getpid(),
            gpus=gpus,
            environment=fingerprint.environment(),
            code_fingerprint=spec.fingerprints["code"],
            data_fingerprint=spec.fingerprints["data"],
        )
    )
    run: Run | program.ProgramRun | None
    if settings.train:
        outcome, run = run_train(spec, settings, channel, fence.check)
    else:
        outcome, run = program.run_program(spec, settings, channel)
    if outcome.reason == Reason.COMPLETED:
        try:
            outcome = finish_done(spec, run, outcome, fence)
        except OSError as e:  # a full disk refused DONE.json: the next attempt only writes it
            if disk_error(e) is None:
                raise
            outcome = _judged(run if isinstance(run, Run) else None, raised=raised(e))
    rss, gpu_peak = peak_memory()
    outcome.pid = os.getpid()
    outcome.gpus = gpus
    # From the worker's start of this process, as max_attempt_seconds counts: interpreter
    # and torch start-up included (seconds, on a busy machine).
    outcome.wall_seconds = spec.seconds_since_start(started_here)
    outcome.gpu_seconds = outcome.wall_seconds * len(gpus)
    outcome.peak_memory_bytes = max(rss, outcome.peak_memory_bytes or 0)
    outcome.peak_gpu_memory_bytes = gpu_peak
    if run is not None:
        outcome.end_step = run.last_step
        outcome.start_step = run.start_step
        outcome.start_checkpoint_sha = run.start_sha
    write_receipt(paths.receipt(spec.attempt), outcome.to_json(), reserve)  # with the reserve on a full disk
    channel.send(Ended(outcome=outcome.to_json()))
    if orphaned(spec.worker_pid):
        close_as_orphan(spec, outcome)
    sys.stdout.flush()
    sys.stderr.flush()
    if not settings.train:
        return program.exit_like(outcome)  # the program's exit code or signal, for the receipt
    return EXIT_CODES.get(Reason(outcome.reason), 1)


if __name__ == "__main__":
    code = main()
    # os._exit: skip interpreter teardown (and any non-daemon thread a training
    # library left behind) now that every file is durable.
    os._exit(code)
