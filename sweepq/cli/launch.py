"""`sweepq launch`: reconcile the sweep file with its root, then run N workers until the sweep settles.

Relaunching is always safe: cells with a verified DONE.json are skipped,
interrupted cells resume first from their newest committed checkpoint, then
queued cells start in order. The first SIGINT (Ctrl-C) or SIGTERM (`sweepq
stop`, a scheduler) preempts every running cell gracefully (each writes a
checkpoint and its receipt); a SIGINT after that stops at once, while a
repeated SIGTERM changes nothing (so `sweepq stop` twice is still graceful).
SIGHUP never stops a launch: the terminal went away, the output moves to the
root's log and the sweep goes on (terminal.py). One launch lives per root at a
time (launch_lock.py).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live

from sweepq.checkpoint import storage, storage_url
from sweepq.cli import header, launch_lock, launch_summary, render
from sweepq.cli.terminal import Terminal
from sweepq.errors import UsageError
from sweepq.host.diskfull import EXIT_DISK_FULL, workers_stopped
from sweepq.layout import CellPaths, RootPaths
from sweepq.program.ranks import gpu_sets
from sweepq.queue import database_url, reconcile
from sweepq.queue.database import Database
from sweepq.queue.reaper import reap, reconcile_markers
from sweepq.queue.records import Outcome
from sweepq.queue.states import MACHINE_FAULTS, UNSETTLED, CellState, CheckpointState, Reason
from sweepq.queue.store import Store
from sweepq.results import failures, spelling
from sweepq.spec.preflight import preflight
from sweepq.spec.sweep import Sweep, load_sweep
from sweepq.worker import gate, usage_text

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # not SIGHUP: losing the terminal never stops training
HARD_STOP_WAIT_S = 10.0
STOPPING = "stopping: running cells are writing a checkpoint (Ctrl-C again to stop at once)"
STOPPING_NOW = "stopping at once (second interrupt): no emergency checkpoint"
# A worker that dies while cells remain (the OOM killer, an operator's kill, a crash) is replaced, each
# worker's place at most REPLACEMENTS times, after a back-off that doubles from 1 s to at most 30 s: a
# worker that dies again at once (a broken environment) must not spin. With none left, the launch ends
# with EXIT_WORKERS_LOST, naming the workers that died and what is left.
REPLACEMENTS = 3  # SWEEPQ_WORKER_REPLACEMENTS sets it (0: a dead worker is never replaced)
REPLACE_BACKOFF_S = (1.0, 30.0)
EXIT_WORKERS_LOST = 3


def check_writable(root: Path) -> None:
    """Refuse, before writing anything, a root that cannot be created or written."""
    if root.exists() and not root.is_dir():
        raise UsageError(f"the sweep root {root} exists and is not a folder")
    probe = root
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"the sweep root {root} is not writable ({probe} does not let this user write)")
    Database.for_root(root).check_writable()


def record_database(sweep: Sweep, root: Path, spec: str) -> None:
    """Where the sweep's queue is, when not the root's SQLite file: --database (which the command line put
    in SWEEPQ_DATABASE_URL), the environment, or the sweep file's `database:`, recorded in the root for
    every process that opens it (database_url.py). A root recorded earlier keeps its record."""
    chosen = database_url.choose(None, os.environ, sweep.database, spec)
    if chosen is None:
        return
    if chosen.dialect != "postgresql":
        raise UsageError(
            f"{chosen.source}: a SQLite queue is the file sweepq.db in the sweep's root: leave the database "
            "out (and give --root to put it elsewhere), or name a PostgreSQL server"
        )
    database_url.write_record(root, chosen, sweep.settings.name, sweep.lease.renew_seconds, sweep.lease.expire_seconds)


@dataclass
class Prepared:
    sweep: Sweep
    root: Path
    plan: reconcile.ReconcilePlan  # made from a read; apply() makes it again inside its write
    accept_changed: reconcile.Accept  # False, reconcile.KEEP (or True) or reconcile.RERUN


def with_storage(sweep: Sweep, spec: str) -> Sweep:
    """The sweep with the storage this launch chose (--storage, which the command line put in
    SWEEPQ_STORAGE_URL, else the environment, else the file's `storage:`) in its settings: stored with
    them, it reaches every worker and attempt, on any machine (checkpoint/storage_url.py)."""
    chosen = storage_url.settled(sweep.settings.storage, spec)
    if chosen == sweep.settings.storage:
        return sweep
    return dataclasses.replace(sweep, settings=dataclasses.replace(sweep.settings, storage=chosen))


def prepare(spec: str, root: str | None, accept_changed: reconcile.Accept) -> Prepared:
    """Everything that can fail on bad input, before anything is written."""
    sweep = with_storage(load_sweep(spec), spec)
    target = preflight(sweep, spec, root, check_entry=True).root  # as plan does, and the train: function
    record_database(sweep, target, spec)
    check_writable(target)
    database = Database.for_root(target)
    if not database.exists():
        return Prepared(sweep, target, reconcile.plan(sweep, {}, accept_changed), accept_changed)
    current = database.schema_current()
    # An older schema is upgraded first: the stored cells are read through this sweepq's models.
    store = Store.open_readonly(target, database=database) if current else Store.open(target, database=database)
    try:
        check_storage_kept(store, target, sweep.settings.storage)
        planner = partial(reconcile.plan, sweep, accept_changed=accept_changed)
        plan = store.read_reconcile(planner, reconcile.plan_digest(sweep))
    finally:
        store.close()
    return Prepared(sweep, target, plan, accept_changed)


def check_storage_kept(store: Store, root: Path, chosen: str | None) -> None:
    """Refuse a relaunch whose storage no longer holds the checkpoints its unfinished cells resume from.

    A launch records its storage with the sweep, and every attempt after it reads checkpoints there. A
    different `storage:` (or --storage, or SWEEPQ_STORAGE_URL) is fine when it reaches the same files (a
    share mounted at another path, a bucket behind another endpoint); otherwise each interrupted cell
    would start over from step 0 and its checkpoints would be left behind where no attempt looks. So the
    newest committed step the queue recorded for each unfinished cell must be in the new storage.
    """
    try:
        before = store.settings().storage
    except UsageError:  # no sweep in the database yet (its first launch makes it): nothing was recorded
        return
    if chosen == before:
        return
    unfinished = {c.id for c in store.cells_in(UNSETTLED)}
    newest: dict[str, int] = {}
    for cell, rows in store.checkpoints_in(CheckpointState.COMMITTED).items():
        if cell in unfinished and rows:
            newest[cell] = max(r.step for r in rows)
    missing = []
    for cell, step in sorted(newest.items()):
        if step not in storage.for_cell(CellPaths(root, cell), chosen).steps():
            missing.append(f"{cell} (step {step})")
            if len(missing) == 3:
                break
    if missing:
        raise UsageError(
            f"this sweep's checkpoints are in {storage_url.shown(before)}, and the storage this launch chose, "
            f"{storage_url.shown(chosen)}, does not hold them: {', '.join(missing)} would start over. "
            + (f"Launch with --storage {before!r}" if before else "Leave storage: out (and SWEEPQ_STORAGE_URL unset)")
            + " to keep them, or copy the cells' checkpoints there first"
        )


def apply(p: Prepared, launcher: Launcher | None = None) -> Store:
    """Write the plan; a `launcher`'s workers start first when there will be work (they wait at the gate)."""
    store = Store.open(p.root, create=True)
    try:
        if launcher is not None and (p.plan.new or store.unsettled() > 0):
            launcher.start_workers()  # their start overlaps writing 100,000 new cells, or checking markers
        planner = partial(reconcile.plan, p.sweep, accept_changed=p.accept_changed)
        p.plan = store.apply_reconcile(
            p.sweep.settings,
            str(p.sweep.path),
            planner,
            reconcile.plan_digest(p.sweep),
            rerun=p.accept_changed == reconcile.RERUN,
        )
        store.keep_spans()  # those of an older root, or made stale since: `status` then reads them
    except BaseException:
        if launcher is not None:
            launcher.open_gate(go=False)
        store.close()
        raise
    return store


@dataclass
class _Seen:
    """Where the cells stood at the last look, for a launch's lines: per state, and per cell (state, attempts)."""

    digest: tuple[tuple[str, int, int], ...]
    steps: dict[str, tuple[str, int]]


class Launcher:
    def __init__(
        self, root: Path, workers: int, gpus: list[str], console: Console, live: bool, terminal: Terminal
    ) -> None:
        self.root = root
        self.n = workers
        self.gpus = gpus
        self.console = console
        self.live = live
        self.ended_on_screen = False  # the live table's last frame (which ends with the counts) stays on screen
        self.terminal = terminal
        self.procs: list[subprocess.Popen[bytes]] = []
        self.gate: int | None = None  # the workers' gate, while they wait on it
        self.slots: dict[int, int] = {}  # a worker's pid -> its place (0..n-1): a replacement takes the same
        self.replacements = [0] * workers  # per place
        self.most_replacements = _replacements()
        self.pending: dict[int, float] = {}  # place -> when its replacement starts (monotonic)
        self.handled: set[int] = set()  # pids of exited workers already looked at
        self.deaths: list[str] = []  # the words for each worker that died
        self.unreplaced: list[str] = []  # workers that died with no replacement left
        self.stamp = time.strftime("%Y%m%d-%H%M%S")
        self.store: Store | None = None  # set by wait(): a replacement is only started while cells remain
        self.stops = 0
        self.signals: list[int] = []  # the stops' signals, for the output (the handler writes nothing)
        self.hard_deadline: float | None = None  # after a second interrupt: when to kill what is left
        self.started_at = datetime.now(UTC)  # the live view's elapsed time counts from here

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if self.stops and signum != signal.SIGINT:
            return  # a repeated SIGTERM (`sweepq stop` twice, a scheduler's reminder) is no second Ctrl-C
        self.stops += 1
        self.signals.append(signum)
        sig = signal.SIGTERM if self.stops == 1 else signal.SIGINT  # second: the workers' hard stop
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.kill(p.pid, sig)
                except ProcessLookupError:
                    pass

    def start_workers(self) -> None:
        """Start the workers, each waiting at the gate (worker/gate.py) until `open_gate`."""
        reader, self.gate = os.pipe()
        try:
            self._start_workers(reader)
        finally:
            os.close(reader)  # the workers hold their own

    def open_gate(self, go: bool = True) -> None:
        """Let the workers claim (`go`), or send them away without a claim; once."""
        if self.gate is not None:
            fd, self.gate = self.gate, None
            gate.release(fd, len(self.procs), go)

    def _start_workers(self, reader: int) -> None:
        RootPaths(self.root).logs.mkdir(parents=True, exist_ok=True)
        for i in range(self.n):
            self._start_worker(i, reader)

    def _start_worker(self, i: int, reader: int) -> subprocess.Popen[bytes]:
        """Start the worker of place `i` (its GPUs, its name, its log), waiting at the gate `reader`."""
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // self.n)))
        if self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = self.gpus[i % len(self.gpus)]
        # The worker keeps its own descriptor of the log; this one is not needed after the start.
        with open(RootPaths(self.root).worker_log(self.stamp, os.getpid(), i + 1), "ab") as log:
            worker = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "sweepq.cli",
                    "worker",
                    "--root",
                    str(self.root),
                    "--name",
                    f"{os.uname().nodename}:{os.getpid()}/w{i + 1}",
                    "--parent-pid",
                    str(os.getpid()),
                    "--gate-fd",
                    str(reader),
                ],
                pass_fds=(reader,),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # only this launcher signals them
            )
        self.procs.append(worker)
        self.slots[worker.pid] = i
        return worker

    def _look_after_workers(self) -> None:
        """Replace the workers that died while cells remain; start the replacements whose back-off ended."""
        for p in self.procs:
            if p.returncode is None or p.pid in self.handled:
                continue
            self.handled.add(p.pid)
            code = p.returncode
            if self.stops or code in (0, 130, EXIT_DISK_FULL):
                continue  # done, stopped as asked, or a full disk (said apart, and not for a new worker to meet)
            place = self.slots[p.pid]
            how = f"killed by {_signal_name(-code)}" if code < 0 else f"exited with code {code}"
            died = f"worker {_worker_name(p)} (pid {p.pid}) died: {how}"
            self.deaths.append(died)
            if self.store is not None and self.store.unsettled() == 0:
                continue
            if self.replacements[place] >= self.most_replacements:
                self.unreplaced.append(died)
                self.console.print(f"{died}; not replaced: it was replaced {self.replacements[place]} times already")
                continue
            self.replacements[place] += 1
            first, most = REPLACE_BACKOFF_S
            wait = min(most, first * 2 ** (self.replacements[place] - 1))
            self.pending[place] = time.monotonic() + wait
            self.console.print(
                f"{died}; a new worker replaces it in {wait:g}s "
                f"(replacement {self.replacements[place]} of {self.most_replacements} for this worker)"
            )
        for place, when in list(self.pending.items()):
            if self.stops:
                self.pending.clear()
                break
            if time.monotonic() < when:
                continue
            del self.pending[place]
            if self.store is not None and self.store.unsettled() == 0:
                continue
            reader, writer = os.pipe()
            try:
                self._start_worker(place, reader)
            finally:
                os.close(reader)
                gate.release(writer, 1, True)  # the launch's checks are done: it claims at once

    def wait(self, store: Store) -> None:
        """Show progress until every worker exited: a live table, or lines (also once the terminal went away)."""
        self.store = store
        if self.live and self._wait_live(store):
            return
        seen = self._first_lines(store)
        told = 0
        while self._alive():
            told = self._tell_stops(told)
            self._print_changes(store, seen)
            time.sleep(0.5)
        self._tell_stops(told)
        self._print_changes(store, seen)

    def _wait_live(self, store: Store) -> bool:
        """The live table until every worker exited (True), or until the output left the terminal (False)."""
        metric = store.settings().metric
        # Refreshed from this thread only: a failed write is then handled here, never in rich's thread.
        with Live(console=self.console, auto_refresh=False, redirect_stdout=False, redirect_stderr=False) as live:
            while self._alive() and not self.terminal.gone():
                live.update(self._view(store, metric), refresh=True)
                time.sleep(0.5)
            live.update(self._view(store, metric), refresh=True)
        if self.terminal.moved is None:
            self.ended_on_screen = True  # its last frame ends with the counts: the launch does not say them again
            return True
        self.console.line()  # the table's last frame, now in the log, ends without a newline
        return False

    def _tell_stops(self, told: int) -> int:
        """Say in the output that a stop arrived (lines and logs have no live title to show it)."""
        for i in range(told, len(self.signals)):
            words = STOPPING if i == 0 else STOPPING_NOW
            self.console.print(f"{signal.Signals(self.signals[i]).name}: {words}", highlight=False)
        return len(self.signals)

    def _alive(self) -> bool:
        """Is a worker alive (or about to replace one that died)?"""
        alive = [p for p in self.procs if p.poll() is None]
        if self.stops >= 2 and alive:
            if self.hard_deadline is None:
                self.hard_deadline = time.monotonic() + HARD_STOP_WAIT_S
            if time.monotonic() > self.hard_deadline:
                for p in alive:
                    p.kill()
        self._look_after_workers()
        return any(p.poll() is None for p in self.procs) or bool(self.pending)

    def live_workers(self) -> int:
        return sum(1 for p in self.procs if p.poll() is None)

    def _view(self, store: Store, metric: Any) -> Any:
        """The header (elapsed since this launch started) above the status table."""
        note = ""
        if self.stops == 1:
            note = STOPPING
        cells = store.cells()
        told = failures.failure_notes(cells, lambda reason: store.attempts(reason=reason), self._where)
        notes = told | store.fault_notes()
        usages = usage_text.latest_by_cell(store.attempts())
        workers = self.live_workers()
        fc = store.forecast(workers)
        etas, rates = header.per_cell(fc, cells)
        table = render.status_table(
            cells, metric, title=note or None, etas=etas, rates=rates, stalls=store.stalls(), notes=notes, usages=usages
        )
        return Group(header.header(cells, fc, self.started_at, live=workers > 0), table)

    def _first_lines(self, store: Store) -> _Seen:
        """Lines for the first cells not queued (a root of 100,000 done cells is counted, not listed)."""
        seen = _Seen(store.steps_digest(), store.cell_steps())
        cells, count = store.cells_not_in(CellState.QUEUED, launch_summary.LISTED)
        for c in cells:
            self._print_cell(store, c)
        if count > len(cells):
            self.console.print(f"… and {count - len(cells):,} more cells not queued (sweepq status lists every cell)")
        return seen

    def _print_changes(self, store: Store, seen: _Seen) -> None:
        """Lines for the cells whose state or attempt changed: looked for only when the counts per state moved."""
        digest = store.steps_digest()
        if digest == seen.digest:
            return
        seen.digest = digest
        steps = store.cell_steps()
        changed = [cell for cell, step in steps.items() if seen.steps.get(cell) != step]
        seen.steps = steps
        for c in store.cells_by_id(changed):
            seen.steps[c.id] = (c.state, c.attempts)  # as told, should it have moved again meanwhile
            if c.state is not CellState.QUEUED:
                self._print_cell(store, c)

    def _print_cell(self, store: Store, c: Any) -> None:
        bits = [f"{c.id} {c.state}"]
        if c.state is CellState.RUNNING:
            bits.append(f"attempt {c.attempts}")
        if c.state is CellState.DONE and c.metrics:
            bits.append(", ".join(f"{k}={spelling.fmt_num(v)}" for k, v in c.metrics.items() if k != "epoch"))
        if c.last_reason and c.state is not CellState.DONE:
            said = self._said(store, c)
            bits.append(f"(last: {c.last_reason}: {said})" if said else f"(last: {c.last_reason})")
        if c.state is CellState.FAILED:
            bits.append(f"logs: {failures.logs_hint(c.id, self._where)}")
        self.console.print("  ".join(bits), highlight=False)

    @property
    def _where(self) -> str:
        return spelling.shown_path(self.root)

    def _said(self, store: Store, c: Any) -> str | None:
        """What the attempt that gave a cell its last reason said: the disk's words, or why it failed."""
        if c.last_reason in MACHINE_FAULTS:
            return store.fault_notes().get(c.id)
        if c.last_reason not in failures.TOLD_FAILURES and c.state is not CellState.FAILED:
            return None
        ended = c.attempts - 1 if c.state is CellState.RUNNING else c.attempts  # a running one has not ended
        attempt = store.attempt(c.id, ended) if ended > 0 else None
        return failures.failure_line(attempt) if attempt is not None else None


MakeLauncher = Callable[[Prepared, int, Terminal, bool], Launcher]


def exit_code(store: Store, interrupted: bool) -> int:
    if interrupted:
        return 130
    counts = store.census().counts  # the cells still in the file, by state
    if counts.get(CellState.FAILED):
        return 1
    if all(state in (CellState.DONE, CellState.CANCELLED) for state in counts):
        return 0
    return 1


def launch(
    spec: str,
    root: str | None,
    workers: int,
    gpus: list[str],
    accept_changed: reconcile.Accept,
    terminal: Terminal,
    live: bool,
    ready_fd: int | None = None,
    make_launcher: MakeLauncher | None = None,
) -> int:
    """Run the sweep; `ready_fd` (of `launch --detach`) hears "ready" once the workers started.

    `make_launcher` starts the workers elsewhere (`--on slurm`: cli/slurm_launch.py); the default
    starts them here. The command chooses, so that this module knows no scheduler."""
    terminal.keep_on_hangup()  # first: a hangup while preparing must not stop the launch either
    prepared = prepare(spec, root, accept_changed)  # raises UsageError: nothing written
    terminal.log = RootPaths(prepared.root).launch_log
    try:  # `processes: N`: each worker takes a GPU per rank
        gpus = gpu_sets(gpus, workers, prepared.sweep.settings.most_processes())
    except ValueError as e:
        raise UsageError(str(e)) from None
    with launch_lock.held(prepared.root, str(Path(spec).resolve()), _grace_seconds(), workers):  # UsageError: one lives
        if make_launcher is not None:
            launcher = make_launcher(prepared, workers, terminal, live)
        else:
            launcher = Launcher(prepared.root, workers, gpus, terminal.console(), live, terminal)
        store = apply(prepared, launcher)
        try:
            return _run(store, prepared, launcher, ready_fd)
        finally:
            store.close()


def _run(store: Store, prepared: Prepared, launcher: Launcher, ready_fd: int | None) -> int:
    console = launcher.console
    try:  # the workers started by apply() wait at the gate meanwhile
        reconcile_markers(store)
        reap(store)
        launch_summary.describe_start(store, prepared.sweep, prepared.root, prepared.plan, console)
        work = store.unsettled() > 0
    except BaseException:
        launcher.open_gate(go=False)
        raise
    if not work:
        launcher.open_gate(go=False)
        for p in launcher.procs:
            p.wait()
        console.print("nothing to do: every cell is done, failed or cancelled")
        return exit_code(store, False)
    old = {s: signal.signal(s, launcher._on_signal) for s in STOP_SIGNALS}
    try:
        if not launcher.procs:  # every cell was settled before the markers were checked: some are not now
            launcher.start_workers()
        launcher.open_gate()
        if ready_fd is not None:
            _tell_ready(ready_fd)
        launcher.wait(store)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    # Which workers a full disk (or inode table) stopped, by name: their lines went to logs on that disk, if anywhere.
    stopped = [_worker_name(p) for p in launcher.procs if p.returncode == EXIT_DISK_FULL]
    if stopped:
        console.print(workers_stopped(store.database.path, stopped), highlight=False)
    if launcher.stops >= 2:
        reap(store, override=Outcome(Reason.PREEMPTED, note="hard stop (second interrupt): no emergency checkpoint"))
    interrupted = launcher.stops > 0
    if not launcher.ended_on_screen or launcher.stops >= 2:  # (a hard stop's reap changed the counts)
        console.print(launch_summary.ending(store.census()))
    if interrupted:
        console.print("interrupted: run the same command again to resume")
    elif launcher.unreplaced and store.unsettled():
        reap(store)  # what the dead workers' training processes did not close themselves
        console.print(workers_lost(launcher.deaths, launcher.most_replacements, store))
        return EXIT_WORKERS_LOST
    return exit_code(store, interrupted)


def workers_lost(deaths: list[str], replacements: int, store: Store) -> str:
    """The last words of a launch whose workers died faster than they could be replaced."""
    counts = store.census().counts
    left = ", ".join(
        f"{counts[s]} {s.value}" for s in (CellState.INTERRUPTED, CellState.QUEUED, CellState.RUNNING) if counts.get(s)
    )
    return (
        f"the launch ran out of workers: {len(deaths)} died, each replaced at most {replacements} times "
        f"({'; '.join(deaths)}). No cell failed for it; {left or 'nothing'} left. See the workers' logs in "
        f"{RootPaths(store.root).logs} and the system's log (an OOM kill is there), then run the same command "
        "again: each cell resumes from its last committed checkpoint."
    )


def _replacements() -> int:
    try:
        return max(0, int(os.environ.get("SWEEPQ_WORKER_REPLACEMENTS", REPLACEMENTS)))
    except ValueError:
        return REPLACEMENTS


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _worker_name(proc: subprocess.Popen[bytes]) -> str:
    """The --name a worker was started with (its pid where there is none)."""
    args = [str(a) for a in proc.args] if isinstance(proc.args, (list, tuple)) else []
    return args[args.index("--name") + 1] if "--name" in args[:-1] else f"pid {proc.pid}"


def _tell_ready(fd: int) -> None:
    """Tell `launch --detach` that the sweep runs; it may be gone (interrupted): the sweep goes on."""
    try:
        os.write(fd, b"ready\n")
    except OSError:
        pass
    finally:
        os.close(fd)


def _grace_seconds() -> float:
    """How long this launch's workers give a training process to checkpoint and stop (for `sweepq stop`)."""
    from sweepq.worker.loop import GRACE_S

    return GRACE_S
