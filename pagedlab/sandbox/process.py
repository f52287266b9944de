"""Run one limited child process and read back what it wrote, without trusting its folder.

The child's stdout/stderr and its record go to files root created in a root-only folder and
hands over as descriptors (the record's number is in PAGEDLAB_RECORD_FD). Root reads them back
through its own descriptors, capped, regular files only: a link, FIFO or device the child
plants in its scratch is never opened. Under a sandbox user the child gets a minimal
environment, a PID namespace where the machine allows one, and a kill step that is verified.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..cputime import tree_cpu
from . import cgroups, ipc
from .policy import Policy
from .trusted_builds import CHILD_ENV as TRUSTED_ENV
from .users import Sandbox
from .workspace import Workspace, read_back

SEAL_ENV = "PAGEDLAB_SEAL"  # drivers.child's: it seals itself before the submission's code runs
# First on a notebook run's PYTHONPATH: its sitecustomize seals every Python process of the run.
SEALED_SITE = str(Path(__file__).with_name("sealed_site"))

try:
    import resource
except ImportError:  # not POSIX: no limits beyond the time limit
    resource = None

RECORD_FD_ENV = "PAGEDLAB_RECORD_FD"
# A task's process may not write more than this to disk (runaway prints fill the log, not the
# disk); its address space is capped by the caller's memory limit.
MAX_FILE_BYTES = 256 * 1024 * 1024
TAIL_BYTES = 3000
# Root's variables the sandboxed child keeps: the compiler's, and the course's own.
KEEP_ENV = ("PATH", "LANG", "CXX", "CC", "MPLBACKEND")


@lru_cache(maxsize=1)
def ipc_namespace() -> bool:
    """Whether this machine lets root give a child an IPC namespace of its own: the System V
    objects and POSIX message queues it makes die with it (they belong to no process, so the kill
    step would leave them, readable by the user's next job)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "--ipc", "true"], capture_output=True, timeout=30, check=False)
    return probe.returncode == 0


@lru_cache(maxsize=1)
def pid_namespace() -> bool:
    """Whether this machine lets root start a child in a PID namespace of its own."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "true"],
                           capture_output=True, timeout=30, check=False)
    return probe.returncode == 0


def isolation_note() -> str:
    if private_namespace():
        kinds = ", ".join(k for k, on in (("PID", True), ("mount", True), ("IPC", ipc_namespace()),
                                          ("network", net_namespace())) if on)
        kinds = " and ".join(kinds.rsplit(", ", 1))
        return (f"each task in {kinds} namespaces of its own, with private /tmp, /var/tmp and "
                f"/dev/shm, and {cgroups.note()}; root then sweeps the user's processes")
    if _unshared():
        ipc = "" if ipc_namespace() else ", IPC objects"
        return (f"each task in a PID namespace of its own; root then sweeps the user's processes and "
                f"their files in /tmp{ipc}")
    return ("this machine allows no PID namespace (and no cgroup kill is used): the kill step is "
            "root's sweep of /proc, and of the user's files in /tmp and IPC objects")


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


def _limits(memory_bytes: int, nproc: int, wall: float):
    memory_bytes = int(memory_bytes)
    # A backstop per process, above anything the tree's CPU limit lets one process use.
    cpu_cap = int(wall) + 30

    def apply() -> None:  # runs in the child between fork and exec: no imports here
        if resource is None:
            return
        try:
            resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
            resource.setrlimit(resource.RLIMIT_CPU, (cpu_cap, cpu_cap))
            if nproc:
                resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        except (ValueError, OSError):
            pass

    return apply


# What a task may write to its private /tmp, /var/tmp, /dev/shm and its scratch folder, each.
PRIVATE_TMP_BYTES = 256 * 1024 * 1024
ENTER = Path(__file__).with_name("enter.py")


def _as_user(cmd: list[str], sandbox: Sandbox, home: Path, keep: list[str],
             group: cgroups.Group | None, loopback: bool = False, own_network: bool = False) -> tuple[list[str], dict]:
    """The command and Popen arguments that run `cmd` as the sandbox user: in a PID and mount
    namespace of its own with private temporary folders (enter.py) where the machine allows.
    `loopback`: in a network namespace whose loopback enter.py brings up, where it allows one."""
    wrap = ["--pid", "--fork", "--kill-child", "--mount-proc"]
    if own_network or net_namespace():
        wrap.append("--net")
    if ipc_namespace():
        wrap.append("--ipc")
    if not private_namespace():
        if _unshared():  # the PID namespace at least
            return (["unshare", *wrap, "--", "setpriv", f"--reuid={sandbox.uid}", f"--regid={sandbox.gid}",
                     "--clear-groups", "--no-new-privs", "--", *cmd], {})
        return cmd, {"user": sandbox.uid, "group": sandbox.gid, "extra_groups": []}
    settings = {"uid": sandbox.uid, "gid": sandbox.gid, "home": str(home), "tmp_bytes": PRIVATE_TMP_BYTES,
                "keep": sorted({os.path.realpath(p) for p in keep if os.path.isabs(p)}),
                "cgroups": group.procs if group else []}
    if net_namespace():  # a check child's loopback stays down: it may open no Internet socket
        settings["loopback"] = loopback
    if ipc_namespace():  # its own message queues at /dev/mqueue, if the machine mounts one there
        settings["mqueue"] = True
    return (["unshare", *wrap, "--", sys.executable, "-I", "-S", str(ENTER), json.dumps(settings), "--",
             *cmd], {})


def _unshared() -> bool:
    """Whether a sandboxed child starts under `unshare` (namespaces of its own), not as a plain
    process of the user."""
    return private_namespace() or (pid_namespace() and bool(shutil.which("setpriv")))


@lru_cache(maxsize=1)
def net_namespace() -> bool:
    """Whether root can also give that child a network namespace with its loopback up."""
    return private_namespace() and _enter_works(net=True)


def notebook_isolation_note() -> str:
    """What holds around a sandboxed notebook run (`Policy(loopback=True)`)."""
    sealed = ("every Python process of it non-dumpable, under no-new-privs and a seccomp filter "
              "(Internet sockets allowed for Jupyter's ZMQ)")
    if net_namespace():
        return f"each notebook runs {sealed}, in a network namespace of its own with only its loopback up"
    return (f"each notebook runs {sealed}, but this machine allows no network namespace: "
            "the notebook's code can reach the network")


@lru_cache(maxsize=1)
def private_namespace() -> bool:
    """Whether root can start a child in PID and mount namespaces of its own, with private
    temporary folders (enter.py, tried once on `true` as nobody)."""
    return pid_namespace() and _enter_works(net=False)


def _enter_works(*, net: bool) -> bool:
    """Whether enter.py runs `true` as nobody in fresh PID and mount namespaces (with `net`, a
    network namespace too, its loopback brought up)."""
    import tempfile

    home = tempfile.mkdtemp(prefix="pagedlab-probe-")
    try:
        settings = {"uid": 65534, "gid": 65534, "home": home, "tmp_bytes": 1 << 20, "keep": [home]}
        wrap = ["--pid", "--fork", "--kill-child", "--mount-proc"]
        if net:
            settings["loopback"] = True
            wrap.append("--net")
        probe = subprocess.run(["unshare", *wrap, "--", sys.executable, "-I", "-S", str(ENTER), json.dumps(settings),
                                "--", "true"], capture_output=True, timeout=30, check=False, cwd="/")
        return probe.returncode == 0
    finally:
        os.rmdir(home)


def _paths_to_keep(env: dict, cwd: Path | None, space: Workspace) -> list[str]:
    """Folders the child needs that may lie under /tmp: its scratch, and every absolute path the
    grader put in its environment (the submission copy, the job's cache, the course...)."""
    keep = [str(space.root), sys.prefix, sys.base_prefix, os.path.realpath(sys.executable)]
    keep += [str(cwd)] if cwd else []
    for key, value in env.items():
        if key.startswith("PAGEDLAB_") or key == "PYTHONPATH":
            keep += [part for part in value.split(os.pathsep) if os.path.isabs(part)]
    return keep


def _private_dirs_sweep(uid: int) -> None:
    """Without a mount namespace: remove what the user left in /tmp, /var/tmp and /dev/shm (each
    folder's own entries; a file deeper down sits in a folder someone let the user write)."""
    from .workspace import remove_tree

    for top in ("/tmp", "/var/tmp", "/dev/shm"):
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid == uid:
                    remove_tree(Path(entry.path))
            except OSError:
                pass


POLL = 0.25  # seconds between two looks at the task's CPU time


@dataclass
class Finished:
    """How a limited child process ended, and what it wrote."""

    returncode: int
    timed_out: bool  # over its CPU limit, or over its wall-clock limit (see wall_out)
    output: str  # the tail of its merged stdout/stderr
    seconds: float  # wall-clock
    record: bytes = b""  # its record (when asked for), at most the cap
    record_size: int = 0  # the record's real size, to tell a flood from a record
    cpu_seconds: float = 0.0  # CPU time of the whole process tree
    wall_out: bool = False  # killed at the wall-clock limit before it used its CPU time
    starved: bool = False  # ...while the machine had no CPU to give it (root's probe: the grader's problem)


# Starvation is judged from outside the task: by what a process of root's own that always wants a
# CPU gets now, in a cgroup like a task's (the same weight) where the machine has them. The task's
# own run delay says nothing: its processes, pinned to one CPU and woken together, wait behind each
# other while the machine idles (tests/test_redteam_root.py). A task that got at least half the
# share the probe gets was competing for the CPU like it (a busy machine slowed both); one that got
# less slept, or starved itself: its own timeout.
PROBE_SECONDS = 0.5
_SPIN = ("import sys, time\nsys.stdin.read(1)\nt, c = time.monotonic(), time.process_time()\n"
         "while time.monotonic() - t < float(sys.argv[1]):\n    pass\n"
         "print((time.process_time() - c) / (time.monotonic() - t))\n")


def cpu_share_now(seconds: float = PROBE_SECONDS, *, like_a_task: bool = True) -> float:
    """The share of one CPU (0 to 1) that a process always ready to run gets on this machine now:
    root's own, spinning for `seconds`, in a cgroup beside the children's when `like_a_task` and
    the machine has them. 0.0 when it cannot be measured (the task then gets the doubt)."""
    group = cgroups.create(f"probe-{os.getpid()}-{time.monotonic_ns()}", memory_bytes=256 << 20, pids=4) \
        if like_a_task else None
    try:
        proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _SPIN, str(seconds)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            for procs in group.procs if group else []:
                with open(procs, "w") as f:
                    f.write(str(proc.pid))
            out, _ = proc.communicate("x", timeout=seconds * 20 + 30)
            return min(max(float(out), 0.0), 1.0)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    except (OSError, ValueError, subprocess.SubprocessError):
        return 0.0
    finally:
        if group is not None:
            group.remove()


def _competing(cpu: float, wall: float, group) -> bool:
    """Whether a task that used `cpu` seconds in `wall` was competing for a CPU: it used half of
    one, or at least half of what root's probe gets on the machine now."""
    share = cpu / wall if wall > 0 else 1.0
    return share >= 0.5 or share >= 0.5 * cpu_share_now(like_a_task=group is not None)


def _ended_within(proc: subprocess.Popen, watch: int | None, seconds: float) -> bool:
    if watch is not None:
        return bool(select.select([watch], [], [], seconds)[0])
    time.sleep(seconds)
    return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _reap(pid: int) -> tuple[int, float]:
    """(return code as Popen gives it, CPU seconds of the child and all it reaped)."""
    _, status, usage = os.wait4(pid, 0)
    return os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime


def run_limited(cmd: list[str], policy: Policy, *, env: dict, cwd: Path | None = None,
                stdin: bytes | None = None) -> Finished:
    """Run `cmd` in a new session, confined as `policy` says; once its process tree has used
    `policy.timeout` CPU seconds, or `policy.wall_factor` times that on the clock, kill
    everything it started. `env` is its environment (a sandboxed child keeps only the course's
    variables of it), `stdin` its input.

    With `policy.sandbox` it runs as that user, with a scratch folder as HOME and (unless `cwd`
    says otherwise) as its working folder. With `policy.record_cap` it gets a record descriptor,
    read back up to that many bytes. Raises users.KillFailed when the user's processes cannot be
    ended. `policy.loopback` (a Jupyter kernel's run): with a sandbox, every Python process of it
    seals itself (sealed_site) with a filter that allows Internet sockets, in a network namespace
    where only the loopback is up when the machine allows one.
    """
    timeout, memory_bytes, wall_factor = policy.timeout, policy.memory_bytes, policy.wall_factor
    sandbox, record_cap, loopback = policy.sandbox, policy.record_cap, policy.loopback
    began = time.perf_counter()
    space = Workspace("pagedlab-run-", owner=sandbox)
    group = None
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
            env[SEAL_ENV] = "1"
            if loopback:
                env[SEAL_ENV] = "inet"
                env["PYTHONPATH"] = os.pathsep.join(filter(None, [SEALED_SITE, env.get("PYTHONPATH")]))
            if private_namespace():
                group = cgroups.create(space.root.name, memory_bytes=memory_bytes,
                                       pids=policy.nproc + 16)
            cmd, as_user = _as_user(cmd, sandbox, space.home, _paths_to_keep(env, cwd, space), group,
                                    loopback=loopback, own_network=policy.own_network)
        if record_cap:
            env[RECORD_FD_ENV] = str(record_fd)
        timed_out = wall_out = starved = False
        cpu = 0.0
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                                stdout=out_fd, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                pass_fds=(record_fd,) if record_cap else (),
                                preexec_fn=_limits(memory_bytes, policy.nproc if sandbox else 0,
                                                   timeout * wall_factor),
                                cwd=cwd or space.home, **as_user)
        returncode = None
        try:
            if stdin is not None:
                try:
                    proc.stdin.write(stdin)
                    proc.stdin.close()
                except BrokenPipeError:
                    pass
            if not os.path.isdir("/proc/self"):  # no CPU time to count: the clock is the limit
                wall_factor = 1.0
            watch = os.pidfd_open(proc.pid) if hasattr(os, "pidfd_open") else None
            try:
                competing = None  # decided once the clock passes the CPU limit
                while not _ended_within(proc, watch, POLL):
                    cpu, _ = tree_cpu(proc.pid, sandbox.uid if sandbox else None, hidden_too=group is None)
                    if group is not None:
                        cpu = max(cpu, group.cpu_seconds())
                    wall = time.perf_counter() - began
                    if cpu > timeout:
                        timed_out = True
                        break
                    # Past the CPU limit on the clock, a child that mostly slept (or starved itself)
                    # is ended now; one competing for a CPU on a busy machine gets the generous wall
                    # limit, and is the machine's problem if it still had no CPU there.
                    if wall > timeout and competing is None:
                        competing = _competing(cpu, wall, group)
                    if wall > timeout * (wall_factor if competing else 1.0):
                        timed_out = wall_out = True
                        starved = bool(competing) and _competing(cpu, time.perf_counter() - began, group)
                        break
            finally:
                if watch is not None:
                    os.close(watch)
        finally:
            # Whatever happened, nothing the child started (compilers, workers) survives it.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            if group is not None:
                group.kill()
            returncode, used = _reap(proc.pid)
            proc.returncode = returncode
            cpu = max(cpu, used, group.cpu_seconds() if group is not None else 0.0)
            if sandbox is not None:
                sandbox.kill_all()
                if not private_namespace():
                    _private_dirs_sweep(sandbox.uid)
                ipc.sweep(sandbox.uid, queues=not (ipc_namespace() and _unshared()))
        tail, size = read_back(out_fd, TAIL_BYTES, tail=True)
        output = ("…" if size > TAIL_BYTES else "") + tail.decode("utf-8", "replace").strip()
        record, record_size = read_back(record_fd, record_cap) if record_cap else (b"", 0)
    finally:
        if group is not None:
            group.remove()
        os.close(out_fd)
        if record_cap:
            os.close(record_fd)
        if sandbox is None or not sandbox_alive(sandbox):
            space.remove()
    return Finished(returncode, timed_out, output, round(time.perf_counter() - began, 2),
                    record, record_size, round(cpu, 2), wall_out, starved)


def sandbox_alive(sandbox: Sandbox) -> bool:
    from .users import pids_of

    return bool(pids_of(sandbox.uid))
