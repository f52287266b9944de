"""A one-node Slurm cluster on this machine, for the Slurm recipe's test (tests/test_slurm.py).

Debian's slurm-wlm and munge (installed with apt where missing, as root), started by hand the way
a container allows (no systemd): munged, slurmctld and slurmd in the foreground, each with its
configuration, sockets, state, spool and logs under one temporary folder, on free ports, and
stopped by PID at the end. The node has 2 CPUs, so an array of one-CPU tasks runs two at once;
backfill passes every second (bf_interval=1, not the default 30) start a pending task within a
second of a free CPU (one loaded CI run saw no two tasks at once; the test prints slurmctld's
allocations if it happens again).
Process tracking by /proc and no task plugin: the container has no delegated cgroup for Slurm.
The clients (sbatch, squeue, scancel, scontrol) find the cluster through SLURM_CONF.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

PACKAGES = ("slurm-wlm", "munge")
DAEMONS = ("munged", "slurmctld", "slurmd")
NODE = "pagedlab-slurm-node"
APT = ["apt-get", "-o", "DPkg::Lock::Timeout=900", "install", "-y", *PACKAGES]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _which(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")


def ensure_installed() -> None:
    """Debian's packages, installed where missing (CI's .ci/run installs them beforehand)."""
    if all(_which(d) for d in DAEMONS) and _which("sbatch"):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("Slurm is not installed and this is not a root shell with apt-get "
                    f"(install them: {' '.join(APT)})")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    done = subprocess.run(APT, capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0:  # an image whose package lists are stale or absent
        subprocess.run(["apt-get", "-o", "DPkg::Lock::Timeout=900", "update", "-qq"], capture_output=True,
                       env=env, timeout=900)
        done = subprocess.run(APT, capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0:
        pytest.skip(f"apt could not install {' '.join(PACKAGES)} (no network or mirror?): {done.stderr[-800:]}")


def _memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return 8192


class Cluster:
    """munged, slurmctld and slurmd of one node, all under `self.base`."""

    def __init__(self):
        ensure_installed()
        self.base = Path(tempfile.mkdtemp(prefix="pagedlab-slurm-"))
        for sub in ("munge", "state", "spool", "log"):
            (self.base / sub).mkdir(mode=0o700)
        key = self.base / "munge" / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o400)
        self.conf = self.base / "slurm.conf"
        self.socket = self.base / "munge" / "munge.socket"
        self.conf.write_text(self._config())
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.procs: dict[str, subprocess.Popen] = {}
        try:
            self._start("munged", [_which("munged"), "-F", "--force", f"--socket={self.socket}",
                                   f"--key-file={key}", f"--pid-file={self.base / 'munge' / 'munged.pid'}",
                                   f"--seed-file={self.base / 'munge' / 'munged.seed'}",
                                   f"--log-file={self.base / 'log' / 'munged.log'}"])
            self._wait(lambda: self.socket.exists(), "munged's socket")
            self._start("slurmctld", [_which("slurmctld"), "-D", "-f", str(self.conf)])
            self._start("slurmd", [_which("slurmd"), "-D", "-f", str(self.conf), "-N", NODE])
            self._wait(lambda: "idle" in self.run("sinfo", "-h", "-N", "-o", "%T").stdout, f"node {NODE} idle")
        except BaseException:
            self.stop()
            raise

    def _config(self) -> str:
        host = socket.gethostname().split(".")[0]
        b = self.base
        return f"""# a one-node cluster for tests/test_slurm.py
ClusterName=pagedlab-test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.socket}
CredType=cred/munge
StateSaveLocation={b / 'state'}
SlurmdSpoolDir={b / 'spool'}
SlurmctldPidFile={b / 'slurmctld.pid'}
SlurmdPidFile={b / 'slurmd.pid'}
SlurmctldLogFile={b / 'log' / 'slurmctld.log'}
SlurmdLogFile={b / 'log' / 'slurmd.log'}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
MpiDefault=none
SwitchType=switch/none
MailProg=/bin/true
ReturnToService=2
KillWait=10
NodeName={NODE} NodeAddr=127.0.0.1 CPUs=2 RealMemory={_memory_mb()} State=UNKNOWN
PartitionName=grading Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
"""

    def _start(self, name: str, cmd: list[str]) -> None:
        log = open(self.base / "log" / f"{name}.out", "wb")
        self.procs[name] = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                            env=self.env, start_new_session=True)
        log.close()

    def _wait(self, ready, what: str, seconds: float = 90) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode} waiting for {what}:\n{self.logs()}")
            if ready():
                return
            time.sleep(0.5)
        raise RuntimeError(f"no {what} after {seconds:.0f} s:\n{self.logs()}")

    def logs(self) -> str:
        parts = []
        for path in sorted((self.base / "log").iterdir()):
            parts.append(f"--- {path.name}\n" + path.read_text(errors="replace")[-2000:])
        return "\n".join(parts)

    def run(self, *cmd: str, check: bool = False) -> subprocess.CompletedProcess:
        return subprocess.run(list(cmd), capture_output=True, text=True, env=self.env, timeout=60, check=check)

    def tasks(self, job: str) -> dict[str, str]:
        """Array task id (job_index) -> state, for the tasks Slurm still holds (pending, running)."""
        out = self.run("squeue", "-h", "-r", "-j", job, "-o", "%i %T").stdout
        return dict(line.split() for line in out.splitlines() if line.strip())

    def wait_for(self, job: str, seconds: float = 600) -> None:
        """Until no task of `job` is pending or running."""
        deadline = time.monotonic() + seconds
        while self.tasks(job):
            if time.monotonic() > deadline:
                raise RuntimeError(f"job {job} still has {self.tasks(job)} after {seconds:.0f} s:\n{self.logs()}")
            time.sleep(0.5)

    def stop(self) -> None:
        """Cancel what still runs, then stop the daemons by PID (slurmd, slurmctld, munged)."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            self.run("scancel", "--user=root")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and self.run("squeue", "-h").stdout.strip():
                time.sleep(0.5)
        for name in reversed(list(self.procs)):
            proc = self.procs[name]
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        shutil.rmtree(self.base, ignore_errors=True)
