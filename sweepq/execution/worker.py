"""A worker: claim the next cell, run one attempt of it in a child process, record the receipt, repeat.

`sweepq launch` starts N of these; `sweepq worker --root DIR` starts one (for
other machines and schedulers). A worker exits when every cell is done, failed
or cancelled; it waits out retry back-offs and cells other live processes run.
On SIGTERM/SIGINT/SIGHUP it stops claiming, passes SIGTERM to its training
process, and records that attempt before exiting.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweepq.atomic import read_json
from sweepq.execution import channel as chan
from sweepq.execution.memory import OomCounters, judge_sigkill
from sweepq.execution.program import tail_file
from sweepq.layout import CellPaths
from sweepq.queue.lock import ENV_LOCK_FD, CellLock
from sweepq.queue.reaper import finish_attempt, reap, reconcile_markers
from sweepq.queue.records import ENV_ATTEMPT_FILE, AttemptSpec, Claim, Outcome, WorkerInfo
from sweepq.queue.states import Reason
from sweepq.queue.store import CheckpointState, Store
from sweepq.spec.sweep import Settings

POLL_S = 0.5
TAIL_LINES = 40
FLUSH_S = 1.0  # progress reaches the database at most once a second per cell
GRACE_S = float(os.environ.get("SWEEPQ_GRACE_SECONDS", "60"))
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
PREEMPTION_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)


@dataclass
class Progress:
    """What the training process reported since the last flush."""

    fields: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    dirty: bool = False
    started: dict[str, Any] = field(default_factory=dict)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    superseded: list[tuple[list[int], str]] = field(default_factory=list)
    corrupt: list[dict[str, Any]] = field(default_factory=list)
    end: dict[str, Any] | None = None
    newest_checkpoint: int | None = None  # committed by this attempt
    notes: list[str] = field(default_factory=list)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def take(self, msg: dict[str, Any]) -> None:
        kind = msg.get("t")
        if kind == "started":
            self.started.update({k: v for k, v in msg.items() if k != "t"})
        elif kind == "resumed":
            self.started.update(start_step=msg["step"], start_checkpoint_sha=msg.get("sha"))
            self._set(step=msg["step"], epoch=msg.get("epoch"), best=msg.get("best"), best_step=msg.get("best_step"))
        elif kind == "fresh":
            self.started.update(start_step=0)
            if msg.get("none_verified"):
                self.notes.append("no checkpoint verified: started from scratch")
                self.events.append(("restarted_from_scratch", {"why": "no checkpoint verified"}))
            elif msg.get("rollback"):
                self.notes.append("rolled back past every checkpoint: started from scratch")
        elif kind == "total":
            self._set(total_steps=msg.get("steps"), total_epochs=msg.get("epochs"))
        elif kind == "log":
            self.metrics.update(msg.get("scalars") or {})
            self._set(step=msg.get("step"), epoch=msg.get("epoch"), metrics=dict(self.metrics))
            if msg.get("best") is not None:
                self._set(best=msg["best"], best_step=msg.get("best_step"))
        elif kind == "ckpt":
            self.checkpoints.append(msg)
            self.newest_checkpoint = max(self.newest_checkpoint or 0, int(msg["step"]))
        elif kind == "superseded":
            self.superseded.append((list(msg.get("steps") or []), msg.get("note") or ""))
        elif kind == "corrupt":
            self.corrupt.append(msg)
        elif kind == "warning":
            self.notes.extend(msg.get("notes") or [])
            self.events.append((msg.get("event") or "warning", {"step": msg.get("step"), "notes": msg.get("notes")}))
        elif kind == "end":
            self.end = msg.get("outcome")

    def _set(self, **values: Any) -> None:
        self.fields.update({k: v for k, v in values.items() if v is not None})
        self.dirty = True


class Worker:
    def __init__(self, root: Path, name: str | None = None, poll: float = POLL_S) -> None:
        self.root = root
        host = socket.gethostname()
        self.info = WorkerInfo(worker=name or f"{host}:{os.getpid()}", host=host, pid=os.getpid())
        self.poll = poll
        self.stopping = False
        self.hard_stop = False
        self.child: subprocess.Popen[bytes] | None = None
        self.store: Store | None = None

    # -- the loop ------------------------------------------------------------------

    def run(self) -> int:
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._on_signal)
        self.store = Store.open(self.root)
        try:
            reconcile_markers(self.store)
            while not self.stopping:
                reap(self.store)
                claimed = self._claim_next()
                if claimed is not None:
                    self._run_attempt(*claimed)
                    continue
                if self.store.unsettled() == 0:
                    break
                time.sleep(self.poll)
        finally:
            self.store.close()
        return 130 if self.stopping else 0

    def _on_signal(self, signum: int, _frame: Any) -> None:
        # Only flags and a forwarded signal here: the loop does the rest.
        if self.stopping and signum == signal.SIGINT:
            self.hard_stop = True
        self.stopping = True
        if self.child is not None and self.child.returncode is None:
            try:
                os.kill(self.child.pid, signal.SIGKILL if self.hard_stop else signal.SIGTERM)
            except ProcessLookupError:
                pass

    def _claim_next(self) -> tuple[Claim, CellLock] | None:
        assert self.store is not None
        for cell in self.store.claimable():
            lock = CellLock(CellPaths(self.root, cell).lock)
            if not lock.try_acquire():
                continue  # a live process holds it (its state will catch up)
            claim = self.store.claim(cell, self.info)
            if claim is not None:
                return claim, lock
            lock.release()
        return None

    # -- one attempt ---------------------------------------------------------------

    def _run_attempt(self, claim: Claim, lock: CellLock) -> None:
        assert self.store is not None and lock.fd is not None
        store = self.store
        settings = store.settings()
        paths = CellPaths(self.root, claim.cell)
        adir = paths.attempt_dir(claim.number)
        adir.mkdir(parents=True, exist_ok=True)
        cell = store.cell(claim.cell)
        spec = AttemptSpec(
            root=str(self.root),
            cell=claim.cell,
            attempt=claim.number,
            cfg=claim.cfg,
            cfg_hash=cell.cfg_hash,
            settings=settings.to_json(),
            nan_step=claim.nan_step,
            previous_reason=claim.previous_reason,
            worker_pid=os.getpid(),
        )
        spec.save(adir / "attempt.json")
        worker_end, child_end = chan.pair()
        env = dict(os.environ)
        env.update(
            {
                ENV_LOCK_FD: str(lock.fd),
                chan.ENV_FD: str(child_end.fileno()),
                ENV_ATTEMPT_FILE: str(adir / "attempt.json"),
                "PYTHONUNBUFFERED": "1",
            }
        )
        before = OomCounters.read()
        started = time.monotonic()
        with open(paths.stdout(claim.number), "ab") as out, open(paths.stderr(claim.number), "ab") as err:
            self.child = subprocess.Popen(
                [sys.executable, "-m", "sweepq.execution.attempt", str(adir / "attempt.json")],
                pass_fds=(lock.fd, child_end.fileno()),
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=settings.spec_dir,
                start_new_session=True,  # terminal signals reach it only through this worker
            )
        child_end.close()
        worker_end.setblocking(False)
        if self.stopping:  # a signal arrived while starting it
            os.kill(self.child.pid, signal.SIGTERM)
        progress = Progress()
        intent, status, rusage = self._watch(claim, settings, worker_end, progress, started)
        for msg in chan.receive(worker_end):
            progress.take(msg)
        worker_end.close()
        self._flush(claim, progress)
        outcome = self._outcome(claim, paths, progress, intent, status, rusage, before)
        finish_attempt(store, claim.cell, claim.number, outcome)
        self.child = None
        lock.release()  # only now: a reaper must never race this worker's own close

    def _watch(
        self, claim: Claim, settings: Settings, sock: socket.socket, progress: Progress, started: float
    ) -> tuple[str | None, int, Any]:
        """Relay messages until the child exits; returns (why we stopped it, wait status, rusage)."""
        assert self.child is not None and self.store is not None
        intent: str | None = None
        sent_term_at: float | None = None
        last_flush = 0.0
        while True:
            ready, _, _ = select.select([sock], [], [], 0.2)
            if ready:
                for msg in chan.receive(sock):
                    progress.take(msg)
                if progress.started:  # where it resumed from is a receipt field: record it at once
                    self.store.attempt_started(claim.cell, claim.number, **progress.started)
                    progress.started = {}
            pid, status, rusage = os.wait4(self.child.pid, os.WNOHANG)
            if pid:
                self.child.returncode = os.waitstatus_to_exitcode(status)
                return intent, status, rusage
            now = time.monotonic()
            if now - last_flush >= FLUSH_S:
                last_flush = now
                self._flush(claim, progress)
                if intent is None and self.store.cancel_requested(claim.cell):
                    intent = Reason.CANCELLED
                    os.kill(self.child.pid, signal.SIGTERM)
                    sent_term_at = now
            limit = settings.max_attempt_seconds
            if intent is None and limit and now - started > limit:
                intent = Reason.TIMEOUT
                os.kill(self.child.pid, signal.SIGTERM)
                sent_term_at = now
            if self.stopping and sent_term_at is None:
                intent = intent or "stop"
                sent_term_at = now
            if sent_term_at is not None and now - sent_term_at > GRACE_S:
                os.kill(self.child.pid, signal.SIGKILL)
                sent_term_at = float("inf")  # once

    def _flush(self, claim: Claim, p: Progress) -> None:
        assert self.store is not None
        with self.store.batch():  # everything reported since the last flush, in one transaction
            self._write_progress(claim, p)

    def _write_progress(self, claim: Claim, p: Progress) -> None:
        assert self.store is not None
        store = self.store
        if p.started:
            store.attempt_started(claim.cell, claim.number, **p.started)
            p.started = {}
        for c in p.checkpoints:
            store.record_checkpoint(
                claim.cell,
                int(c["step"]),
                path=(Path("cells") / claim.cell / c["path"]).as_posix(),
                epoch=c.get("epoch"),
                metrics=c.get("metrics") or {},
                manifest_sha256=c.get("sha"),
                attempt=c.get("attempt"),
                size_bytes=c.get("size"),
            )
        p.checkpoints = []
        for steps, note in p.superseded:
            store.set_checkpoint_state(claim.cell, steps, CheckpointState.SUPERSEDED, note=note)
        p.superseded = []
        for kind, detail in p.events:
            store.add_event(claim.cell, kind, detail)
        p.events = []
        for c in p.corrupt:
            store.record_checkpoint(
                claim.cell,
                int(c["step"]),
                path=(Path("cells") / claim.cell / c["moved_to"]).as_posix(),
                state=CheckpointState.CORRUPT,
                note=c.get("why"),
            )
            store.add_event(claim.cell, "checkpoint_corrupt", {"step": c["step"], "why": c.get("why")})
        p.corrupt = []
        if p.dirty:
            store.progress(claim.cell, claim.number, **p.fields)
            p.dirty = False

    def _outcome(
        self,
        claim: Claim,
        paths: CellPaths,
        p: Progress,
        intent: str | None,
        status: int,
        rusage: Any,
        before: OomCounters,
    ) -> Outcome:
        """The child's own account (channel or receipt file), corrected by what only we know."""
        code = os.waitstatus_to_exitcode(status)
        signum = -code if code < 0 else None
        peak = int(rusage.ru_maxrss) * 1024 if rusage is not None else None
        account = p.end
        if account is None and paths.receipt(claim.number).exists():
            try:
                account = read_json(paths.receipt(claim.number))
            except (OSError, ValueError):
                account = None
        if account is not None:
            o = Outcome.from_json(account)
        elif signum == signal.SIGKILL and intent is None:
            is_oom, evidence = judge_sigkill(before, OomCounters.read(), peak)
            o = Outcome(Reason.OOM if is_oom else Reason.LOST, note=evidence)
        elif signum == signal.SIGKILL:
            o = Outcome(
                Reason.PREEMPTED,
                note="killed by sweepq: "
                + ("hard stop (second interrupt)" if self.hard_stop else "did not stop within the grace period"),
            )
        elif signum in PREEMPTION_SIGNALS:
            o = Outcome(
                Reason.PREEMPTED,
                note=f"{signal.Signals(signum).name} arrived before the training "
                "process could handle it (no emergency checkpoint)",
            )
        elif signum is not None:
            o = Outcome(Reason.ERROR, note=f"killed by {signal.Signals(signum).name}")
        else:
            o = Outcome(Reason.ERROR, note=f"exited with code {code} before reporting how training ended")
        if intent in (Reason.CANCELLED, Reason.TIMEOUT) and o.reason != Reason.COMPLETED:
            o.note = f"{intent} by sweepq (was: {o.reason}){'; ' + o.note if o.note else ''}"
            o.reason = intent
        o.exit_code = code if code >= 0 else None
        o.exit_signal = signum
        if o.end_step is None:
            # Progress reaches us in batches; a committed checkpoint is proof of at least its step.
            known = [x for x in (p.fields.get("step"), p.newest_checkpoint) if x is not None]
            o.end_step = max(known) if known else None
        if peak is not None:
            o.peak_memory_bytes = max(peak, o.peak_memory_bytes or 0)
        if p.notes:
            o.note = "; ".join(p.notes + ([o.note] if o.note else []))
        if o.reason not in (Reason.COMPLETED, Reason.PREEMPTED) and not o.error_tail:
            o.error_tail = tail_file(paths.stderr(claim.number), TAIL_LINES)
        return o
