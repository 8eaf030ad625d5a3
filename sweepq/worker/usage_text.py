"""A cell's GPU and CPU use in words: for a table cell, for `show`, and the low-GPU flag (pure functions).

The figures are worker/usage.py's summary, as an attempt's `usage` holds it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sweepq.queue.records import AttemptRecord
from sweepq.worker.usage import LOW_GPU_GRACE_S, LOW_GPU_PERCENT


def _size(n: int) -> str:
    mib = n / 2**20
    return f"{mib / 1024:.1f}GiB" if mib >= 1024 else f"{mib:.0f}MiB"


def usage_cell(usage: Mapping[str, Any] | None) -> str:
    """A table cell: "gpu 63% 21.3GiB" or "cpu 97% 410MiB"; "" when nothing was sampled.

    A running attempt's usage (with `latest`) shows its latest sample; a finished one its mean
    utilisation and peak memory. GPU figures when the cell's GPUs answered, CPU otherwise.
    """
    if not usage:
        return ""
    latest = usage.get("latest")
    now: Mapping[str, Any] = latest if isinstance(latest, Mapping) else {}
    if usage.get("gpu_percent_mean") is not None or now.get("gpu_percent") is not None:
        kind, pct, mem = "gpu", "gpu_percent", "gpu_memory"
    else:
        kind, pct, mem = "cpu", "cpu_percent", "rss"
    percent = now.get(pct) if now else usage.get(f"{pct}_mean")
    size = now.get(f"{mem}_bytes") if now else usage.get(f"{mem}_peak_bytes")
    words = [
        f"{percent:.0f}%" if isinstance(percent, int | float) else "",
        _size(size) if isinstance(size, int) else "",
    ]
    words = [w for w in words if w]
    return " ".join([kind, *words]) if words else ""


def low_gpu_flag(usage: Mapping[str, Any] | None) -> str | None:
    """The low-GPU flag in words, e.g. "GPU under 20 % since minute 1 (mean 7 %)"; None when not raised."""
    flag = usage.get("low_gpu") if usage else None
    if not isinstance(flag, Mapping):
        return None
    after = float(flag.get("after_seconds", LOW_GPU_GRACE_S)) / 60
    threshold = float(flag.get("threshold_percent", LOW_GPU_PERCENT))
    return f"GPU under {threshold:g} % since minute {after:g} (mean {float(flag['mean_percent']):.0f} %)"


def usage_detail(usage: Mapping[str, Any] | None) -> str:
    """For `show`: "cpu mean 97 % (p95 140 %), RSS peak 410MiB; gpu mean 63 % (p95 90 %), memory peak 21.3GiB
    on 2 GPUs"; "" when nothing was sampled."""
    if not usage or not usage.get("samples"):
        return ""
    parts = []
    for kind, pct, mem, what in (("cpu", "cpu_percent", "rss", "RSS"), ("gpu", "gpu_percent", "gpu_memory", "memory")):
        if usage.get(f"{pct}_mean") is None:
            continue
        words = f"{kind} mean {usage[f'{pct}_mean']:.0f} % (p95 {usage.get(f'{pct}_p95') or 0:.0f} %)"
        peak = usage.get(f"{mem}_peak_bytes")
        if isinstance(peak, int):
            words += f", {what} peak {_size(peak)}"
        if kind == "gpu":
            n = len(usage.get("gpu_devices") or [])
            words += f" on {n} GPU{'s' if n != 1 else ''}" if n else ""
        parts.append(words)
    return "; ".join(parts)


def latest_by_cell(attempts: Iterable[AttemptRecord]) -> dict[str, dict[str, Any]]:
    """Each cell's usage from its newest attempt that has one (AttemptRecords, in any order)."""
    newest: dict[str, tuple[int, dict[str, Any]]] = {}
    for a in attempts:
        if a.usage and (a.cell not in newest or a.number > newest[a.cell][0]):
            newest[a.cell] = (a.number, a.usage)
    return {cell: u for cell, (_, u) in newest.items()}
