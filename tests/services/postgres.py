"""A throwaway PostgreSQL server for the tests and benchmarks: Debian's `postgresql`, on 127.0.0.1 only.

`PostgresServer().start()` initialises a cluster in a temporary folder (`initdb` as the `postgres`
user when this process is root: the server refuses to run as root), starts it with `pg_ctl` on a
free port of the loopback address (no Unix socket, nothing listening elsewhere), and waits until it
accepts connections. `stop()` ends it by its own process id (SIGINT: a fast shutdown, SIGQUIT then
SIGKILL if it lingers) and deletes the folder. Durability is off (`fsync`, `synchronous_commit`,
`full_page_writes`): the cluster is gone at the end anyway, and every commit would otherwise wait
for the disk that the other tests share.

The binaries come from /usr/lib/postgresql/<version>/bin. Where they are missing and this process
is root, the package is installed with apt-get (what `make test` does first, see Makefile); a server
that cannot start raises `PostgresUnavailable` with the reason.

One server per test process: with pytest-xdist each worker that needs one starts its own (about a
second, once), rather than sharing one through a lock and a reference count between processes
whose lifetimes pytest does not tell each other: nothing to coordinate, no server left behind by a
worker that crashed first, and the tests of one worker cannot slow those of the other through a
shared server. Tests isolate themselves further with a fresh database each (`create_database`).

`python tests/services/postgres.py` starts one, prints its URL and the seconds it took, and stops it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

LOOPBACK = "127.0.0.1"
SUPERUSER = "postgres"
START_TIMEOUT_S = 60.0  # a loaded CI machine; a healthy start takes about a second
STOP_TIMEOUT_S = 30.0

# Settings for a throwaway cluster: nothing survives a crash, and nothing needs to.
SETTINGS = {
    "listen_addresses": LOOPBACK,
    "unix_socket_directories": "",  # TCP on the loopback only
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",  # the 32-worker benchmark and several stores per test
    "shared_buffers": "32MB",
    "log_min_messages": "warning",
}


EMPTY = "''"


class PostgresUnavailable(RuntimeError):
    """The server could not be installed or started; the message says why."""


def bin_dir() -> Path | None:
    """The newest installed server's binaries (Debian keeps them out of PATH), or None."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name), reverse=True
    )
    return found[0].parent if found else None


def install() -> Path:
    """Debian's `postgresql` package, installed when its binaries are missing; returns their folder."""
    found = bin_dir()
    if found is not None:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise PostgresUnavailable("PostgreSQL is not installed (Debian: apt-get install postgresql)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "-o", "DPkg::Lock::Timeout=300", "install", "-y", "-q", "postgresql"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:  # a clean machine's package lists may be missing or stale
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, text=True)
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    found = bin_dir()
    if found is None:
        raise PostgresUnavailable(f"apt-get install postgresql failed: {(r.stderr or r.stdout)[-2000:]}")
    return found


def free_port() -> int:
    """A port free on the loopback now (another process may take it first: `start` then retries)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def _signal_and_wait(pid: int, sig: int, timeout: float) -> bool:
    """Send `sig` to `pid`; True once that process is gone (within `timeout`)."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


class PostgresServer:
    """One throwaway cluster: `start()`, `url(database)`, `create_database()`, `stop()`."""

    def __init__(self) -> None:
        self.folder: Path | None = None
        self.port: int | None = None
        self.pid: int | None = None  # the postmaster's
        self.start_seconds: float | None = None
        self._log: Path | None = None

    # -- the server -----------------------------------------------------------------------

    def start(self) -> PostgresServer:
        begin = time.monotonic()
        binaries = install()
        root = os.geteuid() == 0
        self.folder = Path(tempfile.mkdtemp(prefix="sweepq-pg-"))
        data = self.folder / "data"
        self._log = self.folder / "server.log"
        if root:
            shutil.chown(self.folder, SUPERUSER, SUPERUSER)
        user = SUPERUSER if root else None
        try:
            initdb = [str(binaries / "initdb"), "-D", str(data), "-U", SUPERUSER, "--auth=trust", "-E", "UTF8"]
            r = subprocess.run(
                [*initdb, "--no-sync", "--no-instructions", "--locale=C.UTF-8"],
                capture_output=True,
                text=True,
                user=user,
                cwd=self.folder,
            )
            if r.returncode != 0:
                raise PostgresUnavailable(f"initdb failed: {r.stderr[-2000:]}")
            for attempt in range(5):
                if self._launch(binaries, data, user):
                    break
                if attempt == 4:
                    raise PostgresUnavailable(f"postgres did not start: {self.log_tail()}")
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - begin
        return self

    def _launch(self, binaries: Path, data: Path, user: str | None) -> bool:
        """Start postgres on a free port; False when the port was taken meanwhile (try another).

        Through `pg_ctl start`, which returns once the server accepts connections and leaves it a
        child of no test process: the suite's check for stray processes kills every child of the
        test process after each test.
        """
        assert self._log is not None
        self.port = free_port()
        settings = " ".join(f"-c {k}={v or EMPTY}" for k, v in SETTINGS.items())  # pg_ctl hands -o to a shell
        pg_ctl = [str(binaries / "pg_ctl"), "start", "-D", str(data), "-l", str(self._log), "-w"]
        r = subprocess.run(
            [*pg_ctl, "-t", str(int(START_TIMEOUT_S)), "-o", f"-p {self.port} {settings}"],
            capture_output=True,
            text=True,
            user=user,
            cwd=self.folder,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C in the terminal reaches the test run, not the server
        )
        if r.returncode != 0:
            leftover = data / "postmaster.pid"
            if leftover.exists():  # started but not ready in time: not left running behind a retry
                _signal_and_wait(int(leftover.read_text().split()[0]), signal.SIGQUIT, 10.0)
            return False  # "could not bind": the port went to someone else (the log says)
        self.pid = int((data / "postmaster.pid").read_text().split()[0])
        if not self.accepts_connections():
            raise PostgresUnavailable(f"postgres started but refuses connections: {self.log_tail()}")
        return True

    def accepts_connections(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.dsn(), connect_timeout=5):
                return True
        except psycopg.OperationalError:
            return False

    def stop(self) -> None:
        """End the server by its process id and delete its folder (safe to call twice)."""
        pid, self.pid = self.pid, None
        if pid is not None:
            # SIGINT is a fast shutdown; SIGQUIT an immediate one; SIGKILL leaves its children to
            # notice on their own that their postmaster is gone (they do, within a second).
            for sig, wait in ((signal.SIGINT, STOP_TIMEOUT_S), (signal.SIGQUIT, 10.0), (signal.SIGKILL, 10.0)):
                if _signal_and_wait(pid, sig, wait):
                    break
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def log_tail(self) -> str:
        try:
            return self._log.read_text(errors="replace")[-2000:] if self._log else ""
        except OSError:
            return ""

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # -- addresses and databases ------------------------------------------------------------

    def dsn(self, database: str = "postgres") -> str:
        """For psycopg: a libpq connection string."""
        return f"host={LOOPBACK} port={self.port} user={SUPERUSER} dbname={database}"

    def url(self, database: str = "postgres") -> str:
        """For SQLAlchemy (and a sweep file's `database:`): psycopg 3's dialect."""
        return f"postgresql+psycopg://{SUPERUSER}@{LOOPBACK}:{self.port}/{database}"

    def create_database(self, prefix: str = "t") -> str:
        """A new, empty database; returns its SQLAlchemy URL."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:  # CREATE DATABASE refuses a transaction
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


if __name__ == "__main__":
    with PostgresServer() as server:
        print(f"{server.url()} started in {server.start_seconds:.2f} s", file=sys.stderr)
