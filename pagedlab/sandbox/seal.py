"""Seal the process that is about to run a submission's code, before its first byte runs.

    non-dumpable   /proc/<pid>/mem, ptrace and pidfd_getfd are closed even to the process's own
                   uid: a kernel in the runner cannot write code into the Python child above it
    no-new-privs   no exec gains privileges (set-uid programs run as the caller)
    seccomp        no ptrace, no process_vm_readv/writev, no socket but AF_UNIX (no network: a
                   notebook's run also gets AF_INET/AF_INET6 and NETLINK_ROUTE for Jupyter's ZMQ,
                   in a network namespace where its loopback is all there is),
                   no io_uring (its requests bypass seccomp), no new namespaces, no bpf,
                   perf_event_open, userfaultfd or kernel keyrings

The filter is inherited by everything the process starts (compilers, the kernel runner, which
adds its own stricter one). Dumpable is reset by every execve, so each process sets it itself
after its last exec: the check child here at startup, the runner in its main(), and every
Python process of a notebook's run through sandbox/sealed_site/sitecustomize.py.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct

PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2

_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_RET_KILL_PROCESS = 0x80000000
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
_EPERM, _ENOSYS = 1, 38
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK = 1, 2, 10, 16
NETLINK_ROUTE = 0
# clone() flags that make a namespace (CLONE_NEWNS ... CLONE_NEWNET, CLONE_NEWTIME)
_CLONE_NEW_ANY = 0x7E020000 | 0x80

# (audit arch, syscall numbers) of the machines the course runs on
_ARCH = {
    "x86_64": (0xC000003E, dict(ptrace=101, process_vm_readv=310, process_vm_writev=311, socket=41,
                                io_uring_setup=425, io_uring_enter=426, io_uring_register=427,
                                bpf=321, perf_event_open=298, userfaultfd=323, unshare=272, setns=308,
                                add_key=248, request_key=249, keyctl=250, pidfd_getfd=438,
                                process_madvise=440, clone=56, clone3=435)),
    "aarch64": (0xC00000B7, dict(ptrace=117, process_vm_readv=270, process_vm_writev=271, socket=198,
                                 io_uring_setup=425, io_uring_enter=426, io_uring_register=427,
                                 bpf=280, perf_event_open=241, userfaultfd=282, unshare=97, setns=268,
                                 add_key=217, request_key=218, keyctl=219, pidfd_getfd=438,
                                 process_madvise=440, clone=220, clone3=435)),
}
DENIED = ("ptrace", "process_vm_readv", "process_vm_writev", "io_uring_setup", "io_uring_enter",
           "io_uring_register", "bpf", "perf_event_open", "userfaultfd", "unshare", "setns",
           "add_key", "request_key", "keyctl", "pidfd_getfd", "process_madvise")
# Refused by every sealed process, this filter's and the runners' (pagedlab/cuda/pl_seal.h): each
# filter must hold on its own (a runner's parent is not always sealed). clone3 says ENOSYS.
ALWAYS_DENIED = DENIED + ("clone3",)
# The runners' own on top (no program, no process, no socket of any family): a check child needs
# them for the compilers, and AF_UNIX sockets.
RUNNER_ONLY = frozenset({"execve", "execveat", "fork", "vfork", "socket", "socketpair"})


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k & 0xFFFFFFFF)


def program(machine: str | None = None, *, inet: bool = False) -> bytes:
    """The seccomp BPF program for this machine (struct sock_filter[]). `inet`: AF_INET,
    AF_INET6 and NETLINK_ROUTE sockets are allowed too (a Jupyter kernel's ZMQ; the network
    namespace keeps them on the loopback, and changing a route needs a capability)."""
    arch, nr = _ARCH[machine or platform.machine()]
    out = [_insn(_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
           _insn(_JEQ_K, 1, 0, arch),
           _insn(_RET_K, 0, 0, _RET_KILL_PROCESS),
           _insn(_LD_W_ABS, 0, 0, 0)]  # seccomp_data.nr
    if arch == 0xC000003E:  # the x32 ABI's numbers would bypass every rule below
        out += [_insn(_JGE_K, 0, 1, 0x40000000), _insn(_RET_K, 0, 0, _RET_ERRNO | _EPERM)]
    for name in DENIED:
        out += [_insn(_JEQ_K, 0, 1, nr[name]), _insn(_RET_K, 0, 0, _RET_ERRNO | _EPERM)]
    # clone3's flags live in memory a filter cannot read: ENOSYS makes libc fall back to clone.
    out += [_insn(_JEQ_K, 0, 1, nr["clone3"]), _insn(_RET_K, 0, 0, _RET_ERRNO | _ENOSYS)]
    out += [_insn(_JEQ_K, 0, 3, nr["clone"]),
            _insn(_LD_W_ABS, 0, 0, 16),  # args[0], low word: the flags
            _insn(_JSET_K, 0, 1, _CLONE_NEW_ANY),
            _insn(_RET_K, 0, 0, _RET_ERRNO | _EPERM),
            _insn(_LD_W_ABS, 0, 0, 0)]
    if not inet:
        out += [_insn(_JEQ_K, 0, 3, nr["socket"]),
                _insn(_LD_W_ABS, 0, 0, 16),  # args[0]: the address family
                _insn(_JEQ_K, 1, 0, AF_UNIX),
                _insn(_RET_K, 0, 0, _RET_ERRNO | _EPERM)]
    else:  # and NETLINK_ROUTE: libzmq lists the interfaces (getifaddrs) and aborts without it
        out += [_insn(_JEQ_K, 0, 8, nr["socket"]),
                _insn(_LD_W_ABS, 0, 0, 16),  # args[0]: the address family
                _insn(_JEQ_K, 6, 0, AF_UNIX),
                _insn(_JEQ_K, 5, 0, AF_INET),
                _insn(_JEQ_K, 4, 0, AF_INET6),
                _insn(_JEQ_K, 0, 2, AF_NETLINK),
                _insn(_LD_W_ABS, 0, 0, 32),  # args[2]: the protocol
                _insn(_JEQ_K, 1, 0, NETLINK_ROUTE),
                _insn(_RET_K, 0, 0, _RET_ERRNO | _EPERM)]
    out.append(_insn(_RET_K, 0, 0, _RET_ALLOW))
    return b"".join(out)


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def supported() -> bool:
    return os.name == "posix" and platform.system() == "Linux" and platform.machine() in _ARCH


def seal(*, inet: bool = False) -> None:
    """Seal this process (call it with one thread, before any submission code runs).
    Raises OSError when the kernel refuses a step; the caller decides whether that is fatal."""
    if not supported():
        raise OSError(f"no seccomp filter for {platform.system()} {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]

    def prctl(option: int, arg: int, ptr=None) -> None:
        if libc.prctl(option, arg, ptr, 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl({option}): {os.strerror(err)}")

    prctl(PR_SET_DUMPABLE, 0)
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    code = program(inet=inet)
    buf = ctypes.create_string_buffer(code, len(code))
    fprog = _Fprog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p))
    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog))
