"""What a training process reported to its worker since the last flush, and its way to the database."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from sweepq.layout import CellPaths
from sweepq.queue.store import CheckpointState, Store
from sweepq.wire.channel import Rejected
from sweepq.wire.messages import (
    Checkpointed,
    Corrupt,
    Ended,
    Fresh,
    Logged,
    Message,
    Resumed,
    Started,
    Superseded,
    Total,
    Warned,
)

RECORDED_REJECTIONS = 10


@dataclass
class Progress:
    fields: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    dirty: bool = False
    started: dict[str, Any] = field(default_factory=dict)  # attempt fields, recorded at once
    checkpoints: list[Checkpointed] = field(default_factory=list)
    superseded: list[Superseded] = field(default_factory=list)
    corrupt: list[Corrupt] = field(default_factory=list)
    end: dict[str, Any] | None = None  # the receipt, from the last message
    newest_checkpoint: int | None = None  # committed by this attempt
    notes: list[str] = field(default_factory=list)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    fenced: bool = False  # a flush found the attempt no longer current
    usage: dict[str, Any] | None = None  # the worker's latest look at the process (worker/usage.py)
    rejected: int = 0  # messages the channel refused (events for the first RECORDED_REJECTIONS)
    first_rejection: str | None = None

    def take(self, msg: Message | Rejected) -> None:
        match msg:
            case Started():
                self.started.update(
                    pid=msg.pid,
                    gpus=msg.gpus,
                    environment=msg.environment,
                    code_fingerprint=msg.code_fingerprint,
                    data_fingerprint=msg.data_fingerprint,
                )
            case Resumed():
                self.started.update(start_step=msg.step, start_checkpoint_sha=msg.sha)
                self._set(step=msg.step, epoch=msg.epoch, best=msg.best, best_step=msg.best_step)
            case Fresh():
                self._fresh(msg)
            case Total():
                self._set(total_steps=msg.steps, total_epochs=msg.epochs)
            case Logged():
                self.metrics.update(msg.scalars)
                self._set(step=msg.step, epoch=msg.epoch, metrics=dict(self.metrics))
                if msg.best is not None:
                    self._set(best=msg.best, best_step=msg.best_step)
            case Checkpointed():
                self.checkpoints.append(msg)
                self.newest_checkpoint = max(self.newest_checkpoint or 0, msg.step)
            case Superseded():
                self.superseded.append(msg)
            case Corrupt():
                self.corrupt.append(msg)
            case Warned():
                self.notes.extend(msg.notes)
                self.events.append((msg.event, {"step": msg.step, "notes": msg.notes}))
            case Ended():
                self.end = msg.outcome
            case Rejected():
                # A training process of another sweepq version, a bug, or bytes a program wrote to the
                # descriptor it inherited: say so, never guess. The first few are recorded one by one,
                # the rest counted (a flood must not flood the events and the worker's log).
                self.rejected += 1
                if self.rejected <= RECORDED_REJECTIONS:
                    print(f"sweepq: a message on the channel was rejected: {msg.why}", file=sys.stderr)
                    detail = {"why": msg.why, "excerpt": msg.excerpt, "bytes": msg.size}
                    self.events.append(("message_rejected", detail))
                if self.first_rejection is None:
                    self.first_rejection = msg.why

    def rejected_words(self) -> str | None:
        """The attempt's note about what the channel refused, or None when it refused nothing."""
        if not self.rejected:
            return None
        if self.rejected == 1:
            return f"1 message on the channel was rejected: {self.first_rejection}"
        return f"{self.rejected} messages on the channel were rejected, the first: {self.first_rejection}"

    def _fresh(self, msg: Fresh) -> None:
        self.started.update(start_step=0)
        if msg.none_verified:
            self.notes.append("no checkpoint verified: started from scratch")
            self.events.append(("restarted_from_scratch", {"why": "no checkpoint verified"}))
        elif msg.rollback:
            self.notes.append("rolled back past every checkpoint: started from scratch")

    def _set(self, **values: Any) -> None:
        self.fields.update({k: v for k, v in values.items() if v is not None})
        self.dirty = True

    def flush_started(self, store: Store, cell: str, number: int) -> None:
        if self.started:
            store.attempt_started(cell, number, **self.started)
            self.started = {}

    def flush(self, store: Store, paths: CellPaths, number: int) -> None:
        """Everything reported since the last flush, in one transaction, fenced by the attempt number."""
        with store.batch():
            if not store.is_current(paths.cell_id, number):
                self._refuse(store, paths.cell_id, number)
                return
            self.flush_started(store, paths.cell_id, number)
            self._flush_checkpoints(store, paths)
            for kind, detail in self.events:
                store.add_event(paths.cell_id, kind, detail)
            self.events = []
            self._flush_corrupt(store, paths)
            if self.usage is not None:
                store.attempt_usage(paths.cell_id, number, self.usage)
                self.usage = None
            if self.dirty:
                store.progress(paths.cell_id, number, **self.fields)
                self.dirty = False
            # A sign of life each flush, timed after every row it wrote (a checkpoint's, the progress): a
            # reaped attempt ends at its last, never before what it was last heard to do.
            store.seen(paths.cell_id, number)

    def _refuse(self, store: Store, cell: str, number: int) -> None:
        """The attempt lost its cell: what it reported is dropped, and that is recorded once."""
        dropped = len(self.checkpoints) + len(self.superseded) + len(self.corrupt) + len(self.events)
        if dropped or self.dirty or not self.fenced:
            store.add_event(cell, "fenced_write", {"attempt": number, "dropped": dropped})
        self.fenced = True
        self.started, self.checkpoints, self.superseded, self.corrupt, self.events = {}, [], [], [], []
        self.dirty = False
        self.usage = None

    def _flush_checkpoints(self, store: Store, paths: CellPaths) -> None:
        for c in self.checkpoints:
            store.record_checkpoint(
                paths.cell_id,
                c.step,
                path=paths.from_root(c.path),
                epoch=c.epoch,
                metrics=c.metrics,
                manifest_sha256=c.sha,
                attempt=c.attempt,
                size_bytes=c.size,
            )
        self.checkpoints = []
        for s in self.superseded:
            store.set_checkpoint_state(paths.cell_id, s.steps, CheckpointState.SUPERSEDED, note=s.note)
        self.superseded = []

    def _flush_corrupt(self, store: Store, paths: CellPaths) -> None:
        for k in self.corrupt:
            path = paths.from_root(k.moved_to)
            store.record_checkpoint(paths.cell_id, k.step, path=path, state=CheckpointState.CORRUPT, note=k.why)
            store.add_event(paths.cell_id, "checkpoint_corrupt", {"step": k.step, "why": k.why})
        self.corrupt = []
