"""The `Run` object that training code receives: restore, checkpoint, log, should_stop.

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

import math
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from . import checkpoint, manifest, serialize, signals
from .atomic import atomic_write_json, read_json
from .channel import Channel
from .layout import CellPaths
from .spec import CheckpointPolicy, Metric, Settings

ENV_ATTEMPT_FILE = "SWEEPQ_ATTEMPT_FILE"

# Automatic cadence: checkpoint often enough that the overhead stays near this
# share of the run, within these bounds (seconds).
AUTO_OVERHEAD = 0.02
AUTO_MIN_INTERVAL = 10.0
AUTO_MAX_INTERVAL = 300.0
AUTO_FIRST = 10.0
LOG_INTERVAL = 0.25


class DataError(Exception):
    """Raise from training code when the data is bad: the attempt ends `data_error`."""


class NonFiniteLoss(FloatingPointError):
    """A logged or checkpointed loss was NaN or infinite: the attempt ends `nan`."""

    def __init__(self, step: int, name: str, value: float) -> None:
        super().__init__(f"non-finite {name}={value} at step {step}")
        self.step, self.name, self.value = step, name, value


@dataclass
class AttemptSpec:
    """What a worker tells a training process about its attempt (attempts/<n>/attempt.json)."""

    root: str
    cell: str
    attempt: int
    cfg: dict[str, Any]
    cfg_hash: str
    settings: dict[str, Any]
    nan_step: int | None = None
    previous_reason: str | None = None
    worker_pid: int | None = None
    fingerprints: dict[str, Any] = field(default_factory=dict)

    def save(self, path: Path) -> None:
        atomic_write_json(path, self.__dict__)

    @classmethod
    def load(cls, path: Path) -> "AttemptSpec":
        return cls(**read_json(path))


class Run:
    def __init__(self, spec: AttemptSpec, channel: Channel | None = None) -> None:
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
        self._snap = checkpoint.Snapshotter()
        self._writer = checkpoint.AsyncWriter()
        self._lock = threading.Lock()  # guards _manifests (training thread vs writer thread)
        self._manifests = manifest.committed_manifests(self.paths)
        self._last_scheduled = -1
        self._last_time = time.monotonic()
        self._auto_interval = AUTO_FIRST
        self._state_ref: dict[str, Any] | None = None
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
        self.stall_seconds: list[float] = []
        self.corrupt: list[dict[str, Any]] = []

    # -- the public API ---------------------------------------------------------

    @property
    def should_stop(self) -> bool:
        """True once a preemption signal (SIGTERM, SIGINT, SIGUSR1, SIGHUP) arrived."""
        return signals.requested()

    def restore(self, state: dict[str, Any], map_location: str | torch.device | None = None) -> bool:
        """Fill `state` in place from the newest verified checkpoint; False when starting fresh.

        Objects with `load_state_dict` are loaded, other entries replaced, and the
        RNG states (python, numpy, torch, CUDA) restored. A checkpoint that fails
        verification is moved aside and the previous one used.
        """
        max_step = self._rollback_target()
        loaded = checkpoint.load_newest(self.paths, max_step, on_corrupt=self._report_corrupt)
        self._state_ref = state
        if loaded is None:
            self._channel.send("fresh", rollback=max_step is not None)
            return False
        self._supersede_after(loaded.step, "abandoned: the attempt resumed from an earlier step")
        plain = loaded.state
        if map_location is not None:
            plain = _move(plain, torch.device(map_location))
        serialize.load_into(state, plain)
        if loaded.rng:
            serialize.restore_rng(loaded.rng)
        self.start_step = self.last_step = self._last_scheduled = loaded.step
        self.start_sha = loaded.manifest_sha256
        self.epoch = loaded.manifest.get("epoch")
        self._last_time = time.monotonic()
        self._channel.send(
            "resumed",
            step=loaded.step,
            sha=loaded.manifest_sha256,
            path=self.paths.relative(loaded.path),
            epoch=self.epoch,
            metrics=loaded.manifest.get("metrics") or {},
            rollback=max_step is not None,
        )
        return True

    def checkpoint(
        self,
        state: dict[str, Any],
        step: int,
        metrics: dict[str, Any] | None = None,
        force: bool = False,
    ) -> bool:
        """Commit a checkpoint when the cadence says so (or `force`); True when one is taken.

        The training loop pauses only while the tensors are copied into reusable
        CPU buffers; files, fsync and the commit happen on a background thread
        (one write at a time). A step already committed is a no-op.
        """
        step = int(step)
        self._state_ref = state
        self.last_step = max(self.last_step, step)
        if metrics:
            self._check_finite(step, metrics)
            self._track_best(step, metrics)
        if step <= self._last_scheduled or not (force or self._due(step)):
            return False
        self._save(state, step, metrics or {})
        return True

    def log(self, step: int, **scalars: Any) -> None:
        """Record scalars at a step (shown by `sweepq status`; `epoch=` sets the epoch)."""
        step = int(step)
        self.last_step = max(self.last_step, step)
        self._check_finite(step, scalars)
        if "epoch" in scalars:
            self.epoch = float(scalars["epoch"])
        self._track_best(step, scalars)
        self._pending.update({k: _scalar(v) for k, v in scalars.items()})
        now = time.monotonic()
        if now - self._last_send >= LOG_INTERVAL:
            self._send_log()

    def set_total(self, steps: int, epochs: float | None = None) -> None:
        """Declare the cell's length, for progress and ETA."""
        self.total_steps = int(steps)
        self.total_epochs = None if epochs is None else float(epochs)
        self._channel.send("total", steps=self.total_steps, epochs=self.total_epochs)

    def finish(self, metrics: dict[str, Any] | None = None) -> None:
        """For programs using `Run.from_env()`: flush checkpoints and record final metrics."""
        self.final_metrics = dict(metrics) if metrics else {}
        self.close(completed=True)
        atomic_write_json(self.paths.attempt_dir(self.attempt) / "result.json", {"metrics": self.final_metrics})

    @classmethod
    def from_env(cls) -> "Run":
        """The Run of a program that sweepq started as a subprocess cell."""
        path = os.environ.get(ENV_ATTEMPT_FILE)
        if not path:
            raise RuntimeError(
                "Run.from_env() found no SWEEPQ_ATTEMPT_FILE: this program was not started by sweepq"
            )
        signals.install()
        return cls(AttemptSpec.load(Path(path)), Channel.from_env())

    # -- used by the attempt runner ------------------------------------------------

    def close(self, completed: bool) -> None:
        """Wait for the write in flight; on completion make sure the last step is committed."""
        self._writer.flush()
        if completed and self._state_ref is not None and self.last_step > self._last_scheduled >= 0:
            self._save(self._state_ref, self.last_step, {})
            self._writer.flush()
        self._send_log()

    def newest_committed(self) -> tuple[int, dict[str, Any]] | None:
        with self._lock:
            if not self._manifests:
                return None
            step = max(self._manifests)
            return step, self._manifests[step]

    # -- internals ----------------------------------------------------------------

    def _due(self, step: int) -> bool:
        p = self._policy
        if p.every_steps and step - max(self._last_scheduled, 0) >= p.every_steps:
            return True
        elapsed = time.monotonic() - self._last_time
        if p.every_seconds and elapsed >= p.every_seconds:
            return True
        return p.auto and elapsed >= self._auto_interval

    def _save(self, state: dict[str, Any], step: int, metrics: dict[str, Any]) -> None:
        t0 = time.perf_counter()
        skeleton, tensors = serialize.flatten({**state, serialize.RNG_KEY: serialize.capture_rng()})
        self._writer.flush()  # at most one write in flight; raises its error if it failed
        buffers = self._snap.take(tensors)
        meta = {
            "cell": self.cell,
            "attempt": self.attempt,
            "epoch": self.epoch,
            "metrics": {k: _scalar(v) for k, v in metrics.items()},
            "cfg_hash": self._spec.cfg_hash,
            "fingerprints": self._spec.fingerprints,
        }
        self._last_scheduled = step
        self._writer.submit(lambda: self._commit(step, skeleton, buffers, meta))
        stall = time.perf_counter() - t0
        self.stall_seconds.append(stall)
        self._last_time = time.monotonic()
        cost = stall + self._writer.last_seconds
        self._auto_interval = min(AUTO_MAX_INTERVAL, max(AUTO_MIN_INTERVAL, cost / AUTO_OVERHEAD))

    def _commit(self, step: int, skeleton: Any, buffers: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        # Checkpoints at or after this step belong to an abandoned timeline (this
        # attempt never scheduled them): a resume must never land on them.
        self._supersede_after(step - 1, "abandoned: training restarted from an earlier step")
        c = checkpoint.write_checkpoint(self.paths.checkpoints, step, skeleton, buffers, meta)
        with self._lock:
            self._manifests[step] = {"step": step, "metrics": c.metrics, "epoch": c.epoch}
        self._channel.send(
            "ckpt",
            step=step,
            epoch=c.epoch,
            metrics=c.metrics,
            path=self.paths.relative(c.path),
            sha=c.manifest_sha256,
            size=c.size_bytes,
            created_at=c.created_at,
            attempt=self.attempt,
        )
        self._retain()

    def _retain(self) -> None:
        metric = (self._metric.name, self._metric.goal) if self._metric and self._policy.keep_best else None
        with self._lock:
            keep = manifest.to_keep(self._manifests, self._policy.keep_last, metric, set())
            drop = sorted(set(self._manifests) - keep)
        for step in drop:
            manifest.delete(self.paths.checkpoint(step))
            with self._lock:
                self._manifests.pop(step, None)
        if drop:
            self._channel.send("superseded", steps=drop, note="retention")

    def _supersede_after(self, step: int, note: str) -> None:
        with self._lock:
            later = sorted(s for s in self._manifests if s > step)
        for s in later:
            manifest.delete(self.paths.checkpoint(s))
            with self._lock:
                self._manifests.pop(s, None)
        if later:
            self._channel.send("superseded", steps=later, note=note)

    def _rollback_target(self) -> int | None:
        """After a `nan`: resume from the checkpoint before the one the bad interval started from."""
        if self._spec.nan_step is None:
            return None
        with self._lock:
            before = sorted((s for s in self._manifests if s < self._spec.nan_step), reverse=True)
        return before[1] if len(before) > 1 else -1

    def _report_corrupt(self, step: int, why: str, moved: Path) -> None:
        self.corrupt.append({"step": step, "why": why})
        with self._lock:
            self._manifests.pop(step, None)
        self._channel.send("corrupt", step=step, why=why, moved_to=self.paths.relative(moved))

    def _check_finite(self, step: int, scalars: dict[str, Any]) -> None:
        for name, value in scalars.items():
            if "loss" not in name.lower():
                continue
            v = _scalar(value)
            if isinstance(v, float) and not math.isfinite(v):
                self.nan_step = step if self.nan_step is None else self.nan_step
                raise NonFiniteLoss(step, name, v)

    def _track_best(self, step: int, scalars: dict[str, Any]) -> None:
        if self._metric is None or self._metric.name not in scalars:
            return
        v = _scalar(scalars[self._metric.name])
        if not isinstance(v, (int, float)) or not math.isfinite(v):
            return
        better = self.best is None or (v > self.best if self._metric.goal == "max" else v < self.best)
        if better:
            self.best, self.best_step = float(v), step

    def _send_log(self) -> None:
        self._last_send = time.monotonic()
        self._channel.send(
            "log",
            step=self.last_step,
            epoch=self.epoch,
            scalars=self._pending,
            best=self.best,
            best_step=self.best_step,
        )


def _scalar(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        v = v.detach()
        return v.item() if v.numel() == 1 else v.tolist()
    if hasattr(v, "item") and callable(v.item):
        try:
            return v.item()
        except (TypeError, ValueError):
            return v
    return v


def _move(obj: Any, device: torch.device) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: _move(v, device) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_move(v, device) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_move(v, device) for v in obj)
    return obj
