"""The training process of one attempt: `python -m sweepq.execution.attempt <attempt.json>`.

Started by a worker with the cell's locked descriptor (so the lock lives as
long as this process) and a channel to report on. It runs `train(cfg, run)`
in-process, or the user's program as a child, classifies how the attempt
ended, writes DONE.json on completion and always a receipt file, then exits.
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

from sweepq.atomic import atomic_write_json
from sweepq.checkpoint import manifest, marker
from sweepq.execution import fingerprint
from sweepq.execution.channel import Channel
from sweepq.execution.procs import die_with_parent, orphaned
from sweepq.execution.run import AttemptSpec, DataError, NonFiniteLoss, Run
from sweepq.layout import CellPaths
from sweepq.queue.lock import ENV_LOCK_FD, verify_inherited
from sweepq.queue.records import Outcome
from sweepq.queue.states import Reason
from sweepq.spec.sweep import Settings

EXIT_CODES = {Reason.COMPLETED: 0, Reason.PREEMPTED: 75}  # 75: EX_TEMPFAIL, "run me again"
TAIL_LINES = 40


def tail(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


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


def classify_exception(e: BaseException, run: Run | None) -> Outcome:
    tb = tail("".join(traceback.format_exception(e)))
    import torch

    if isinstance(e, NonFiniteLoss) or (run is not None and run.nan_step is not None):
        step = e.step if isinstance(e, NonFiniteLoss) else run.nan_step  # type: ignore[union-attr]
        return Outcome(Reason.NAN, error_tail=tb, nan_step=step, note=f"non-finite loss at step {step}")
    if isinstance(e, DataError):
        return Outcome(Reason.DATA_ERROR, error_tail=tb)
    if isinstance(e, (MemoryError, torch.cuda.OutOfMemoryError)):
        return Outcome(Reason.OOM, error_tail=tb, note=f"{type(e).__name__} raised in the training process")
    return Outcome(Reason.ERROR, error_tail=tb)


def run_train(spec: AttemptSpec, settings: Settings, channel: Channel) -> tuple[Outcome, Run | None]:
    run: Run | None = None
    try:
        func = import_entry(settings.train or "", settings.spec_dir)
        run = Run(spec, channel)
        result = func(dict(spec.cfg), run)
    except BaseException as e:
        if run is not None:
            _close_quietly(run)
        if signals.requested() and not isinstance(e, (NonFiniteLoss, DataError, MemoryError)):
            return Outcome(
                Reason.PREEMPTED,
                error_tail=tail("".join(traceback.format_exception(e))),
                note="stopped by a signal; the training code raised while stopping",
            ), run
        return classify_exception(e, run), run
    if run.nan_step is not None:  # the training code swallowed NonFiniteLoss
        _close_quietly(run)
        return Outcome(Reason.NAN, nan_step=run.nan_step, note=f"non-finite loss at step {run.nan_step}"), run
    reached_end = run.total_steps is not None and run.last_step >= run.total_steps
    if signals.requested() and not reached_end:
        _close_quietly(run)
        return Outcome(Reason.PREEMPTED, note=_stop_note()), run
    run.close(completed=True)
    return Outcome(Reason.COMPLETED, metrics=_metrics(result)), run


def _stop_note() -> str:
    return f"{signals.describe()} received; emergency checkpoint written by the training code"


def _close_quietly(run: Run) -> None:
    try:
        run.close(completed=False)
    except Exception:
        traceback.print_exc()


def _metrics(result: Any) -> Any:
    if result is None:
        return None
    if isinstance(result, dict):
        from sweepq.execution.run import _scalar

        return {str(k): _scalar(v) for k, v in result.items()}
    return {"result": str(result)}


def finish_done(spec: AttemptSpec, run: Run | None, outcome: Outcome) -> None:
    """The marker goes down after the final checkpoint and before anyone tells the database."""
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
    spec = AttemptSpec.load(Path(argv[0]))
    die_with_parent(spec.worker_pid)
    verify_inherited(int(os.environ[ENV_LOCK_FD]))
    settings = Settings.from_json(spec.settings)
    paths = CellPaths(Path(spec.root), spec.cell)
    channel = Channel.from_env()
    manifest.clean_partial(paths.checkpoints)
    started = time.time()
    gpus = gpus_seen()
    spec.fingerprints = {
        "code": fingerprint.code(settings.train, settings.program, settings.spec_dir),
        "data": fingerprint.data(settings.data),
    }
    channel.send(
        "started",
        pid=os.getpid(),
        gpus=gpus,
        environment=fingerprint.environment(),
        code_fingerprint=spec.fingerprints["code"],
        data_fingerprint=spec.fingerprints["data"],
    )
    if settings.train:
        outcome, run = run_train(spec, settings, channel)
    else:
        from sweepq.execution.program import run_program

        outcome, run = run_program(spec, settings, channel)
    if outcome.reason == Reason.COMPLETED:
        finish_done(spec, run, outcome)
    rss, gpu_peak = peak_memory()
    outcome.pid = os.getpid()
    outcome.gpus = gpus
    outcome.wall_seconds = time.time() - started
    outcome.gpu_seconds = outcome.wall_seconds * len(gpus)
    outcome.peak_memory_bytes = max(rss, outcome.peak_memory_bytes or 0)
    outcome.peak_gpu_memory_bytes = gpu_peak
    if run is not None:
        outcome.end_step = run.last_step
        outcome.start_step = run.start_step
        outcome.start_checkpoint_sha = run.start_sha
    atomic_write_json(paths.receipt(spec.attempt), outcome.to_json())
    channel.send("end", outcome=outcome.to_json())
    if orphaned(spec.worker_pid):
        close_as_orphan(spec, outcome)
    sys.stdout.flush()
    sys.stderr.flush()
    if not settings.train:
        from sweepq.execution.program import exit_like

        return exit_like(outcome)  # the program's exit code or signal, for the receipt
    return EXIT_CODES.get(Reason(outcome.reason), 1)


if __name__ == "__main__":
    code = main()
    # os._exit: skip interpreter teardown (and any non-daemon thread a training
    # library left behind) now that every file is durable.
    os._exit(code)
