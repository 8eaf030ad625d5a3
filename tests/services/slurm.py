"""A throwaway single-node Slurm for the tests: Debian's `slurm-wlm` and `munge`, on 127.0.0.1 only.

`SlurmCluster().start()` makes a temporary folder with a munge key, starts `munged` as the `munge`
user with its socket there, writes a `slurm.conf` there (named by `SLURM_CONF` for every command
and job of this process: sbatch, squeue, scancel, the daemons) and starts `slurmctld` and `slurmd`,
then waits until the node is idle. `stop()` cancels what is left, ends the daemons by their process
ids and deletes the folder.

The configuration is the smallest that runs real jobs: process tracking by /proc (linuxproc, no
cgroups in a container), no task plugin, no accounting (so no `sacct`: nothing here may depend on
it), `cred_expire=10` so a requeued job may start again about 12 s later instead of 2 minutes, the
node with this machine's real CPU count and memory, and `ReturnToService=2` so a node that went
down while a test killed things comes back by itself. Everything runs as root here (the daemons and
the jobs): a test machine has no other users.

Pitfalls met: killed daemons linger as zombies when nothing reaps them (their state is read from
/proc, not with `kill -0`); Slurm checks time limits only about every 30 s (tests deliver the
warning themselves with `scancel --signal=...`, but for tests/process/test_slurm_time_limit.py,
which waits for a real one-minute limit); `scancel --signal=KILL` sends SIGTERM first (a node's
death is SIGKILL to the job's processes themselves); the apt lock may be held by another install (apt
waits for it). The daemons are not children of the test process (they daemonize): the suite's check
for stray processes ends every child of a test.

`python tests/services/slurm.py` starts one, prints the seconds it took, and stops it.
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
from pathlib import Path

START_TIMEOUT_S = 60.0  # a loaded CI machine; a healthy start takes a few seconds
PACKAGES = ("slurm-wlm", "munge")
DAEMONS = ("munged", "slurmctld", "slurmd")
PARTITION = "debug"


class SlurmUnavailable(RuntimeError):
    """Slurm could not be installed or started; the message says why."""


def install() -> None:
    """Debian's `slurm-wlm` and `munge`, installed when their programs are missing."""
    if all(shutil.which(p, path=os.environ.get("PATH", "") + ":/usr/sbin") for p in (*DAEMONS, "sbatch")):
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise SlurmUnavailable("Slurm is not installed (Debian: apt-get install slurm-wlm munge)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "-o", "DPkg::Lock::Timeout=300", "install", "-y", "-q", *PACKAGES]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:  # a clean machine's package lists may be missing or stale
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, text=True)
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise SlurmUnavailable(f"apt-get install {' '.join(PACKAGES)} failed: {(r.stderr or r.stdout)[-2000:]}")


def free_ports(n: int) -> list[int]:
    """`n` distinct ports free on the loopback now."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def running(pid: int) -> bool:
    """Alive and not a zombie (a daemon's parent may never reap it: `kill -0` would say alive)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024 * 9 // 10  # below the real figure, or the node is refused
    return 1024


class SlurmCluster:
    """One throwaway single-node cluster: `start()`, `env`, `squeue()`, `stop()`."""

    def __init__(self) -> None:
        self.folder: Path | None = None
        self.conf: Path | None = None
        self.node = socket.gethostname().split(".")[0]
        self.start_seconds: float | None = None

    @property
    def env(self) -> dict[str, str]:
        """What a command or a job needs to reach this cluster."""
        assert self.conf is not None
        return {"SLURM_CONF": str(self.conf)}

    def start(self) -> SlurmCluster:
        begin = time.monotonic()
        install()
        self.folder = Path(tempfile.mkdtemp(prefix="sweepq-slurm-"))
        try:
            self._start_munge()
            self._write_conf()
            os.environ["SLURM_CONF"] = str(self.conf)  # this process's sbatch, squeue and scancel, and its jobs
            for daemon in ("slurmctld", "slurmd"):
                r = subprocess.run(
                    [f"/usr/sbin/{daemon}", *(["-c"] if daemon == "slurmctld" else [])],
                    env=dict(os.environ, **self.env),
                    capture_output=True,
                    text=True,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
                if r.returncode != 0:
                    raise SlurmUnavailable(f"{daemon} did not start: {r.stderr[-1000:]} {self.log_tail(daemon)}")
            self._wait_idle()
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - begin
        return self

    def _start_munge(self) -> None:
        assert self.folder is not None
        munge = self.folder / "munge"
        munge.mkdir()
        os.chmod(munge, 0o755)  # munged: every client must reach its socket (execute for all)
        key = self.folder / "munge.key"  # not beside the socket: that folder is open to all
        r = subprocess.run(["/usr/sbin/mungekey", "--create", "--keyfile", str(key)], capture_output=True, text=True)
        if r.returncode != 0:
            raise SlurmUnavailable(f"mungekey failed: {r.stderr}")
        for path in (munge, key):  # the key: 0600 and the munge user's
            shutil.chown(path, "munge", "munge")
        os.chmod(self.folder, 0o755)  # munged checks the folders above its socket: none writable by others
        cmd = [
            "/usr/sbin/munged",
            f"--key-file={key}",
            f"--socket={munge / 'munge.socket.2'}",
            f"--pid-file={munge / 'munged.pid'}",
            f"--log-file={munge / 'munged.log'}",
            f"--seed-file={munge / 'munged.seed'}",
            "--num-threads=2",
        ]
        r = subprocess.run(cmd, user="munge", capture_output=True, text=True, start_new_session=True)
        if r.returncode != 0:
            raise SlurmUnavailable(f"munged did not start: {r.stderr[-1000:]}")

    def _write_conf(self) -> None:
        assert self.folder is not None
        f = self.folder
        for sub in ("state", "spool"):
            (f / sub).mkdir()
        (f / "plugstack.conf").write_text("")  # not the system's
        ctld, slurmd = free_ports(2)
        cpus = os.cpu_count() or 1
        lines = {
            "ClusterName": "sweepq",
            "SlurmctldHost": f"{self.node}(127.0.0.1)",
            "SlurmUser": "root",
            "SlurmctldPort": ctld,
            "SlurmdPort": slurmd,
            "AuthType": "auth/munge",
            "CredType": "cred/munge",
            "AuthInfo": f"socket={f / 'munge' / 'munge.socket.2'},cred_expire=10",
            "StateSaveLocation": f / "state",
            "SlurmdSpoolDir": f / "spool",
            "SlurmctldPidFile": f / "slurmctld.pid",
            "SlurmdPidFile": f / "slurmd.pid",
            "SlurmctldLogFile": f / "slurmctld.log",
            "SlurmdLogFile": f / "slurmd.log",
            "PlugStackConfig": f / "plugstack.conf",
            "ProctrackType": "proctrack/linuxproc",
            "TaskPlugin": "task/none",
            "JobAcctGatherType": "jobacct_gather/none",
            "AccountingStorageType": "accounting_storage/none",
            "SchedulerType": "sched/backfill",
            "SelectType": "select/cons_tres",
            "SelectTypeParameters": "CR_Core",  # memory not consumed: a job does not take the whole node's
            "ReturnToService": 2,
            "MpiDefault": "none",
            "SlurmctldTimeout": 30,
            "SlurmdTimeout": 60,
            "InactiveLimit": 0,
            "KillWait": 30,  # the SIGTERM-to-SIGKILL grace of a preempted or cancelled job
            "MinJobAge": 300,  # a finished job stays visible to squeue meanwhile
            "SchedulerParameters": "sched_interval=2",
            "SlurmctldDebug": "info",
            "SlurmdDebug": "info",
        }
        text = "".join(f"{k}={v}\n" for k, v in lines.items())
        text += f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb()} State=UNKNOWN\n"
        text += f"PartitionName={PARTITION} Nodes={self.node} Default=YES MaxTime=INFINITE State=UP\n"
        self.conf = f / "slurm.conf"
        self.conf.write_text(text)

    def _wait_idle(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        state = ""
        while time.monotonic() < deadline:
            r = subprocess.run(
                ["sinfo", "--noheader", "--format=%T", f"--nodes={self.node}"],
                env=dict(os.environ, **self.env),
                capture_output=True,
                text=True,
            )
            state = r.stdout.strip()
            if r.returncode == 0 and state in ("idle", "mixed", "allocated"):
                return
            time.sleep(0.2)
        raise SlurmUnavailable(f"the node is not up ({state or 'no answer'}): {self.log_tail('slurmd')}")

    def squeue(self, *jobs: str) -> dict[str, str]:
        """Job id (ARRAY_TASK for an array's) -> state, of the jobs squeue still lists."""
        args = ["squeue", "--noheader", "--format=%i %T"]
        if jobs:
            args.append("--jobs=" + ",".join(jobs))
        r = subprocess.run(args, env=dict(os.environ, **self.env), capture_output=True, text=True)
        return dict(line.split(None, 1) for line in r.stdout.splitlines() if line.strip())

    def log_tail(self, daemon: str) -> str:
        if self.folder is None:
            return ""
        try:
            return (self.folder / f"{daemon}.log").read_text()[-2000:]
        except OSError:
            return ""

    def _pid(self, daemon: str) -> int | None:
        assert self.folder is not None
        path = self.folder / ("munge/munged.pid" if daemon == "munged" else f"{daemon}.pid")
        try:
            return int(path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def _end_leftover_steps(self) -> None:
        """Kill what jobs left behind their daemons: a slurmstepd outlives slurmd, and a stopped job's
        batch step (its shell and srun) was seen lingering after slurmctld forgot the job. Found by
        the folder: their working directory, or their command line (the job scripts are in its spool)."""
        import psutil

        assert self.folder is not None
        doomed: set[psutil.Process] = set()
        for p in psutil.process_iter(["cmdline", "cwd"]):
            # a step's slurmstepd runs in the folder; its job's shell runs a script from the spool
            if str(self.folder) in " ".join(p.info["cmdline"] or []) or (p.info["cwd"] or "").startswith(
                str(self.folder)
            ):
                try:
                    parent = p.parent()
                    doomed.update(p.children(recursive=True))
                    doomed.add(p)
                    if parent is not None and parent.name().startswith("slurmstepd"):
                        doomed.add(parent)
                        doomed.update(parent.children(recursive=True))
                except psutil.NoSuchProcess:
                    pass
        for p in doomed:
            if p.pid != os.getpid():
                try:
                    p.kill()
                except psutil.NoSuchProcess:
                    pass

    def stop(self) -> None:
        """Cancel the jobs left, end the daemons by their pids, delete the folder (safe to call twice)."""
        if self.folder is None:
            return
        if self.conf is not None and self.conf.exists():
            env = dict(os.environ, **self.env)
            subprocess.run(
                ["scancel", "--full", "--signal=KILL", f"--nodelist={self.node}"], env=env, capture_output=True
            )
            subprocess.run(["scancel", f"--partition={PARTITION}"], env=env, capture_output=True)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and self.squeue():
                time.sleep(0.2)
        for daemon in ("slurmd", "slurmctld", "munged"):
            pid = self._pid(daemon)
            if pid is None or not running(pid):
                continue
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while running(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if running(pid):
                os.kill(pid, signal.SIGKILL)
        self._end_leftover_steps()
        if os.environ.get("SLURM_CONF") == str(self.conf):
            del os.environ["SLURM_CONF"]
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder = None


if __name__ == "__main__":
    cluster = SlurmCluster()
    try:
        cluster.start()
        print(f"Slurm up in {cluster.start_seconds:.1f}s: SLURM_CONF={cluster.conf}", flush=True)
        if "--keep" in sys.argv:
            input("press Enter to stop")
    finally:
        cluster.stop()
