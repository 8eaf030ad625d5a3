"""The peers bench/checkpoint.py measures sweepq against, run as their users run them.

Writes: `torch.save` (atomic: a temporary file, fsync, rename, fsync of the
folder), `torch.distributed.checkpoint` `save` and `async_save` (no process
group: `no_dist=True`; the async one with DCP's cached stager, `DefaultStager`,
staging in the call or on its staging thread; pinned and shared memory off, as
this machine has no GPU), `safetensors.save_file` (made atomic the same way),
a `torch.save` on a thread of its own after cloning the state, and the raw
`O_DIRECT` write of the same bytes (the disk's limit, not a checkpoint).
Reads: `torch.load(weights_only=True)` and the raw `O_DIRECT` read.

Each checkpointer runs in a training loop the same way: `checkpoint(step)`
right after an optimizer step, `before_update()` right before the next ones
(where a peer that copies in the background makes the update wait), `drain()`
untimed before the next round.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from sweepq.atomic import fsync_dir
from sweepq.run.run import Run

O_DIRECT = getattr(os, "O_DIRECT", 0)
ALIGN = 4096
# DCP says so at every call, also from its upload thread (where a catch_warnings block does not reach).
warnings.filterwarnings("ignore", message="torch.distributed is disabled")


def aligned_bytes(n: int) -> memoryview:
    """n bytes of page-aligned, already touched memory (what a direct write or read wants)."""
    raw = torch.empty(n + ALIGN, dtype=torch.uint8)
    start = -raw.data_ptr() % ALIGN
    buf = raw[start : start + n]
    buf.fill_(1)
    return buf.numpy().data.cast("B")


def plain(state: dict[str, Any]) -> dict[str, Any]:
    """The state as its users hand it to torch.save or DCP: state_dicts and plain values."""
    return {k: (v.state_dict() if hasattr(v, "state_dict") else v) for k, v in state.items()}


def atomic(folder: Path, name: str, write: Callable[[Path], None]) -> Path:
    """write(tmp), then fsync it, rename it to name, fsync the folder: a checkpoint a crash cannot half-write."""
    tmp, final = folder / f".tmp-{name}", folder / name
    write(tmp)
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, final)
    fsync_dir(folder)
    return final


def torch_save(folder: Path, name: str, state: dict[str, Any]) -> Path:
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            torch.save(state, f)

    return atomic(folder, name, write)


def flat_tensors(obj: Any, prefix: str, out: dict[str, torch.Tensor], rest: dict[str, Any]) -> None:
    """safetensors holds named tensors and string metadata: the tensors by path, the rest as JSON."""
    if isinstance(obj, torch.Tensor):
        out[prefix] = obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            flat_tensors(v, f"{prefix}.{k}" if prefix else str(k), out, rest)
    else:
        rest[prefix] = obj


def safetensors_save(folder: Path, name: str, state: dict[str, Any]) -> Path:
    from safetensors.torch import save_file

    tensors: dict[str, torch.Tensor] = {}
    rest: dict[str, Any] = {}
    flat_tensors(state, "", tensors, rest)
    meta = {"rest": json.dumps(rest, default=str)}
    return atomic(folder, name, lambda tmp: save_file(tensors, str(tmp), metadata=meta))


def dcp_save(folder: Path, name: str, state: dict[str, Any]) -> Path:
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, checkpoint_id=str(folder / name), no_dist=True)
    return folder / name


def raw_direct_write(folder: Path, name: str, data: memoryview) -> None:
    """The same bytes in one file, from page-aligned memory, one O_DIRECT write (the tail buffered), fsync,
    rename, fsync of the folder: what the disk allows, with nothing hashed or described."""
    tmp = folder / f".tmp-{name}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_DIRECT, 0o644)
    try:
        whole = len(data) - len(data) % ALIGN
        view = data[:whole]
        while len(view):
            view = view[os.write(fd, view) :]
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~O_DIRECT)
        tail = data[whole:]
        while len(tail):
            tail = tail[os.write(fd, tail) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, folder / name)
    fsync_dir(folder)


def direct_read(paths: list[Path], bufs: list[memoryview]) -> int:
    """Each file in one O_DIRECT read into its page-aligned buffer (the last partial page buffered)."""
    n = 0
    for path, buf in zip(paths, bufs, strict=True):
        size = path.stat().st_size
        fd = os.open(path, os.O_RDONLY | O_DIRECT)
        try:
            view = buf[:size]
            while len(view) >= ALIGN:
                got = os.readv(fd, [view[: len(view) - len(view) % ALIGN]])
                n += got
                view = view[got:]
                if got % ALIGN or not got:
                    break
            if len(view):
                fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~O_DIRECT)
                while len(view) and (got := os.readv(fd, [view])):
                    n += got
                    view = view[got:]
        finally:
            os.close(fd)
    return n


def direct_supported(folder: Path) -> bool:
    fd = -1
    try:
        fd = os.open(folder / ".probe", os.O_WRONLY | os.O_CREAT | O_DIRECT, 0o644)
        return True
    except OSError as e:
        if e.errno == errno.EINVAL:
            return False
        raise
    finally:
        if fd >= 0:
            os.close(fd)
        (folder / ".probe").unlink(missing_ok=True)


def clone(obj: Any) -> Any:
    """A copy of every tensor in a state_dict-like structure (the snapshot a background save needs)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {k: clone(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(clone(v) for v in obj)
    return obj


# -- checkpointers in a training loop ---------------------------------------------------------


class Checkpointer:
    """One way to checkpoint in a loop. The base is synchronous: the loop waits for the whole save."""

    def __init__(self, name: str, folder: Path, state: dict[str, Any], save: Callable[..., Path] | None) -> None:
        self.name, self.folder, self.state, self._save = name, folder, state, save
        self.folder.mkdir(parents=True, exist_ok=True)
        self.saved: list[Path] = []

    def checkpoint(self, step: int) -> None:
        assert self._save is not None
        self.saved.append(self._save(self.folder, f"step-{step}", plain(self.state)))

    def before_update(self) -> float:
        """Called right before an optimizer step; the seconds it waited."""
        return 0.0

    @property
    def busy(self) -> bool:
        return False

    def drain(self) -> None:
        """Untimed: wait for any background work, remove what was saved."""
        for p in self.saved:
            shutil.rmtree(p) if p.is_dir() else p.unlink()
        self.saved.clear()

    def close(self) -> None:
        self.drain()


class ThreadSave(Checkpointer):
    """Clone the state in the loop, torch.save it (atomic) on a thread."""

    def __init__(self, folder: Path, state: dict[str, Any]) -> None:
        super().__init__("torch_save_thread", folder, state, None)
        self._thread: threading.Thread | None = None

    def checkpoint(self, step: int) -> None:
        snap = clone(plain(self.state))
        self._thread = threading.Thread(target=lambda: self.saved.append(torch_save(self.folder, f"step-{step}", snap)))
        self._thread.start()

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def drain(self) -> None:
        if self._thread is not None:
            self._thread.join()
        super().drain()


class DcpAsync(Checkpointer):
    """dcp.async_save with one cached DefaultStager: staging (the copy) in the call, or on its staging thread
    (then the next optimizer step waits for the copy to end)."""

    def __init__(self, folder: Path, state: dict[str, Any], staging_thread: bool) -> None:
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

        name = "dcp_async_save_staging_thread" if staging_thread else "dcp_async_save"
        super().__init__(name, folder, state, None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._stager = DefaultStager(
                StagingOptions(
                    use_pinned_memory=False,
                    use_shared_memory=False,
                    use_async_staging=staging_thread,
                    use_non_blocking_copy=False,
                )
            )
        self._staging: Any = None
        self._upload: Any = None

    def checkpoint(self, step: int) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict_saver import AsyncSaveResponse

        path = self.folder / f"step-{step}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = dcp.async_save(plain(self.state), checkpoint_id=str(path), no_dist=True, async_stager=self._stager)
        self.saved.append(path)
        if isinstance(r, AsyncSaveResponse):  # staging on its thread
            self._staging, self._upload = r.staging_completion, r.upload_completion
        else:
            self._staging, self._upload = None, r

    def before_update(self) -> float:
        if self._staging is None or self._staging.done():
            return 0.0
        t = time.perf_counter()
        self._staging.result()
        return time.perf_counter() - t

    @property
    def busy(self) -> bool:
        return self._upload is not None and not self._upload.done()

    def drain(self) -> None:
        if self._upload is not None:
            self._upload.result()
        self._staging = self._upload = None
        super().drain()

    def close(self) -> None:
        self.drain()
        self._stager.close()


class Sweepq(Checkpointer):
    """Run.checkpoint at the cadence (every step due, not forced): the tensors only the optimizer writes are
    copied on the writer thread, and the optimizer's next step waits for that copy (its pre-hook)."""

    def __init__(self, run: Run, folder: Path, state: dict[str, Any]) -> None:
        super().__init__("sweepq", folder, state, None)
        self.run = run
        self._waited = 0.0

    def checkpoint(self, step: int) -> None:
        assert self.run.checkpoint(self.state, step)
        self._waited = self.run._guard.waited_seconds

    def before_update(self) -> float:
        return 0.0  # the optimizer's pre-hook waits; `waited` reads how long

    def waited(self) -> float:
        return self.run._guard.waited_seconds - self._waited

    @property
    def busy(self) -> bool:
        return self.run._writer.busy

    def drain(self) -> None:
        self.run._writer.flush()

    def close(self) -> None:
        self.run.close(completed=False)
