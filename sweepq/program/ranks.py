"""A program cell of several processes (`processes: N`): N ranks with torchrun's environment, one fate.

Each attempt starts its N ranks itself, as direct children of the attempt process, each with the
environment `torchrun --standalone --nproc-per-node N --max-restarts 0` gives its workers (`rank_env`):
RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_*, MASTER_ADDR=127.0.0.1 and
MASTER_PORT (a free port of this machine), TORCHELASTIC_RESTART_COUNT=0 (no restarts: sweepq's retries
decide), OMP_NUM_THREADS=1 unless set. A script written for torchrun runs unchanged. Every rank sees
the worker's GPUs (CUDA_VISIBLE_DEVICES as the worker has it) and picks `cuda:LOCAL_RANK`, as under
torchrun, which does not split CUDA_VISIBLE_DEVICES either.

Why not `python -m torch.distributed.run` itself: its agent would stand between the attempt and the
ranks. The attempt could then neither tie each rank's life to its own (PR_SET_PDEATHSIG, launch.py's
_EXEC: a SIGKILLed attempt leaves no rank behind) nor see how each rank ended (the agent exits 1 for
any failure, so a rank's SIGKILL, exception or OOM would all read the same), and a stop signal would
reach the ranks on the agent's own timetable (it turns SIGTERM into an exception and stops its workers
with its own timeouts). Started here, the ranks obey the attempt's grace like a one-process program.

One attempt, one fate (`Ranks.supervise`): the first rank that ends other than with exit 0 ends the
attempt for all. The others get SIGTERM at once and SIGKILL RANK_GRACE_SECONDS later, so no rank stays
blocked in a collective waiting for a peer that is gone (gloo's and NCCL's own timeouts are minutes).
The attempt is judged by that rank's exit (a SIGKILL nobody sent: `lost`, or `oom` on the kernel's
evidence; an exception: `failed`), its note names the rank, and the receipt's `ranks` says how and
when each rank ended.
"""

from __future__ import annotations

import dataclasses
import os
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from sweepq.host import logkeeper, signals
from sweepq.program.launch import Launch
from sweepq.spec.sweep import Settings

#: The port of a `train:` cell's ranks' own store (run/collective.py), beside torchrun's MASTER_PORT.
ENV_STORE_PORT = "SWEEPQ_RANKS_PORT"
#: What each rank of a `train:` cell runs: `train(cfg, run)` with its own Run (attempt/rank.py).
TRAIN_RANK_MODULE = "sweepq.attempt.rank"

#: After the first rank failed, how long the others may take to end on SIGTERM before SIGKILL.
RANK_GRACE_SECONDS = 5.0
POLL_S = 0.05


def free_port() -> int:
    """A TCP port of this machine free now, for rank 0's store (as torchrun --standalone picks one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rank_env(rank: int, world: int, port: int, run_id: str) -> dict[str, str]:
    """The variables torchrun sets for local rank `rank` of `world` on one machine (a single node)."""
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(world),
        "GROUP_RANK": "0",
        "GROUP_WORLD_SIZE": "1",
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(world),
        "ROLE_NAME": "default",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": run_id,
    }


def train_settings(settings: Settings) -> Settings:
    """A `train:` cell of several processes, as the program its ranks run: each rank is
    `python -m sweepq.attempt.rank` in the sweep file's folder (the train module imports from there)."""
    return dataclasses.replace(settings, command=[sys.executable, "-m", TRAIN_RANK_MODULE], workdir="sweep")


def start(launch: Launch, world: int, run_id: str, store: bool = False) -> list[subprocess.Popen[bytes]]:
    """Start the `world` ranks of the program; OSError (none left running) when one cannot start.

    `store`: a `train:` cell's ranks, whose Runs agree through a store of their own (ENV_STORE_PORT).
    """
    port = free_port()
    extra = {ENV_STORE_PORT: str(free_port())} if store else {}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for rank in range(world):
            env = {**launch.env, **rank_env(rank, world, port, run_id), **extra}
            env.setdefault("OMP_NUM_THREADS", "1")  # as torchrun: N ranks must not each take every core
            streams = logkeeper.rank_streams(rank)  # whole lines, each marked [rank<N>]:, in the shared logs
            out, err = streams if streams is not None else (None, None)
            try:
                procs.append(
                    subprocess.Popen(
                        launch.popen_argv(),
                        cwd=launch.cwd,
                        env=env,
                        pass_fds=launch.fds,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=err,
                    )
                )
            finally:
                for fd in streams or ():
                    os.close(fd)  # the rank has them: its end of the pipe is the only writer's
    except OSError:
        for proc in procs:
            proc.kill()
            proc.wait()
        raise
    return procs


def gpu_sets(gpus: list[str], workers: int, processes: int) -> list[str]:
    """Each worker's CUDA_VISIBLE_DEVICES when its cells run `processes` ranks: a GPU per rank.

    `--gpus 0,1,2,3 --workers 2` with `processes: 2` gives "0,1" and "2,3"; with one process per
    attempt, each worker one GPU in turn, as before. ValueError (said to the user) when there are
    fewer GPUs than the workers' ranks.
    """
    if processes <= 1 or not gpus:
        return gpus
    if len(gpus) < workers * processes:
        raise ValueError(
            f"--gpus gives {len(gpus)} GPU(s), but {workers} worker(s) running cells of processes: {processes} "
            f"need {workers * processes} (one per rank). Give more GPUs or start fewer workers (--workers "
            f"{max(1, len(gpus) // processes)})"
        )
    return [",".join(gpus[i * processes : (i + 1) * processes]) for i in range(workers)]


@dataclass
class RankEnd:
    rank: int
    pid: int
    exit_code: int  # os.waitstatus_to_exitcode: negative for a signal
    seconds: float  # after the ranks started
    ended_by_sweepq: bool  # it was sent a signal because another rank failed or the attempt stopped

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "pid": self.pid,
            "exit_code": self.exit_code if self.exit_code >= 0 else None,
            "exit_signal": -self.exit_code if self.exit_code < 0 else None,
            "seconds": round(self.seconds, 3),
            "ended_by_sweepq": self.ended_by_sweepq,
        }


@dataclass
class Ended:
    """How the ranks of one attempt ended."""

    status: int  # the wait status the attempt is judged by: the failed rank's, else rank 0's
    peak_memory_bytes: int  # the ranks' peaks summed (they ran side by side)
    forwarded: bool  # a stop signal of the attempt was forwarded to the ranks
    killed_after_grace: bool  # a rank outlived the stop's grace
    cause: int | None  # the rank whose failure ended the others
    ranks: list[RankEnd] = field(default_factory=list)

    def note(self) -> str | None:
        if self.cause is None:
            return None
        end = next(r for r in self.ranks if r.rank == self.cause)
        how = f"was killed by {signal.Signals(-end.exit_code).name}" if end.exit_code < 0 else f"exited {end.exit_code}"
        others = [r.rank for r in self.ranks if r.ended_by_sweepq]
        stopped = f"; sweepq then ended rank(s) {', '.join(map(str, others))}" if others else ""
        return f"rank {self.cause} (pid {end.pid}) {how} first{stopped} (one attempt, one fate)"


def supervise(procs: list[subprocess.Popen[bytes]], grace: float) -> Ended:
    """Wait for every rank; forward a stop to all; a failed rank ends the others (see the module)."""
    started = time.monotonic()
    alive = dict(enumerate(procs))
    ends: dict[int, RankEnd] = {}
    statuses: dict[int, int] = {}
    signalled: set[int] = set()
    peak = 0
    cause: int | None = None
    fate_at: float | None = None
    forwarded_at: float | None = None
    killed = fate_killed = False
    exits = {rank: _pidfd(p.pid) for rank, p in alive.items()}
    try:
        while alive:
            failed: list[int] = []  # ranks that failed on their own since the last look
            for rank, proc in list(alive.items()):
                pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
                if not pid:
                    continue
                proc.returncode = code = os.waitstatus_to_exitcode(status)
                del alive[rank]
                statuses[rank] = status
                peak += int(rusage.ru_maxrss) * 1024
                ends[rank] = RankEnd(rank, proc.pid, code, time.monotonic() - started, rank in signalled)
                if code != 0 and rank not in signalled and forwarded_at is None:
                    failed.append(rank)
            if failed and cause is None:
                # Seen in the same look, a rank killed by a signal is the cause and a peer that then
                # raised in a collective (gloo reports the closed connection at once) its consequence.
                cause = min(failed, key=lambda r: (ends[r].exit_code >= 0, r))
                fate_at = time.monotonic()
                _send(alive, signal.SIGTERM, signalled)
            if not alive:
                break
            now = time.monotonic()
            if (signals.requested() or logkeeper.flooded()) and forwarded_at is None:
                _send(alive, signal.SIGTERM, signalled)
                forwarded_at = now
            elif forwarded_at is not None and not killed and now - forwarded_at > grace:
                _send(alive, signal.SIGKILL, signalled)
                killed = True
            if fate_at is not None and not fate_killed and now - fate_at > RANK_GRACE_SECONDS:
                _send(alive, signal.SIGKILL, signalled)
                fate_killed = True
            ready = [fd for rank, fd in exits.items() if fd is not None and rank in alive]
            if ready and len(ready) == len(alive):
                select.select(ready, [], [], POLL_S)
            else:
                time.sleep(POLL_S)
    finally:
        for fd in exits.values():
            if fd is not None:
                os.close(fd)
    deciding = cause if cause is not None else 0
    return Ended(
        status=statuses[deciding],
        peak_memory_bytes=peak,
        forwarded=forwarded_at is not None,
        killed_after_grace=killed,
        cause=cause,
        ranks=[ends[r] for r in sorted(ends)],
    )


def _send(alive: dict[int, subprocess.Popen[bytes]], sig: int, signalled: set[int]) -> None:
    for rank, proc in alive.items():
        signalled.add(rank)
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            pass


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None
