"""Run one limited child process and read back what it wrote, without trusting its folder.

The child's stdout/stderr and its record go to files root created in a root-only folder and
hands over as descriptors (the record's number is in PAGEDLAB_RECORD_FD). Root reads them back
through its own descriptors, capped, regular files only: a link, FIFO or device the child
plants in its scratch is never opened. Under a sandbox user the child gets a minimal
environment, a PID namespace where the machine allows one, and a kill step that is verified.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .trusted_builds import CHILD_ENV as TRUSTED_ENV
from .users import Sandbox
from .workspace import Workspace, read_back

try:
    import resource
except ImportError:  # not POSIX: no limits beyond the time limit
    resource = None

RECORD_FD_ENV = "PAGEDLAB_RECORD_FD"
# A task's process may not write more than this to disk (runaway prints fill the log, not the
# disk); its address space is capped by the caller's memory limit.
MAX_FILE_BYTES = 256 * 1024 * 1024
TAIL_BYTES = 3000
# Processes + threads the sandbox user may have at once. torch's pools, the kernel compiler and
# the executor's workers need a few dozen; a fork bomb needs more. Only under a sandbox user:
# RLIMIT_NPROC counts every process of the user, which on a laptop includes Jupyter itself.
NPROC_ENV = "PAGEDLAB_GRADE_NPROC"
NPROC = 128
NO_NETWORK_ENV = "PAGEDLAB_GRADE_NO_NETWORK"
# Root's variables the sandboxed child keeps: the compiler's, and the course's own.
KEEP_ENV = ("PATH", "LANG", "CXX", "CC", "MPLBACKEND")


def nproc_limit() -> int:
    text = os.environ.get(NPROC_ENV, "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else NPROC


def no_network() -> bool:
    """PAGEDLAB_GRADE_NO_NETWORK=1: the sandboxed child gets no network (needs root, unshare and
    setpriv from util-linux; refused with a clear error when they are missing)."""
    if os.environ.get(NO_NETWORK_ENV, "").strip() not in ("1", "true", "yes"):
        return False
    missing = [tool for tool in ("unshare", "setpriv") if shutil.which(tool) is None]
    if missing:
        raise ValueError(f"{NO_NETWORK_ENV}=1 needs {' and '.join(missing)} (util-linux) on PATH")
    return True


@lru_cache(maxsize=1)
def pid_namespace() -> bool:
    """Whether this machine lets root start a child in a PID namespace of its own."""
    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("setpriv")):
        return False
    probe = subprocess.run(["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "true"],
                           capture_output=True, timeout=30, check=False)
    return probe.returncode == 0


def isolation_note() -> str:
    if pid_namespace():
        return "each task in a PID namespace of its own; root then sweeps the user's processes"
    return ("this machine allows no PID namespace (and no cgroup kill is used): the kill step is "
            "root's sweep of /proc only")


def minimal_env(env: dict, home: Path) -> dict:
    """What a sandboxed child sees: HOME and TMPDIR in its scratch, the course's variables."""
    kept = {k: v for k, v in env.items() if k in KEEP_ENV or k.startswith("PAGEDLAB_")}
    kept.pop("PAGEDLAB_GRADE_USER", None)
    kept.pop(TRUSTED_ENV, None)  # only the folder the grader checked (Sandbox.trusted)
    kept.setdefault("PATH", os.defpath)
    kept.setdefault("LANG", "C.UTF-8")
    kept.update(HOME=str(home), TMPDIR=str(home), MPLCONFIGDIR=str(home / ".matplotlib"),
                PYTHONNOUSERSITE="1")
    if "PYTHONPATH" in env:
        kept["PYTHONPATH"] = env["PYTHONPATH"]
    return kept


def _limits(memory_bytes: int, nproc: int):
    memory_bytes = int(memory_bytes)

    def apply() -> None:  # runs in the child between fork and exec: no imports here
        if resource is None:
            return
        try:
            resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
            if nproc:
                resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        except (ValueError, OSError):
            pass

    return apply


def _as_user(cmd: list[str], sandbox: Sandbox) -> tuple[list[str], dict]:
    """The command and Popen arguments that run `cmd` as the sandbox user."""
    wrap = []
    if pid_namespace():
        wrap += ["--pid", "--fork", "--kill-child", "--mount-proc"]
    if no_network():
        wrap.append("--net")
    if not wrap:
        return cmd, {"user": sandbox.uid, "group": sandbox.gid, "extra_groups": []}
    return (["unshare", *wrap, "--", "setpriv", f"--reuid={sandbox.uid}", f"--regid={sandbox.gid}",
             "--clear-groups", "--", *cmd], {})


@dataclass
class Finished:
    """How a limited child process ended, and what it wrote."""

    returncode: int
    timed_out: bool
    output: str  # the tail of its merged stdout/stderr
    seconds: float
    record: bytes = b""  # its record (when asked for), at most the cap
    record_size: int = 0  # the record's real size, to tell a flood from a record


def run_limited(cmd: list[str], *, env: dict, timeout: float, memory_bytes: int,
                sandbox: Sandbox | None = None, cwd: Path | None = None, stdin: bytes | None = None,
                record_cap: int = 0) -> Finished:
    """Run `cmd` in a new session with limits; after `timeout` s kill everything it started.

    With a `sandbox` it runs as that user, with a scratch folder as HOME and (unless `cwd` says
    otherwise) as its working folder. With `record_cap` it gets a record descriptor, read back
    up to that many bytes. Raises users.KillFailed when the user's processes cannot be ended.
    """
    began = time.perf_counter()
    space = Workspace("pagedlab-run-", owner=sandbox)
    out_fd = space.open_channel("output")
    record_fd = space.open_channel("record") if record_cap else -1
    try:
        env = dict(env)
        as_user = {}
        if sandbox is not None:
            env = minimal_env(env, space.home)
            if sandbox.cache is not None:
                env["PAGEDLAB_CACHE"] = str(sandbox.cache)
            if sandbox.trusted is not None:
                env[TRUSTED_ENV] = str(sandbox.trusted)
            cmd, as_user = _as_user(cmd, sandbox)
        if record_cap:
            env[RECORD_FD_ENV] = str(record_fd)
        timed_out = False
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                                stdout=out_fd, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                pass_fds=(record_fd,) if record_cap else (),
                                preexec_fn=_limits(memory_bytes, nproc_limit() if sandbox else 0),
                                cwd=cwd or space.home, **as_user)
        try:
            if stdin is not None:
                try:
                    proc.stdin.write(stdin)
                    proc.stdin.close()
                except BrokenPipeError:
                    pass
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            # Whatever happened, nothing the child started (compilers, workers) survives it.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
            if sandbox is not None:
                sandbox.kill_all()
        tail, size = read_back(out_fd, TAIL_BYTES, tail=True)
        output = ("…" if size > TAIL_BYTES else "") + tail.decode("utf-8", "replace").strip()
        record, record_size = read_back(record_fd, record_cap) if record_cap else (b"", 0)
    finally:
        os.close(out_fd)
        if record_cap:
            os.close(record_fd)
        if sandbox is None or not sandbox_alive(sandbox):
            space.remove()
    return Finished(proc.returncode, timed_out, output, round(time.perf_counter() - began, 2),
                    record, record_size)


def sandbox_alive(sandbox: Sandbox) -> bool:
    from .users import pids_of

    return bool(pids_of(sandbox.uid))
