"""CPU time of a task's process tree, read from /proc: what its time limit counts.

A leaf module: the grader (pagedlab.sandbox.process) kills by it, and the check child below it
(pagedlab.drivers.child) dumps its stack by it, so both count the same seconds.
"""

from __future__ import annotations

import os


def _stat_fields(pid: str) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode("ascii", "replace")
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _real_uid(pid: str) -> int | None:
    """The real uid of `pid` from its status (root reads it whatever the process's dumpable flag)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Uid:"):
                    return int(line.split()[1])
    except (OSError, IndexError, ValueError):
        pass
    return None


def tree_cpu(session: int, uid: int | None, *, hidden_too: bool = False) -> tuple[float, float]:
    """(CPU seconds, seconds spent waiting for a CPU) of the live processes of `session` or owned
    by `uid`, their reaped children's CPU time included. A non-dumpable process's /proc folder is
    root's: one that also left the session is counted only with `hidden_too` (root reads each
    root-owned process's real uid then: a few ms a look, for a machine with no cgroup to count it)."""
    cpu = waited = 0.0
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return 0.0, 0.0
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is None:
            continue
        mine = fields[3] == str(session)
        if not mine and uid is not None:
            try:
                owner = os.stat(f"/proc/{pid}").st_uid
            except OSError:
                continue
            mine = owner == uid or (hidden_too and owner == 0 and _real_uid(pid) == uid)
        if not mine:
            continue
        cpu += sum(int(x) for x in fields[11:15]) / TICK
        try:
            with open(f"/proc/{pid}/schedstat", "rb") as f:
                waited += int(f.read().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            pass
    return cpu, waited
