"""The training process of one attempt: `python -m sweepq.attempt <attempt.json>` (__main__.py).

Started by a worker with the cell's locked descriptor (so the lock lives as
long as this process) and a channel to report on. It runs `train(cfg, run)`
in-process, or the user's program as a child, tells how the attempt ended
(by the rules of sweepq.outcome), writes DONE.json on completion and always a receipt file, then exits.
If its worker died meanwhile (it then got SIGTERM from the kernel), it closes
its own attempt in the database before exiting, so the receipt is written
before the last process of the sweep is gone.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sweepq.attempt.judge import Trained, judged
from sweepq.checkpoint import marker, storage
from sweepq.checkpoint.fenced import FencedStorage
from sweepq.durable import files as durable_files
from sweepq.durable import opening as durable_opening
from sweepq.durable.shipping import Shipper
from sweepq.host import logkeeper, signals
from sweepq.host.diskfull import Reserve, disk_error, guard_streams, write_receipt
from sweepq.host.procs import die_with_parent, orphaned
from sweepq.layout import CellPaths
from sweepq.outcome import EXIT_PREEMPTED
from sweepq.program import supervisor as program
from sweepq.program.launch import trusted_checkpoints
from sweepq.queue import liveness
from sweepq.queue.fence import Fence, Fenced
from sweepq.queue.records import Outcome
from sweepq.queue.states import Reason
from sweepq.run import fingerprint
from sweepq.run.errors import raised
from sweepq.spec.sweep import Settings
from sweepq.wire.attempt_spec import AttemptSpec
from sweepq.wire.channel import Channel
from sweepq.wire.messages import Ended, Started

EXIT_CODES = {Reason.COMPLETED: 0, Reason.PREEMPTED: EXIT_PREEMPTED}  # EX_TEMPFAIL: "run me again"


def gpus_seen() -> list[dict[str, Any]]:
    """The GPUs this attempt may use. A program cell's supervisor never loads torch (its program
    does): it counts the devices CUDA_VISIBLE_DEVICES names, or those nvidia-smi lists."""
    torch = sys.modules.get("torch")
    if torch is not None:
        if not torch.cuda.is_available():
            return []
        return [{"index": i, "name": torch.cuda.get_device_name(i)} for i in range(torch.cuda.device_count())]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [{"index": i, "name": None} for i, d in enumerate(visible.split(",")) if d.strip() not in ("", "-1")]
    try:
        listed = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    rows = [line.split(",", 1) for line in listed.stdout.splitlines() if "," in line] if listed.returncode == 0 else []
    return [{"index": int(i), "name": name.strip()} for i, name in rows if i.strip().isdigit()]


def peak_memory() -> tuple[int, int | None]:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    torch = sys.modules.get("torch")  # loaded by train cells only
    gpu = None
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        gpu = sum(torch.cuda.max_memory_allocated(i) for i in range(torch.cuda.device_count()))
    return rss, gpu


def finish_done(spec: AttemptSpec, run: Trained | program.ProgramRun | None, outcome: Outcome, fence: Fence) -> Outcome:
    """The marker goes down after the final checkpoint and before anyone tells the database.

    Fenced: an attempt that lost its cell meanwhile writes no marker, and its
    outcome says why (its receipt is its own; the queue already moved on).
    """
    try:
        fence.check("DONE.json")
    except Fenced as e:
        print(f"sweepq: {e}", file=sys.stderr, flush=True)
        return judged(None if isinstance(run, program.ProgramRun) else run, raised=raised(e))
    _write_done(spec, run, outcome)
    return outcome


def _write_done(spec: AttemptSpec, run: Trained | program.ProgramRun | None, outcome: Outcome) -> None:
    paths = CellPaths(Path(spec.root), spec.cell)
    checkpoints = trusted_checkpoints(spec, paths)  # a superseded attempt's late commit is not ours
    newest = run.newest_committed() if run is not None else None
    newest_step = newest[0] if newest else _newest_committed(checkpoints)
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
        checkpoints=checkpoints,
        files=durable_opening.for_cell(paths, Settings.from_json(spec.settings).storage),
    )


def _newest_committed(checkpoints: storage.CheckpointStorage) -> int | None:
    steps = checkpoints.steps()
    return steps[0] if steps else None


def _to_storage(shipper: Shipper, files: durable_files.CellFiles, paths: CellPaths, number: int) -> None:
    """The last of the history and the logs, then the receipt, in the sweep's storage. The queue has the
    receipt too (the Ended message): a storage that refuses them now costs the files, never the attempt."""
    try:
        shipper.finish()
        files.put(f"attempts/{number}/receipt.json", paths.receipt(number).read_bytes())
    except Exception as e:
        print(f"sweepq: attempt {number}'s files did not all reach the sweep's storage: {e}", file=sys.stderr)


def close_as_orphan(spec: AttemptSpec, outcome: Outcome) -> None:
    """Our worker is gone: record our own receipt in the database."""
    from sweepq.queue.reaper import finish_attempt
    from sweepq.queue.store import Store

    store = Store.open(Path(spec.root))
    try:
        finish_attempt(store, spec.cell, spec.attempt, outcome)
    finally:
        store.close()


def main(argv: list[str] | None = None, started_by: str = "interpreter") -> int:
    """One attempt; `started_by` says how this process began: a fresh interpreter or a fork of the
    worker's template (worker/template.py), which the receipt keeps."""
    argv = sys.argv[1:] if argv is None else argv
    signals.install()
    guard_streams()  # its logs are on the sweep's disk: a full one must not raise from a print
    logkeeper.capture()  # its logs keep their head and tail, however much is printed (a flood ends it)
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
    FencedStorage(storage.for_cell(paths, settings.storage), fence.check).clean_partial()
    # The history and the logs copied to the sweep's storage as they grow, when it is not this root.
    files = durable_opening.for_cell(paths, settings.storage)
    shipper = (
        None if durable_files.is_root(files, paths) else Shipper(files, paths.attempt_dir(spec.attempt), spec.attempt)
    )
    if shipper is not None:
        shipper.start()
    started_here = time.monotonic()  # when the worker did not say when it started us
    # A train: cell of several processes runs its ranks as a program's (program/ranks.py): each rank
    # calls train(cfg, run) in its own process, and this one supervises them.
    in_process = bool(settings.train) and settings.processes_of(spec.cell) == 1
    if in_process:
        from sweepq.attempt import training  # torch and the user's code: only train cells load them
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
    run: Trained | program.ProgramRun | None
    if in_process:
        try:
            logkeeper.start_raising()  # a train loop that floods its logs is stopped with LogFlood
            outcome, run = training.run_train(spec, settings, channel, fence.check)
        finally:
            logkeeper.stop_raising()
        flood = logkeeper.flood_words()
        if flood is not None and outcome.reason != Reason.COMPLETED:
            outcome = judged(run, flooded=flood)
    else:
        outcome, run = program.run_program(spec, settings, channel)
    if outcome.reason == Reason.COMPLETED:
        try:
            outcome = finish_done(spec, run, outcome, fence)
        except OSError as e:  # a full disk refused DONE.json: the next attempt only writes it
            if disk_error(e) is None:
                raise
            outcome = judged(None if isinstance(run, program.ProgramRun) else run, raised=raised(e))
    rss, gpu_peak = peak_memory()
    outcome.pid = os.getpid()
    outcome.started_by = started_by
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
    logkeeper.finish()  # the logs as they stay, before anyone reads them for this attempt
    write_receipt(paths.receipt(spec.attempt), outcome.to_json(), reserve)  # with the reserve on a full disk
    if shipper is not None:
        _to_storage(shipper, files, paths, spec.attempt)
    channel.send(Ended(outcome=outcome.to_json()))
    if orphaned(spec.worker_pid):
        close_as_orphan(spec, outcome)
    sys.stdout.flush()
    sys.stderr.flush()
    if not in_process:
        return program.exit_like(outcome)  # the program's exit code or signal, for the receipt
    return EXIT_CODES.get(Reason(outcome.reason), 1)
