"""CPU time of a task's process tree, read from /proc: what its time limit counts.

A leaf module: the grader (pagedlab.sandbox.process) kills by it, and the check child below it
(pagedlab.checks.child) dumps its stack by it, so both count the same seconds.
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


def tree_cpu(session: int, uid: int | None) -> tuple[float, float]:
    """(CPU seconds, seconds spent waiting for a CPU) of the live processes of `session` or owned
    by `uid`, their reaped children's CPU time included. A process that left the session and hid
    from /proc's owner is not counted: its CPU time is then the machine's load, not the task's."""
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
                mine = os.stat(f"/proc/{pid}").st_uid == uid
            except OSError:
                continue
        if not mine:
            continue
        cpu += sum(int(x) for x in fields[11:15]) / TICK
        try:
            with open(f"/proc/{pid}/schedstat", "rb") as f:
                waited += int(f.read().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            pass
    return cpu, waited
