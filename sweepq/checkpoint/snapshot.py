"""Snapshots of training state into reusable CPU buffers, overlapped with the next step where safe.

Copying the tensors is most of the training loop's pause at a checkpoint. The
weights and the optimizer's moments change only inside `optimizer.step()` (the
observation behind CheckFreq, Mohan et al., FAST '21), so their copy can run on
the writer thread while the next forward and backward passes run, provided the
next `step()` waits for it. A `StepGuard` arms a step pre-hook on every
`torch.optim` optimizer in the state, and only the tensors such an optimizer
owns (its parameters and its per-parameter state, on the CPU) are copied late.
Everything else is copied before `run.checkpoint` returns: buffers (BatchNorm
statistics change in forward), user tensors, and GPU tensors.

A write to a late tensor outside the optimizer's step is caught by the
tensor's version counter (every in-place operation bumps it). The snapshot is
then refused (`SnapshotRaced`), never committed. Writes through `.data` bump no
counter: code that changes weights that way between a checkpoint and the next
optimizer step sets `checkpoint: {overlap: false}`.
"""

from __future__ import annotations

import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch

from sweepq.checkpoint.image import Files
from sweepq.host.procs import usable_cores

TensorKey = tuple[int, int, torch.dtype]  # data_ptr, numel, dtype: the same memory under any alias


def key(t: torch.Tensor) -> TensorKey:
    return (t.data_ptr(), t.numel(), t.dtype)


class SnapshotRaced(RuntimeError):
    """A late-copied tensor changed before its copy ended: the snapshot is not a state that existed."""

    def __init__(self, names: list[str]) -> None:
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        super().__init__(f"{shown} changed in place before the snapshot's copy ended (outside optimizer.step())")
        self.names = names


@dataclass
class Snapshot:
    """The buffers of one checkpoint; `late` ones are filled by `finish()` on the writer thread."""

    buffers: dict[str, torch.Tensor]
    image: Files | None = None  # the tensor files the buffers are views of (image.py)
    late: list[tuple[str, torch.Tensor, torch.Tensor, int]] = field(default_factory=list)  # name, buf, src, version
    copied: threading.Event = field(default_factory=threading.Event)

    def finish(self) -> None:
        """Copy the late tensors, check that none changed meanwhile, then release the optimizers.

        The version check comes before the release: once released, the
        optimizer's own step bumps the counters.
        """
        try:
            with torch.no_grad():
                for _, buf, src, _ in self.late:
                    buf.copy_(src)
            changed = [name for name, _, src, version in self.late if src._version != version]
        finally:
            self.late = []  # drop the references to the live tensors
            self.copied.set()
        if changed:
            raise SnapshotRaced(changed)


class Snapshotter:
    """Copies tensors into reusable CPU buffers (pinned for GPU tensors).

    The buffers are views of page-aligned images of the checkpoint's tensor
    files (image.py), kept while the tensors keep their names, shapes and dtypes. Reusing
    them matters: fresh allocations cost several times a copy into memory
    that is already mapped. The immediate copy runs in the training
    thread, which waits for it anyway, so it may use every core the process may
    run on (torch's intra-op threads, for the copy only): on two cores that cuts
    it by about a third. (Copying on a second Python thread while the training
    thread waits was tried: the hand-off cost more than it saved.)
    """

    def __init__(self) -> None:
        self.image: Files | None = None
        self._threads = usable_cores(COPY_THREADS_MAX)

    @property
    def buffers(self) -> dict[str, torch.Tensor]:
        return self.image.views if self.image is not None else {}

    def take(self, tensors: dict[str, torch.Tensor], late: frozenset[TensorKey] = frozenset()) -> Snapshot:
        """Copy `tensors` now, except CPU tensors whose key is in `late` (left to Snapshot.finish)."""
        on_gpu = any(t.is_cuda for t in tensors.values())
        specs = tuple((name, t.shape, t.dtype) for name, t in tensors.items())
        image = self.image
        if image is None or image.specs != specs or image.pinned != on_gpu:
            self.image = None  # the old one's memory goes before the new one is allocated
            image = self.image = Files(specs, pin=on_gpu)
        snap = Snapshot(image.views, image=image)
        with torch.no_grad(), _threads_at_least(self._threads):  # no_grad: copy_ records nothing
            for name, t in tensors.items():
                buf = image.views[name]
                if t.is_cuda:
                    buf.copy_(t, non_blocking=True)
                elif late and key(t) in late:
                    snap.late.append((name, buf, t, t._version))
                else:
                    buf.copy_(t)
        if on_gpu:
            torch.cuda.synchronize()
        if not snap.late:
            snap.copied.set()
        return snap


class StepGuard:
    """Holds the next `step()` of every optimizer in the state until the late copy has ended.

    Hooks are registered once per optimizer and cost one attribute test per
    step while no copy is pending.
    """

    def __init__(self) -> None:
        self._hooked: weakref.WeakKeyDictionary[torch.optim.Optimizer, Any] = weakref.WeakKeyDictionary()
        self._pending: threading.Event | None = None
        self.waited_seconds = 0.0  # the part of the pause spent in step(): the copy had not ended yet
        self.waits = 0

    def owned(self, state: dict[str, Any]) -> frozenset[TensorKey]:
        """Keys of the CPU tensors that only a (now hooked) optimizer of `state` writes."""
        out: set[TensorKey] = set()
        for value in state.values():
            if not isinstance(value, torch.optim.Optimizer):
                continue
            if value not in self._hooked:
                self._hooked[value] = value.register_step_pre_hook(self._before_step)
            for group in value.param_groups:
                out.update(key(p) for p in group["params"] if not p.is_cuda)
            for per_param in value.state.values():
                out.update(key(t) for t in per_param.values() if isinstance(t, torch.Tensor) and not t.is_cuda)
        return frozenset(out)

    def arm(self, snap: Snapshot) -> None:
        self._pending = None if snap.copied.is_set() else snap.copied

    def wait(self) -> None:
        """Block until the pending late copy (if any) has ended."""
        pending = self._pending
        if pending is None:
            return
        if not pending.is_set():
            t0 = time.perf_counter()
            pending.wait()
            self.waited_seconds += time.perf_counter() - t0
            self.waits += 1
        self._pending = None

    def _before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.wait()

    def remove(self) -> None:
        for handle in list(self._hooked.values()):
            handle.remove()
        self._hooked.clear()


COPY_THREADS_MAX = 8  # memory bandwidth is saturated well before this


class _threads_at_least:
    """Raise torch's intra-op thread count for a block, and put the caller's back after."""

    __slots__ = ("before", "want")

    def __init__(self, want: int) -> None:
        self.want = want
        self.before = 0

    def __enter__(self) -> None:
        self.before = torch.get_num_threads()
        if self.before < self.want:
            torch.set_num_threads(self.want)

    def __exit__(self, *exc: object) -> None:
        if self.before < self.want:
            torch.set_num_threads(self.before)
