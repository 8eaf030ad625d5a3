"""GPU and CPU use per attempt: the summary and the flag (pure), NVML faked at its API, real processes for CPU and RSS.

The GPU path meets NVML only through `pynvml`'s functions: a fake module stands in for it (this
machine has no GPU); the process tree is sampled for real (a process that burns a configured
amount of CPU time, one that sleeps, one that holds N MB).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from alembic import command
from sqlalchemy import inspect

from sweepq.layout import CellPaths
from sweepq.queue import database as db
from sweepq.queue.records import Outcome
from sweepq.queue.states import Reason
from sweepq.queue.store import Store
from sweepq.worker import usage, usage_text
from sweepq.worker.loop import _sampled
from sweepq.worker.progress import Progress
from sweepq.worker.usage import Gpus, Sample, Sampler, summarize, visible_devices
from unit.support import WORKER

MiB = 2**20
PERIOD = 0.02  # seconds between samples in these tests


# -- the summary and the flag (pure) ---------------------------------------------------------------------


def test_summary_means_p95_and_peaks() -> None:
    samples = [Sample(0.0, None, 100 * MiB)] + [Sample(float(i), float(i), (100 + i) * MiB) for i in range(1, 21)]
    s = summarize(samples)
    assert s["samples"] == 21 and s["seconds"] == 20.0
    assert s["cpu_percent_mean"] == 10.5  # 1..20, each over one second; the first sample has no interval
    assert s["cpu_percent_p95"] == 19.0  # nearest rank: the 19th of 20
    assert s["rss_peak_bytes"] == 120 * MiB
    assert s["gpu_percent_mean"] is None and s["gpu_memory_peak_bytes"] is None and s["gpu_devices"] == []
    assert s["low_gpu"] is None and "latest" not in s


def test_cpu_mean_weighs_each_sample_by_the_seconds_it_covers() -> None:
    """A late sample (a busy machine) covers more time: mean x seconds stays the CPU time used."""
    s = summarize([Sample(0.0, None, 1), Sample(1.0, 100.0, 1), Sample(4.0, 0.0, 1)])
    assert s["cpu_percent_mean"] == pytest.approx(100 * 1 / 4, abs=0.1)
    assert s["cpu_percent_mean"] * s["seconds"] / 100 == pytest.approx(1.0, abs=0.01)


def gpu_run(before: float, after: float, until: float, step: float = 1.0) -> list[Sample]:
    """GPU utilisation `before` in the grace, `after` past it, sampled each `step` s up to `until`."""
    n = int(until / step) + 1
    return [
        Sample(i * step, 50.0, MiB, before if i * step < usage.LOW_GPU_GRACE_S else after, 2 * MiB) for i in range(n)
    ]


def test_low_gpu_after_the_first_minute_is_flagged_with_its_mean() -> None:
    end = usage.LOW_GPU_GRACE_S + usage.LOW_GPU_WINDOW_S
    s = summarize(gpu_run(before=100.0, after=7.0, until=end), gpu_devices=["0"])
    assert s["low_gpu"] == {"mean_percent": 7.0, "threshold_percent": 20.0, "after_seconds": 60.0}
    assert usage_text.low_gpu_flag(s) == "GPU under 20 % since minute 1 (mean 7 %)"
    assert s["gpu_percent_mean"] > 7.0 and s["gpu_memory_peak_bytes"] == 2 * MiB and s["gpu_devices"] == ["0"]


@pytest.mark.parametrize(
    ("before", "after", "until", "why"),
    [
        (0.0, 60.0, 200.0, "busy after the first minute: a slow start is not flagged"),
        (5.0, usage.LOW_GPU_PERCENT, 200.0, "at the threshold is not under it"),
        (5.0, 5.0, usage.LOW_GPU_GRACE_S + usage.LOW_GPU_WINDOW_S - 1, "not yet sampled long enough past the grace"),
    ],
)
def test_low_gpu_is_not_flagged(before: float, after: float, until: float, why: str) -> None:
    s = summarize(gpu_run(before, after, until))
    assert s["low_gpu"] is None, why
    assert usage_text.low_gpu_flag(s) is None


def test_no_gpu_samples_no_flag() -> None:
    assert summarize([Sample(float(i), 1.0, MiB) for i in range(500)])["low_gpu"] is None


# -- words --------------------------------------------------------------------------------------------------


def test_usage_cell_gpu_cpu_live_and_nothing() -> None:
    gpu = summarize(gpu_run(63.0, 63.0, 10.0), ["0"]) | {"gpu_memory_peak_bytes": int(21.3 * 2**30)}
    assert usage_text.usage_cell(gpu) == "gpu 63% 21.3GiB"
    cpu = summarize([Sample(0.0, None, 410 * MiB), Sample(1.0, 97.0, 300 * MiB)])
    assert usage_text.usage_cell(cpu) == "cpu 97% 410MiB"
    live = cpu | {"latest": {"seconds": 1.0, "cpu_percent": 12.4, "rss_bytes": 300 * MiB}}
    assert usage_text.usage_cell(live) == "cpu 12% 300MiB"  # a running attempt: its latest sample
    assert usage_text.usage_cell({}) == usage_text.usage_cell(None) == ""


def test_usage_detail_for_show() -> None:
    s = summarize([Sample(0.0, None, 410 * MiB, 50.0, 3 * 2**30), Sample(1.0, 97.0, MiB, 90.0, MiB)], ["0", "1"])
    assert usage_text.usage_detail(s) == (
        "cpu mean 97 % (p95 97 %), RSS peak 410MiB; gpu mean 70 % (p95 90 %), memory peak 3.0GiB on 2 GPUs"
    )
    assert usage_text.usage_detail({}) == ""


# -- NVML, faked at pynvml's API ------------------------------------------------------------------------------


class NVMLError(Exception):
    pass


@dataclass
class FakeNvml:
    """pynvml as far as sweepq calls it: devices with a utilisation and used memory each."""

    util: dict[int, float]
    used: dict[int, int]
    init_fails: bool = False
    unsupported: set[int] = field(default_factory=set)
    calls: list[str] = field(default_factory=list)
    NVMLError: type[Exception] = NVMLError

    def nvmlInit(self) -> None:
        self.calls.append("init")
        if self.init_fails:
            raise NVMLError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self) -> int:
        return len(self.util)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        if i not in self.util:
            raise NVMLError("Invalid Argument")
        return i

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int:
        return int(uuid.rsplit("-", 1)[1])

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        if h in self.unsupported:
            raise NVMLError("Not Supported")
        return SimpleNamespace(gpu=self.util[h], memory=0)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(total=80 * 2**30, free=80 * 2**30 - self.used[h], used=self.used[h])


def four_gpus() -> FakeNvml:
    return FakeNvml(util={0: 90.0, 1: 10.0, 2: 30.0, 3: 50.0}, used={0: 1 * MiB, 1: 2 * MiB, 2: 3 * MiB, 3: 4 * MiB})


def test_visible_devices_as_cuda_reads_them() -> None:
    assert visible_devices(None, 3) == ["0", "1", "2"]
    assert visible_devices("2, 0", 4) == ["2", "0"]
    assert visible_devices("1,-1,2", 4) == ["1"]  # CUDA stops at the first entry naming no device
    assert visible_devices("", 4) == [] and visible_devices("7", 4) == []
    assert visible_devices("GPU-aa-1,MIG-bb-2", 4) == ["GPU-aa-1", "MIG-bb-2"]


def test_gpus_read_the_cells_devices_only(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = four_gpus()
    monkeypatch.setitem(sys.modules, "pynvml", fake)  # where `import pynvml` finds it
    gpus = Gpus.open("1,3")
    assert gpus is not None and gpus.devices == ["1", "3"]
    assert gpus.read() == (30.0, 6 * MiB)  # the mean of 10 % and 50 %; 2 + 4 MiB
    fake.unsupported.add(3)  # a MIG device has no utilisation: skipped, the others still count
    assert gpus.read() == (10.0, 2 * MiB)
    fake.unsupported.add(1)
    assert gpus.read() == (None, None)
    gpus.close()
    assert fake.calls == ["init", "shutdown"]


def test_no_gpus_without_nvml_a_driver_or_a_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed: `import pynvml` raises ImportError
    assert Gpus.open(None) is None
    assert Gpus.open(None, nvml=SimpleNamespace(nvmlInit=lambda: None)) is None  # another module named pynvml
    broken = four_gpus()
    broken.init_fails = True
    assert Gpus.open(None, nvml=broken) is None
    none_given = four_gpus()
    assert Gpus.open("-1", nvml=none_given) is None
    assert none_given.calls == ["init", "shutdown"]  # what it opened it closed


def sleeper() -> subprocess.Popen[bytes]:
    """A process that waits on its stdin: alive until the test closes it."""
    return subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)


def wait_samples(sampler: Sampler, n: int) -> None:
    for _ in range(100_000):  # a guard against a hang, not a bound on speed
        if sampler.samples() >= n:
            return
        time.sleep(PERIOD)
    raise AssertionError(f"the sampler took {sampler.samples()} samples, expected {n}")


def test_sampler_reports_the_cells_gpus_live_and_at_the_end() -> None:
    fake = four_gpus()
    gpus = Gpus.open("0,2", nvml=fake)
    proc = sleeper()
    sampler = Sampler(proc.pid, gpus, period=PERIOD)
    sampler.start()
    try:
        wait_samples(sampler, 3)
        live = sampler.live()
        assert live["latest"]["gpu_percent"] == 60.0 and live["latest"]["gpu_memory_bytes"] == 4 * MiB
        assert usage_text.usage_cell(live) == "gpu 60% 4MiB"
    finally:
        proc.communicate(b"")
        used = sampler.stop()
    assert used["gpu_devices"] == ["0", "2"] and used["gpu_percent_mean"] == 60.0 and used["gpu_percent_p95"] == 60.0
    assert used["gpu_memory_peak_bytes"] == 4 * MiB and used["rss_peak_bytes"] > 0
    assert fake.calls == ["init", "shutdown"]


def test_low_gpu_news_once_and_it_goes_out_with_the_flush(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's side: the flag is raised once, as an event, and the live figures ride on the flush."""
    monkeypatch.setattr(usage, "LOW_GPU_GRACE_S", 2 * PERIOD)
    monkeypatch.setattr(usage, "LOW_GPU_WINDOW_S", 2 * PERIOD)
    fake = FakeNvml(util={0: 7.0}, used={0: MiB})
    proc = sleeper()
    sampler = Sampler(proc.pid, Gpus.open(None, nvml=fake), period=PERIOD)
    sampler.start()
    progress = Progress()
    try:
        for _ in range(100_000):  # a guard against a hang, not a bound on speed
            _sampled(progress, sampler, 3, sampler.live())
            if progress.events:
                break
            time.sleep(PERIOD)
        ((kind, detail),) = progress.events
        assert kind == "low_gpu" and detail["attempt"] == 3 and detail["mean_percent"] == 7.0
        assert progress.usage is not None and progress.usage["latest"]["gpu_percent"] == 7.0
        wait_samples(sampler, sampler.samples() + 2)
        _sampled(progress, sampler, 3, sampler.live())
        assert len(progress.events) == 1  # once per attempt
    finally:
        proc.communicate(b"")
        used = sampler.stop()
    assert used["low_gpu"]["mean_percent"] == 7.0


# -- CPU and RSS of real processes --------------------------------------------------------------------------

BURN_CPU_S = 0.5  # CPU seconds the busy process burns (process time, whatever the machine's load)
BUSY_TREE = f"""
import subprocess, sys
burn = "import time\\nend = time.process_time() + {BURN_CPU_S}\\nwhile time.process_time() < end: pass"
child = subprocess.Popen([sys.executable, "-c", burn])
print("ready", flush=True)
child.wait()
"""
IDLE = 'import sys; print("ready", flush=True); sys.stdin.read()'


def ready(cmd: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", cmd], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"  # started: its start-up is behind it
    return proc


def cpu_seconds(s: dict[str, Any]) -> float:
    return float(s["cpu_percent_mean"]) * float(s["seconds"]) / 100


def test_a_busy_process_tree_uses_much_more_cpu_than_a_sleeping_one() -> None:
    """The busy one is a parent that waits on a child that burns: the tree is summed, children included."""
    busy, idle = ready(BUSY_TREE), ready(IDLE)
    on_busy, on_idle = Sampler(busy.pid, period=PERIOD), Sampler(idle.pid, period=PERIOD)
    on_busy.start()
    on_idle.start()
    _, status, rusage = os.wait4(busy.pid, 0)
    busy.returncode = os.waitstatus_to_exitcode(status)
    wait_samples(on_idle, on_idle.samples() + 2)
    idle.communicate(b"")
    hot, cold = on_busy.stop(), on_idle.stop()
    recorded = rusage.ru_utime + rusage.ru_stime  # the kernel's account of the tree (its waited child included)
    assert busy.returncode == 0
    assert BURN_CPU_S / 2 <= cpu_seconds(hot) <= recorded + 0.05  # at most one interval is missed at the end
    assert cold["cpu_percent_mean"] is not None and cold["samples"] >= 3
    assert hot["cpu_percent_mean"] >= 10 * cold["cpu_percent_mean"]
    assert hot["cpu_percent_p95"] > 0 and hot["rss_peak_bytes"] > 0


def test_peak_rss_covers_what_the_process_holds() -> None:
    n = 64 * MiB
    proc = ready(f'import sys; held = b"x" * {n}; print("ready", flush=True); sys.stdin.read()')
    sampler = Sampler(proc.pid, period=PERIOD)
    sampler.start()
    wait_samples(sampler, 2)
    proc.communicate(b"")
    used = sampler.stop()
    assert used["rss_peak_bytes"] >= n
    assert usage_text.usage_cell(used).startswith("cpu ") and "MiB" in usage_text.usage_cell(used)


def test_a_process_gone_before_sampling_gives_an_empty_summary() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    sampler = Sampler(proc.pid, period=PERIOD)
    sampler.start()
    assert sampler.stop() == summarize([])
    assert usage_text.usage_cell(summarize([])) == ""


# -- the attempt's row: live figures, the receipt's, and roots made before the column -------------------------


def test_usage_reaches_the_attempt_row_live_then_final(store: Store) -> None:
    won = store.claim("1.1", WORKER)
    assert won is not None
    store.attempt_usage("1.1", won.number, {"samples": 3, "latest": {"cpu_percent": 50.0}})
    assert store.attempt("1.1", won.number).usage["latest"] == {"cpu_percent": 50.0}  # type: ignore[union-attr]
    final = summarize([Sample(0.0, None, MiB), Sample(1.0, 80.0, 2 * MiB)])
    store.finish("1.1", won.number, Outcome(reason=str(Reason.COMPLETED), usage=final))
    store.attempt_usage("1.1", won.number, {"samples": 99})  # a late live write never replaces the final one
    record = store.attempt("1.1", won.number)
    assert record is not None and record.usage == final and record.to_json()["usage"] == final


def test_a_root_made_before_usage_upgrades_and_reads_none(store: Store) -> None:
    """A root at the previous revision (with an attempt in it) is migrated by the next open; its attempts read {}."""
    won = store.claim("1.1", WORKER)
    assert won is not None
    store.finish("1.1", won.number, Outcome(reason=str(Reason.PREEMPTED)))
    cfg = db._alembic_config()
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0001")
    assert db.current_revision(store.engine) == "0001"
    assert "usage" not in {c["name"] for c in inspect(store.engine).get_columns("attempts")}
    root = store.root
    store.close()
    reopened = Store.open(root)
    try:
        assert db.current_revision(reopened.engine) == db.SCHEMA_HEAD
        (old,) = reopened.attempts("1.1")
        assert old.usage == {} and old.to_json()["usage"] == {} and old.reason == "preempted"
        again = reopened.claim("1.1", WORKER)
        assert again is not None
        reopened.finish("1.1", again.number, Outcome(reason=str(Reason.COMPLETED), usage={"samples": 1}))
        assert reopened.attempt("1.1", again.number).usage == {"samples": 1}  # type: ignore[union-attr]
    finally:
        reopened.close()


def test_usage_of_each_cells_newest_attempt(store: Store) -> None:
    for cell, figures in (("1.1", [{"samples": 1}, {"samples": 2}]), ("1.2", [{"samples": 5}, None])):
        for f in figures:
            won = store.claim(cell, WORKER)
            assert won is not None
            store.finish(cell, won.number, Outcome(reason=str(Reason.PREEMPTED), usage=f))
    assert usage_text.latest_by_cell(store.attempts()) == {"1.1": {"samples": 2}, "1.2": {"samples": 5}}


def test_the_flush_carries_the_live_figures(store: Store) -> None:
    won = store.claim("1.1", WORKER)
    assert won is not None
    progress = Progress(usage={"samples": 2, "latest": {"cpu_percent": 40.0}})
    progress.flush(store, CellPaths(store.root, "1.1"), won.number)
    assert progress.usage is None  # sent
    assert store.attempt("1.1", won.number).usage == {"samples": 2, "latest": {"cpu_percent": 40.0}}  # type: ignore[union-attr]
