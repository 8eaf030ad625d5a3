"""What a training process uses while it runs: GPU utilisation and memory, CPU and resident memory.

A worker samples its training process from a thread of its own (never inside the
training process): every second, the utilisation and used memory of the GPUs the
cell was given, through NVIDIA's management library when `pynvml` (the
`nvidia-ml-py` package) imports and reports GPUs, and always the CPU time and RSS
of the whole process tree (the attempt process and, for program cells, the
program and its children), through psutil.

The samples are folded as they come (a tally, not a list: an attempt may run for
days), into mean, p95 and peak figures; `summary` is the receipt's `usage`.
"""

from __future__ import annotations

import importlib
import math
import os
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: Seconds between two samples.
SAMPLE_S = 1.0
#: The low-GPU flag: a cell whose GPUs' mean utilisation after its first LOW_GPU_GRACE_S seconds
#: (start-up, data loading, compilation) stays under LOW_GPU_PERCENT, once at least
#: LOW_GPU_WINDOW_S seconds past the grace were sampled.
LOW_GPU_PERCENT = 20.0
LOW_GPU_GRACE_S = 60.0
LOW_GPU_WINDOW_S = 30.0
#: The event a worker records, once per attempt, when the flag is first raised.
LOW_GPU_EVENT = "low_gpu"


@dataclass(frozen=True)
class Sample:
    """One look at the training process, `t` seconds after sampling began (None: not seen this time)."""

    t: float
    cpu_percent: float | None = None  # percent of one core since the previous sample, summed over the tree
    rss_bytes: int | None = None  # summed over the process tree (shared pages count in each process)
    gpu_percent: float | None = None  # the mean over the cell's GPUs
    gpu_memory_bytes: int | None = None  # used memory, summed over the cell's GPUs


@dataclass
class _Stat:
    """Mean and p95 of a percentage, in constant memory (p95 to the nearest percent, over samples).

    The mean weighs each value by the seconds it covers, when given: a CPU percentage measured over
    a longer interval (a late sample) counts for longer, so mean x seconds is the CPU time used.
    """

    total: float = 0.0
    weighted: float = 0.0
    weights: float = 0.0
    count: int = 0
    bins: Counter[int] = field(default_factory=Counter)

    def add(self, v: float, weight: float | None = None) -> None:
        self.total += v
        self.count += 1
        self.bins[round(v)] += 1
        if weight is not None and weight > 0:
            self.weighted += v * weight
            self.weights += weight

    def mean(self) -> float | None:
        if not self.count:
            return None
        return round(self.weighted / self.weights if self.weights else self.total / self.count, 1)

    def p95(self) -> float | None:
        if not self.count:
            return None
        rank, seen = math.ceil(0.95 * self.count), 0  # nearest rank
        for v in sorted(self.bins):
            seen += self.bins[v]
            if seen >= rank:
                return float(v)
        raise AssertionError("unreachable: the bins hold every value")


@dataclass
class Tally:
    """The samples of one attempt, folded: what `summary` and the low-GPU flag are made of."""

    gpu_devices: list[str] = field(default_factory=list)
    samples: int = 0
    first_t: float | None = None
    last: Sample | None = None
    cpu: _Stat = field(default_factory=_Stat)
    gpu: _Stat = field(default_factory=_Stat)
    late_gpu: _Stat = field(default_factory=_Stat)  # after LOW_GPU_GRACE_S
    rss_peak: int | None = None
    gpu_memory_peak: int | None = None

    def add(self, s: Sample) -> None:
        self.samples += 1
        self.first_t = s.t if self.first_t is None else self.first_t
        if s.cpu_percent is not None:  # measured since the previous sample
            self.cpu.add(s.cpu_percent, s.t - self.last.t if self.last is not None else None)
        self.last = s
        if s.gpu_percent is not None:
            self.gpu.add(s.gpu_percent)
            if s.t - self.first_t >= LOW_GPU_GRACE_S:
                self.late_gpu.add(s.gpu_percent)
        self.rss_peak = _max(self.rss_peak, s.rss_bytes)
        self.gpu_memory_peak = _max(self.gpu_memory_peak, s.gpu_memory_bytes)

    def low_gpu(self) -> dict[str, Any] | None:
        """The flag, when the GPUs stayed under the threshold since the grace (None otherwise, or not yet)."""
        if self.last is None or self.first_t is None or not self.late_gpu.count:
            return None
        if self.last.t - self.first_t < LOW_GPU_GRACE_S + LOW_GPU_WINDOW_S:
            return None
        mean = self.late_gpu.mean()
        if mean is None or mean >= LOW_GPU_PERCENT:
            return None
        return {"mean_percent": mean, "threshold_percent": LOW_GPU_PERCENT, "after_seconds": LOW_GPU_GRACE_S}


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def summary(t: Tally, live: bool = False) -> dict[str, Any]:
    """The receipt's `usage` (percentages of one core or one GPU, bytes, seconds); `live` adds the latest sample."""
    out: dict[str, Any] = {
        "samples": t.samples,
        "seconds": round(t.last.t - t.first_t, 1) if t.last is not None and t.first_t is not None else 0.0,
        "cpu_percent_mean": t.cpu.mean(),
        "cpu_percent_p95": t.cpu.p95(),
        "rss_peak_bytes": t.rss_peak,
        "gpu_devices": list(t.gpu_devices),
        "gpu_percent_mean": t.gpu.mean(),
        "gpu_percent_p95": t.gpu.p95(),
        "gpu_memory_peak_bytes": t.gpu_memory_peak,
        "low_gpu": t.low_gpu(),
    }
    if live and t.last is not None:
        s = t.last
        out["latest"] = {
            "seconds": round(s.t - (t.first_t or 0.0), 1),
            "cpu_percent": None if s.cpu_percent is None else round(s.cpu_percent, 1),
            "rss_bytes": s.rss_bytes,
            "gpu_percent": None if s.gpu_percent is None else round(s.gpu_percent, 1),
            "gpu_memory_bytes": s.gpu_memory_bytes,
        }
    return out


def summarize(samples: Iterable[Sample], gpu_devices: Iterable[str] = ()) -> dict[str, Any]:
    """`summary` of these samples (pure: what a Sampler does with the samples it takes)."""
    t = Tally(gpu_devices=list(gpu_devices))
    for s in samples:
        t.add(s)
    return summary(t)


# -- the process tree (psutil) ------------------------------------------------------------------------


class ProcessTree:
    """CPU and RSS of a process and all its descendants, as they come and go."""

    def __init__(self, pid: int) -> None:
        import psutil  # imported here, not at the top: read commands format usage and never sample

        try:
            self._root: psutil.Process | None = psutil.Process(pid)
        except psutil.Error:  # it already ended
            self._root = None
        self._last: tuple[float, float] | None = None  # (t, CPU seconds) of the previous look

    def read(self, t: float) -> tuple[float | None, int | None]:
        """(CPU percent since the previous read, RSS now); (None, None) once the root is gone."""
        import psutil

        try:
            if self._root is None or not self._root.is_running():  # also false when its pid was reused
                return None, None
            procs = [self._root, *self._root.children(recursive=True)]
        except psutil.Error:
            return None, None
        cpu, rss = 0.0, 0
        for p in procs:
            try:
                with p.oneshot():
                    times, mem = p.cpu_times(), p.memory_info()
            except psutil.Error:
                continue  # ended between the listing and the read
            # A process's children_* times are those of the descendants it reaped: a child that
            # ends moves its time there, so the sum over the live tree does not drop when one exits.
            cpu += times.user + times.system + times.children_user + times.children_system
            rss += mem.rss
        percent = None
        if self._last is not None and t > self._last[0]:
            # A descendant reaped by a process outside the tree takes its time away: never below zero.
            percent = max(0.0, cpu - self._last[1]) / (t - self._last[0]) * 100.0
        self._last = (t, cpu)
        return percent, rss


# -- the GPUs (NVML) ----------------------------------------------------------------------------------


def visible_devices(visible: str | None, count: int) -> list[str]:
    """The NVML devices CUDA_VISIBLE_DEVICES names (indices or GPU-/MIG- UUIDs); all of them when unset.

    As CUDA reads it: the list ends at its first entry that names no device ("-1", "", a bad index).
    Indices are taken in NVML's order (PCI bus), as CUDA numbers them with CUDA_DEVICE_ORDER=PCI_BUS_ID.
    """
    if visible is None:
        return [str(i) for i in range(count)]
    out = []
    for d in (x.strip() for x in visible.split(",")):
        if d.isdigit() and int(d) < count:
            out.append(str(int(d)))
        elif d.startswith(("GPU-", "MIG-")):
            out.append(d)
        else:
            break
    return out


def import_nvml() -> Any | None:
    """The `pynvml` module (from the `nvidia-ml-py` package), or None where it is not installed."""
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        return None


class Gpus:
    """The cell's GPUs through NVML: their mean utilisation and summed used memory."""

    def __init__(self, nvml: Any, handles: list[Any], devices: list[str]) -> None:
        self.nvml = nvml
        self.handles = handles
        self.devices = devices

    @classmethod
    def open(cls, visible: str | None, nvml: Any | None = None) -> Gpus | None:
        """The GPUs CUDA_VISIBLE_DEVICES gives (`visible`); None without NVML, a driver, or a GPU."""
        nvml = nvml if nvml is not None else import_nvml()
        error = getattr(nvml, "NVMLError", None)
        if nvml is None or not (isinstance(error, type) and issubclass(error, Exception)):
            return None  # not installed, or another module of that name
        try:
            nvml.nvmlInit()
        except error:  # no driver, no library: a machine without GPUs
            return None
        try:
            devices = visible_devices(visible, int(nvml.nvmlDeviceGetCount()))
            handles = [cls._handle(nvml, d) for d in devices]
        except error:
            handles = []
        if not handles:
            _shutdown(nvml)
            return None
        return cls(nvml, handles, devices)

    @staticmethod
    def _handle(nvml: Any, device: str) -> Any:
        if device.isdigit():
            return nvml.nvmlDeviceGetHandleByIndex(int(device))
        return nvml.nvmlDeviceGetHandleByUUID(device)

    def read(self) -> tuple[float | None, int | None]:
        """(mean utilisation %, summed used bytes) of the GPUs that answered; (None, None) if none did."""
        utils, used = [], []
        for h in self.handles:
            try:  # a MIG device has no utilisation, a GPU may fall off the bus: skip it this time
                u, m = self.nvml.nvmlDeviceGetUtilizationRates(h), self.nvml.nvmlDeviceGetMemoryInfo(h)
            except self.nvml.NVMLError:
                continue
            utils.append(float(u.gpu))
            used.append(int(m.used))
        if not utils:
            return None, None
        return sum(utils) / len(utils), sum(used)

    def close(self) -> None:
        _shutdown(self.nvml)


def _shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except nvml.NVMLError:
        pass


# -- the sampler ----------------------------------------------------------------------------------------


class Sampler:
    """Samples a process tree (and the cell's GPUs) every `period` seconds from a thread of the worker."""

    def __init__(self, pid: int, gpus: Gpus | None = None, period: float = SAMPLE_S) -> None:
        self._tree = ProcessTree(pid)
        self._gpus = gpus
        self._period = period
        self._tally = Tally(gpu_devices=list(gpus.devices) if gpus is not None else [])
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sweepq-usage", daemon=True)
        self._t0 = time.monotonic()
        self._flagged = False

    @classmethod
    def watch(cls, pid: int, environ: Mapping[str, str] = os.environ, period: float = SAMPLE_S) -> Sampler:
        """Start sampling `pid`'s tree, and the GPUs its environment gives it where NVML sees them."""
        sampler = cls(pid, Gpus.open(environ.get("CUDA_VISIBLE_DEVICES")), period)
        sampler.start()
        return sampler

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._thread.start()

    def stop(self) -> dict[str, Any]:
        """Stop sampling (at once: no sleep to wait out) and give the summary of the attempt."""
        self._stopping.set()
        self._thread.join()
        if self._gpus is not None:
            self._gpus.close()
        with self._lock:
            return summary(self._tally)

    def live(self) -> dict[str, Any]:
        """The summary so far and the latest sample: what the live view shows of a running attempt."""
        with self._lock:
            return summary(self._tally, live=True)

    def samples(self) -> int:
        with self._lock:
            return self._tally.samples

    def low_gpu_news(self) -> dict[str, Any] | None:
        """The low-GPU flag the first time it is raised (for the event), None before and after."""
        with self._lock:
            flag = None if self._flagged else self._tally.low_gpu()
        self._flagged = self._flagged or flag is not None
        return flag

    def _loop(self) -> None:
        while True:
            self._take()
            if self._stopping.wait(self._period):
                return

    def _take(self) -> None:
        t = time.monotonic() - self._t0
        cpu, rss = self._tree.read(t)
        if rss is None:
            return  # the process is gone: nothing of it to see (its GPUs are no longer its own)
        gpu, gpu_mem = self._gpus.read() if self._gpus is not None else (None, None)
        with self._lock:
            self._tally.add(Sample(t, cpu, rss, gpu, gpu_mem))
