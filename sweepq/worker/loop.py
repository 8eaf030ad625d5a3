"""A worker: claim the next cell, run one attempt of it in a child process, record the receipt, repeat.

`sweepq launch` starts N of these; `sweepq worker --root DIR` starts one (for
other machines and schedulers). A worker exits when every cell is done, failed
or cancelled; it waits out retry back-offs and cells other live processes run.
On SIGTERM/SIGINT it stops claiming, passes SIGTERM to its training
process, and records that attempt before exiting.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

from sqlalchemy.exc import OperationalError

from sweepq.atomic import atomic_write_json, read_json
from sweepq.checkpoint import storage_url
from sweepq.durable import opening as durable_opening
from sweepq.evidence import Evidence, Intent, Witness
from sweepq.host import diskfull
from sweepq.host.memory import OomCounters, judge_sigkill
from sweepq.host.procs import pidfd
from sweepq.host.tails import tail_file
from sweepq.layout import CellPaths
from sweepq.outcome import decide
from sweepq.queue import liveness
from sweepq.queue.reaper import finish_attempt, reap, reconcile_markers
from sweepq.queue.records import Claim, Outcome, WorkerInfo
from sweepq.queue.states import Reason
from sweepq.queue.store import CheckpointState, Store
from sweepq.spec.sweep import Settings
from sweepq.wire import channel as chan
from sweepq.wire.attempt_spec import ENV_ATTEMPT_FILE, AttemptSpec
from sweepq.worker import gate, strays, usage, usage_text
from sweepq.worker.progress import Progress
from sweepq.worker.starter import Child, Launch, Starter, become_subreaper

POLL_S = 0.5
FLUSH_S = 1.0  # progress reaches the database at most once a second per cell
GRACE_S = float(os.environ.get("SWEEPQ_GRACE_SECONDS", "60"))
LEFTOVERS_EVENT = "leftovers_ended"  # processes an attempt left running, ended by its worker
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)  # not SIGHUP: a terminal going away never stops training


class Worker:
    def __init__(
        self,
        root: Path,
        name: str | None = None,
        poll: float = POLL_S,
        gate: int | None = None,
        extra_signals: tuple[int, ...] = (),
    ) -> None:
        self.root = root
        # a scheduler's warnings (Slurm's SIGUSR1/SIGUSR2, sweepq/slurm/job.py): a stop like SIGTERM
        self.signals = STOP_SIGNALS + tuple(extra_signals)
        self.first_signal: int | None = None  # the stop's signal: a scheduler's job requeues or ends by it
        self.gate = gate  # a launch's pipe: claim once it says go; the launch checks the markers meanwhile
        host = socket.gethostname()
        self.info = WorkerInfo(worker=name or f"{host}:{os.getpid()}", host=host, pid=os.getpid())
        self.poll = poll
        self.stopping = False
        self.hard_stop = False
        self.killed_after_grace = False  # this attempt's: the worker SIGKILLed it when its grace period ended
        self.child: Child | None = None
        self.store: Store | None = None
        self.starter: Starter | None = None
        self.owners = liveness.for_root(root)

    # -- the loop ------------------------------------------------------------------

    def run(self) -> int:
        for sig in self.signals:
            signal.signal(sig, self._on_signal)
        # A hangup never stops a worker (a standalone one's terminal closing must not stop training):
        # one that is ignored (`nohup`) stays so, any other is ignored from here on.
        if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
        diskfull.guard_streams()  # its log is on the sweep's disk: a full one must not raise from a print
        # Whatever an attempt forks is re-parented here when its parent exits (daemons that left their
        # session too), so that the worker can end it with the attempt (`_end_leftovers`).
        become_subreaper()
        self.store = Store.open(self.root)
        if self.gate is not None and not gate.opens(self.gate):  # before the settings: a first launch writes them
            self.store.close()
            return 0  # the launch found nothing to do, or is gone
        settings = self.store.settings()
        self.starter = Starter(self.root, settings.train, settings.spec_dir, settings.start)  # at the first claim
        try:
            if self.gate is None:
                reconcile_markers(self.store)
            while not self.stopping:
                self._end_orphans()
                reap(self.store, owners=self.owners)  # its own liveness: a new one each time would never settle
                claimed = self._claim_next()
                if claimed is not None:
                    self._run_attempt(*claimed)
                    continue
                if self.store.unsettled() == 0:
                    break
                time.sleep(self.poll)
        except OperationalError as e:  # a full disk refused the database: say so, stop, exit non-zero
            words = diskfull.database_full(e, self.store.database.path)
            if words is None:
                raise
            return diskfull.stop_worker(words, self.child, GRACE_S)
        except OSError as e:  # a full disk (or inode table) refused another file of its own: the same
            said = diskfull.worker_disk_error(e, self.root)
            if said is None:
                raise
            return diskfull.stop_worker(said[0], self.child, GRACE_S, what=said[1])
        finally:
            self.starter.close()
            self.store.close()
        return 130 if self.stopping else 0

    def _on_signal(self, signum: int, _frame: Any) -> None:
        # Only flags and a forwarded signal here: the loop does the rest.
        if self.stopping and signum == signal.SIGINT:
            self.hard_stop = True
        if self.first_signal is None:
            self.first_signal = signum
        self.stopping = True
        if self.child is not None and self.child.returncode is None:
            try:
                os.kill(self.child.pid, signal.SIGKILL if self.hard_stop else signal.SIGTERM)
            except ProcessLookupError:
                pass

    def _claim_next(self) -> tuple[Claim, liveness.Ownership] | None:
        assert self.store is not None
        # The ownership is taken inside the claim's transaction, before its commit (queue/claim.py).
        return self.store.claim_next(self.info, self.owners.take)

    # -- one attempt ---------------------------------------------------------------

    def _run_attempt(self, claim: Claim, owner: liveness.Ownership) -> None:
        assert self.store is not None
        settings = self.store.settings()
        paths = CellPaths(self.root, claim.cell)
        # max_attempt_seconds counts from here, and so does the receipt's wall time (AttemptSpec).
        started = time.monotonic()
        attempt_file = self._write_spec(claim, settings, started)
        worker_end, child_end = chan.pair()
        before = OomCounters.read()
        self.child = self._start(claim, settings, owner, attempt_file, child_end.fileno())
        child_end.close()
        worker_end.setblocking(False)
        if self.stopping:  # a signal arrived while starting it
            os.kill(self.child.pid, signal.SIGTERM)
        progress = Progress()
        sampler = usage.Sampler.watch(self.child.pid)  # a thread of this worker, never of the training
        exited = pidfd(self.child.pid)  # None before Linux 5.3: the loop's timeout notices the exit
        try:
            intent, status, rusage = self._watch(claim, settings, worker_end, progress, started, owner, sampler, exited)
        finally:
            used = sampler.stop()
            if exited is not None:
                os.close(exited)
        left = self._end_leftovers(claim, owner, progress)
        _sampled(progress, sampler, claim.number, None)  # the low-GPU flag, if only the whole attempt shows it
        for _ in range(100):  # what is still waiting, in bounded batches (the attempt and its leftovers are gone)
            batch = chan.receive(worker_end)
            for msg in batch:
                progress.take(msg)
            if not batch:
                break
        worker_end.close()
        rejected = progress.rejected_words()
        if rejected is not None:
            progress.notes.append(rejected)
        progress.flush(self.store, paths, claim.number)
        outcome = self._outcome(claim, paths, progress, intent, status, rusage, before)
        if outcome.reason == Reason.ERROR:
            _lapsed(outcome, owner)
        outcome.usage = used
        for words in (usage_text.low_gpu_flag(used), strays.ended_words(left) if left else None):
            if words:
                outcome.note = f"{outcome.note}; {words}" if outcome.note else words
        _keep_usage(paths, claim.number, used, left, settings.storage)
        finish_attempt(self.store, claim.cell, claim.number, outcome)
        self.child = None
        owner.release()  # only now: a reaper must never race this worker's own close
        assert self.starter is not None
        self.starter.reap()  # what the attempt's own children left, adopted by this worker

    def _end_leftovers(self, claim: Claim, owner: liveness.Ownership, progress: Progress) -> list[strays.Ended]:
        """End every process the exited attempt left running, before its cell is closed and released.

        A helper forked by the training code (multiprocessing, DataLoader workers, a daemon that
        left its session) inherits the cell's locked descriptor: alive, it would hold the cell's
        ownership for its own life, and no worker could resume the cell. Nothing of an attempt may
        outlive it; the event and the attempt's note name each process ended (pid, command line).
        """
        assert self.child is not None
        spare = (self.starter.template.proc.pid,) if self.starter and self.starter.template else ()
        # The holders looked for are those of the folder this attempt locked, known by its descriptor:
        # the path may name another folder by now (the cell's moved away under a stopped attempt and the
        # new one's locked by the attempt that replaced it), whose holders are none of this attempt's.
        try:
            fds = owner.handoff().fds
        except liveness.OwnershipLost:
            fds = ()
        others, keepers = strays.log_keepers(strays.leftovers(spare, self.child.pid, fds[0] if fds else None))
        left = strays.end_processes(others)
        left += strays.wait_then_end(keepers)  # each finishes by itself, its logs copied, once the rest is gone
        assert self.starter is not None
        self.starter.reap()  # the zombies of those that were this worker's (adopted) children
        if left:
            diskfull.say(f"sweepq: attempt {claim.number} of {claim.cell}: {strays.ended_words(left)}")
            detail = {"attempt": claim.number, "processes": [e.to_json() for e in left]}
            progress.events.append((LEFTOVERS_EVENT, detail))
        return left

    def _end_orphans(self) -> None:
        """End what holds a running cell's lock on this host once its attempt's processes are all dead.

        A worker ends what its attempt leaves (`_end_leftovers`), but a worker killed together with its
        training process (kill -9 of a whole launch, the OOM killer taking both) ends nothing: a forked
        helper that inherited the locked descriptor would then hold the cell for its own life, and no
        reaper could take it. Once the queue's record says the attempt ran here, and neither its training
        process nor its worker lives (a pid started after the attempt's last sign of life is somebody
        else's), whoever holds the lock is such a leftover: it is ended and named in a `leftovers_ended`
        event, and the reaper then closes the attempt as it would any dead one.
        """
        assert self.store is not None
        from sweepq.queue import lock

        for cell, number in self.store.running():
            rec = self.store.attempt(cell, number)
            if rec is None or rec.host != self.info.host or rec.seen_at is None:
                continue  # another machine's (its lock is not seen here), or not yet flushed once
            last = rec.seen_at.timestamp()
            if strays.alive_since(rec.pid, last) or strays.alive_since(rec.worker_pid, last):
                continue
            folder = CellPaths(self.root, cell).lock
            holders = [h.pid for h in lock.holders(folder, exclude=(os.getpid(),))]
            if not holders:
                continue
            left = strays.end_processes(holders)
            if left:
                diskfull.say(f"sweepq: attempt {number} of {cell} (its processes dead): {strays.ended_words(left)}")
                detail = {"attempt": number, "processes": [e.to_json() for e in left], "after": "its processes died"}
                self.store.add_event(cell, LEFTOVERS_EVENT, detail)

    def _write_spec(self, claim: Claim, settings: Settings, started: float) -> Path:
        assert self.store is not None
        paths = CellPaths(self.root, claim.cell)
        paths.attempt_dir(claim.number).mkdir(parents=True, exist_ok=True)
        spec = AttemptSpec(
            root=str(self.root),
            cell=claim.cell,
            attempt=claim.number,
            cfg=claim.cfg,
            cfg_hash=self.store.cell(claim.cell).cfg_hash,
            settings=settings.to_json(),
            nan_step=claim.nan_step,
            previous_reason=claim.previous_reason,
            worker_pid=os.getpid(),
            started_monotonic=started,
            # Read after the claim: every earlier attempt is closed, its late commits unwitnessed for good.
            witnessed=[
                [k.step, k.attempt, k.manifest_sha256]
                for k in self.store.checkpoints(claim.cell)
                if k.state == CheckpointState.COMMITTED
            ],
        )
        attempt_file = paths.attempt_file(claim.number)
        spec.save(attempt_file)
        return attempt_file

    def _start(
        self, claim: Claim, settings: Settings, owner: liveness.Ownership, attempt_file: Path, channel_fd: int
    ) -> Child:
        assert self.starter is not None
        paths = CellPaths(self.root, claim.cell)
        handoff = owner.handoff()  # the training process owns the cell while it lives
        env = dict(os.environ)
        env.update(
            {
                **handoff.env,
                chan.ENV_FD: str(channel_fd),
                ENV_ATTEMPT_FILE: str(attempt_file),
                "PYTHONUNBUFFERED": "1",
            }
        )
        launch = Launch(
            attempt_file=attempt_file,
            cwd=settings.spec_dir,
            env=env,
            stdout=paths.stdout(claim.number),
            stderr=paths.stderr(claim.number),
            fds=(*handoff.fds, channel_fd),
        )
        return self.starter.start(launch)

    def _watch(
        self,
        claim: Claim,
        settings: Settings,
        sock: socket.socket,
        progress: Progress,
        started: float,
        owner: liveness.Ownership,
        sampler: usage.Sampler,
        exited: int | None,
    ) -> tuple[Intent | None, int, Any]:
        """Relay messages until the child exits; returns (why we stopped it, wait status, rusage).
        `exited` (a pidfd) turns readable when it exits, which wakes the loop at once."""
        assert self.child is not None and self.store is not None
        intent: Intent | None = None
        sent_term_at: float | None = None
        self.killed_after_grace = False
        last_flush = 0.0
        watched: list[int] = [sock.fileno()] if exited is None else [sock.fileno(), exited]
        while True:
            ready, _, _ = select.select(
                watched, [], [], 0.2 if sock.fileno() in watched or exited is not None else 0.01
            )
            if sock.fileno() in ready:
                messages = chan.receive(sock)
                for msg in messages:
                    progress.take(msg)
                if not messages:  # readable with nothing to read: its end closed, the child is exiting
                    watched.remove(sock.fileno())
                # Where it resumed from is a receipt field: record it at once.
                progress.flush_started(self.store, claim.cell, claim.number)
            pid, status, rusage = os.wait4(self.child.pid, os.WNOHANG)
            if pid:
                self.child.returncode = os.waitstatus_to_exitcode(status)
                if self.stopping and intent is None:  # the signal handler forwarded a stop this loop had not seen
                    intent = Intent.STOP
                return intent, status, rusage
            now = time.monotonic()
            if now - last_flush >= FLUSH_S:
                last_flush = now
                _sampled(progress, sampler, claim.number, sampler.live())
                progress.flush(self.store, CellPaths(self.root, claim.cell), claim.number)
                if intent is None and self.store.cancel_requested(claim.cell):
                    intent = Intent.CANCEL
                    os.kill(self.child.pid, signal.SIGTERM)
                    sent_term_at = now
                if intent is None and (progress.fenced or owner.lost()):
                    # The cell went to another attempt (or its folder went away): its writes are
                    # refused by the fence anyway; stop spending the machine on it.
                    diskfull.say(f"sweepq: stopping attempt {claim.number} of {claim.cell}: {_why_fenced(owner)}")
                    intent = Intent.STOP
                    os.kill(self.child.pid, signal.SIGTERM)
                    sent_term_at = now
            limit = settings.max_attempt_seconds
            if intent is None and limit and now - started > limit:
                intent = Intent.TIMEOUT
                os.kill(self.child.pid, signal.SIGTERM)
                sent_term_at = now
            if self.stopping and sent_term_at is None:
                intent = intent or Intent.STOP
                sent_term_at = now
            if sent_term_at is not None and now - sent_term_at > GRACE_S:
                os.kill(self.child.pid, signal.SIGKILL)
                self.killed_after_grace = True  # a SIGKILL the receipt may blame on sweepq; any other is not
                sent_term_at = float("inf")  # once

    def _outcome(
        self,
        claim: Claim,
        paths: CellPaths,
        p: Progress,
        intent: Intent | None,
        status: int,
        rusage: Any,
        before: OomCounters,
    ) -> Outcome:
        """The child's own account (its last message, else its receipt file), judged with what only we know."""
        code = os.waitstatus_to_exitcode(status)
        peak = int(rusage.ru_maxrss) * 1024 if rusage is not None else None
        evidence = Evidence(
            Witness.WORKER,
            exit_code=code,
            account=p.end if p.end is not None else _receipt(paths, claim.number),
            intent=intent,
            hard_stop=self.hard_stop,
            killed_after_grace=self.killed_after_grace,
            oom=judge_sigkill(before, OomCounters.read(), peak) if code == -signal.SIGKILL else None,
        )
        o = decide(evidence)
        assert o is not None  # the worker always has a verdict
        if o.end_step is None:
            # Progress reaches us in batches; a committed checkpoint is proof of at least its step.
            known = [x for x in (p.fields.get("step"), p.newest_checkpoint) if x is not None]
            o.end_step = max(known) if known else None
        if peak is not None:
            o.peak_memory_bytes = max(peak, o.peak_memory_bytes or 0)
        told = [n for n in p.notes if n not in (o.note or "")]  # a program's receipt may carry them already
        if told:
            o.note = "; ".join(told + ([o.note] if o.note else []))
        if o.reason not in (Reason.COMPLETED, Reason.PREEMPTED) and not o.error_tail:
            o.error_tail = tail_file(paths.stderr(claim.number))
        return o


def _lapsed(outcome: Outcome, owner: liveness.Ownership) -> None:
    """An error of an attempt whose ownership lapsed meanwhile is the queue's loss, not the training code's.

    Its lease expired while the database could not be reached (an outage longer than the lease), so
    its writes were refused (Fenced, or OwnershipLost where it started): `lost`, retried under
    `retries: lost` from its last checkpoint, rather than an error that fails the cell for good.
    """
    why = owner.lost()
    if why is not None:
        outcome.reason = Reason.LOST
        words = f"its ownership of the cell lapsed ({why}): its writes were refused"
        outcome.note = f"{words}; {outcome.note}" if outcome.note else words


def _why_fenced(owner: liveness.Ownership) -> str:
    return owner.lost() or "the queue moved the cell to another attempt"


def _sampled(progress: Progress, sampler: usage.Sampler, number: int, live: dict[str, Any] | None) -> None:
    """What the sampler saw goes out with the next flush: the live figures, the low-GPU event once."""
    progress.usage = live
    flag = sampler.low_gpu_news()
    if flag is not None:
        progress.events.append((usage.LOW_GPU_EVENT, {"attempt": number, **flag}))


def _keep_usage(
    paths: CellPaths, number: int, used: dict[str, Any], left: list[strays.Ended], storage: str | None
) -> None:
    """The receipt the training process wrote before it exited gets what only its worker saw of it:
    the usage, and the processes it left running that the worker ended; in the sweep's storage too, when
    it is not the root (the attempt put its receipt there as it ended: this one replaces it)."""
    path = paths.receipt(number)
    try:
        receipt = read_json(path)
        if not isinstance(receipt, dict):
            return
        ended = {"leftovers_ended": [e.to_json() for e in left]} if left else {}
        atomic_write_json(path, {**receipt, "usage": used, **ended})
    except (OSError, ValueError):
        return  # no receipt (a killed process), or a full disk: the attempt's row keeps the usage
    if storage_url.in_effect(storage) is None:  # the root's: the receipt is already there (no client made to know)
        return
    try:
        durable_opening.for_cell(paths, storage).put(f"attempts/{number}/receipt.json", path.read_bytes())
    except Exception as e:  # a storage that refuses it now costs the usage there, never the attempt's close
        print(
            f"sweepq: attempt {number}'s receipt with its usage did not reach the sweep's storage: {e}", file=sys.stderr
        )


def _receipt(paths: CellPaths, number: int) -> dict[str, Any] | None:
    try:
        return read_json(paths.receipt(number))
    except (OSError, ValueError):
        return None
