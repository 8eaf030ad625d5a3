"""The terminal going away never stops training: a real pty hung up (SIGHUP ignored or not), a stdout
pipe whose reader left, and `launch --detach` with `sweepq stop`.

Each cell is held at its first checkpoint (gated_sweep.py) while the terminal goes away, so that it
surely goes away mid-training, whatever the machine's speed.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import subprocess
import termios
import threading
from pathlib import Path

import pytest
from conftest import SWEEPQ, cli, kill_tree, wait_for, write
from gated_sweep import HANG_GUARD_S, gated_sweep, held

from sweepq.layout import RootPaths
from sweepq.queue.store import Store


def sweep(sweep_dir: Path, cells: int) -> tuple[Path, Path]:
    return gated_sweep(sweep_dir, cells, "term")


def open_gate(sweep_dir: Path, cell: str) -> None:
    (sweep_dir / f"gate-{cell}").unlink()


def log_of(root: Path) -> str:
    log = RootPaths(root).launch_log
    return log.read_text() if log.exists() else ""


def receipts(root: Path) -> dict[str, list[tuple[str | None, int, int | None]]]:
    """Per cell, its attempts as (reason, start step, end step), read from the root's database."""
    store = Store.open_readonly(root)
    try:
        return {c.id: [(a.reason, a.start_step, a.end_step) for a in store.attempts(c.id)] for c in store.cells()}
    finally:
        store.close()


def assert_trained_once(root: Path, cells: int, steps: int = 40) -> None:
    """Every cell done by one attempt from step 0 to the end: nothing stopped, nothing lost."""
    assert receipts(root) == {f"1.{i}": [("completed", 0, steps)] for i in range(1, cells + 1)}


class Screen:
    """A real terminal (pty) for a launch: drained while it lives, hung up when its master closes."""

    def __init__(self) -> None:
        self.master, self.slave = pty.openpty()
        self.seen = bytearray()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drain, daemon=True)

    def launch(self, spec: Path, ignore_hup: bool) -> subprocess.Popen[bytes]:
        def become_its_terminal() -> None:  # in the child, after setsid: this pty is its controlling terminal
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
            # As `nohup` leaves it, or as a terminal's shell does: not inherited from whatever runs the tests
            # (a suite started under `nohup` would otherwise ignore the hangup this test sends).
            signal.signal(signal.SIGHUP, signal.SIG_IGN if ignore_hup else signal.SIG_DFL)

        p = subprocess.Popen(
            [*SWEEPQ, "launch", str(spec), "--workers", "1"],
            cwd=spec.parent,
            stdin=self.slave,
            stdout=self.slave,
            stderr=self.slave,
            start_new_session=True,
            preexec_fn=become_its_terminal,
        )
        os.close(self.slave)
        self._thread.start()
        return p

    def _drain(self) -> None:
        while not self._stop.is_set():
            if select.select([self.master], [], [], 0.05)[0]:
                try:
                    data = os.read(self.master, 65536)
                except OSError:
                    return
                if not data:
                    return
                self.seen += data

    def hang_up(self) -> None:
        """Close the terminal, as a closed window or a dropped SSH connection does."""
        self._stop.set()
        self._thread.join()
        os.close(self.master)


@pytest.mark.parametrize(
    ("ignore_hup", "note"),
    [(True, "the terminal is gone"), (False, "SIGHUP (the terminal went away)")],
    ids=["nohup", "hangup"],
)
def test_closing_the_terminal_never_stops_training(sweep_dir: Path, ignore_hup: bool, note: str) -> None:
    spec, root = sweep(sweep_dir, 1)
    screen = Screen()
    launch = screen.launch(spec, ignore_hup)
    try:
        wait_for(lambda: held(root, "1.1"), HANG_GUARD_S, "1.1 mid-training")
        screen.hang_up()
        wait_for(lambda: note in log_of(root), HANG_GUARD_S, "the launch moving its output to launch.log")
        open_gate(sweep_dir, "1.1")
        assert launch.wait(timeout=HANG_GUARD_S) == 0, log_of(root)
    finally:
        kill_tree(launch.pid)
    assert b"state" in screen.seen  # the live table was on the terminal until it went away
    assert "1 cell: 1 done" in log_of(root)  # and the launch went on writing, to its log
    assert_trained_once(root, 1)


def test_a_broken_pipe_on_stdout_never_stops_training(sweep_dir: Path) -> None:
    """`sweepq launch SPEC | head -1`: the launch goes on in its log and exits as the sweep ended (0)."""
    spec, root = sweep(sweep_dir, 2)
    launch = subprocess.Popen(
        [*SWEEPQ, "launch", str(spec), "--workers", "2"], cwd=sweep_dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        wait_for(lambda: held(root, "1.1", "1.2"), HANG_GUARD_S, "both cells mid-training")
        assert launch.stdout is not None
        assert launch.stdout.readline().startswith(b"sweep term at")
        launch.stdout.close()  # what `head -1` does after its line
        # 1.1 ends first: the pipe breaks at the latest on "1.1 done", while 1.2 is still mid-training.
        open_gate(sweep_dir, "1.1")
        wait_for(lambda: "1.1 done" in log_of(root), HANG_GUARD_S, "1.1 done, in launch.log")
        open_gate(sweep_dir, "1.2")
        _, err = launch.communicate(timeout=HANG_GUARD_S)
    finally:
        kill_tree(launch.pid)
    assert launch.returncode == 0, err
    assert err == b""  # no traceback, not even from the interpreter's last flush
    assert "writing the output failed (EPIPE: Broken pipe)" in log_of(root)
    assert "2 cells: 2 done" in log_of(root)
    assert_trained_once(root, 2)


def test_detach_refuses_a_second_launch_and_stops_gracefully(sweep_dir: Path) -> None:
    spec, root = sweep(sweep_dir, 1)
    bad = cli("launch", str(write(sweep_dir / "bad.yaml", spec.read_text() + "bogus: 1\n")), "--detach", cwd=sweep_dir)
    assert bad.returncode == 2 and "bogus" in bad.stderr and not root.exists()  # checked first: nothing started
    r = cli("launch", str(spec), "--detach", "--workers", "1", cwd=sweep_dir)
    assert r.returncode == 0, r.stdout + r.stderr
    pid = int(re.search(r"launched in the background: pid (\d+)", r.stdout).group(1))  # type: ignore[union-attr]
    try:
        assert "sweepq status --watch --root runs/term" in r.stdout and "tail -f runs/term/launch.log" in r.stdout
        assert r.stdout.startswith("sweep term at runs/term: 1 cell\n  queued: 1.1\n")  # what the launch said
        assert "sweepq stop runs/term" in r.stdout
        assert os.getsid(pid) == pid != os.getsid(0)  # its own session: no terminal of ours reaches it
        assert os.readlink(f"/proc/{pid}/fd/0") == os.devnull
        second = cli("launch", str(spec), cwd=sweep_dir)
        assert second.returncode == 2, second.stdout + second.stderr
        assert "a launch is already running on the sweep root runs/term" in second.stderr
        assert f"(pid {pid} on " in second.stderr and "this one started nothing" in second.stderr
        assert "sweepq stop runs/term" in second.stderr
        wait_for(lambda: held(root, "1.1"), HANG_GUARD_S, "1.1 mid-training")
        stop = cli("stop", "runs/term", cwd=sweep_dir)
    finally:
        kill_tree(pid)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert stop.stdout.startswith(f"stopping the launch on runs/term (pid {pid}): each running cell writes")
    assert "stopped: 1 cell: 1 interrupted\nresume with: sweepq launch term.yaml\n" in stop.stdout
    assert "SIGTERM: stopping: running cells are writing a checkpoint" in log_of(root)
    ((reason, _, end_step),) = receipts(root)["1.1"]
    steps = [int(p.name.split("-")[1]) for p in (root / "cells/1.1/checkpoints").glob("step-*")]
    assert reason == "preempted" and end_step is not None
    assert max(steps) == end_step > 20  # its emergency checkpoint is the last step trained, past the gate's

    open_gate(sweep_dir, "1.1")
    nothing = cli("stop", "runs/term", cwd=sweep_dir)
    assert (nothing.returncode, nothing.stdout) == (0, "no launch is running on runs/term: nothing to stop\n")
    again = cli("launch", str(spec), "--workers", "1", cwd=sweep_dir)
    assert again.returncode == 0, again.stdout + again.stderr
    assert receipts(root)["1.1"] == [("preempted", 0, end_step), ("completed", end_step, 40)]  # nothing lost
    watch = cli("status", "--watch", "--root", str(root), cwd=sweep_dir)  # settled: one table, then it ends
    assert watch.returncode == 0 and "1 cell: 1 done" in watch.stdout


WRITE_AFTER_HANGUP = r"""
import os, pty, signal, sys
from pathlib import Path
from sweepq.cli.terminal import Terminal

master, slave = pty.openpty()
os.dup2(slave, 1)
signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as `nohup` leaves it
terminal = Terminal()
terminal.log = Path(sys.argv[1])
terminal.keep_on_hangup()
console = terminal.console()
console.print("on the terminal")
os.close(master)  # the window closes; no poll of terminal.gone() comes before the next write
console.print("after the hangup")
"""


def test_a_write_to_a_hung_up_terminal_says_the_terminal_is_gone(tmp_path: Path) -> None:
    """With SIGHUP ignored, the first sign of a closed terminal may be a failed write (EIO), before the
    launch's poll sees it: the log still says the terminal is gone, and the line is kept."""
    log = tmp_path / "launch.log"
    r = subprocess.run([SWEEPQ[0], "-c", WRITE_AFTER_HANGUP, str(log)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    text = log.read_text()
    assert "the terminal is gone" in text and "writing the output failed" not in text, text
    assert "after the hangup" in text
