"""The `Run` object that training code receives: restore, checkpoint, log, should_stop; resume_path and
commit_files for libraries that checkpoint in their own format.

    def train(cfg: dict, run: sweepq.Run) -> dict | None:
        state = {"model": model, "optimizer": opt, "loader": loader, "step": 0}
        run.restore(state)                      # False when the cell starts fresh
        for batch in loader: ...
            run.log(step, loss=loss)
            if run.should_stop:                 # a preemption signal arrived
                run.checkpoint(state, step, force=True)
                return None
            run.checkpoint(state, step)         # commits when the cadence says so

It runs in the training process and knows nothing of the database: it writes
checkpoints (the lock holder is the only writer) and reports to its worker
over the channel. A program started as a subprocess gets the same object from
`Run.from_env()`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from sweepq.checkpoint import commit as checkpoint
from sweepq.checkpoint import files as library_files
from sweepq.checkpoint import serialize, snapshot, storage
from sweepq.checkpoint.commit import Committed
from sweepq.checkpoint.fenced import FenceCheck, FencedStorage
from sweepq.checkpoint.image import Files
from sweepq.checkpoint.manifest import CheckpointCorrupt
from sweepq.checkpoint.witnessed import Witnessed
from sweepq.errors import SweepqError
from sweepq.host import signals
from sweepq.layout import CellPaths
from sweepq.run import collective, fingerprint, history_writer, reporter
from sweepq.run.cadence import Cadence
from sweepq.run.committed import CommittedSet
from sweepq.run.errors import DataError, NonFiniteLoss
from sweepq.run.metrics import check_finite, improved, plain
from sweepq.spec.sweep import CheckpointPolicy, Metric, Settings
from sweepq.wire.attempt_spec import ENV_ATTEMPT_FILE, AttemptSpec
from sweepq.wire.channel import Channel
from sweepq.wire.messages import Checkpointed, Corrupt, Fresh, Logged, Resumed, Total, Warned

RESUME_INEXACT = "resume_inexact"  # the event of Run.resume_inexact (queries.INEXACT_RESUMES reads it)
LOG_INTERVAL = 0.25


class Run:
    def __init__(self, spec: AttemptSpec, channel: Channel | None = None, fence: FenceCheck | None = None) -> None:
        """`fence` is asked before every change to the cell's checkpoints (a process started by a
        worker always has one: queue/fence.py); without it, as in tests, nothing is fenced."""
        self._spec = spec
        self.cell: str = spec.cell
        self.cfg: dict[str, Any] = spec.cfg
        self.attempt: int = spec.attempt
        self.previous_reason: str | None = spec.previous_reason
        self.root = Path(spec.root)
        self.paths = CellPaths(self.root, spec.cell)
        settings = Settings.from_json(spec.settings)
        self._policy: CheckpointPolicy = settings.checkpoint
        self._metric: Metric | None = settings.metric
        self._channel = channel or Channel(None)
        # `processes: N` of a `train:` cell: every rank has a Run; rank 0 decides and commits, the others
        # follow (collective.py). A follower reports nothing and writes nothing of the cell.
        self._ranks = collective.from_env()
        self._follower = self._ranks is not None and not self._ranks.is_main
        if self._follower:
            self._channel = Channel(None)
        self._snap = snapshot.Snapshotter()
        self._guard = snapshot.StepGuard()  # optimizer.step() waits for a late copy
        self._overlap = self._policy.overlap
        self._writer = checkpoint.AsyncWriter()
        self._cadence = Cadence(self._policy, self._writer)
        cell_storage = storage.for_cell(self.paths, settings.storage)
        fenced = cell_storage if fence is None else FencedStorage(cell_storage, fence)
        # Fencing at the storage: a late commit of a superseded attempt is never resumed from (witnessed.py).
        witnessed = None if spec.witnessed is None else Witnessed(fenced, spec.attempt, spec.witnessed)
        self._checkpoints = fenced if witnessed is None else witnessed
        self._committed = CommittedSet(self._checkpoints, self._channel)
        if witnessed is not None:
            self._say_unwitnessed(witnessed.unwitnessed)
        self._reporter: reporter.Reporter | None = None  # a program's (Run.from_env())
        self._state_ref: dict[str, Any] | None = None
        self._resume: tuple[Path | None] | None = None  # resume_path()'s answer, once asked
        self._history = history_writer.HistoryWriter(self.paths.metrics(spec.attempt), spec.cell, spec.attempt)
        self._pending: dict[str, Any] = {}
        self._last_send = 0.0
        self.start_step = 0
        self.start_sha: str | None = None
        self.last_step = 0
        self.epoch: float | None = None
        self.total_steps: int | None = None
        self.total_epochs: float | None = None
        self.best: float | None = None
        self.best_step: int | None = None
        self.nan_step: int | None = None
        self.final_metrics: dict[str, Any] | None = None
        # The sweep's metric in the best checkpoint handed to the writer, until the committed set holds it;
        # and the metrics last given to run.checkpoint, with their step (the final checkpoint keeps them).
        self._best_pending: float | None = None
        self._given: tuple[int, dict[str, Any]] | None = None
        self.corrupt: list[dict[str, Any]] = []
        self.warnings: list[str] = []

    # -- the public API ---------------------------------------------------------

    @property
    def rank(self) -> int:
        """This process's rank among the cell's processes (`processes: N`: torchrun's RANK); 0 alone."""
        return int(os.environ.get("RANK", "0"))

    @property
    def world_size(self) -> int:
        """How many processes the cell's attempt runs (`processes: N`: torchrun's WORLD_SIZE); 1 alone."""
        return int(os.environ.get("WORLD_SIZE", "1"))

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0, the one that reports, logs and commits checkpoints."""
        return self.rank == 0

    @property
    def keep_last(self) -> int:
        """How many of the newest committed checkpoints retention keeps (the sweep's `checkpoint.keep_last`)."""
        return self._policy.keep_last

    @property
    def should_stop(self) -> bool:
        """True once a preemption signal (SIGTERM, SIGINT, SIGUSR1, SIGUSR2, SIGHUP) arrived.

        In a `train:` cell of several processes each read is a meeting of the ranks (read it at the same
        points on every rank): True on every rank at the same read once a signal reached any of them.
        """
        if self._ranks is not None:
            return self._ranks.stop()
        return signals.requested()

    def restore(self, state: dict[str, Any], map_location: str | torch.device | None = None) -> bool:
        """Fill `state` in place from the newest verified checkpoint; False when starting fresh.

        Objects with `load_state_dict` are loaded, other entries replaced, and the
        RNG states (python, numpy, torch, CUDA) restored. A checkpoint that fails
        verification is moved aside and the previous one used.

        With several processes, call it on every rank: rank 0 chooses the checkpoint, every rank
        loads that one (the replicated state) and gets its own RNG states back.
        """
        if self._follower:
            return self._restore_follower(state, map_location)
        max_step = self._committed.rollback_limit(self._spec.nan_step)
        self._best_pending = None  # what is kept is what the committed set holds after the restore
        loaded = checkpoint.load_newest(self._checkpoints, max_step, on_corrupt=self._report_corrupt)
        self._state_ref = state
        if self._ranks is not None:  # the step every rank loads; -1: all start fresh
            self._ranks.decide("-1" if loaded is None else str(loaded.step))
        if loaded is None:
            self._channel.send(Fresh(rollback=max_step is not None, none_verified=bool(self.corrupt)))
            return False
        self._committed.supersede_after(loaded.step, "abandoned: the attempt resumed from an earlier step")
        tensors = loaded.state
        if map_location is not None:
            tensors = serialize.to_device(tensors, torch.device(map_location))
        serialize.load_into(state, tensors)
        if loaded.rng:
            serialize.restore_rng(loaded.rng)
        self._resumed_from(loaded.step, loaded.manifest_sha256, loaded.path, loaded.manifest, max_step is not None)
        return True

    def resume_path(self) -> Path | None:
        """The folder of the newest verified checkpoint kept by `commit_files`; None: start fresh.

        For libraries that checkpoint in their own format (sweepq.integrations):
        every file of the folder was just checked against its manifest, and a
        checkpoint that fails is moved aside and the previous one tried. Pass the
        folder (or a file in it) to the library's resume argument. Asked once per
        attempt; later calls return the same answer.
        """
        if self._resume is None:
            self._resume = (self._resume_files(),)
        return self._resume[0]

    def commit_files(self, step: int, files: Path | dict[str, Path], metrics: dict[str, Any] | None = None) -> bool:
        """Keep the files a library wrote for `step` as a committed, verified checkpoint; False when `step` is kept.

        `files` is a flat folder (a Hugging Face `checkpoint-N/`) or name -> path.
        They are copied (the library may rewrite or delete its own later), hashed
        and fsynced, then committed; retention applies as to run.checkpoint.
        """
        return self._commit_files(int(step), files, metrics or {})

    def resume_inexact(self, why: str) -> None:
        """Declare that this attempt's resume does not continue training exactly (its data order restarted).

        For a program whose loader cannot restore its position mid-epoch: the
        cell's result may differ from an uninterrupted run's. The attempt's
        receipt note, `sweepq status` and `sweepq best` flag the cell (event
        `resume_inexact`). Also printed to stderr.
        """
        note = f"inexact resume from step {self.start_step}: {why}"
        print(f"sweepq warning: {self.cell}: {note}", file=sys.stderr, flush=True)
        self.warnings.append(note)
        self._channel.send(Warned(event=RESUME_INEXACT, step=self.start_step, notes=[note]))

    def checkpoint_due(self, step: int) -> bool:
        """Whether the sweep's checkpoint policy asks for a checkpoint at `step` (for `commit_files` callers)."""
        return int(step) > self._cadence.last_scheduled and self._cadence.due(int(step))

    def checkpoint(
        self,
        state: dict[str, Any],
        step: int,
        metrics: dict[str, Any] | None = None,
        force: bool = False,
    ) -> bool:
        """Commit a checkpoint when the cadence says so (or `force`); True when one is taken.

        With the sweep's `metric:` (and `keep_best`, the default) a checkpoint whose `metrics`
        hold the metric better than every checkpoint the cell keeps is committed too, whatever
        the cadence: retention keeps it beside the newest `keep_last`, so `sweepq best` names a
        checkpoint that holds each cell's best. It costs a checkpoint only when the metric
        improves, the same as one at the cadence.
        The training loop pauses only while the tensors are copied into reusable
        CPU buffers; files, fsync and the commit happen on a background thread
        (one write at a time). At the cadence, the weights and optimizer state
        that only the optimizer writes are copied on that thread during the next
        forward/backward, and the next `optimizer.step()` waits for that copy
        (snapshot.py); a forced checkpoint copies everything before it returns.
        A step already committed is a no-op.

        With several processes it is a collective: call it on every rank with the same step. Rank 0
        decides (cadence, force, best) for all; when it takes one, every other rank hands rank 0 its
        RNG states and rank 0 commits the state (replicated: its own copy) with every rank's RNG in
        one checkpoint, so all of it commits together or none does.
        """
        step = int(step)
        self._state_ref = state
        self.last_step = max(self.last_step, step)
        if self._follower:
            return self._follow_checkpoint(step)
        if metrics:
            self._check_finite(step, metrics)
            self._track_best(step, metrics)
            self._given = (step, metrics)
        best = self._beats_kept_best(metrics) if metrics else None
        take = step > self._cadence.last_scheduled and (force or best is not None or self._cadence.due(step))
        if self._ranks is not None:
            self._ranks.decide("1" if take else "0")
        if not take:
            return False
        self._save(state, step, metrics or {}, overlap=not force, gather=self._ranks is not None)
        if best is not None:
            self._best_pending = best
        return True

    def log(self, step: int, **scalars: Any) -> None:
        """Record scalars at a step: shown by `sweepq status`, kept in the history (`epoch=` sets the epoch)."""
        step = int(step)
        self.last_step = max(self.last_step, step)
        if self._follower:  # rank 0's points are the cell's history
            self.epoch = float(scalars["epoch"]) if "epoch" in scalars else self.epoch
            return
        self._history.append(step, values := plain(scalars))  # first: a non-finite loss's point is history too
        self._check_finite(step, values)
        self.epoch = float(values["epoch"]) if "epoch" in values else self.epoch
        self._track_best(step, values)
        self._pending.update(values)
        if time.monotonic() - self._last_send >= LOG_INTERVAL:
            self._send_log()

    def set_total(self, steps: int, epochs: float | None = None) -> None:
        """Declare the cell's length, for progress and ETA."""
        self.total_steps = int(steps)
        self.total_epochs = None if epochs is None else float(epochs)
        self._channel.send(Total(steps=self.total_steps, epochs=self.total_epochs))

    def finish(self, metrics: dict[str, Any] | None = None) -> None:
        """Training completed: commit the last step and record the final metrics (kept in DONE.json).

        For programs using `Run.from_env()` (in-process `train` returns its metrics
        instead). Waits for the checkpoint in flight, commits a final checkpoint when
        the last step trained is newer than the last one committed, and tells sweepq
        that the program completed: the cell is done once the program exits 0.
        """
        self.final_metrics = plain(metrics or {})
        if self._state_ref is not None:  # the final checkpoint, even before the cadence's first
            self.checkpoint(self._state_ref, self.last_step, force=True)  # (a no-op when committed)
        self.close(completed=True)
        if self._reporter is not None:
            self._reporter.finished_with(self.final_metrics)

    def add_final_metrics(self, metrics: dict[str, Any]) -> None:
        """After `finish()`: add metrics measured once training completed (a test set's) to DONE.json's.

        Same names replace those given to `finish`. The cell's completion is
        unchanged; outside a subprocess cell only `final_metrics` changes.
        """
        if self.final_metrics is None:
            raise SweepqError("run.add_final_metrics() comes after run.finish(): training has not completed")
        self.final_metrics = {**self.final_metrics, **plain(metrics)}
        if self._reporter is not None:
            self._reporter.finished_with(self.final_metrics)

    @classmethod
    def from_env(cls, required: bool = True) -> Run | None:
        """The Run of a program that sweepq started as a subprocess cell (`program:`, W&B files).

        Same API as in-process training: restore, checkpoint, log, set_total,
        should_stop, plus `finish(metrics)` at the end. It installs the preemption
        signal handlers, and hooks that report how the program ended: an uncaught
        DataError, MemoryError or non-finite loss ends the attempt `data_error`,
        `oom` or `nan` as in-process, and the checkpoint being written when the
        program exits is waited for. Call it once, in one process (rank 0 under DDP).

        Outside sweepq it raises RuntimeError, or returns None when `required=False`
        (so one script runs both under sweepq and on its own).
        """
        existing = getattr(cls, "_from_env", None)
        if existing is not None:
            return existing
        path = os.environ.get(ENV_ATTEMPT_FILE)
        rank = os.environ.get("RANK", "0")
        ranked = bool(os.environ.get(collective.ENV_PORT))  # a train: cell's ranks: every rank has a Run
        if path and rank != "0" and not ranked:  # a cell's checkpoints have one writer: two would race
            raise RuntimeError(
                f"Run.from_env() on rank {rank}: under `processes:` only rank 0 holds the cell's Run (it reports, "
                "logs and commits checkpoints). Call it when RANK is 0, e.g. run = Run.from_env() if "
                "int(os.environ['RANK']) == 0 else None, and have the other ranks load what rank 0 restored"
            )
        if not path:
            if not required:
                return None
            raise RuntimeError(
                f"Run.from_env() found no {ENV_ATTEMPT_FILE}: this program was not started by sweepq "
                "(use Run.from_env(required=False) to run it on its own too)"
            )
        from sweepq.queue import liveness
        from sweepq.queue.fence import Fence

        signals.install()
        spec = AttemptSpec.load(Path(path))
        if rank != "0":  # a follower rank: it writes nothing of the cell, reports nothing, holds no lease
            run = cls(spec, None, None)
            Run._from_env = run  # type: ignore[attr-defined]
            return run
        owner = liveness.for_root(Path(spec.root)).inherit(spec.cell)  # never a second writer of its checkpoints
        fence = Fence(Path(spec.root), spec.cell, spec.attempt, owner).check if owner is not None else None
        run = cls(spec, Channel.from_env(), fence)
        run._reporter = reporter.attach(run)
        Run._from_env = run  # type: ignore[attr-defined]
        return run

    # -- used by the attempt runner ------------------------------------------------

    def close(self, completed: bool) -> None:
        """Wait for the write in flight; on completion make sure the last step is committed."""
        if self._follower:
            return
        self._history.close()  # every point logged on the disk, whatever happens below
        self._writer.flush()
        self._guard.remove()
        # The final state is committed even when the cadence never came due (short cells), and when the
        # newest step is a link (a warm start already at the end): DONE.json names the cell's own checkpoint.
        final_due = self.last_step > self._cadence.last_scheduled or self._committed.newest_is_linked()
        if completed and self._state_ref is not None and final_due:
            given = self._given[1] if self._given is not None and self._given[0] == self.last_step else {}
            self._save(self._state_ref, self.last_step, given)  # the metrics given for that step stay with it
            self._writer.flush()
        self._send_log()

    @property
    def stall_seconds(self) -> list[float]:
        """How long each checkpoint of this attempt paused training."""
        return self._cadence.stall_seconds

    def newest_committed(self) -> tuple[int, dict[str, Any]] | None:
        return self._committed.newest()

    # -- internals ----------------------------------------------------------------

    def _save(
        self, state: dict[str, Any], step: int, metrics: dict[str, Any], overlap: bool = False, gather: bool = False
    ) -> None:
        """`gather`: the other ranks take this checkpoint too; the writer thread waits for their RNG
        states and commits them with this state (collective.rng_handover)."""
        t0 = time.perf_counter()
        rng = serialize.capture_rng()
        collect = self._ranks.rng_handover() if gather and self._ranks is not None else None
        skeleton, tensors = serialize.flatten(state)
        self._writer.flush()  # at most one write in flight; raises its error if it failed
        late = self._guard.owned(state) if overlap and self._overlap else frozenset()
        snap = self._snap.take(tensors, late)
        meta = self._meta(metrics)
        self._cadence.last_scheduled = step  # before the job: its _refuse_raced may move it back
        self._writer.submit(lambda: self._commit_snapshot(step, snap, skeleton, rng, meta, collect))
        self._guard.arm(snap)  # after the job is handed over: a copy that never starts never holds a step
        self._cadence.paused(time.perf_counter() - t0)

    def _follow_checkpoint(self, step: int) -> bool:
        """A follower's side of `checkpoint`: rank 0's decision; when taken, this rank's RNG states to it."""
        assert self._ranks is not None
        if self._ranks.decide(None) != "1":
            return False
        t0 = time.perf_counter()
        self._ranks.give_rng(serialize.capture_rng())
        self._cadence.last_scheduled = step
        self._cadence.paused(time.perf_counter() - t0)
        return True

    def _restore_follower(self, state: dict[str, Any], map_location: str | torch.device | None) -> bool:
        """A follower's side of `restore`: the checkpoint rank 0 chose (and verified), with this rank's RNG."""
        assert self._ranks is not None
        self._state_ref = state
        step = int(self._ranks.decide(None))
        if step < 0:
            return False
        loaded = checkpoint.load(self._checkpoints, step)  # verified again: every byte this rank trains on
        tensors = loaded.state
        if map_location is not None:
            tensors = serialize.to_device(tensors, torch.device(map_location))
        serialize.load_into(state, tensors)
        mine = ((loaded.rng or {}).get("ranks") or {}).get(str(self.rank))
        if mine:
            serialize.restore_rng(mine)
        else:  # a checkpoint of fewer ranks (or a one-process run): this rank's streams start afresh
            note = f"the checkpoint of step {step} holds no RNG states of rank {self.rank}: its streams are not resumed"
            print(f"sweepq warning: {self.cell}: {note}", file=sys.stderr, flush=True)
            self.warnings.append(note)
        self.start_step = self.last_step = step
        self.start_sha = loaded.manifest_sha256
        self.epoch = loaded.manifest.get("epoch")
        best = loaded.manifest.get("best") or {}
        self.best, self.best_step = best.get("value"), best.get("step")
        self._cadence.restart_at(step)
        return True

    def _commit_snapshot(
        self,
        step: int,
        snap: snapshot.Snapshot,
        skeleton: Any,
        rng: dict[str, Any],
        meta: dict[str, Any],
        collect: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        """On the writer thread: the other ranks' RNG states (`collect`), finish the snapshot's copy,
        then commit it: every rank's part in one checkpoint, or none."""
        if collect is not None:
            rng = {**rng, "ranks": collect()}
        try:
            snap.finish()
        except snapshot.SnapshotRaced as e:
            self._refuse_raced(step, e)
            return
        self._commit(step, *serialize.with_rng(skeleton, snap.buffers, rng), meta, snap.image)

    def _refuse_raced(self, step: int, e: snapshot.SnapshotRaced) -> None:
        """The copy saw a state that never existed: commit nothing, and copy everything up front from now on."""
        self._overlap = False
        self._best_pending = None  # a best checkpoint refused is not kept: the next improvement commits
        # So that close() commits the final step even if this was it.
        self._cadence.last_scheduled = self._committed.newest_step(default=self.start_step)
        note = (
            f"checkpoint at step {step} not committed: {e}; later checkpoints of this attempt copy "
            "everything before run.checkpoint returns (set checkpoint: {overlap: false} to start that way)"
        )
        print(f"sweepq warning: {self.cell}: {note}", file=sys.stderr, flush=True)
        self.warnings.append(note)
        self._channel.send(Warned(event="snapshot_raced", step=step, notes=[note]))

    def _commit(
        self, step: int, skeleton: Any, buffers: dict[str, torch.Tensor], meta: dict[str, Any], image: Files | None
    ) -> None:
        # Checkpoints at or after this step belong to an abandoned timeline (this
        # attempt never scheduled them): a resume must never land on them.
        self._committed.supersede_after(step - 1, "abandoned: training restarted from an earlier step")
        self._history.sync()  # the points up to this step are on the disk before it commits
        self._after_commit(checkpoint.write_checkpoint(self._checkpoints, step, skeleton, buffers, meta, image))

    # Checkpoints of files another library wrote (resume_path, commit_files): the same
    # bookkeeping as a state checkpoint (fencing, superseding an abandoned timeline,
    # retention, the messages the worker records), with the bytes kept as the library
    # wrote them (checkpoint/files.py). The copy is made on the training thread: the
    # library just wrote the files synchronously, and may delete or rewrite them as soon
    # as control returns to it.

    def _resume_files(self) -> Path | None:
        """The newest verified files checkpoint (within a rollback's limit), reported as the attempt's start."""
        max_step = self._committed.rollback_limit(self._spec.nan_step)
        for step in self._checkpoints.steps():
            if max_step is not None and step > max_step:
                continue
            try:
                found = library_files.verified(self._checkpoints, step)
            except CheckpointCorrupt as e:
                self._report_corrupt(step, e.why, self._checkpoints.quarantine(step))
                continue
            self._committed.supersede_after(found.step, "abandoned: the attempt resumed from an earlier step")
            self._resumed_from(found.step, found.manifest_sha256, found.path, found.manifest, max_step is not None)
            return found.path
        self._channel.send(Fresh(rollback=max_step is not None, none_verified=bool(self.corrupt)))
        return None

    def _commit_files(self, step: int, given: Path | dict[str, Path], metrics: dict[str, Any]) -> bool:
        sources = library_files.sources_of(given)
        self.last_step = max(self.last_step, step)
        if metrics:
            self._check_finite(step, metrics)
            self._track_best(step, metrics)
        if step <= self._cadence.last_scheduled:
            return False
        t0 = time.perf_counter()
        self._writer.flush()  # a state checkpoint in flight commits first: commits stay in step order
        self._committed.supersede_after(step - 1, "abandoned: training restarted from an earlier step")
        self._history.sync()  # the points up to this step are on the disk before it commits
        self._after_commit(library_files.write_files_checkpoint(self._checkpoints, step, sources, self._meta(metrics)))
        self._cadence.last_scheduled = step
        self._cadence.paused(time.perf_counter() - t0)
        self._send_log()  # progress shown at least up to the step kept (logs otherwise wait for the next log call)
        return True

    def _meta(self, metrics: dict[str, Any]) -> dict[str, Any]:
        return {
            "cell": self.cell,
            "attempt": self.attempt,
            "epoch": self.epoch,
            "metrics": plain(metrics),
            "best": {"value": self.best, "step": self.best_step},  # the metric's best so far, resumed with it
            "cfg_hash": self._spec.cfg_hash,
            "fingerprints": self._spec.fingerprints,
        }

    def _after_commit(self, c: Committed) -> None:
        step = c.step
        self._committed.add(step, {"step": step, "metrics": c.metrics, "epoch": c.epoch})
        self._channel.send(
            Checkpointed(
                step=step,
                epoch=c.epoch,
                metrics=c.metrics,
                path=self.paths.relative(c.path),
                sha=c.manifest_sha256,
                size=c.size_bytes,
                created_at=c.created_at,
                attempt=self.attempt,
            )
        )
        metric = (self._metric.name, self._metric.goal) if self._metric and self._policy.keep_best else None
        self._committed.retain(self._policy.keep_last, metric)

    def _resumed_from(self, step: int, sha: str, path: Path, manifest: dict[str, Any], rollback: bool) -> None:
        self.start_step = self.last_step = step
        self.start_sha = sha
        self._warn_if_changed(manifest.get("fingerprints") or {}, step)
        self.epoch = manifest.get("epoch")
        best = manifest.get("best") or {}
        self.best, self.best_step = best.get("value"), best.get("step")
        self._cadence.restart_at(step)
        self._channel.send(
            Resumed(
                step=step,
                sha=sha,
                path=self.paths.relative(path),
                epoch=self.epoch,
                metrics=manifest.get("metrics") or {},
                rollback=rollback,
                best=self.best,
                best_step=self.best_step,
            )
        )

    def _warn_if_changed(self, then: dict[str, Any], step: int) -> None:
        """Resuming weights under different code or data is usually a mistake: say so."""
        notes = fingerprint.changes(then, self._spec.fingerprints)
        if not notes:
            return
        for note in notes:
            print(f"sweepq warning: resuming {self.cell} from step {step}: {note}", file=sys.stderr, flush=True)
        self.warnings.extend(notes)
        self._channel.send(Warned(event="resumed_under_changes", step=step, notes=notes))

    def _say_unwitnessed(self, hidden: dict[int, int]) -> None:
        for step, by in sorted(hidden.items()):
            note = (
                f"checkpoints/step-{step} was committed by attempt {by} after the queue had given the cell to "
                "a later attempt (a late write of a superseded process): it is never resumed from"
            )
            print(f"sweepq warning: {note}", file=sys.stderr, flush=True)
            self._channel.send(Warned(event="checkpoint_unwitnessed", step=step, notes=[note]))

    def _report_corrupt(self, step: int, why: str, moved: Path) -> None:
        self.corrupt.append({"step": step, "why": why})
        self._committed.forget(step)
        self._channel.send(Corrupt(step=step, why=why, moved_to=self.paths.relative(moved)))

    def _check_finite(self, step: int, values: dict[str, Any]) -> None:
        try:
            check_finite(step, values)
        except NonFiniteLoss:
            self.nan_step = step if self.nan_step is None else self.nan_step
            raise

    def _beats_kept_best(self, metrics: dict[str, Any]) -> float | None:
        """The sweep's metric in `metrics` when it beats every checkpoint kept or being written (and retention
        keeps the best); else None."""
        if self._metric is None or not self._policy.keep_best:
            return None
        kept = self._committed.best(self._metric.name, self._metric.goal)
        pending = self._best_pending
        if kept is None or pending is None:
            best = kept if pending is None else pending
        else:
            best = max(kept, pending) if self._metric.goal == "max" else min(kept, pending)
        return improved(self._metric, best, metrics)

    def _track_best(self, step: int, values: dict[str, Any]) -> None:
        best = improved(self._metric, self.best, values)
        if best is not None:
            self.best, self.best_step = best, step

    def _send_log(self) -> None:
        self._last_send = time.monotonic()
        self._channel.send(
            Logged(
                step=self.last_step, epoch=self.epoch, scalars=self._pending, best=self.best, best_step=self.best_step
            )
        )


__all__ = ["DataError", "NonFiniteLoss", "Run"]
