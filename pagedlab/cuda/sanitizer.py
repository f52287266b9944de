"""The executor as a sanitizer: shared-memory races, out-of-bounds and uninitialised reads.

A GPU's compute-sanitizer finds the bugs that make a kernel right under one thread order and
wrong under another. pagedlab does the same on a CPU, deterministically:

* **racecheck** (``"race"``): two accesses to one byte of ``__shared__`` memory by different
  threads, at least one a write, with nothing ordering them, are a hazard (RAW/WAR/WAW). What
  orders two accesses is CUDA's rule, not this run's order: a ``__syncthreads()`` between them;
  for two lanes of one warp also a ``__syncwarp()`` or warp collective both took part in.
  Warp-synchronous code without ``__syncwarp`` is therefore a race (as on Volta and later);
  atomics never race with each other. A write-after-write that leaves the bytes as they were
  (all lanes storing one ``cg::reduce`` result) is not reported: compute-sanitizer rates a
  hazard with "no impact on program execution" INFO, below its default report level. The
  write hook runs before the store, so the judgement waits for the next hook.
  Global memory too: two threads touching one word of an argument array, at least one
  writing, not both atomic, from different blocks (never ordered within a launch) or from one
  block with no barrier between them; a write the writer's block followed with
  ``__threadfence()`` counts as published to other blocks (the last-block reduction pattern).
* **memcheck** (``"memcheck"``): every global access must fall inside one of the launch's
  argument arrays (reads through ``const`` pointers too), and every access to dynamic shared
  memory inside the launch's ``shared_mem`` bytes.
* **initcheck** (``"init"``): a read of shared memory no thread of the block has written.

How: the checked kernel is built a second time with ``-fsanitize=thread`` but without the
ThreadSanitizer runtime; the compiler then calls ``__tsan_read4(address)`` & co. before every
memory access, and the executor's runtime (``sanitizer_rt.h``) implements those calls. The
return address of each call names the instruction; ``addr2line`` turns it into the ``.cu`` line.
Checks-off launches use the uninstrumented build and pay nothing.

Determinism: whether a race exists does not depend on the schedule (the rule above ignores the
order this run took), but which pair of accesses is met first does. A launch that fails under
another schedule or several workers is therefore re-run once under ``round_robin`` with one
worker (outputs restored first), and that run's report is raised: the same message under
every schedule. The hazard is named after the source: a write on an earlier line than the read
is a read-after-write (the read was meant to see it), the other way round a write-after-read
(on one line: the order the canonical run met them). The fix is the same either way: a barrier
between the two lines, and the report lists the two accesses in source order.

Limits: Linux only (shared memory is found as the kernel library's thread-local block); static
``__shared__`` arrays are checked as one block of shared memory, so an index past one static
array into the next is not an out-of-bounds error; ``__device__`` variables are not bounds-checked;
``memcpy``/``memset`` into an object of known size are bounds-checked at the call in every
build (prelude.h), reported as an ``OutOfBoundsError`` naming the object and the line. Indexes past fixed-size arrays (a thread's
local array, a static ``__shared__`` array's dimension) are caught by ``-fsanitize=bounds`` in
the checked build, whatever checks are named. Global races are judged per 4-byte word with
one writer and one reader remembered, so a race between two earlier readers and a later
writer may be missed (never invented); fences order nothing else.
An atomic and a plain access by another thread to the same shared byte in one barrier interval
are a race (a histogram reading its bins before the barrier); two atomics never are. Lanes ordered only by a warp operation with a partial mask may hide a race (never
invent one). Sizes of argument arrays are those of the numpy arrays passed (a view: the view).
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import dataclasses
import os
import re
import subprocess
import sys
import threading

import numpy as np

from . import compiler, executor
from .errors import KernelError, OutOfBoundsError, RaceError, SanitizerError, UninitializedReadError

CHECKS = ("race", "memcheck", "init")
_ALIASES = {"race": "race", "racecheck": "race", "memcheck": "memcheck", "mem": "memcheck",
            "init": "init", "initcheck": "init"}
ST_SANITIZER = 40  # Diag status of a sanitizer report (runtime.cpp's own codes are 0-6)

MAX_RANGES = 96
PROFILE_CAPACITY = 4096
REP_RACE, REP_OOB_GLOBAL, REP_UNINIT, REP_OOB_SHARED, REP_RACE_GLOBAL = 1, 2, 3, 4, 5
HAZARDS = {1: "RAW", 2: "WAR", 3: "WAW"}
HAZARD_WORDS = {1: "read-after-write", 2: "write-after-read", 3: "write-after-write"}


class Range(ctypes.Structure):
    _fields_ = [("lo", ctypes.c_uint64), ("hi", ctypes.c_uint64), ("index", ctypes.c_int32),
                ("kind", ctypes.c_int32)]


class Report(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int32), ("hazard", ctypes.c_int32), ("block", ctypes.c_int32 * 3),
                ("tid", ctypes.c_int32), ("other_tid", ctypes.c_int32), ("other_warp", ctypes.c_int32),
                ("write", ctypes.c_int32), ("other_write", ctypes.c_int32), ("size", ctypes.c_int32),
                ("atomic", ctypes.c_int32), ("addr", ctypes.c_uint64), ("offset", ctypes.c_uint64),
                ("pc", ctypes.c_uint64), ("other_pc", ctypes.c_uint64),
                ("other_block", ctypes.c_int32), ("arg", ctypes.c_int32)]


class ProfEntry(ctypes.Structure):
    _fields_ = [("pc", ctypes.c_uint64), ("space", ctypes.c_int32), ("access", ctypes.c_int32),
                ("requests", ctypes.c_uint64), ("sectors", ctypes.c_uint64), ("ideal", ctypes.c_uint64),
                ("ways", ctypes.c_uint64), ("max_ways", ctypes.c_uint64), ("lanes", ctypes.c_uint64)]


class ProfHeader(ctypes.Structure):
    _fields_ = [("count", ctypes.c_int32), ("cap", ctypes.c_int32), ("overflow", ctypes.c_int32),
                ("pad", ctypes.c_int32)]


class Config(ctypes.Structure):
    _fields_ = [("race", ctypes.c_int32), ("mem", ctypes.c_int32), ("init", ctypes.c_int32),
                ("profile", ctypes.c_int32), ("nranges", ctypes.c_int32), ("status", ctypes.c_int32),
                ("interleave", ctypes.c_int32), ("pad", ctypes.c_int32),
                ("ranges", Range * MAX_RANGES), ("report", ctypes.c_void_p), ("prof", ctypes.c_void_p),
                ("entries", ctypes.c_void_p)]


# ---- which checks ------------------------------------------------------------------------------

_DEFAULT: contextvars.ContextVar[frozenset | None] = contextvars.ContextVar("pagedlab_cuda_check",
                                                                           default=None)


def parse_checks(check) -> frozenset:
    """`check=` as given by a user: None/False/"" (off), True or "all" (every check), or names
    separated by commas ("race,memcheck,init"; also "racecheck", "mem", "initcheck")."""
    if check is None or check is False or check == "":
        return frozenset()
    if check is True:
        return frozenset(CHECKS)
    if isinstance(check, str):
        names = [c.strip() for c in check.split(",") if c.strip()]
    elif isinstance(check, (list, tuple, set, frozenset)):
        names = list(check)
    else:
        raise TypeError(f"check must be a string such as 'race,memcheck,init', True, or None; "
                        f"got {check!r}")
    out = set()
    for n in names:
        if not isinstance(n, str):
            raise TypeError(f"check names must be strings (race, memcheck, init), got {n!r}")
        if n.lower() == "all":
            out.update(CHECKS)
        elif n.lower() in _ALIASES:
            out.add(_ALIASES[n.lower()])
        else:
            raise ValueError(f"unknown check {n!r}; use any of race, memcheck, init (or all)")
    return frozenset(out)


def default_checks() -> frozenset:
    """Checks for launches that do not say: `checking(...)` in force, else $PAGEDLAB_CUDA_CHECK."""
    scoped = _DEFAULT.get()
    if scoped is not None:
        return scoped
    return parse_checks(os.environ.get("PAGEDLAB_CUDA_CHECK") or None)


@contextlib.contextmanager
def checking(check="all"):
    """Turn the sanitizer on for every CPU launch inside the `with` block that does not pass
    its own `check=`: ``with pagedlab.cuda.checking(): kernel(...)``. `check=None` turns it off."""
    token = _DEFAULT.set(parse_checks(check))
    try:
        yield
    finally:
        _DEFAULT.reset(token)


def instrumented_build(kernel) -> compiler.Build:
    with kernel._lock:
        if getattr(kernel, "_san_build", None) is None:
            module = getattr(kernel, "_module", None)
            kernel._san_build = compiler.build(
                kernel.code, kernel.filename, kernel.options, sanitize=True,
                name_expressions=module.name_expressions if module is not None else ())
        return kernel._san_build


# ---- one launch --------------------------------------------------------------------------------

_ARM_LOCK = threading.Lock()  # the runtime holds one configuration: checked launches take turns


def _runtime_ready(rt) -> None:
    if getattr(rt, "_pl_san_ready", False):
        return
    rt.pl_san_configure.argtypes = [ctypes.c_void_p]
    rt.pl_san_configure.restype = None
    rt.pl_san_sizes.argtypes = [ctypes.c_int]
    rt.pl_san_sizes.restype = ctypes.c_size_t
    sizes = [rt.pl_san_sizes(i) for i in range(4)]
    want = [ctypes.sizeof(t) for t in (Config, Report, ProfEntry, ProfHeader)]
    if sizes != want:
        raise SanitizerError(f"pagedlab sanitizer runtime and sanitizer.py disagree on struct "
                             f"layouts ({sizes} != {want})")
    rt._pl_san_ready = True


@dataclasses.dataclass
class ArgInfo:
    name: str
    ctype: str
    lo: int
    nbytes: int
    dtype: np.dtype
    size: int
    buf_lo: int = 0  # the whole allocation under a view (what memcheck allows); 0: the view itself
    buf_hi: int = 0


class Session:
    """The checks (and optionally the profile) of one launch: configures the runtime before the
    launch, turns its report into an exception afterwards."""

    def __init__(self, kernel, checks: frozenset, cfg, profile: bool = False, lanes_ordered: bool = False):
        self.kernel, self.checks, self.cfg, self.profile = kernel, checks, cfg, profile
        self.lanes_ordered = lanes_ordered  # lanes of one warp ordered: only cross-warp races remain
        self.profile_entries: list[tuple] = []
        self.profile_overflow = False
        self._rt = None
        self._buf = None
        self._locked = False
        self.args: list[ArgInfo] = []

    def arm(self, rt, build, params, args, slots):
        _runtime_ready(rt)
        nbytes = (ctypes.sizeof(Report) + ctypes.sizeof(ProfHeader)
                  + (PROFILE_CAPACITY * ctypes.sizeof(ProfEntry) if self.profile else 0))
        self._buf = executor.SharedBuffer(rt, nbytes)
        self._buf.view(nbytes)[:] = 0
        base = self._buf.data
        cfg = Config(race=(2 if self.lanes_ordered else 1) if "race" in self.checks else 0, mem="memcheck" in self.checks,
                     init="init" in self.checks, profile=self.profile, status=ST_SANITIZER,
                     interleave=self.cfg.schedule == "interleaved")
        cfg.report = base
        cfg.prof = base + ctypes.sizeof(Report)
        cfg.entries = cfg.prof + ctypes.sizeof(ProfHeader)
        ProfHeader.from_address(cfg.prof).cap = PROFILE_CAPACITY if self.profile else 0
        ranges = []
        for i, (p, a) in enumerate(zip(params, args, strict=True)):
            cell = slots[i]
            if p.pointer:
                ptr = ctypes.c_void_p.from_address(cell).value or 0
                start = end = 0
                if a.nbytes and ptr:
                    # The whole allocation under a view is mapped (executor.buffer_span), so a
                    # stencil's in[i-1] before a view's start is legal, as on a GPU.
                    lo, hi = executor.buffer_span(a)
                    start = ptr - (int(a.ctypes.data) - lo)
                    end = start + (hi - lo)
                    ranges.append((start, end, i, 3 if p.const else 0))
                self.args.append(ArgInfo(p.name, p.ctype, ptr, int(a.nbytes), a.dtype, int(a.size),
                                         start, end))
        for off, size in guard_variables(build):  # C++ init guards of __shared__ class arrays
            ranges.append((off, off + size, -1, 2))
        # Memory the entry glue reads (the argument slots and scalar cells): not kernel memory.
        ranges.append((ctypes.addressof(slots), ctypes.addressof(slots) + ctypes.sizeof(slots), -1, 1))
        for i, a in enumerate(args):
            try:  # a scalar's cell holds its bytes (a struct may be large); a pointer's, 8
                size = max(64, int(np.asarray(a).nbytes)) if not params[i].pointer else 64
            except (TypeError, ValueError):
                size = 4096
            ranges.append((slots[i], slots[i] + size, i, 1))
        # Writable arguments first: a buffer passed both as `T*` and as `const T*` is then
        # found as the writable one, whose accesses the global-race check watches.
        ranges.sort(key=lambda r: {0: 0, 3: 1}.get(r[3], 2))
        if len(ranges) > MAX_RANGES:
            raise ValueError(f"the sanitizer handles at most {MAX_RANGES - 1} kernel parameters")
        cfg.nranges = len(ranges)
        for k, (lo, hi, idx, kind) in enumerate(ranges):
            cfg.ranges[k] = Range(lo, hi, idx, kind)
        self._cfg = cfg
        self._rt = rt
        _ARM_LOCK.acquire()
        self._locked = True
        rt.pl_san_configure(ctypes.addressof(cfg))
        return cfg

    def disarm(self):
        if self._rt is not None:
            self._rt.pl_san_configure(None)
        if self._locked:
            self._locked = False
            _ARM_LOCK.release()
        if self._buf is not None:
            self._buf.free()
            self._buf = None

    def finish(self, diag, build):
        base = self._buf.data
        if self.profile:
            head = ProfHeader.from_address(base + ctypes.sizeof(Report))
            arr = (ProfEntry * PROFILE_CAPACITY).from_address(base + ctypes.sizeof(Report)
                                                              + ctypes.sizeof(ProfHeader))
            self.profile_entries = [
                (e.pc, e.space, e.access, e.requests, e.sectors, e.ideal, e.ways, e.max_ways, e.lanes)
                for e in arr[:head.count]]
            self.profile_overflow = bool(head.overflow)
        if diag.status != ST_SANITIZER:
            return
        rep = Report.from_buffer_copy(Report.from_address(base))
        raise _error(rep, build, self)


# ---- reports -----------------------------------------------------------------------------------

def _thread(tid: int, block: tuple[int, int, int]) -> str:
    bx, by, _ = block
    x, y, z = tid % bx, (tid // bx) % by, tid // (bx * by)
    idx = f"threadIdx ({x}, {y}, {z}), " if by > 1 or block[2] > 1 else f"threadIdx.x {x}, "
    return f"thread {tid} ({idx}warp {tid // 32}, lane {tid % 32})"


def source_lines(build, pcs) -> dict[int, int | None]:
    """.cu line of each return address (relative to the kernel library), from its line tables."""
    pcs = sorted({int(p) for p in pcs if p})
    out: dict[int, int | None] = dict.fromkeys(pcs)
    if not pcs:
        return out
    try:
        proc = subprocess.run(["addr2line", "-e", str(build.library), "-i", "-a",
                               *[hex(p - 1) for p in pcs]], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return out
    current = None
    for ln in proc.stdout.splitlines():
        if ln.startswith("0x"):
            current = int(ln, 16) + 1
            continue
        if current in out and out[current] is None and build.filename in ln:
            m = re.search(r":(\d+)", ln.rsplit(build.filename, 1)[1])
            if m:
                out[current] = int(m.group(1))
    return out


_TLS_CACHE: dict[str, list[tuple[int, int, str]]] = {}
_GUARD_CACHE: dict[str, list[tuple[int, int]]] = {}


def guard_variables(build) -> list[tuple[int, int]]:
    """(offset, size) of the guard variables in the TLS block: GCC guards a __shared__ array of
    a class type (half2) with one, read by compiled code that no thread of the kernel wrote."""
    shared_variables(build)
    return _GUARD_CACHE.get(str(build.library), [])


def shared_variables(build) -> list[tuple[int, int, str]]:
    """(offset, size, name) of every __shared__ variable in the kernel library's TLS block."""
    key = str(build.library)
    if key in _TLS_CACHE:
        return _TLS_CACHE[key]
    found = []
    try:
        proc = subprocess.run(["readelf", "-sW", key], capture_output=True, text=True, timeout=60)
        raw = []
        for ln in proc.stdout.splitlines():
            f = ln.split()
            if len(f) >= 8 and f[3] == "TLS" and f[6] != "UND":
                raw.append((int(f[1], 16), int(f[2], 0), f[7]))
        names = [r[2] for r in raw]
        if names:
            dem = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True,
                                 text=True, timeout=60).stdout.splitlines()
            if len(dem) == len(names):
                names = dem
        seen = set()
        _GUARD_CACHE[key] = [(off, size) for (off, size, _), name in zip(raw, names, strict=True)
                             if name.startswith("guard variable for")]
        for (off, size, _), name in zip(raw, names, strict=True):
            short = name.rsplit("::", 1)[-1]
            if short.startswith("pl_") or (off, short) in seen:
                continue
            seen.add((off, short))
            found.append((off, size, short))
    except (OSError, subprocess.SubprocessError, ValueError):
        pass
    found.sort()
    _TLS_CACHE[key] = found
    return found


def _shared_name(build, offset: int, size: int, session) -> str:
    for off, n, name in shared_variables(build):
        if off <= offset < off + max(n, 1):
            rel = offset - off
            elem = f", {size}-byte element {rel // size}" if size and rel % size == 0 else ""
            return f"__shared__ `{name}` (byte {rel} of its {n}{elem}; shared offset 0x{offset:x})"
    return f"shared memory at offset 0x{offset:x}"


def _element(build, offset: int, size: int) -> tuple[str, int] | None:
    """(array name, index) of the shared element at `offset`, when it is a whole element. The
    array's size says nothing about an unwritten element (a logits row is sized for the longest
    sequence), so the report shows the index and leaves the bound to the code that knows it."""
    for off, n, name in shared_variables(build):
        if size and off <= offset < off + max(n, 1) and (offset - off) % size == 0:
            return name, (offset - off) // size
    return None


def _nearest_arg(session, addr: int, size: int) -> str:
    best = None
    for a in session.args:
        if not a.nbytes:
            continue
        lo, hi = (a.buf_lo, a.buf_hi) if a.buf_hi else (a.lo, a.lo + a.nbytes)
        whose = "" if (lo, hi) == (a.lo, a.lo + a.nbytes) else " the buffer under"
        if addr < lo:
            dist, text = lo - addr, f"{lo - addr} bytes before the start of{whose}"
        elif addr + size > hi:
            dist = addr - hi
            text = (f"{dist} bytes past the end of{whose}" if dist >= 0
                    else f"straddling the end ({hi - addr} of {size} bytes inside) of{whose}")
            dist = max(dist, 0)
        else:
            continue
        if dist > 1 << 30:  # a wild pointer: the distance to an array says nothing
            continue
        item = a.dtype.itemsize
        elem = (addr - a.lo) // item
        view = f", a view {a.lo - lo} bytes into a {hi - lo}-byte buffer" if whose else ""
        desc = (f"{text} argument `{a.name}` ({a.dtype} array of {a.size} elements, {a.nbytes} bytes"
                f"{view}; the address is element {elem})")
        if best is None or dist < best[0]:
            best = (dist, desc)
    if best:
        return best[1]
    if addr < 4096:
        return "the address is a null pointer (plus a small offset)"
    return "the address is far from every argument array (a wild pointer or a huge index?)"


def _error(rep: Report, build, session) -> SanitizerError:
    block3 = tuple(session.cfg.block)
    blk = tuple(rep.block)
    block_txt = f"block ({blk[0]}, {blk[1]}, {blk[2]})"
    lines = source_lines(build, [rep.pc, rep.other_pc])
    fn = build.filename

    def at(pc):
        line = lines.get(int(pc))
        return f"{fn}:{line}" if line else f"{fn} (line unknown)"

    me = _thread(rep.tid, block3)
    verb = "wrote" if rep.write else "read"
    if rep.kind == REP_RACE:
        where = _shared_name(build, rep.offset, rep.size, session)
        verb = "updated it atomically" if rep.atomic else verb + " it"
        other_verb = {2: "updated it atomically", 1: "wrote it"}.get(rep.other_write, "read it")
        if rep.other_tid >= 0:
            other = _thread(rep.other_tid, block3)
            same_warp = rep.other_tid // 32 == rep.tid // 32
        else:
            other = f"a thread of warp {rep.other_warp}"
            same_warp = False
        first, second = (other, other_verb, rep.other_pc, rep.other_tid), (me, verb, rep.pc, rep.tid)
        l1, l2 = lines.get(int(first[2])), lines.get(int(second[2]))
        hazard = rep.hazard
        if hazard != 3 and l1 and l2 and l1 != l2:
            # Name the hazard after the program's intent: which access comes first in the source.
            if l2 < l1:
                first, second, l1, l2 = second, first, l2, l1
            hazard = 1 if first[1] != "read it" else 2
        fix = ("These two threads are lanes of one warp: lanes do not run in lockstep (Volta and "
               "later), so put a __syncwarp() (or a __syncthreads()) between the two accesses"
               if same_warp else
               "Put a __syncthreads() between the two accesses (every thread of the block must reach it)")
        outcome = "which value stays" if rep.hazard == 3 else "the value read"
        if l1 and l2 and l1 != l2:
            fix += f", i.e. between line {min(l1, l2)} and line {max(l1, l2)} in program order"
        msg = (f"shared-memory race ({HAZARDS[hazard]}, {HAZARD_WORDS[hazard]} hazard) in "
               f"{block_txt} on {where}:\n"
               f"  {first[0]} {first[1]} at {at(first[2])}\n"
               f"  {second[0]} {second[1]} at {at(second[2])}\n"
               f"with no barrier ordering the two, so {outcome} depends on which thread runs first. "
               f"{fix}.")
        return RaceError(msg, kind=HAZARDS[hazard], block=blk, threads=(first[3], second[3]),
                         lines=(l1, l2), address=rep.addr, variable=where, same_warp=same_warp,
                         fix=fix, pair=f"{first[0]} {first[1]} at {at(first[2])}; {second[0]} {second[1]} "
                                       f"at {at(second[2])}")
    if rep.kind == REP_RACE_GLOBAL:
        return _global_race(rep, build, session, lines, at, me, verb, blk)
    line = lines.get(int(rep.pc))
    if rep.kind == REP_UNINIT:
        where = _shared_name(build, rep.offset, rep.size, session)
        element = _element(build, rep.offset, rep.size)
        what = "an atomic operation on" if rep.atomic else "a read of"
        name = f"element {element[1]} of __shared__ `{element[0]}`" if element else where
        msg = (f"uninitialized shared memory: no thread wrote this element. {me} of {block_txt} "
               f"performed {what} {name} at {at(rep.pc)}, and no thread of this block had "
               "written it. Shared memory starts with garbage on a GPU (the CPU executor fills it with "
               "NaN). If the index is past the elements the kernel fills (a loop bound such as "
               "seq_len), bound this read by the same limit; if another thread writes the element, "
               "put a __syncthreads() between that write and this read.")
        return UninitializedReadError(msg, block=blk, threads=(rep.tid,), lines=(line,), address=rep.addr,
                                      variable=where, array=element and element[0],
                                      index=element and element[1])
    if rep.kind == REP_OOB_SHARED:
        name = build.dyn_arrays[rep.other_tid].name if 0 <= rep.other_tid < len(build.dyn_arrays) else "?"
        msg = (f"out-of-bounds shared memory access: {me} of {block_txt} {verb} {rep.size} bytes at "
               f"byte offset {rep.offset} of `extern __shared__ {name}[]` at {at(rep.pc)}, but the "
               f"launch has shared_mem={session.cfg.shared_mem} bytes. Check the index, or launch "
               "with more shared_mem.")
        return OutOfBoundsError(msg, block=blk, threads=(rep.tid,), lines=(line,), address=rep.addr,
                                space="shared")
    what = "an atomic on" if rep.atomic else ("a write of" if rep.write else "a read of")
    msg = (f"out-of-bounds global memory access: {me} of {block_txt} made {what} {rep.size} bytes "
           f"at address 0x{rep.addr:x} at {at(rep.pc)}, outside every array passed to the kernel: "
           f"{_nearest_arg(session, rep.addr, rep.size)}. Check the index arithmetic and the bounds "
           "test (e.g. `if (i < n)`) before the access.")
    return OutOfBoundsError(msg, block=blk, threads=(rep.tid,), lines=(line,), address=rep.addr,
                            space="global")


def _global_element(session, addr: int, size: int) -> str:
    for a in session.args:
        lo, hi = (a.buf_lo, a.buf_hi) if a.buf_hi else (a.lo, a.lo + a.nbytes)
        if a.nbytes and lo <= addr < hi:
            item = a.dtype.itemsize
            rel = addr - a.lo
            elem = f"element {rel // item}" if rel % item == 0 and size >= item else f"byte {rel}"
            return f"{elem} of argument `{a.name}` ({a.dtype} array of {a.size} elements)"
    return f"global memory at 0x{addr:x}"


def _global_race(rep: Report, build, session, lines, at, me, verb, blk) -> SanitizerError:
    grid = tuple(session.cfg.grid)
    ob = rep.other_block
    other_blk = (ob % grid[0], (ob // grid[0]) % grid[1], ob // (grid[0] * grid[1]))
    block3 = tuple(session.cfg.block)
    verb = "updated it atomically" if rep.atomic else verb + " it"
    other_verb = {2: "updated it atomically", 1: "wrote it"}.get(rep.other_write, "read it")
    first = (f"{_thread(rep.other_tid, block3)} of block {other_blk}", other_verb, rep.other_pc,
             rep.other_tid)
    second = (f"{me} of block {blk}", verb, rep.pc, rep.tid)
    l1, l2 = lines.get(int(first[2])), lines.get(int(second[2]))
    hazard = rep.hazard
    if hazard != 3 and l1 and l2 and l1 != l2:
        if l2 < l1:
            first, second, l1, l2 = second, first, l2, l1
        hazard = 1 if first[1] != "read it" else 2
    where = _global_element(session, rep.addr, rep.size)
    if other_blk != blk:
        why = ("they are in different blocks, and nothing orders two blocks within one launch "
               "(__syncthreads() orders one block only)")
        fix = ("Make the update an atomic (atomicAdd & co.), give each block its own output and "
               "combine them in a second kernel launch, or split the kernel where one block "
               "must see another's result")
    elif rep.other_tid // 32 == rep.tid // 32:
        why = "they are lanes of one warp with no __syncwarp() or warp operation between the accesses"
        fix = "Put a __syncwarp() between the two accesses, or make the update an atomic"
    else:
        why = "no __syncthreads() orders them"
        fix = "Put a __syncthreads() between the two accesses, or make the update an atomic"
    outcome = "which value stays" if rep.hazard == 3 else "the value read"
    msg = (f"global-memory race ({HAZARDS[hazard]}, {HAZARD_WORDS[hazard]} hazard) on {where}:\n"
           f"  {first[0]} {first[1]} at {at(first[2])}\n"
           f"  {second[0]} {second[1]} at {at(second[2])}\n"
           f"and {why}, so {outcome} depends on which thread runs first (a read-modify-write "
           f"such as `out[i] += v` loses updates). {fix}.")
    return RaceError(msg, kind=HAZARDS[hazard], block=blk, threads=(first[3], second[3]),
                     lines=(l1, l2), address=rep.addr, variable=where)


# ---- entry points used by RawKernel --------------------------------------------------------------

def run(kernel, args, cfg, checks: frozenset, profile: bool = False) -> Session:
    """Launch `kernel` instrumented; on a report, re-run once canonically so it is the same
    under every schedule. Returns the session (its profile entries, if asked for)."""
    if not sys.platform.startswith("linux"):
        raise NotImplementedError("the CPU executor's sanitizer and profile need Linux")
    build = instrumented_build(kernel)
    session = Session(kernel, checks, cfg, profile)
    module = getattr(kernel, "_module", None)
    globals_ = module.launch_globals() if module is not None else None  # one set, checks or not
    canonical = cfg.schedule in ("round_robin", "interleaved") and cfg.workers == 1
    saved = [(a, a.copy()) for p, a in zip(kernel.params, args, strict=True)
             if p.pointer and not p.const] if "race" in checks or not canonical else []
    try:
        executor.launch(build, kernel.name, kernel.params, args, cfg, sanitizer=session,
                        globals=globals_)
    except SanitizerError as first:
        if canonical:
            raise _warp_advice(first, build, kernel, args, cfg, checks, saved, globals_) from None
        for a, copy in saved:
            a[...] = copy
        again = dataclasses.replace(cfg, schedule="round_robin", seed=0, workers=1)
        try:
            executor.launch(build, kernel.name, kernel.params, args, again,
                            sanitizer=Session(kernel, checks, again, profile), globals=globals_)
        except SanitizerError as canon:
            raise _warp_advice(canon, build, kernel, args, cfg, checks, saved, globals_).with_traceback(None) from None
        except KernelError:
            pass  # e.g. a deadlock only this order hits: report what the first run found
        raise first from None  # the canonical order ran clean: keep what this schedule found
    return session


def _warp_advice(err, build, kernel, args, cfg, checks, saved, globals_):
    """A race between lanes of one warp advises __syncwarp(); but when threads of other warps
    touch the same data between the same barriers, a __syncwarp() fixes nothing and the next
    run reports those. Re-run with the lanes of a warp ordered: a race left is between warps,
    so the advice is a __syncthreads(), naming the other warp's access."""
    if not isinstance(err, RaceError) or not err.report.get("same_warp"):
        return err
    for a, copy in saved:
        a[...] = copy
    again = dataclasses.replace(cfg, schedule="round_robin", seed=0, workers=1)
    try:
        executor.launch(build, kernel.name, kernel.params, args, again, globals=globals_,
                        sanitizer=Session(kernel, frozenset({"race"}), again, lanes_ordered=True))
    except RaceError as across:
        if across.report.get("same_warp"):
            return err
        fix = err.report["fix"].split(", i.e.")[0]
        advice = (f"These two threads are lanes of one warp, but a __syncwarp() is not enough here: threads "
                  f"of different warps touch the same data with no barrier between them too "
                  f"({across.report['pair']}). Put a __syncthreads() between the accesses (every thread "
                  f"of the block must reach it)")
        message = str(err).replace(fix, advice)
        report = {k: v for k, v in err.report.items() if k != "fix"}
        return RaceError(message, **{**report, "fix": advice})
    except KernelError:
        pass
    finally:
        for a, copy in saved:
            a[...] = copy
    return err
