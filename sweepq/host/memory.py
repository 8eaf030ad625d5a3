"""Evidence for telling an out-of-memory kill from any other SIGKILL.

A process killed by the kernel's OOM killer just exits by SIGKILL, like one
killed by `kill -9`. What can be told apart: the kernel counts OOM kills
(per cgroup in memory.events / memory.oom_control, system-wide in
/proc/vmstat), so a counter that moved while the attempt ran, together with a
SIGKILL no sweepq process sent, is strong evidence. Without a moving counter
(another cgroup, an old kernel) a peak RSS near the memory limit is weak
evidence and is recorded as such. A kill by another user's `kill -9` while the
counter moved for another reason cannot be told apart; the receipt says what
was seen.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

NEAR_LIMIT = 0.9


def _read_counter(path: Path, key: str) -> int | None:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        return None
    return None


def _cgroup_dirs() -> list[Path]:
    out: list[Path] = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        _, controllers, rel = line.split(":", 2)
        rel = rel.lstrip("/")
        if controllers == "":  # cgroup v2
            out.append(Path("/sys/fs/cgroup") / rel)
        elif "memory" in controllers.split(","):
            out.append(Path("/sys/fs/cgroup/memory") / rel)
            out.append(Path("/sys/fs/cgroup/memory"))
    return out


@dataclass(frozen=True)
class OomCounters:
    cgroup: int | None
    system: int | None

    @classmethod
    def read(cls) -> OomCounters:
        cg = None
        for d in _cgroup_dirs():
            cg = _read_counter(d / "memory.events", "oom_kill")
            if cg is None:
                cg = _read_counter(d / "memory.oom_control", "oom_kill")
            if cg is not None:
                break
        return cls(cg, _read_counter(Path("/proc/vmstat"), "oom_kill"))


def memory_limit() -> int:
    """The tightest limit on this process: its cgroup's, else the machine's RAM."""
    limits = [os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")]
    for d in _cgroup_dirs():
        for name in ("memory.max", "memory.limit_in_bytes"):
            try:
                text = (d / name).read_text().strip()
            except OSError:
                continue
            if text.isdigit() and int(text) < (1 << 60):
                limits.append(int(text))
    return min(limits)


def judge_sigkill(before: OomCounters, after: OomCounters, peak_rss: int | None) -> tuple[bool, str]:
    """(is_oom, evidence) for a training process that died by a SIGKILL sweepq did not send."""
    limit = memory_limit()
    peak = f"peak RSS {peak_rss / 2**20:.0f} MiB of a {limit / 2**20:.0f} MiB limit" if peak_rss else "peak RSS unknown"
    if before.cgroup is not None and after.cgroup is not None and after.cgroup > before.cgroup:
        return True, f"SIGKILL while this cgroup's OOM-kill counter rose {before.cgroup}->{after.cgroup}; {peak}"
    if before.system is not None and after.system is not None and after.system > before.system:
        return True, f"SIGKILL while the kernel's OOM-kill counter rose {before.system}->{after.system}; {peak}"
    if peak_rss and peak_rss >= NEAR_LIMIT * limit:
        return True, f"SIGKILL with {peak} (no OOM counter moved: weak evidence)"
    return False, f"SIGKILL from outside sweepq; no OOM counter moved; {peak}"
