"""Launch a compiled kernel on the CPU: argument marshalling, isolation, diagnostics.

Isolation: by default every launch runs in the kernel runner (runner.py, runner.cpp), a small
program with no Python interpreter in it, so a kernel cannot reach Python's C API. The launch,
its argument arrays and the Diag go through one shared region; the runner runs the blocks on
worker threads and exits, and the parent waits with a watchdog. A segfault or an endless loop
therefore ends the runner, not Python or the Jupyter kernel; the runner reports what went wrong
through the Diag in the region. Output arrays are copied back, even from a failed launch.
Set PAGEDLAB_CUDA_ISOLATE=0 to run launches in-process (faster, but a crash is fatal and the
watchdog cannot stop a spinning kernel); a grading child ignores it and always isolates.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass

import numpy as np

from . import compiler, runner
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
    """pl_launch.h's Stuck: where a worker's running thread was when the watchdog fired."""
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
        ("stdout_fd", ctypes.c_int32), ("collapsed", ctypes.c_int32),
    ]


ST_OK, ST_BARRIER, ST_WARP, ST_SMEM, ST_CRASH, ST_TRAP, ST_INTERNAL = range(7)
# "interleaved": round-robin, and a thread also hands over before each access to an argument
# array (run on the instrumented build), so unsynchronised read-modify-writes lose updates.
SCHEDULE_CODES = {"round_robin": 0, "warp0_first": 1, "reversed": 2, "random": 3, "interleaved": 0}

CHECKS_CHILD = "pagedlab.drivers.child"  # the module the grader runs student checks in

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


def grading() -> bool:
    """Inside the grader or its checks child: student kernels must not run in this process."""
    main = getattr(sys.modules.get("__main__"), "__spec__", None)
    return bool(os.environ.get("PAGEDLAB_GRADING")) or getattr(main, "name", "") == CHECKS_CHILD


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
           sanitizer=None, globals: dict[str, bytes] | None = None) -> None:  # noqa: A002
    """sanitizer: a pagedlab.cuda.sanitizer.Session for an instrumented build, else None.
    globals: symbol name -> bytes written into that `__constant__`/`__device__` variable before
    the launch; None carries the values this process's copy of the library holds (get_global)."""
    if globals is not None:
        _check_globals(build, globals)
    else:
        globals = current_globals(build)  # noqa: A001
    tables = pointer_tables(params, args)
    if tables.arrays:  # arrays reached only through a table of device pointers: map them too
        params = list(params) + [Param(len(params) + k, f"array at device_ptr 0x{a.ctypes.data:x}",
                                       "void*", "void", True, False, None)
                                 for k, a in enumerate(tables.arrays)]
        args = tuple(args) + tuple(tables.arrays)
    if grading():
        _not_dumpable()
        if not cfg.isolate:
            cfg = dataclasses.replace(cfg, isolate=True)
    collapsed = use_collapsed(build, name, cfg, sanitizer)
    if cfg.isolate:
        _launch_in_runner(build, name, params, args, cfg, sanitizer, globals, tables, collapsed)
    else:
        _launch_here(build, name, params, args, cfg, sanitizer, globals, collapsed)
    return "collapsed" if collapsed else "fibers"


_FIBERS_ONLY = [0]  # depth of `fibers_only()` blocks open in this process


@contextlib.contextmanager
def fibers_only():
    """Every launch inside runs on fibers. The graded checks use it: a grade then never
    depends on the collapsing pass, whatever order their schedules come in."""
    _FIBERS_ONLY[0] += 1
    try:
        yield
    finally:
        _FIBERS_ONLY[0] -= 1


def use_collapsed(build, name, cfg, sanitizer) -> bool:
    """Run the kernel's collapsed version (collapse.py: the block's threads as loops, no
    fibers)? Only unchecked launches (checked ones need the fibers' hooks), in the default
    round_robin order (the order a collapsed kernel reproduces; the other schedules exist to
    reorder threads), and whole warps of at most 1024 threads. PAGEDLAB_CUDA_COLLAPSE=0: never."""
    threads = cfg.block[0] * cfg.block[1] * cfg.block[2]
    return (sanitizer is None and not _FIBERS_ONLY[0] and compiler.collapse_enabled()
            and build.collapsed.get(name) == "" and cfg.schedule == "round_robin"
            and threads % 32 == 0 and 0 < threads <= 1024)


# ---- device pointers -----------------------------------------------------------------------------
# CuPy code builds tables of device addresses (`a.data.ptr`) and passes them as int64 arrays
# (vLLM's copy_blocks: one cache address per layer). device_ptr(a) is that address for a numpy
# array on the CPU executor: a launch whose int64/uint64 argument holds it maps `a` as well, and
# the table's entries then point at `a`'s bytes inside the launch (and back into `a` after it).
_DEVICE_ARRAYS: dict[int, weakref.ref] = {}


def device_ptr(a: np.ndarray) -> int:
    """The device address of numpy array `a` (as CuPy's `a.data.ptr`), for pointer tables."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"device_ptr takes a numpy array, got {type(a).__name__}")
    if not a.nbytes:
        raise ValueError("device_ptr of an empty array: no memory to point at")
    for addr in [k for k, ref in _DEVICE_ARRAYS.items() if ref() is None]:
        del _DEVICE_ARRAYS[addr]
    addr = int(a.ctypes.data)
    _DEVICE_ARRAYS[addr] = weakref.ref(a)
    return addr


@dataclass
class PointerTables:
    arrays: list  # arrays reached only through the tables
    entries: list  # (table array, flat index, address it holds)


def pointer_tables(params, args) -> PointerTables:
    out = PointerTables([], [])
    live = [(addr, ref()) for addr, ref in list(_DEVICE_ARRAYS.items())]
    live = [(addr, a) for addr, a in live if a is not None and int(a.ctypes.data) == addr]
    if not live:
        return out
    passed = {id(a) for p, a in zip(params, args, strict=True) if p.pointer}
    for p, a in zip(params, args, strict=True):
        if not (p.pointer and isinstance(a, np.ndarray) and a.dtype in (np.int64, np.uint64)
                and a.nbytes):
            continue
        flat = a.reshape(-1, order="A").view(np.uint64)
        for _, target in live:
            lo, hi = buffer_span(target)
            hit = np.flatnonzero((flat >= lo) & (flat < hi))
            if not len(hit):
                continue
            if id(target) not in passed and all(t is not target for t in out.arrays):
                out.arrays.append(target)
            out.entries.extend((a, int(j), int(flat[j])) for j in hit)
    return out


# ---- what the parent knows of a library without loading it -----------------------------------

_DESCRIBED: dict[str, runner.Description] = {}
_GLOBAL_MEMORY: dict[str, dict[str, np.ndarray]] = {}  # library -> name -> its bytes here
_DESCRIBE_LOCK = threading.Lock()


def describe(build: compiler.Build) -> runner.Description:
    """Parameters of every kernel and each global's size and initial bytes, asked of the runner
    (cached per build): loading the library here would run its constructors in Python."""
    key = str(build.library)
    with _DESCRIBE_LOCK:
        if key not in _DESCRIBED:
            runtime(build.runtime)
            _DESCRIBED[key] = runner.describe(runner.program(build.runtime), build)
        return _DESCRIBED[key]


def param_infos(build: compiler.Build, name: str) -> tuple[int, bytes]:
    """(count, raw pl::ParamInfo records) of kernel `name`, as pl_params_<symbol> gives them."""
    return describe(build).params[f"pl_params_{build.symbol(name)}"]


def global_memory(build: compiler.Build, name: str) -> tuple[np.ndarray, bytes]:
    """This process's copy of global `name` (uint8; what later launches write into the
    library's variable) and its raw pl::ParamInfo record."""
    info, initial = describe(build).globals[name]
    with _DESCRIBE_LOCK:
        mem = _GLOBAL_MEMORY.setdefault(str(build.library), {})
        if name not in mem:
            mem[name] = np.frombuffer(bytearray(initial), np.uint8)
        return mem[name], info


def current_globals(build: compiler.Build) -> dict[str, bytes]:
    """Globals a launch carries when its caller names none: those read through global_memory,
    else (a library this process loaded itself) the bytes its variables hold now."""
    with _LIB_LOCK:
        loaded = _LIBS.get(str(build.library))
    values = runner.global_bytes(build, loaded)
    with _DESCRIBE_LOCK:
        values.update((k, v.tobytes()) for k, v in _GLOBAL_MEMORY.get(str(build.library), {}).items())
    return values


def _not_dumpable() -> None:
    """A grading child's memory is not readable or writable through /proc by processes of
    the same user (a runner included)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE


def _check_globals(build, values) -> None:
    if not isinstance(values, dict):
        raise TypeError(f"globals must be a dict of variable name -> bytes, got {type(values).__name__}")
    for k, v in values.items():
        if k not in build.globals:
            raise ValueError(f"globals: no file-scope __constant__ or __device__ variable {k!r} "
                             f"in the module (found: {', '.join(build.globals) or 'none'})")
        if not isinstance(v, (bytes, bytearray, memoryview)):
            raise TypeError(f"globals[{k!r}] must be bytes, got {type(v).__name__}")


def _launch_here(build, name, params, args, cfg, sanitizer, globals_, collapsed=False) -> None:
    """In this process, on its threads (PAGEDLAB_CUDA_ISOLATE=0)."""
    rt = runtime(build.runtime)
    lib = _load(build.library)
    _write_globals(lib, build, globals_ or {})
    entry = ctypes.cast(getattr(lib, f"pl_entry_{build.symbol(name)}"), ctypes.c_void_p).value
    smem_info = ctypes.cast(lib.pl_smem_info, ctypes.c_void_p).value
    diag = Diag()
    keep = []  # ctypes objects that must outlive the launch
    slots = (ctypes.c_void_p * max(1, len(params)))()
    try:
        for i, (p, a) in enumerate(zip(params, args, strict=True)):
            if p.pointer:
                cell = ctypes.c_void_p(a.ctypes.data if a.nbytes else 0)
            else:
                raw = scalar_bytes(a)
                cell = ctypes.create_string_buffer(raw, max(16, len(raw)))
            keep.append(cell)
            slots[i] = ctypes.addressof(cell)
        spec = Spec(entry=entry, args=ctypes.addressof(slots),
                    grid=(ctypes.c_uint32 * 3)(*cfg.grid), block=(ctypes.c_uint32 * 3)(*cfg.block),
                    shared_mem=cfg.shared_mem, schedule=SCHEDULE_CODES[cfg.schedule],
                    workers=cfg.workers, seed=cfg.seed, smem_info=smem_info,
                    diag=ctypes.addressof(diag), filename=build.filename.encode(),
                    stack_size=cfg.stack_size, isolate=0, out_pid=-1, out_fd=-1, stdout_fd=-1,
                    collapsed=int(collapsed))
        if sanitizer is not None:  # the sanitizer's checks and profile of this launch
            keep.append(sanitizer.arm(rt, build, params, args, slots))
        with _INPROCESS_LOCK:
            rt.pl_launch(ctypes.byref(spec))
        if sanitizer is not None:  # the sanitizer raises RaceError & co., collects the profile
            sanitizer.finish(diag, build)
        _raise_for(diag, build, cfg)
    finally:
        if sanitizer is not None:
            sanitizer.disarm()


def _launch_in_runner(build, name, params, args, cfg, sanitizer, globals_, tables=None,
                      collapsed=False) -> None:
    """In the kernel runner: lay the launch out in a shared region, spawn, wait, copy back."""
    rt = runtime(build.runtime)  # checks the struct layouts; the sanitizer configures it
    prog = runner.program(build.runtime)
    entries = tables.entries if tables is not None else []
    if runner.serve_enabled() and not grading():
        # Every global, so a kept runner starts each launch from the memory a fresh one would.
        globals_ = {**{g: raw for g, (_, raw) in describe(build).globals.items()}, **globals_}
        plan = _plan(build, params, args, sanitizer, globals_, len(entries))
        return _launch_served(build, name, prog, plan, params, args, cfg, rt, sanitizer, globals_,
                              entries, collapsed)
    plan = _plan(build, params, args, sanitizer, globals_, len(entries))
    region = runner.take_region(plan.lay.size)
    reuse = False
    try:
        slots, san_cfg = _fill(region, plan, build, params, args, cfg, sanitizer, rt, globals_,
                               buffers=False)
        Spec.from_address(region.at(plan.spec)).collapsed = int(collapsed)
        hdr = runner.header_of(region)
        live = Diag.from_address(region.at(plan.diag))
        printed = tempfile.TemporaryFile()
        try:
            # The runner starts (exec, loading the libraries) while the arguments are copied in.
            go_read, go_write = os.pipe()
            try:
                pid = runner.spawn(prog, build, f"pl_entry_{build.symbol(name)}", region,
                                   printed.fileno(), go_fd=go_read)
            except BaseException:
                os.close(go_write)
                raise
            finally:
                os.close(go_read)
            try:
                _copy_buffers(region, plan)
                _relocate_tables(region, plan, entries)
                os.write(go_write, b"g")
            except BaseException:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise
            finally:
                os.close(go_write)
            try:
                _wait_child(pid, runner.exit_watch(pid), cfg, live, build,
                            lib_base=lambda: hdr.lib_base)  # written by the runner once started
            except KernelError as e:
                _raise_start_error(e, hdr)
        finally:
            _show_printed(printed)
        diag = _results_back(region, plan, entries, live)
        if sanitizer is not None:
            _sanitizer_back(region, plan, san_cfg, sanitizer, hdr)
            sanitizer.finish(diag, build)
        reuse = bool(hdr.locked)  # a runner that could fork may have left a writer behind
        _raise_for(diag, build, cfg, lib_base=hdr.lib_base)
    finally:
        if sanitizer is not None:
            sanitizer.disarm()
        if reuse:
            runner.give_back(region)
        else:
            region.close()


def _raise_start_error(e: KernelError, hdr) -> None:
    """Re-raise a runner's failure; one that could not start the launch says why (Header.error),
    as an OSError when the library needs more static TLS (kernel.py rebuilds on that)."""
    if type(e) is KernelError and hdr.error:
        text = hdr.error.decode(errors="replace")
        if "static TLS" in text:
            raise OSError(text) from None
        raise KernelError(f"the kernel runner could not start the launch: {text}") from None
    raise e


def _results_back(region, plan: _Plan, entries, live: Diag) -> Diag:
    """Written arrays and pointer tables back to the caller; the Diag, its fault address among
    the caller's arrays."""
    for (lo, hi, written), off in zip(plan.regions, plan.buffers, strict=True):
        if written:  # results come back even from a failed launch, like on a GPU
            ctypes.memmove(lo, region.at(off), hi - lo)
    for table, j, addr in entries:  # a writable table comes back with the caller's addresses
        table.reshape(-1, order="A").view(np.uint64)[j] = addr
    diag = Diag.from_buffer_copy(live)
    if diag.fault_addr >= 4096:  # a null pointer (plus a small offset) stays as it is
        diag.fault_addr = runner.runner_to_user(diag.fault_addr, plan.regions, plan.buffers,
                                                _segments(region, plan))
    return diag


def _launch_served(build, name, prog, plan, params, args, cfg, rt, sanitizer, globals_, entries,
                   collapsed) -> None:
    """A launch in a served runner (runner.Served): kept from the last clean launch of this
    build's kernel when there is one, else started while the arguments are copied in."""
    entry = f"pl_entry_{build.symbol(name)}"
    served = runner.take_served(build, entry, plan.lay.size) or runner.Served(build, entry, plan.lay.size)
    keep = False
    try:
        for attempt in (1, 2):
            region = served.region
            _, san_cfg = _fill(region, plan, build, params, args, cfg, sanitizer, rt, globals_,
                               buffers=False)
            Spec.from_address(region.at(plan.spec)).collapsed = int(collapsed)
            hdr = runner.header_of(region)
            live = Diag.from_address(region.at(plan.diag))
            if served.pid < 0:
                served.start(prog, build)  # exec and libraries while the arguments are copied
            _copy_buffers(region, plan)
            _relocate_tables(region, plan, entries)
            try:
                os.write(served.go, b"g")
                break
            except BrokenPipeError:
                # A kept runner ended before this launch began (the thread that spawned it is
                # gone: PR_SET_PDEATHSIG); a fresh one runs it. A fresh one that died: its error.
                if attempt == 2 or served.launches == 0:
                    break
                served.close()
                served = runner.Served(build, entry, plan.lay.size)
        try:
            answer = _wait_served(served, cfg, live, build, lib_base=lambda: hdr.lib_base)
        except KernelError as e:
            _raise_start_error(e, hdr)
        finally:
            _show_text(served.printed_text())
        diag = _results_back(region, plan, entries, live)
        served.launches += 1
        served.count_cpu(int(hdr.cpu_ns))
        if sanitizer is not None:
            _sanitizer_back(region, plan, san_cfg, sanitizer, hdr)
            sanitizer.finish(diag, build)  # raises the report
        _raise_for(diag, build, cfg, lib_base=hdr.lib_base)
        # Kept only after a clean launch (nothing raised) in a runner that cannot fork.
        keep = answer == 0 and diag.status == ST_OK and bool(hdr.locked)
    finally:
        if sanitizer is not None:
            sanitizer.disarm()
        if keep:
            runner.keep_served(served)
        else:
            served.close()


def _wait_served(served, cfg: LaunchConfig, diag: Diag, build, lib_base) -> int:
    """The status byte a served runner answered for this launch; if it ended instead, or ran
    past the watchdog, raises as _wait_child does (the caller then retires it)."""
    deadline = time.monotonic() + cfg.timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            _sample_stuck(served.pid, diag)
            served.kill()  # the region (and the Diag in it) stays until the caller closes it
            raise KernelTimeout(_timeout_message(diag, cfg, build, lib_base()))
        ready, _, _ = select.select([served.done, served.watch], [], [], min(left, 0.5))
        if served.done in ready:
            answer = os.read(served.done, 1)
            if answer:
                return answer[0]
        if ready:
            break
    pid, served.pid = served.pid, -1  # it ended: reaped here, so close() leaves it
    runner._LIVE.discard(served)
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        status = 0
    _raise_for_exit(status, diag)
    return 0 if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 else 1  # as a fresh runner's


@dataclasses.dataclass
class _Plan:
    lay: runner.Layout
    regions: list
    diag: int = 0
    spec: int = 0
    slots: int = 0
    cells: list = dataclasses.field(default_factory=list)
    filename: int = 0
    san: int = 0
    san_area: int = 0
    san_area_size: int = 0
    globals: list = dataclasses.field(default_factory=list)  # (record off, name off, data off)
    records: int = 0
    buffers: list = dataclasses.field(default_factory=list)
    segments: list = dataclasses.field(default_factory=list)  # (offset, length) of each buffer
    reloc: int = 0
    nreloc: int = 0
    seg_list: int = 0


def _san_types(sanitizer):
    """The sanitizer's ctypes structs, from the session's own module (no import: no cycle)."""
    mod = sys.modules[type(sanitizer).__module__]
    return mod.Config, mod.Report, mod.ProfHeader, mod.ProfEntry, mod.PROFILE_CAPACITY


def _relocate_tables(region, plan: _Plan, entries) -> None:
    """Pointer-table entries: the caller's address of an array -> that array's copy in the region
    (relocated into the runner's mapping like every other pointer of the launch)."""
    if not entries:
        return
    spans = list(zip(plan.regions, plan.buffers, strict=True))
    relocs = (ctypes.c_uint64 * plan.nreloc).from_address(region.at(plan.reloc))
    hdr = runner.header_of(region)
    for table, j, addr in entries:
        word = table.ctypes.data + 8 * j
        here = [(lo, off) for (lo, hi, _), off in spans if lo <= word < hi]
        there = [(lo, off) for (lo, hi, _), off in spans if lo <= addr < hi]
        if not here or not there:
            continue
        at = here[0][1] + (word - here[0][0])
        ctypes.c_uint64.from_address(region.at(at)).value = region.at(there[0][1]) + (addr - there[0][0])
        relocs[hdr.nreloc] = at
        hdr.nreloc += 1


def _plan(build, params, args, sanitizer, globals_, table_entries: int = 0) -> _Plan:
    lay = runner.Layout()
    lay.take(ctypes.sizeof(runner.Header))
    plan = _Plan(lay, runner.argument_regions(params, args, buffer_span))
    plan.spec = lay.take(ctypes.sizeof(Spec))
    plan.diag = lay.take(ctypes.sizeof(Diag))
    plan.slots = lay.take(8 * max(1, len(params)))
    for p, a in zip(params, args, strict=True):
        plan.cells.append(lay.take(8 if p.pointer else max(16, len(scalar_bytes(a))), 16))
    plan.filename = lay.take(len(build.filename.encode()) + 1)
    nreloc = 3 + len(params) + sum(1 for p in params if p.pointer) + table_entries
    if sanitizer is not None:
        config, report, prof_header, prof_entry, capacity = _san_types(sanitizer)
        plan.san = lay.take(ctypes.sizeof(config))
        plan.san_area_size = (ctypes.sizeof(report) + ctypes.sizeof(prof_header)
                              + capacity * ctypes.sizeof(prof_entry))
        plan.san_area = lay.take(plan.san_area_size)
        nreloc += 3 + 2 * len(config().ranges)  # report, prof, entries; each range's lo, hi
    plan.records = lay.take(ctypes.sizeof(runner.GlobalRecord) * max(1, len(globals_)))
    for gname, raw in globals_.items():
        name_off = lay.take(len(f"pl_global_{gname}") + 1)
        plan.globals.append((name_off, lay.take(len(raw))))
    for lo, hi, _ in plan.regions:
        data, start, length = lay.take_segment(hi - lo)
        plan.buffers.append(data)
        plan.segments.append((start, length))
    plan.nreloc = nreloc
    plan.reloc = lay.take(8 * nreloc, 8)
    plan.seg_list = lay.take(ctypes.sizeof(runner.Segment) * max(1, len(plan.segments)), 8)
    return plan


def _copy_buffers(region, plan: _Plan) -> None:
    """The argument arrays' bytes into their buffers in the region."""
    copies = []
    for (lo, hi, _), off, (start, length) in zip(plan.regions, plan.buffers, plan.segments,
                                                 strict=True):
        # zeros around the data, as in fresh pages: a reused region's old bytes read past an
        # array (an index table's, say) would send the kernel somewhere else each launch
        ctypes.memset(region.at(start), 0, off - start)
        copies.append((region.at(off), lo, hi - lo))
        ctypes.memset(region.at(off + hi - lo), 0, start + length - (off + hi - lo))
    _copy_in_two(copies)


PARALLEL_COPY = 4 << 20  # bytes from which a second thread copies half (one core's memcpy
_COPIER: list = [None, 0]  # does not saturate memory: 16 MB in ~0.5 ms with two, ~1.1 with one)


def _copy_in_two(copies) -> None:
    """memmove each (dst, src, n); above PARALLEL_COPY bytes, half of them on a helper thread
    (ctypes calls release the GIL). Never in a grading child, whose thread budget is the sandbox's."""
    total = sum(n for _, _, n in copies)
    half = []
    if total >= PARALLEL_COPY and not grading():
        left = total // 2
        while copies and left > 0:  # move the last bytes (splitting an array) to the helper
            dst, src, n = copies.pop()
            take = min(n, left)
            half.append((dst + n - take, src + n - take, take))
            if take < n:
                copies.append((dst, src, n - take))
            left -= take
    future = None
    if half:
        try:
            if _COPIER[0] is None or _COPIER[1] != os.getpid():  # threads do not survive a fork
                from concurrent.futures import ThreadPoolExecutor
                _COPIER[:] = [ThreadPoolExecutor(1, thread_name_prefix="pagedlab-copy"), os.getpid()]
            future = _COPIER[0].submit(lambda: [ctypes.memmove(*c) for c in half])
        except RuntimeError:  # no thread to be had: copy it here
            copies.extend(half)
    for c in copies:
        ctypes.memmove(*c)
    if future is not None:
        future.result()


def _fill(region, plan: _Plan, build, params, args, cfg, sanitizer, rt, globals_, buffers=True):
    """Write the launch into the region (addresses in this process's mapping) and list the
    words the runner must relocate. Returns the slots and the sanitizer's own Config.
    buffers=False: all but the argument arrays' bytes (_copy_buffers, later)."""
    relocs: list[int] = []
    # A reused region holds the last launch's bytes: clear everything before the buffers.
    ctypes.memset(region.at(0), 0, plan.buffers[0] if plan.buffers else plan.reloc)

    def put_ptr(off: int, addr: int) -> None:
        ctypes.c_uint64.from_address(region.at(off)).value = addr
        relocs.append(off)

    if buffers:
        _copy_buffers(region, plan)
    slots = (ctypes.c_void_p * max(1, len(params))).from_address(region.at(plan.slots))
    for i, (p, a) in enumerate(zip(params, args, strict=True)):
        put_ptr(plan.slots + 8 * i, region.at(plan.cells[i]))
        if p.pointer:
            ptr = a.ctypes.data if a.nbytes else 0
            for (lo, hi, _), off in zip(plan.regions, plan.buffers, strict=True):
                if a.nbytes and lo <= ptr and ptr + a.nbytes <= hi:
                    ptr = region.at(off) + (ptr - lo)
                    break
            put_ptr(plan.cells[i], ptr)
        else:
            raw = scalar_bytes(a)
            ctypes.memmove(region.at(plan.cells[i]), raw, len(raw))
    name = build.filename.encode() + b"\0"  # a reused region holds old bytes: terminate
    ctypes.memmove(region.at(plan.filename), name, len(name))
    spec = Spec.from_address(region.at(plan.spec))
    spec.grid[:] = cfg.grid
    spec.block[:] = cfg.block
    spec.shared_mem, spec.schedule = cfg.shared_mem, SCHEDULE_CODES[cfg.schedule]
    spec.workers, spec.seed, spec.stack_size = cfg.workers, cfg.seed, cfg.stack_size
    spec.isolate, spec.out_pid, spec.out_fd, spec.stdout_fd = 1, -1, -1, -1
    put_ptr(plan.spec + Spec.args.offset, region.at(plan.slots))
    put_ptr(plan.spec + Spec.diag.offset, region.at(plan.diag))
    put_ptr(plan.spec + Spec.filename.offset, region.at(plan.filename))
    san_cfg = None
    if sanitizer is not None:
        san_cfg = sanitizer.arm(rt, build, params, args, slots)
        for info in sanitizer.args:  # the session names arguments by the caller's addresses
            for field in ("lo", "buf_lo", "buf_hi"):
                if getattr(info, field):
                    setattr(info, field, runner.to_user(getattr(info, field) - region.base,
                                                        plan.regions, plan.buffers))
        config, report, prof_header, _, _ = _san_types(sanitizer)
        ctypes.memmove(region.at(plan.san), ctypes.addressof(san_cfg), ctypes.sizeof(config))
        # the report's head as the session set it up (the profile's capacity)
        ctypes.memmove(region.at(plan.san_area), san_cfg.report,
                       ctypes.sizeof(report) + ctypes.sizeof(prof_header))
        area = region.at(plan.san_area)
        put_ptr(plan.san + config.report.offset, area)
        put_ptr(plan.san + config.prof.offset, area + ctypes.sizeof(report))
        put_ptr(plan.san + config.entries.offset, area + ctypes.sizeof(report) + ctypes.sizeof(prof_header))
        for k in range(len(san_cfg.ranges)):  # Range: lo, hi first
            at = plan.san + config.ranges.offset + k * ctypes.sizeof(san_cfg.ranges[0])
            relocs.extend((at, at + 8))
    records = (runner.GlobalRecord * max(1, len(globals_))).from_address(region.at(plan.records))
    for k, ((gname, raw), (name_off, data_off)) in enumerate(zip(globals_.items(), plan.globals,
                                                                  strict=True)):
        sym = f"pl_global_{gname}".encode() + b"\0"
        ctypes.memmove(region.at(name_off), sym, len(sym))
        ctypes.memmove(region.at(data_off), bytes(raw), len(raw))
        records[k] = runner.GlobalRecord(name_off, data_off, len(raw))
    hdr = runner.header_of(region)
    hdr.magic = b"PLRUN01"
    hdr.size, hdr.parent_base, hdr.spec_off = region.size, region.base, plan.spec
    hdr.san_off = plan.san if sanitizer is not None else 0
    hdr.nglobal, hdr.global_off = len(globals_), plan.records
    assert len(relocs) <= plan.nreloc
    (ctypes.c_uint64 * max(1, len(relocs))).from_address(region.at(plan.reloc))[:len(relocs)] = relocs
    hdr.nreloc, hdr.reloc_off = len(relocs), plan.reloc
    segs = (runner.Segment * max(1, len(plan.segments))).from_address(region.at(plan.seg_list))
    for k, (start, length) in enumerate(plan.segments):
        segs[k] = runner.Segment(start, length, 0)
    hdr.nseg, hdr.seg_off = len(plan.segments), plan.seg_list
    return slots, san_cfg


def _segments(region, plan: _Plan) -> list:
    """The segment records as the runner left them (with its addresses), copied out."""
    table = (runner.Segment * max(1, len(plan.segments))).from_address(region.at(plan.seg_list))
    return [runner.Segment.from_buffer_copy(table[k]) for k in range(len(plan.segments))]


def _sanitizer_back(region, plan: _Plan, san_cfg, sanitizer, hdr) -> None:
    """Copy the runner's sanitizer report and profile to where the session reads them. Sizes
    come from this process's own Config, never from the region the kernel could scribble on."""
    _, report, prof_header, prof_entry, _ = _san_types(sanitizer)
    cap = prof_header.from_address(san_cfg.prof).cap
    nbytes = ctypes.sizeof(report) + ctypes.sizeof(prof_header) + cap * ctypes.sizeof(prof_entry)
    head = prof_header.from_address(san_cfg.prof)
    ctypes.memmove(san_cfg.report, region.at(plan.san_area), min(nbytes, plan.san_area_size))
    head.cap = cap
    head.count = max(0, min(head.count, cap))
    rep = report.from_address(san_cfg.report)
    if rep.addr >= 4096:
        rep.addr = runner.runner_to_user(rep.addr, plan.regions, plan.buffers,
                                         _segments(region, plan))


def _write_globals(lib, build, values: dict[str, bytes]) -> None:
    """Write each global's bytes into a build loaded in this process (PAGEDLAB_CUDA_ISOLATE=0);
    the runner does the same in runner.cpp's write_globals."""
    for name, data in values.items():
        if name not in build.globals:
            raise ValueError(f"no __constant__/__device__ variable {name!r} in {build.filename}")
        fn = getattr(lib, f"pl_global_{name}")
        fn.restype = ctypes.c_void_p
        info = runner.ParamInfo()
        addr = fn(ctypes.byref(info))
        data = bytes(data)[:int(info.total)]
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


def _show_printed(printed) -> None:
    printed.seek(0)
    text = printed.read()
    printed.close()
    _show_text(text)


def _show_text(text: bytes) -> None:
    if text:
        sys.stdout.write(text.decode(errors="replace"))
        sys.stdout.flush()


def _wait_child(pid: int, fd: int, cfg: LaunchConfig, diag: Diag, build,
                lib_base=None) -> None:
    """lib_base: a function giving where the launch process loaded the kernel library (the
    runner's), read when the watchdog reports; None: the library is loaded in this process."""
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
                raise KernelTimeout(_timeout_message(diag, cfg, build,
                                                     lib_base() if lib_base else None))
            ready, _, _ = select.select([fd], [], [], min(left, 0.5))
            if ready:
                break
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:  # SIGCHLD ignored by the host program: already reaped
            status = 0
        pid = -1
        _raise_for_exit(status, diag)
    finally:
        if pid > 0:  # KeyboardInterrupt or another error while waiting: stop the child
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        os.close(fd)


def _raise_for_exit(status: int, diag: Diag) -> None:
    """A launch process that ended (wait status) without writing a report into its Diag."""
    if os.WIFSIGNALED(status) and diag.status == ST_OK:
        sig = os.WTERMSIG(status)
        raise KernelCrash(f"the launch process died on signal {signal.Signals(sig).name} "
                          "before it could report (out of memory?)")
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) != 0 and diag.status == ST_OK:
        raise KernelError(f"the launch process exited with status {os.WEXITSTATUS(status)} "
                          "without a report (did the kernel call exit()?)")


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


def _stuck_line(st: Stuck, build, lib_base: int | None = None) -> str | None:
    """file:line of the innermost frame in the kernel's own source (pcs[0] is exact, the rest
    are return addresses)."""
    for i in range(min(st.npcs, 16)):
        pc = int(st.pcs[i])
        line = _source_line(pc if i == 0 else pc - 1, build, lib_base)
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


def _timeout_message(diag: Diag, cfg: LaunchConfig, build, lib_base: int | None = None) -> str:
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
            here = _stuck_line(st, build, lib_base) if st.sampled else None
            last = (f"the last barrier/warp operation it passed was at {build.filename}:{p.line}"
                    if p.line else "it had not passed any barrier or warp operation")
            at = f"it was at {here} when stopped ({last})" if here else last
            lines.append(f"  block ({p.block[0]}, {p.block[1]}, {p.block[2]}) was running thread "
                         f"{p.thread}; {at}{_others(st, build) if st.sampled else ''}")
    return "\n".join(lines)


def _raise_for(diag: Diag, build, cfg: LaunchConfig, lib_base: int | None = None) -> None:
    """lib_base: where the process that ran the launch loaded the kernel library (the runner's
    load address), or None for this process."""
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
        raise KernelCrash(_crash_message(diag, build, block, lib_base))
    if st == ST_TRAP and msg.startswith("out-of-bounds"):  # an array index (checked builds), a copy
        from .errors import OutOfBoundsError
        line = re.search(r" at \S+:(\d+) in thread", msg)
        why = (". The index is past the array's declared size: on a GPU such a write lands in "
               "another variable (a loop bound such as `j <= N` instead of `j < N`?)."
               if msg.startswith("out-of-bounds array index") else
               ". The copy runs past the end of the object: on a GPU it overwrites whatever lies "
               "next to it. Copy sizeof(the object) bytes, or fewer.")
        raise OutOfBoundsError(msg + why, block=tuple(diag.block), threads=(diag.thread,),
                               space="array", lines=(int(line.group(1)),) if line else ())
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


def _crash_message(diag: Diag, build, block: str, lib_base: int | None = None) -> str:
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
    line = _source_line(diag.fault_pc, build, lib_base)
    if line:
        what += f", at {line}"
    return what + ". The kernel crashed; the Python process is fine."


def _source_line(pc: int, build, lib_base: int | None = None) -> str | None:
    """file:line of a crash address inside the kernel library, from its line tables (-g1).
    lib_base: the library's load address in the process that crashed (None: this one)."""
    if not pc:
        return None
    try:
        if lib_base is None:
            lib_base = _loaded_base(pc, build)
        if not lib_base or pc < lib_base:
            return None
        out = subprocess.run(["addr2line", "-e", str(build.library), "-i", hex(pc - lib_base)],
                             capture_output=True, text=True, timeout=20)
        for ln in out.stdout.splitlines():
            if build.filename in ln:
                return f"{build.filename}:{ln.rsplit(':', 1)[-1].split()[0]}"
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return None


def _loaded_base(pc: int, build) -> int | None:
    """Load address of the kernel library in this process, if `pc` lies inside it."""
    class DlInfo(ctypes.Structure):
        _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                    ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]
    libc = ctypes.CDLL(None)
    info = DlInfo()
    if not libc.dladdr(ctypes.c_void_p(pc), ctypes.byref(info)) or not info.fname:
        return None
    if os.path.realpath(info.fname.decode()) != os.path.realpath(build.library):
        return None
    return info.fbase
