"""Launch a compiled kernel on the CPU: argument marshalling, isolation, diagnostics.

Isolation: by default every launch runs in a forked child process. Output arrays (pointers to
non-const) are copied into MAP_SHARED pages that end at an inaccessible page, the child runs
the blocks on worker threads and `_exit`s, and the parent waits with a watchdog. A segfault or
an endless loop therefore ends the child, not Python or the Jupyter kernel; the child reports
what went wrong through a small shared record (`Diag`). Inputs (pointers to const) are read
in place through the child's copy-on-write view of the parent's memory: no copy.
Set PAGEDLAB_CUDA_ISOLATE=0 to run launches in-process (faster, but a crash is fatal and the
watchdog cannot stop a spinning kernel).
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

import numpy as np

from . import compiler
from .errors import (
    BarrierError,
    KernelCrash,
    KernelError,
    KernelTimeout,
    SharedMemoryError,
    WarpSyncError,
)
from .signature import Param

MAX_WORKERS = 64


class Progress(ctypes.Structure):
    _fields_ = [("active", ctypes.c_int32), ("block", ctypes.c_int32 * 3),
                ("thread", ctypes.c_int32), ("line", ctypes.c_int32)]


class Stuck(ctypes.Structure):
    """runtime.cpp's Stuck: where a worker's running thread was when the watchdog fired."""
    _fields_ = [("pcs", ctypes.c_uint64 * 16), ("npcs", ctypes.c_int32), ("sampled", ctypes.c_int32),
                ("wait_line", ctypes.c_int32 * 4), ("wait_count", ctypes.c_int32 * 4),
                ("wait_kind", ctypes.c_int32 * 4), ("runnable", ctypes.c_int32),
                ("exited", ctypes.c_int32)]


class Diag(ctypes.Structure):
    _fields_ = [
        ("status", ctypes.c_int32), ("signal", ctypes.c_int32),
        ("fault_addr", ctypes.c_uint64), ("fault_pc", ctypes.c_uint64),
        ("block", ctypes.c_int32 * 3), ("thread", ctypes.c_int32),
        ("stack_overflow", ctypes.c_int32),
        ("smem_index", ctypes.c_int32), ("smem_line", ctypes.c_int32),
        ("smem_offset", ctypes.c_int64),
        ("nworkers", ctypes.c_int32),
        ("progress", Progress * MAX_WORKERS),
        ("message", ctypes.c_char * 8192),
        ("blocks_done", ctypes.c_int64), ("nblocks", ctypes.c_int64),
        ("si_code", ctypes.c_int32), ("pad_", ctypes.c_int32),
        ("stuck", Stuck * MAX_WORKERS),
    ]


SMEM_INFO = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                             ctypes.POINTER(ctypes.c_uint64), ctypes.c_int)


class Spec(ctypes.Structure):
    _fields_ = [
        ("entry", ctypes.c_void_p), ("args", ctypes.c_void_p),
        ("grid", ctypes.c_uint32 * 3), ("block", ctypes.c_uint32 * 3),
        ("shared_mem", ctypes.c_uint64),
        ("schedule", ctypes.c_int32), ("workers", ctypes.c_int32),
        ("seed", ctypes.c_uint64),
        ("smem_info", ctypes.c_void_p), ("diag", ctypes.c_void_p),
        ("filename", ctypes.c_char_p), ("stack_size", ctypes.c_uint64),
        ("isolate", ctypes.c_int32), ("out_pid", ctypes.c_int32), ("out_fd", ctypes.c_int32),
        ("stdout_fd", ctypes.c_int32),
    ]


ST_OK, ST_BARRIER, ST_WARP, ST_SMEM, ST_CRASH, ST_TRAP, ST_INTERNAL = range(7)
SCHEDULE_CODES = {"round_robin": 0, "warp0_first": 1, "reversed": 2, "random": 3}

_LIBS: dict[str, ctypes.CDLL] = {}
_LIB_LOCK = threading.Lock()
# The runtime keeps one launch's state in globals: in-process launches take turns.
_INPROCESS_LOCK = threading.Lock()


def _load(path) -> ctypes.CDLL:
    key = str(path)
    with _LIB_LOCK:
        if key not in _LIBS:
            _LIBS[key] = ctypes.CDLL(key)
        return _LIBS[key]


def runtime(rt_path) -> ctypes.CDLL:
    lib = _load(rt_path)
    if not getattr(lib, "_pl_ready", False):
        lib.pl_launch.argtypes = [ctypes.POINTER(Spec)]
        lib.pl_launch.restype = ctypes.c_int
        lib.pl_shared_alloc.argtypes = [ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]
        lib.pl_shared_alloc.restype = ctypes.c_void_p
        lib.pl_shared_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib.pl_shared_free.restype = None
        lib.pl_diag_size.restype = ctypes.c_size_t
        lib.pl_spec_size.restype = ctypes.c_size_t
        if lib.pl_diag_size() != ctypes.sizeof(Diag) or lib.pl_spec_size() != ctypes.sizeof(Spec):
            raise KernelError("pagedlab CPU runtime and executor.py disagree on struct layouts")
        lib._pl_ready = True
    return lib


class SharedBuffer:
    """MAP_SHARED pages (plus a guard page) that a forked child writes and the parent reads."""

    def __init__(self, rt: ctypes.CDLL, nbytes: int):
        self.rt = rt
        self.mapped = ctypes.c_size_t(0)
        # End the data at the guard page (rounded to 64 bytes) so overruns fault at once.
        page = os.sysconf("SC_PAGE_SIZE")
        body = max(page, -(-nbytes // page) * page)
        self.addr = rt.pl_shared_alloc(nbytes, ctypes.byref(self.mapped))
        if not self.addr:
            raise MemoryError(f"could not map {nbytes} bytes of shared memory for a kernel argument")
        self.offset = (body - nbytes) // 64 * 64
        self.data = self.addr + self.offset

    def view(self, nbytes: int) -> np.ndarray:
        buf = (ctypes.c_char * max(nbytes, 1)).from_address(self.data)
        return np.frombuffer(buf, dtype=np.uint8, count=nbytes)

    def free(self):
        if self.addr:
            self.rt.pl_shared_free(self.addr, self.mapped)
            self.addr = None


def default_workers() -> int:
    env = os.environ.get("PAGEDLAB_CUDA_WORKERS")
    if env:
        return max(1, int(env))
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS
        return max(1, os.cpu_count() or 1)


def isolate_default() -> bool:
    return os.environ.get("PAGEDLAB_CUDA_ISOLATE", "1") not in ("0", "false", "no")


@dataclass
class LaunchConfig:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    schedule: str
    seed: int
    timeout: float
    workers: int
    isolate: bool
    stack_size: int


def launch(build: compiler.Build, name: str, params: list[Param], args, cfg: LaunchConfig,
           sanitizer=None, globals: dict[str, bytes] | None = None) -> None:
    """sanitizer: a pagedlab.cuda.sanitizer.Session for an instrumented build, else None.
    globals: `__constant__`/`__device__` variable name -> bytes written into it before the launch."""
    rt = runtime(build.runtime)
    lib = _load(build.library)
    _write_globals(lib, build, globals or {})
    entry = ctypes.cast(getattr(lib, f"pl_entry_{build.symbol(name)}"), ctypes.c_void_p).value
    smem_info = ctypes.cast(lib.pl_smem_info, ctypes.c_void_p).value

    diag_buf = SharedBuffer(rt, ctypes.sizeof(Diag))
    diag_buf.view(ctypes.sizeof(Diag))[:] = 0
    diag = Diag.from_address(diag_buf.data)
    shared = _shared_regions(rt, params, args) if cfg.isolate else []
    keep = []  # ctypes objects that must outlive the launch
    slots = (ctypes.c_void_p * max(1, len(params)))()
    try:
        for i, (p, a) in enumerate(zip(params, args, strict=True)):
            if p.pointer:
                ptr = a.ctypes.data if a.nbytes else 0
                for sb, lo, hi in shared:
                    if a.nbytes and lo <= ptr and ptr + a.nbytes <= hi:
                        ptr = sb.data + (ptr - lo)
                        break
                cell = ctypes.c_void_p(ptr)
            else:
                raw = scalar_bytes(a)
                cell = ctypes.create_string_buffer(raw, max(16, len(raw)))
            keep.append(cell)
            slots[i] = ctypes.addressof(cell)

        filename = build.filename.encode()
        # Kernel printf: the child writes to a file the parent then prints to sys.stdout, so
        # the output shows in a notebook cell rather than in the server's terminal.
        printed = tempfile.TemporaryFile() if cfg.isolate else None
        keep.append(printed)
        spec = Spec(entry=entry, args=ctypes.addressof(slots),
                    grid=(ctypes.c_uint32 * 3)(*cfg.grid), block=(ctypes.c_uint32 * 3)(*cfg.block),
                    shared_mem=cfg.shared_mem, schedule=SCHEDULE_CODES[cfg.schedule],
                    workers=cfg.workers, seed=cfg.seed, smem_info=smem_info,
                    diag=diag_buf.data, filename=filename, stack_size=cfg.stack_size,
                    isolate=int(cfg.isolate), out_pid=-1, out_fd=-1,
                    stdout_fd=printed.fileno() if printed else -1)
        if sanitizer is not None:  # issue 16: checks and profile of this launch
            keep.append(sanitizer.arm(rt, build, params, args, slots))
        if cfg.isolate:
            rc = rt.pl_launch(ctypes.byref(spec))
            if rc < 0:
                raise KernelError(f"could not start the launch process: {os.strerror(-rc)}")
            try:
                _wait_child(spec.out_pid, spec.out_fd, cfg, diag, build)
            finally:
                _show_printed(printed)
        else:
            with _INPROCESS_LOCK:
                rt.pl_launch(ctypes.byref(spec))
        for sb, lo, hi in shared:  # results come back even from a failed launch, like on a GPU
            ctypes.memmove(lo, sb.data, hi - lo)
        if sanitizer is not None:  # issue 16: raises RaceError & co., collects the profile
            sanitizer.finish(diag, build)
        _raise_for(diag, build, cfg)
    finally:
        if sanitizer is not None:
            sanitizer.disarm()
        for sb, _, _ in shared:
            sb.free()
        diag_buf.free()


def _write_globals(lib, build, values: dict[str, bytes]) -> None:
    """Write each global's bytes into the loaded build (a forked launch child inherits them)."""
    for name, data in values.items():
        if name not in build.globals:
            raise ValueError(f"no __constant__/__device__ variable {name!r} in {build.filename}")
        fn = getattr(lib, f"pl_global_{name}")
        fn.restype = ctypes.c_void_p
        info = ctypes.create_string_buffer(256)  # a pl::ParamInfo (160 bytes), unused here
        addr = fn(info)
        if ctypes.string_at(addr, len(data)) != data:  # a const global is never rewritten
            ctypes.memmove(addr, data, len(data))


def scalar_bytes(a) -> bytes:
    """The bytes a by-value argument passes: a numpy scalar (structured for a struct), a 0-d or
    1-D array (a float3 as three float32), or raw bytes of the parameter's size."""
    if isinstance(a, (bytes, bytearray, memoryview)):
        return bytes(a)
    return np.ascontiguousarray(a).tobytes()


def buffer_span(a: np.ndarray) -> tuple[int, int]:
    """Address range of the whole buffer under `a`, not just the view: a kernel given `x[3:]`
    may read `p[-1]`, real data on a GPU, so the executor maps everything the view belongs to."""
    root = a
    while isinstance(root.base, np.ndarray):
        root = root.base
    lo, hi = _byte_bounds(root)
    vlo, vhi = _byte_bounds(a)
    return min(lo, vlo), max(hi, vhi)


def _byte_bounds(a: np.ndarray) -> tuple[int, int]:
    try:
        from numpy.lib.array_utils import byte_bounds
    except ImportError:  # numpy < 2
        byte_bounds = np.byte_bounds
    lo, hi = byte_bounds(a)
    return int(lo), int(hi)


def _shared_regions(rt, params: list[Param], args) -> list[tuple[SharedBuffer, int, int]]:
    """MAP_SHARED copies of the memory the kernel may write, as (buffer, start, end) address ranges.

    Arrays that overlap (the same array passed twice, or an input that is a view of an output)
    share one region, so the kernel sees one memory, exactly as on the GPU.
    """
    spans = [(*buffer_span(a), p.const)
             for p, a in zip(params, args, strict=True) if p.pointer and a.nbytes]
    regions = sorted((lo, hi) for lo, hi, const in spans if not const)
    while True:  # add read-only arrays that overlap a written region, until nothing changes
        grown = regions + [(lo, hi) for lo, hi, const in spans if const
                           and any(lo < rhi and rlo < hi for rlo, rhi in regions)
                           and not any(rlo <= lo and hi <= rhi for rlo, rhi in regions)]
        merged: list[list[int]] = []
        for lo, hi in sorted(grown):
            if merged and lo < merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        new = [tuple(m) for m in merged]
        if new == regions:
            break
        regions = new
    out = []
    try:
        for lo, hi in regions:
            sb = SharedBuffer(rt, hi - lo)
            out.append((sb, lo, hi))
            ctypes.memmove(sb.data, lo, hi - lo)
    except BaseException:
        for sb, _, _ in out:
            sb.free()
        raise
    return out


def _show_printed(printed) -> None:
    printed.seek(0)
    text = printed.read()
    printed.close()
    if text:
        sys.stdout.write(text.decode(errors="replace"))
        sys.stdout.flush()


def _wait_child(pid: int, fd: int, cfg: LaunchConfig, diag: Diag, build) -> None:
    deadline = time.monotonic() + cfg.timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                _sample_stuck(pid, diag)
                os.kill(pid, signal.SIGKILL)
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass
                pid = -1
                raise KernelTimeout(_timeout_message(diag, cfg, build))
            ready, _, _ = select.select([fd], [], [], min(left, 0.5))
            if ready:
                break
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:  # SIGCHLD ignored by the host program: already reaped
            status = 0
        pid = -1
        if os.WIFSIGNALED(status) and diag.status == ST_OK:
            sig = os.WTERMSIG(status)
            raise KernelCrash(f"the launch process died on signal {signal.Signals(sig).name} "
                              "before it could report (out of memory?)")
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) != 0 and diag.status == ST_OK:
            raise KernelError(f"the launch process exited with status {os.WEXITSTATUS(status)} "
                              "without a report (did the kernel call exit()?)")
    finally:
        if pid > 0:  # KeyboardInterrupt or another error while waiting: stop the child
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        os.close(fd)


def _sample_stuck(pid: int, diag: Diag) -> None:
    """Ask the child where its threads are (SIGUSR2, see runtime.cpp's on_watchdog); wait up to
    half a second for every busy worker to answer."""
    try:
        os.kill(pid, signal.SIGUSR2)
    except ProcessLookupError:
        return
    busy = [k for k in range(min(diag.nworkers, MAX_WORKERS)) if diag.progress[k].active]
    end = time.monotonic() + 0.5
    while time.monotonic() < end and not all(diag.stuck[k].sampled for k in busy):
        time.sleep(0.01)


_BARRIERS = ["__syncthreads()", "__syncthreads_count()", "__syncthreads_and()", "__syncthreads_or()"]
_WARP_OPS = ["__syncwarp", "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
             "__ballot_sync", "__any_sync", "__all_sync", "__reduce_add_sync", "__reduce_min_sync",
             "__reduce_max_sync", "coalesced_threads"]


def _stuck_line(st: Stuck, build) -> str | None:
    """file:line of the innermost frame in the kernel's own source (pcs[0] is exact, the rest
    are return addresses)."""
    for i in range(min(st.npcs, 16)):
        pc = int(st.pcs[i])
        line = _source_line(pc if i == 0 else pc - 1, build)
        if line:
            return line
    return None


def _others(st: Stuck, build) -> str:
    parts = []
    for k in range(4):
        if st.wait_count[k]:
            kind = int(st.wait_kind[k])
            op = (_WARP_OPS[kind - 100] if 100 <= kind < 100 + len(_WARP_OPS)
                  else _BARRIERS[kind] if 0 <= kind < 4 else "a barrier")
            parts.append(f"{st.wait_count[k]} waiting at {op} at {build.filename}:{st.wait_line[k]}")
    if st.runnable:
        parts.append(f"{st.runnable} waiting for their turn to run")
    if st.exited:
        parts.append(f"{st.exited} finished")
    return "; the block's other threads: " + ", ".join(parts) if parts else ""


def _timeout_message(diag: Diag, cfg: LaunchConfig, build) -> str:
    done, total = int(diag.blocks_done), int(diag.nblocks)
    head = f"the launch ran for more than {cfg.timeout:g} s and was stopped (watchdog); "
    if done > 0:
        need = cfg.timeout * total / done
        lines = [head + f"{done} of {total} blocks had finished, so it was making progress, only "
                 f"slowly: at that rate it needs about {need:.0f} s. Raise the limit with "
                 f"timeout={max(need * 1.5, cfg.timeout * 2):.0f} (seconds) or "
                 "PAGEDLAB_CUDA_TIMEOUT, or launch a smaller problem."]
    else:
        lines = [head + f"none of its {total} blocks had finished. Is there a loop that never "
                 "ends, or a spin-wait on a value no other thread changes? (If a single block is "
                 "simply that slow, raise timeout=.)"]
    for k in range(min(diag.nworkers, MAX_WORKERS)):
        p = diag.progress[k]
        if p.active:
            st = diag.stuck[k]
            here = _stuck_line(st, build) if st.sampled else None
            last = (f"the last barrier/warp operation it passed was at {build.filename}:{p.line}"
                    if p.line else "it had not passed any barrier or warp operation")
            at = f"it was at {here} when stopped ({last})" if here else last
            lines.append(f"  block ({p.block[0]}, {p.block[1]}, {p.block[2]}) was running thread "
                         f"{p.thread}; {at}{_others(st, build) if st.sampled else ''}")
    return "\n".join(lines)


def _raise_for(diag: Diag, build, cfg: LaunchConfig) -> None:
    st = diag.status
    if st == ST_OK:
        return
    msg = diag.message.decode(errors="replace")
    block = f"block ({diag.block[0]}, {diag.block[1]}, {diag.block[2]})"
    sched = f" [schedule {cfg.schedule}{':' + str(cfg.seed) if cfg.schedule == 'random' else ''}]"
    if st == ST_BARRIER:
        raise BarrierError(msg + sched)
    if st == ST_WARP:
        raise WarpSyncError(msg + sched)
    if st == ST_SMEM:
        i = diag.smem_index
        if 0 <= i < len(build.dyn_arrays):
            d = build.dyn_arrays[i]
            size = _ctype_size(d.ctype)
            elem = f" (element {diag.smem_offset // size} of `extern __shared__ {d.ctype} {d.name}[]`"
            elem += f", which has {cfg.shared_mem // size} elements in this launch)" if size else ")"
            at = f"offset {diag.smem_offset}"
            msg = msg.replace(at, at + elem, 1)
        raise SharedMemoryError(msg)
    if st == ST_CRASH:
        raise KernelCrash(_crash_message(diag, build, block))
    if st == ST_TRAP:
        raise KernelCrash(msg + ". The launch was stopped, as a device-side assert stops it on a GPU.")
    raise KernelError(msg)


def _ctype_size(ctype: str) -> int:
    from .signature import _SCALARS, _VECTORS
    base = " ".join(w for w in ctype.split() if w not in ("const", "volatile"))
    if base in _SCALARS:
        return np.dtype(_SCALARS[base]).itemsize
    if base in _VECTORS:
        return np.dtype(_VECTORS[base]).itemsize * int(base[-1])
    return 0


def _crash_message(diag: Diag, build, block: str) -> str:
    sig = diag.signal
    try:
        signame = signal.Signals(sig).name
    except ValueError:
        signame = f"signal {sig}"
    who = f"thread {diag.thread} of {block}" if diag.thread >= 0 else block
    addr = diag.fault_addr
    if diag.stack_overflow:
        what = (f"{signame}: stack overflow in {who} (each CUDA thread has "
                f"{int(os.environ.get('PAGEDLAB_CUDA_STACK_KB', '256'))} KiB of stack on the CPU; "
                "a large local array or deep recursion?)")
    elif sig == signal.SIGSEGV and addr == 0 and diag.si_code == 0x80:
        # SI_KERNEL with no address: a general-protection fault, which on x86-64 is how an
        # aligned vector load or store (float4, double2) at a misaligned address ends.
        what = (f"{signame}: misaligned access in {who}: a vector load or store (float4, double2, "
                "int4, ...) from an address that is not a multiple of its size, or a corrupt "
                "pointer. On a GPU this is 'misaligned address'; check reinterpret_casts and "
                "offsets into shared or global memory")
    elif sig == signal.SIGBUS and diag.si_code == 1:  # BUS_ADRALN
        what = f"{signame}: misaligned access in {who} (address 0x{addr:x})"
    elif sig in (signal.SIGSEGV, signal.SIGBUS):
        kind = "a null pointer" if addr < 4096 else f"address 0x{addr:x}"
        what = (f"{signame}: {who} accessed {kind}, which is not memory the launch owns "
                "(out-of-bounds index, a wrong pointer, or an output array too small?)")
    elif sig == signal.SIGFPE:
        what = f"{signame}: arithmetic fault (integer division by zero?) in {who}"
    else:
        what = f"{signame} in {who}"
    line = _source_line(diag.fault_pc, build)
    if line:
        what += f", at {line}"
    return what + ". The kernel crashed; the Python process is fine."


def _source_line(pc: int, build) -> str | None:
    """file:line of a crash address inside the kernel library, from its line tables (-g1)."""
    if not pc:
        return None
    try:
        import ctypes.util  # noqa: F401

        class DlInfo(ctypes.Structure):
            _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                        ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]
        libc = ctypes.CDLL(None)
        info = DlInfo()
        if not libc.dladdr(ctypes.c_void_p(pc), ctypes.byref(info)) or not info.fname:
            return None
        if os.path.realpath(info.fname.decode()) != os.path.realpath(build.library):
            return None
        tool = "addr2line"
        out = subprocess.run([tool, "-e", str(build.library), "-i", hex(pc - info.fbase)],
                             capture_output=True, text=True, timeout=20)
        for ln in out.stdout.splitlines():
            if build.filename in ln:
                return f"{build.filename}:{ln.rsplit(':', 1)[-1].split()[0]}"
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return None
