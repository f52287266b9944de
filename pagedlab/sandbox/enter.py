"""Root's last step before a sandboxed child: private temporary folders, then the sandbox user.

    unshare --pid --fork --mount-proc [--net] [--ipc] -- python -I -S enter.py SETTINGS_JSON -- CMD...

Runs as root inside the child's own mount namespace (so nothing here is seen outside it) and
imports nothing of pagedlab: it is a script, started with -I -S. It

- mounts an empty, size-capped tmpfs on /tmp, /var/tmp and /dev/shm (what a task writes there
  is gone with its namespace and never seen by the next task or a classmate), and binds back
  the grader's own folders under them that the child needs (its scratch, the job's cache, the
  submission copy), each as it is, permissions and all;
- mounts a size-capped tmpfs owned by the user on the child's scratch folder (its HOME/TMPDIR);
- joins the job's cgroups (process, memory and CPU limits), when the grader made some;
- with "mqueue" (under `unshare --ipc`), mounts the new IPC namespace's own message queues on
  /dev/mqueue where the machine has that folder: the parent namespace's stay out of reach;
- with "loopback" (a notebook's run, under `unshare --net`), brings up the new network
  namespace's loopback, the only interface there: Jupyter's kernel talks ZMQ over 127.0.0.1,
  and nothing outside the namespace is reachable;
- drops to the sandbox user for good (groups, gid, uid, no-new-privs) and execs CMD.
"""

import ctypes
import fcntl
import json
import os
import socket
import struct
import sys

MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 8, 4096, 16384, 1 << 18
PRIVATE_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
PR_SET_NO_NEW_PRIVS = 38

_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source, target, fstype, flags, data=None) -> None:
    args = [None if x is None else x.encode() for x in (source, target, fstype)]
    if _libc.mount(args[0], args[1], args[2], ctypes.c_ulong(flags),
                   None if data is None else data.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


def private_tmp(keep: list, size: int) -> None:
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing mounted here propagates out
    done = set()
    for top in PRIVATE_DIRS:
        top = os.path.realpath(top)
        if top in done or not os.path.isdir(top):
            continue
        done.add(top)
        names = sorted({os.path.relpath(p, top).split(os.sep)[0] for p in keep
                        if os.path.commonpath([top, p]) == top and p != top})
        held = {name: os.open(os.path.join(top, name), os.O_PATH) for name in names
                if os.path.exists(os.path.join(top, name))}
        _mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode=1777")
        for name, fd in held.items():
            target = os.path.join(top, name)
            os.mkdir(target, 0o755)
            _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
            os.close(fd)


SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def loopback_up() -> None:
    """`ip link set lo up`, without ip: ioctl SIOCSIFFLAGS on "lo" (needs root in this namespace)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        got = fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, struct.pack("16sH22x", b"lo", 0))
        flags = struct.unpack("16sH22x", got)[1]
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))


def _which(name: str) -> str:
    if os.sep in name:
        return name
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(folder, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError(name)


def main() -> None:
    settings = json.loads(sys.argv[1])
    cmd = sys.argv[3:]
    uid, gid, home = settings["uid"], settings["gid"], settings["home"]
    for procs in settings.get("cgroups", []):
        with open(procs, "w") as f:
            f.write("0")
    if settings.get("loopback"):
        loopback_up()
    size = int(settings["tmp_bytes"])
    private_tmp([os.path.realpath(p) for p in settings["keep"]], size)
    if settings.get("mqueue") and os.path.isdir("/dev/mqueue"):
        _mount("mqueue", "/dev/mqueue", "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _mount("tmpfs", home, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode=0700,uid={uid},gid={gid}")
    os.chdir(home)  # the old cwd is the folder under the new mount
    program = _which(cmd[0])  # now: once the user is dropped, this interpreter may not import
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    os.execv(program, cmd)


if __name__ == "__main__":
    main()
