"""One cgroup per sandboxed child: its CPU share, memory and process count, whatever it forks.

Per process and per uid limits (RLIMIT_*) leave one thing open: 120 processes of one job
spinning in sessions of their own get 120 shares of the CPU, and a classmate graded beside them
one. In a cgroup of its own a child's whole tree gets one share (cgroup v2 `cpu.weight`, v1
`cpu.shares`, both left at their default, the same for every child), at most `memory` bytes
(tmpfs pages of its private /tmp included) and `pids` tasks.

cgroup v2 where /sys/fs/cgroup offers cpu, memory and pids to root; otherwise the v1 hierarchies
(cpu, cpuacct, memory, pids) that are mounted; otherwise none, and the grader says so.
enter.py joins the child to them (root, before it drops to the user).
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

TOP = Path("/sys/fs/cgroup")
PARENT = "pagedlab"  # root's folder of the children's groups in each hierarchy
V1 = ("cpu", "cpuacct", "memory", "pids")
# All grading together weighs as much as this many ordinary processes of the machine; each
# child's group weighs the same as any other child's.
PARENT_WEIGHT = 4


@dataclass
class Group:
    version: int
    dirs: list[Path]

    @property
    def procs(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def cpu_seconds(self) -> float:
        """CPU time of every process that was ever in the group (reaped ones included)."""
        try:
            if self.version == 2:
                for line in (self.dirs[0] / "cpu.stat").read_text().splitlines():
                    if line.startswith("usage_usec "):
                        return int(line.split()[1]) / 1e6
            for d in self.dirs:
                if (d / "cpuacct.usage").exists():
                    return int((d / "cpuacct.usage").read_text()) / 1e9
        except (OSError, ValueError):
            pass
        return 0.0

    def kill(self) -> None:
        for d in self.dirs:
            if (d / "cgroup.kill").exists():
                _write(d / "cgroup.kill", "1")
                continue
            try:
                pids = (d / "cgroup.procs").read_text().split()
            except OSError:
                continue
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass

    def remove(self) -> None:
        """Removed once empty (its killed processes take a moment to leave it)."""
        deadline = time.monotonic() + 5
        for d in self.dirs:
            while True:
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    self.kill()
                    time.sleep(0.05)


def _write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _controllers_v2() -> set[str]:
    try:
        return set((TOP / "cgroup.controllers").read_text().split())
    except OSError:
        return set()


@lru_cache(maxsize=1)
def _layout() -> tuple[int, tuple[Path, ...]]:
    """(version, the parent folder of every hierarchy used), or (0, ()) when none can be used."""
    if os.geteuid() != 0:
        return 0, ()
    if {"cpu", "memory", "pids"} <= _controllers_v2():
        parent = TOP / PARENT
        try:
            _write(TOP / "cgroup.subtree_control", "+cpu +memory +pids")
            parent.mkdir(exist_ok=True)
            _write(parent / "cgroup.subtree_control", "+cpu +memory +pids")
            _write(parent / "cpu.weight", str(100 * PARENT_WEIGHT))
            return 2, (parent,)
        except OSError:
            pass
    parents = []
    for name in V1:
        base = TOP / name
        if not (base / "cgroup.procs").exists():
            continue
        try:
            (base / PARENT).mkdir(exist_ok=True)
            if name == "cpu":
                _write(base / PARENT / "cpu.shares", str(1024 * PARENT_WEIGHT))
        except OSError:
            continue
        parents.append(base / PARENT)
    if any(p.parent.name == "cpu" for p in parents):
        return 1, tuple(parents)
    return 0, ()


def note() -> str:
    version, parents = _layout()
    if version == 2:
        return "a cgroup v2 per task (one CPU share, memory, processes)"
    if version == 1:
        names = ", ".join(p.parent.name for p in parents)
        return f"a cgroup per task (v1: {names})"
    return ("no cgroups here: CPU, memory and processes are limited per process and per user, "
            "so a job's many processes may slow its neighbours")


def create(name: str, *, memory_bytes: int, pids: int) -> Group | None:
    """A fresh group `name` with these limits, or None when the machine has none to give."""
    version, parents = _layout()
    if not version:
        return None
    dirs = []
    try:
        for parent in parents:
            d = parent / name
            d.mkdir()
            dirs.append(d)
            if version == 2:
                _write(d / "memory.max", str(int(memory_bytes)))
                _write(d / "pids.max", str(int(pids)))
            elif parent.parent.name == "memory":
                _write(d / "memory.limit_in_bytes", str(int(memory_bytes)))
            elif parent.parent.name == "pids":
                _write(d / "pids.max", str(int(pids)))
    except OSError:
        Group(version, dirs).remove()
        return None
    return Group(version, dirs)
