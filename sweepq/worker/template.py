"""A worker's template process: torch and the training code imported once, a fresh fork per attempt.

`python -m sweepq.worker.template <socket fd> <worker pid> <train> <spec dir> <room>`, started by a
worker (worker/starter.py). It imports what an attempt of a `train:` cell needs (sweepq's
attempt, torch, the user's module; for a program cell's supervisor, sweepq's attempt alone, `train`
being empty), says it is ready, then waits. For each attempt the worker
sends a `Spawn` with the attempt's descriptors; the template forks twice and the middle process
exits at once, so the attempt is re-parented to the worker (a child subreaper): the worker waits
for it, signals it and reads its rusage exactly as for a process it started itself. The attempt
then runs `attempt.main` as `python -m sweepq.attempt` would, in its own session, with
the attempt's stdout, stderr, environment and working folder, and shows that command line (`ps`
finds training processes as before: worker/proctitle.py; `room` is the space it needs).

Each attempt is a fork of the template as it was after its imports, never of a previous attempt:
fresh memory, its own crash domain. What must not cross a fork is checked before the template
says it is ready, and any of it makes every attempt of this worker start a fresh interpreter
instead: a thread the user's import started (Python's or native), CUDA initialised (or its
driver loaded). The template opens no database and starts no thread. Each fork reseeds the
global random generators from the OS as a fresh interpreter does (Python's `random` by CPython
at fork; NumPy's and torch's here), so cells that do not seed still draw different numbers.
Before each fork the template checks that the user's source files it imported are unchanged on
disk; if one changed it declines and exits, and the worker starts a new template.
"""

from __future__ import annotations

import gc
import os
import signal
import socket
import sys
import sysconfig
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from sweepq.host import signals
from sweepq.host.procs import die_with_parent
from sweepq.wire import template as wire
from sweepq.worker import proctitle

FileStamp = tuple[str, int, int]  # path, mtime_ns, size


def main(argv: list[str]) -> int:
    fd, worker_pid, train, spec_dir = int(argv[0]), int(argv[1]), argv[2], argv[3]
    proctitle.set_cmdline([sys.executable, "-m", __spec__.name if __spec__ else "template", *argv[:4]])  # no room
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the worker decides what a Ctrl-C means
    die_with_parent(worker_pid, signal.SIGKILL)  # idle between attempts: nothing to save
    sock = socket.socket(fileno=fd)
    started = time.monotonic()
    why, stamps = _prepare(train, spec_dir)
    try:
        wire.send(sock, wire.Ready(ok=why is None, why=why, seconds=round(time.monotonic() - started, 3)))
    except OSError:
        return 0  # the worker is gone
    if why is not None:
        return 0
    gc.freeze()  # what the imports made stays out of every child's collections: fewer pages copied
    while True:
        msg, fds = wire.receive(sock)
        if not isinstance(msg, wire.Spawn):
            return 0  # the worker closed its end (or spoke nonsense): nothing left to start
        changed = _changed(stamps)
        try:
            if changed is not None:
                wire.send(sock, wire.Declined(why=f"{changed} changed since the template imported it"))
                return 0
            wire.send(sock, wire.Spawned(pid=_spawn(msg, fds, sock)))
        except OSError:
            return 0  # the worker is gone (its attempt, if forked, was adopted and dies with it)
        finally:
            _close(fds)


def _prepare(train: str, spec_dir: str) -> tuple[str | None, list[FileStamp]]:
    """Import what attempts need; None when forks of this process are safe, else why not."""
    from sweepq.attempt import main as attempt  # noqa: F401
    from sweepq.program import supervisor as program  # noqa: F401
    from sweepq.queue import fence
    from sweepq.run import fingerprint

    fingerprint.environment()  # platform's answers are cached: each attempt asks again
    fence.warm()
    if not train:
        return None, []  # a program cell's supervisor: never torch, nothing of the user's to import
    from sweepq.attempt import training  # torch comes with it

    baseline = _native_threads()
    before = set(sys.modules)
    try:
        training.import_entry(train, spec_dir)
    except BaseException as e:  # the fresh interpreter reports it as the attempt's own failure
        return f"importing {train} failed ({type(e).__name__}: {e})", []
    sys.stdout.flush()
    sys.stderr.flush()
    if threading.active_count() > 1:
        return f"importing {train} started a Python thread", []
    if _native_threads() > baseline:
        return f"importing {train} started {_native_threads() - baseline} native thread(s)", []
    if _cuda_touched():
        return f"importing {train} initialised CUDA, which a fork cannot carry", []
    return None, _stamps(set(sys.modules) - before)


def _native_threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _cuda_touched() -> bool:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return True
    try:  # cuInit without torch's own initialisation (e.g. torch.cuda.device_count() at import time)
        return "libcuda.so" in Path("/proc/self/maps").read_text()
    except OSError:
        return False


def _stamps(modules: set[str]) -> list[FileStamp]:
    """The source files of the user's modules (those outside the interpreter's and site's trees)."""
    installed = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    out: list[FileStamp] = []
    for name in modules:
        path = getattr(sys.modules.get(name), "__file__", None)
        if not path or any(path.startswith(p + os.sep) for p in installed):
            continue
        try:
            st = os.stat(path)
        except OSError:
            continue
        out.append((path, st.st_mtime_ns, st.st_size))
    return out


def _changed(stamps: list[FileStamp]) -> str | None:
    for path, mtime, size in stamps:
        try:
            st = os.stat(path)
        except OSError:
            return path
        if (st.st_mtime_ns, st.st_size) != (mtime, size):
            return path
    return None


def _spawn(msg: wire.Spawn, fds: list[int], sock: socket.socket) -> int:
    """Fork the attempt through a middle process that exits at once; the attempt's pid."""
    r, w = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:
            os.close(r)
            middle_pid = os.getpid()
            pid = os.fork()
            if pid == 0:
                os.close(w)
                _become_attempt(msg, fds, sock, middle_pid)
            os.write(w, str(pid).encode())
        finally:
            os._exit(0)
    os.close(w)
    try:
        os.waitpid(middle, 0)  # once it is reaped, the attempt is the worker's child
        return int(os.read(r, 32) or b"0")
    finally:
        os.close(r)


def _become_attempt(msg: wire.Spawn, fds: list[int], sock: socket.socket, middle: int) -> None:
    """In the forked attempt: what Popen would have set up, then the attempt itself. Never returns."""
    signals.install()  # first: a SIGTERM from here on is a preemption, as in a fresh interpreter
    code = 1
    try:
        sock.close()
        os.setsid()  # terminal signals reach it only through its worker
        _standard_streams(fds[msg.stdout], fds[msg.stderr])
        for i in msg.inherit:
            os.set_inheritable(fds[i], True)
        env = dict(msg.env)
        env.update({name: str(fds[i]) for name, i in msg.fd_env.items()})
        os.environ.clear()
        os.environ.update(env)
        os.chdir(msg.cwd)
        _reseed()
        while os.getppid() == middle:  # until the worker adopted it (its pdeath signal is set after)
            time.sleep(0.0002)
        from sweepq.attempt import main as attempt

        sys.argv = [str(Path(attempt.__file__).with_name("__main__.py")), msg.attempt_file]  # as a fresh one has
        proctitle.set_cmdline([sys.executable, "-m", "sweepq.attempt", msg.attempt_file])  # as in ps
        code = attempt.main([msg.attempt_file], started_by="template")
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def _standard_streams(out: int, err: int) -> None:
    devnull = os.open(os.devnull, os.O_RDONLY)
    for source, target in ((devnull, 0), (out, 1), (err, 2)):
        os.dup2(source, target)
    for fd in {devnull, out, err}:
        os.close(fd)


def _reseed() -> None:
    """The global generators a fresh interpreter seeds from the OS (Python's `random` is reseeded by
    CPython at fork): otherwise every cell that does not seed would draw the same numbers."""
    numpy: Any = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
    torch: Any = sys.modules.get("torch")
    if torch is not None:
        torch.seed()  # CUDA's generators too, lazily: this initialises no device


def _close(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
