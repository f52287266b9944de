"""How a child process is confined, as one value decided before it starts.

`run_limited(command, policy, env=...)` takes everything about confinement from a `Policy`: the
CPU-time limit and how far the clock may run past it, the memory cap, the sandbox user, whether
the child gets a record descriptor, whether its network keeps a loopback. The machine-wide knobs
an instructor may set are read here and nowhere else, once, by `Policy.from_env`; a caller then
fills in its run's own limits with `but(...)`.

    PAGEDLAB_GRADE_NPROC        processes + threads the sandbox user may have at once (default 128)
    PAGEDLAB_GRADE_NO_NETWORK   1: a network namespace of its own for every sandboxed child, or an
                                error before grading where the machine cannot give one
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from dataclasses import dataclass

from .users import Sandbox

NPROC_ENV = "PAGEDLAB_GRADE_NPROC"
NO_NETWORK_ENV = "PAGEDLAB_GRADE_NO_NETWORK"
# Processes + threads the sandbox user may have at once. torch's pools, the kernel compiler and
# the executor's workers need a few dozen; a fork bomb needs more. Only under a sandbox user:
# RLIMIT_NPROC counts every process of the user, which on a laptop includes Jupyter itself.
NPROC = 128
# The wall-clock limit is this many times the CPU limit: a loaded machine slows a task down, it
# does not use up its CPU time.
WALL_FACTOR = 4.0


@dataclass(frozen=True)
class Policy:
    """What a limited child may use, and as whom it runs."""

    timeout: float = 60.0  # CPU seconds of its whole process tree
    memory_bytes: int = 4 * 2**30  # address space per process, and its cgroup's memory
    wall_factor: float = WALL_FACTOR  # the clock may run this many times the CPU limit
    sandbox: Sandbox | None = None  # run as this user, sealed and swept; None: as the caller
    record_cap: int = 0  # >0: a record descriptor (PAGEDLAB_RECORD_FD), read back up to this
    loopback: bool = False  # a Jupyter kernel's run: Internet sockets allowed, loopback only
    nproc: int = NPROC  # with a sandbox: processes + threads of the user
    own_network: bool = False  # with a sandbox: a network namespace required, not just preferred

    @classmethod
    def from_env(cls, environ=None) -> Policy:
        """The instructor's knobs (module docstring), checked: a setting this machine cannot
        honour raises ValueError now, before any child starts."""
        environ = os.environ if environ is None else environ
        text = environ.get(NPROC_ENV, "").strip()
        nproc = int(text) if text.isdigit() and int(text) > 0 else NPROC
        own_network = environ.get(NO_NETWORK_ENV, "").strip() in ("1", "true", "yes")
        if own_network and shutil.which("unshare") is None:
            raise ValueError(f"{NO_NETWORK_ENV}=1 needs unshare (util-linux) on PATH")
        return cls(nproc=nproc, own_network=own_network)

    def but(self, **changes) -> Policy:
        """This policy with a run's own limits (timeout=..., sandbox=...)."""
        return dataclasses.replace(self, **changes)
