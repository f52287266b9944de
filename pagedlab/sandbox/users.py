"""The unprivileged users a submission's code runs as, and the kill step that ends them.

PAGEDLAB_GRADE_USER names one user, or a comma-separated pool (one per concurrent grading job:
two jobs under one user would kill each other's checks, and could read each other's files).

Which job has which user is decided on the machine itself, by a lock per user (`claimed`): a
grading job holds its user's lock for its whole life, so two graders on one node (two tasks of a
Slurm array, `grade-class` beside an array, two instructors) never share a uid, whoever started
them. The kernel drops the lock with the last descriptor, so a job killed in any way (SIGKILL,
a cancelled or requeued array task) frees its user.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

USER_ENV = "PAGEDLAB_GRADE_USER"
# Node-local (never a shared file system: the users' processes live on this machine only), and
# root's own: the lock files are root's, and a user who could replace them could take a uid.
LOCK_DIR = Path("/run/pagedlab-pool")
LOCK_DIR_ENV = "PAGEDLAB_GRADE_LOCKS"
WAIT_ENV = "PAGEDLAB_GRADE_USER_WAIT"
WAIT_SECONDS = 900.0  # how long a job waits for a free user before it is a grader problem
# How long root keeps killing a user's processes before it calls the grade off.
KILL_SECONDS = 20.0


class KillFailed(RuntimeError):
    """Processes of the sandbox user outlived every SIGKILL: the next task must not start."""


@dataclass(frozen=True)
class Sandbox:
    name: str
    uid: int
    gid: int
    # The kernel compile cache of one grading job, shared by its children (the user's own: a
    # planted build can only mislead this submission's own later checks, which the judge verifies).
    cache: Path | None = None
    # Root's folder of pagedlab's own builds (sandbox.trusted_builds), read-only for the user.
    trusted: Path | None = None

    def own(self, path: Path) -> None:
        os.chown(path, self.uid, self.gid)

    def kill_all(self) -> None:
        kill_user(self.uid)


def _lookup(name: str) -> Sandbox:
    import pwd

    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise ValueError(f"{USER_ENV}: no such user {name!r} (create it, e.g. `useradd -M {name}`, "
                         "or run grading/setup.sh)") from None
    if entry.pw_uid == 0:
        raise ValueError(f"{USER_ENV}: {name!r} is root; the submission must run as an unprivileged user")
    return Sandbox(name, entry.pw_uid, entry.pw_gid)


def pool() -> list[Sandbox]:
    """Every user named by PAGEDLAB_GRADE_USER, in order (empty when it is unset)."""
    names = [n.strip() for n in os.environ.get(USER_ENV, "").split(",") if n.strip()]
    if not names:
        return []
    if os.geteuid() != 0:
        raise ValueError(f"{USER_ENV}={','.join(names)} needs the grader to run as root "
                         f"(it is uid {os.geteuid()})")
    users = [_lookup(n) for n in names]
    if len({u.uid for u in users}) != len(users):
        raise ValueError(f"{USER_ENV}: the pool names one uid twice; each job needs a user of its own")
    return users


def sandbox_user() -> Sandbox | None:
    """The pool's first user, or None (a grading job takes its user with `claimed`)."""
    users = pool()
    return users[0] if users else None


class PoolBusy(ValueError):
    """Every user of the pool is held by another grading job on this machine, past the wait."""


def wait_seconds() -> float:
    text = os.environ.get(WAIT_ENV, "").strip()
    try:
        return max(0.0, float(text)) if text else WAIT_SECONDS
    except ValueError:
        raise ValueError(f"{WAIT_ENV}={text!r}: a number of seconds") from None


def lock_dir() -> Path:
    """The folder of the pool's lock files, created root-only; refused when anyone but root could
    have put a file (a link, someone's lock) there."""
    folder = Path(os.environ.get(LOCK_DIR_ENV) or LOCK_DIR)
    try:
        folder.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    except OSError as exc:  # a read-only /run, say: a grader problem, said as one
        raise ValueError(f"{folder}: cannot make the sandbox pool's lock folder ({exc}); "
                         f"set {LOCK_DIR_ENV} to a folder of root's on this machine's own disk") from None
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o022:
        raise ValueError(f"{folder}: the sandbox pool's locks need a folder of root's that no one else may "
                         f"write (it is {'a link' if stat.S_ISLNK(info.st_mode) else oct(info.st_mode & 0o777)}, "
                         f"uid {info.st_uid}); remove it, or set {LOCK_DIR_ENV} to another folder")
    return folder


def _try_lock(folder: Path, user: Sandbox) -> int | None:
    """An open descriptor holding `user`'s lock, or None when another job holds it."""
    fd = os.open(folder / f"{user.name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    # Who holds it, for a person looking at a stuck node (the lock itself is the kernel's).
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} {socket.gethostname()} {time.strftime('%Y-%m-%dT%H:%M:%S')}\n".encode(), 0)
    return fd


@contextlib.contextmanager
def claimed(wait: float | None = None, echo: Callable[[str], None] = print) -> Iterator[Sandbox | None]:
    """The first user of the pool no other grading job on this machine holds, held until the
    block ends (None without a pool). Waits up to `wait` seconds (PAGEDLAB_GRADE_USER_WAIT,
    default 15 minutes) for one to come free, then raises PoolBusy: a job never grades as a
    user another job holds."""
    users = pool()
    if not users:
        yield None
        return
    folder = lock_dir()
    wait = wait_seconds() if wait is None else wait
    began = time.monotonic()
    said = -60.0
    while True:
        for user in users:
            fd = _try_lock(folder, user)
            if fd is None:
                continue
            try:
                # Whatever a job that died holding this user left running: no job may have it now.
                kill_user(user.uid)
                yield user
            finally:
                os.close(fd)
            return
        waited = time.monotonic() - began
        if waited >= wait:
            raise PoolBusy(f"all {len(users)} users of the sandbox pool ({USER_ENV}={','.join(u.name for u in users)}) "
                           f"were held by other grading jobs on {socket.gethostname()} for {waited:.0f} s: give the "
                           f"pool as many users as jobs run at once on one machine (grade-class --jobs, array tasks "
                           f"per node; grading/README.md), or wait longer ({WAIT_ENV})")
        if waited - said >= 60:
            said = waited
            echo(f"waiting for a free sandbox user: all {len(users)} of {USER_ENV} are grading on "
                 f"{socket.gethostname()} (up to {wait:.0f} s)")
        time.sleep(0.5)


def _uids_of(pid: str) -> tuple[set[int], bool]:
    """(real/effective/saved uids, is a zombie) of a process; ({}, False) once it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return set(), False
    uids, zombie = set(), False
    for line in text.splitlines():
        if line.startswith("Uid:"):
            uids = {int(x) for x in line.split()[1:4]}
        elif line.startswith("State:"):
            zombie = line.split()[1] in ("Z", "X")
    return uids, zombie


def pids_of(uid: int) -> list[int]:
    """Live processes running as `uid` (by /proc's owner, the effective uid; zombies run nothing
    and are left to their reaper). Only a check: the kill itself reaches real and saved uids too."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:  # a stat first: reading every process's status makes the sweep slow
                # (a non-dumpable process's /proc folder is root's, whatever its uid)
                if os.stat(f"/proc/{pid}").st_uid not in (uid, 0):
                    continue
            except OSError:
                continue
            uids, zombie = _uids_of(pid)
            if uid in uids and not zombie:
                found.append(int(pid))
    return found


# A uid no process has: the killer's real and saved uid, so the user's processes cannot signal it.
KILLER_UID_OFFSET = 0x40000000
QUIET_SWEEPS = 3  # consecutive sweeps of /proc that must find nothing


def _kill_minus_one(uid: int) -> None:
    """kill(-1, SIGKILL) from a forked child with real/saved uid unused and effective uid `uid`:
    the kernel signals every process of `uid` in one pass (a fork racing it fails), and none of
    them may signal back (their uid matches neither the killer's real nor its saved uid)."""
    pid = os.fork()
    if pid == 0:  # only system calls here: the parent has threads
        try:
            shadow = uid + KILLER_UID_OFFSET
            os.setresuid(shadow, uid, shadow)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def kill_user(uid: int, timeout: float = KILL_SECONDS) -> None:
    """SIGKILL every process of `uid`, again until /proc shows none several sweeps in a row.

    Neither a process that keeps sending SIGKILL to -1 (it cannot reach the killer) nor one that
    keeps forking (one kill(-1) takes them all; a sweep that missed one is followed by another)
    survives. Raises KillFailed after `timeout` s.
    """
    deadline = time.monotonic() + timeout
    quiet = 0
    while quiet < QUIET_SWEEPS:
        _kill_minus_one(uid)
        pids = pids_of(uid)
        quiet = 0 if pids else quiet + 1
        if pids and time.monotonic() > deadline:
            raise KillFailed(f"processes of uid {uid} survived {timeout:.0f} s of SIGKILL: {pids[:10]}")
        if pids:
            time.sleep(0.01)
