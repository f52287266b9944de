"""Isolated launches in the kernel runner, a program with no Python interpreter in it.

A kernel library loaded into Python (or into a fork of it) can look up the interpreter's C API
and compute its output with torch. So an isolated launch never loads the kernel there: it lays
the whole launch out in one shared region (a memfd), spawns `runner.cpp` (built once per
runtime, next to it in the build cache), and reads results and the Diag back from the region.
A launch outside grading goes to a served runner instead (`Served`, below): the same protocol,
one launch per byte on a pipe, in a runner kept from the kernel's last clean launch.

Region layout, every part at an offset from the start: Header | Spec | Diag | argument slots |
cells | file name | sanitizer Config and report | globals | argument buffers | relocation
list | segment list. The runner maps each argument buffer again on its own, 64 MiB from the next
and followed by a PROT_NONE page, so a write just past an array faults and a wild index lands
nearer its own array than a neighbour's.
Pointers are written as addresses in this process's mapping; the runner moves the words named
in the relocation list to its own mapping. Every pointer argument is copied in (inputs too: the
runner cannot read this process's memory); regions holding a non-const argument are copied back.
"""

from __future__ import annotations

import ctypes
import dataclasses
import fcntl
import mmap
import os
import select
import signal
import sys
import tempfile
import threading
from pathlib import Path

from . import compiler

SOURCE = Path(__file__).with_name("runner.cpp")
# Everything the runner is compiled from (its headers are the runtime's): all in its cache key.
SOURCES = (SOURCE, SOURCE.with_name("pl_seal.h"), compiler.ABI, compiler.LAUNCH)
PAGE = mmap.PAGESIZE
EXIT_NO_START = 3  # the runner's exit status when it could not start the launch


class Header(ctypes.Structure):
    """Header in runner.cpp."""
    _fields_ = [("magic", ctypes.c_char * 8), ("size", ctypes.c_uint64),
                ("parent_base", ctypes.c_uint64), ("runner_base", ctypes.c_uint64),
                ("lib_base", ctypes.c_uint64), ("spec_off", ctypes.c_uint64),
                ("san_off", ctypes.c_uint64), ("nreloc", ctypes.c_uint64),
                ("reloc_off", ctypes.c_uint64), ("nseg", ctypes.c_uint64),
                ("seg_off", ctypes.c_uint64), ("nglobal", ctypes.c_uint64),
                ("global_off", ctypes.c_uint64), ("locked", ctypes.c_int32),
                ("pad_", ctypes.c_int32), ("cpu_ns", ctypes.c_uint64), ("error", ctypes.c_char * 512)]


class Segment(ctypes.Structure):
    """Segment in runner.cpp: an argument buffer, mapped on its own in the runner."""
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64), ("runner_addr", ctypes.c_uint64)]


class GlobalRecord(ctypes.Structure):
    _fields_ = [("name_off", ctypes.c_uint64), ("data_off", ctypes.c_uint64),
                ("len", ctypes.c_uint64)]


class ParamInfo(ctypes.Structure):
    """pl::ParamInfo in pl_abi.h (what pl_global_<name> fills in)."""
    _fields_ = [("pointer", ctypes.c_int32), ("is_const", ctypes.c_int32),
                ("lanes", ctypes.c_int32), ("is_class", ctypes.c_int32),
                ("size", ctypes.c_int64), ("elem_size", ctypes.c_int64), ("total", ctypes.c_int64),
                ("code", ctypes.c_char * 8), ("name", ctypes.c_char * 96)]


_PROGRAMS: dict[str, Path] = {}
_PROGRAM_LOCK = threading.Lock()


def program(rt_path: Path, copy_from: Path | None = None) -> Path:
    """The runner linked against this runtime, built on first use beside it (copied from
    `copy_from` when it has it), or in the build cache when the runtime's folder is not ours to
    write (the trusted builds of a grading child)."""
    key = str(rt_path)
    with _PROGRAM_LOCK:
        if key not in _PROGRAMS:
            cxx = compiler.find_compiler()
            digest = compiler._digest(*(p.read_bytes() for p in SOURCES), rt_path.name,
                                      compiler.compiler_version(cxx))
            name = f"pagedlab-runner-{digest}"
            target = rt_path.parent / name
            if not target.exists() and not os.access(rt_path.parent, os.W_OK):
                target = compiler.cache_dir() / name
            if not target.exists() and not compiler.copied(copy_from, target):
                compiler._atomic_build(target, lambda tmp: compiler._run(
                    [cxx, "-std=c++17", "-O2", "-o", tmp, str(SOURCE), str(rt_path),
                     *compiler.runtime_rpath(rt_path, target.parent)]
                    + ([] if sys.platform == "darwin" else ["-ldl"]),
                    "building the pagedlab kernel runner", {}))
                os.chmod(target, 0o755)
            _PROGRAMS[key] = target
        return _PROGRAMS[key]


class Layout:
    """Offsets of the region's parts, planned before the region exists."""

    def __init__(self):
        self.size = 0

    def take(self, nbytes: int, align: int = 64) -> int:
        off = -(-self.size // align) * align
        self.size = off + max(int(nbytes), 1)
        return off

    def take_segment(self, nbytes: int) -> tuple[int, int, int]:
        """(offset of the data, offset of its pages, their length) for an argument buffer: the
        data ends at the end of its pages (rounded down to 64 bytes), where the runner puts an
        inaccessible page, as executor.SharedBuffer lays it out."""
        body = max(PAGE, -(-nbytes // PAGE) * PAGE)
        start = self.take(body, PAGE)
        # One unused page before the next part: an address one past this buffer's end (a
        # sanitizer range's end) must not also be the next buffer's start, or the runner
        # relocates it into that buffer's mapping.
        self.size += PAGE
        return start + (body - nbytes) // 64 * 64, start, body


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
MAP_FAILED = ctypes.c_void_p(-1).value


class Region:
    """The launch's shared memory, mapped here; the runner gets its fd as fd 3."""

    def __init__(self, size: int):
        self.size = -(-size // PAGE) * PAGE
        if hasattr(os, "memfd_create"):
            self.fd = os.memfd_create("pagedlab-launch", os.MFD_CLOEXEC)
        else:  # an unlinked file only this user can open
            with tempfile.TemporaryFile() as f:
                self.fd = os.dup(f.fileno())
        self.base = None
        try:
            os.ftruncate(self.fd, self.size)
            base = _libc.mmap(None, self.size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED,
                              self.fd, 0)
            if base in (None, MAP_FAILED):
                raise MemoryError(f"could not map {self.size} bytes of shared memory for a launch: "
                                  f"{os.strerror(ctypes.get_errno())}")
            self.base = base
        except BaseException:
            os.close(self.fd)
            raise

    def at(self, off: int) -> int:
        return self.base + off

    def close(self):
        if self.base is not None:
            _libc.munmap(self.base, self.size)
            self.base = None
            os.close(self.fd)


_IDLE: list[Region] = []  # regions of finished launches, kept: fresh shmem pages are slow
_IDLE_LOCK = threading.Lock()
KEEP_IDLE = 2


def take_region(size: int) -> Region:
    """A region of at least `size` bytes: an idle one that fits, else a new one (sized in MiB
    steps so the next launch of similar size fits it too)."""
    with _IDLE_LOCK:
        fits = [r for r in _IDLE if r.size >= size]
        if fits:
            region = min(fits, key=lambda r: r.size)
            _IDLE.remove(region)
            return region
    return new_region(size)


def new_region(size: int) -> Region:
    """A fresh region of at least `size` bytes, in MiB steps so the next launch of similar size
    fits it too."""
    return Region(-(-size // (1 << 20)) * (1 << 20))


def give_back(region: Region) -> None:
    """Keep a finished launch's region for the next one. Only once its runner is gone (the
    caller has reaped it), and the runner cannot fork, so no process of it still writes there."""
    with _IDLE_LOCK:
        _IDLE.append(region)
        _IDLE.sort(key=lambda r: r.size, reverse=True)
        while len(_IDLE) > KEEP_IDLE:
            _IDLE.pop().close()


def argument_regions(params, args, buffer_span) -> list[tuple[int, int, bool]]:
    """Address ranges of every array the kernel gets, merged where they overlap (so an array
    passed twice, or a view of another argument, is one memory as on a GPU), each with whether
    the kernel may write it (it holds a non-const argument) and so must be copied back."""
    spans = sorted((*buffer_span(a), not p.const)
                   for p, a in zip(params, args, strict=True) if p.pointer and a.nbytes)
    merged: list[list] = []
    for lo, hi, written in spans:
        if merged and lo < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
            merged[-1][2] = merged[-1][2] or written
        else:
            merged.append([lo, hi, written])
    return [tuple(m) for m in merged]


def global_bytes(build, loaded) -> dict[str, bytes]:
    """Current bytes of the build's __constant__/__device__ globals in this process's copy of
    the library (what get_global wrote), or {} when this process never loaded it."""
    if loaded is None:
        return {}
    out = {}
    for name in build.globals:
        fn = getattr(loaded, f"pl_global_{name}")
        fn.restype = ctypes.c_void_p
        info = ParamInfo()
        addr = fn(ctypes.byref(info))
        out[name] = ctypes.string_at(addr, int(info.total))
    return out


class Query(ctypes.Structure):
    """Query in runner.cpp (describe mode)."""
    _fields_ = [("name_off", ctypes.c_uint64), ("out_off", ctypes.c_uint64), ("cap", ctypes.c_uint64),
                ("kind", ctypes.c_int32), ("result", ctypes.c_int32)]


Q_PARAMS, Q_GLOBAL = 1, 2
MAX_PARAMS = 64
MAX_GLOBAL = 16 << 20  # bytes per global asked for; pages never written cost nothing


@dataclasses.dataclass
class Description:
    params: dict[str, tuple[int, bytes]]      # pl_params_<symbol> -> (count, ParamInfo records)
    globals: dict[str, tuple[bytes, bytes]]   # variable -> (ParamInfo record, initial bytes)


def describe(prog: Path, build) -> Description:
    """Ask the runner, which loads the library, what the parent would otherwise load it for."""
    asks = [(Q_PARAMS, f"pl_params_{sym}", MAX_PARAMS * ctypes.sizeof(ParamInfo))
            for sym in dict.fromkeys(build.entries.values())]
    asks += [(Q_GLOBAL, f"pl_global_{g}", ctypes.sizeof(ParamInfo) + MAX_GLOBAL) for g in build.globals]
    lay = Layout()
    lay.take(ctypes.sizeof(Header))
    table = lay.take(ctypes.sizeof(Query) * max(1, len(asks)))
    places = [(lay.take(len(name) + 1), lay.take(cap, PAGE)) for _, name, cap in asks]
    region = Region(lay.size)
    try:
        hdr = header_of(region)
        hdr.magic, hdr.size, hdr.parent_base = b"PLRUN01", region.size, region.base
        hdr.nglobal, hdr.global_off = len(asks), table
        queries = (Query * max(1, len(asks))).from_address(region.at(table))
        for k, ((kind, name, cap), (name_off, out_off)) in enumerate(zip(asks, places, strict=True)):
            ctypes.memmove(region.at(name_off), name.encode(), len(name))
            queries[k] = Query(name_off, out_off, cap, kind, 0)
        with tempfile.TemporaryFile() as out:
            pid = spawn(prog, build, "--describe", region, out.fileno())
            status = _wait(pid, DESCRIBE_TIMEOUT)
        if status != 0:
            why = hdr.error.decode(errors="replace") or f"wait status {status}"
            raise OSError(f"the kernel runner could not describe {build.library.name}: {why}")
        out = Description({}, {})
        size = ctypes.sizeof(ParamInfo)
        for (kind, name, _), (_, out_off), q in zip(asks, places, queries, strict=False):
            if kind == Q_PARAMS:
                n = max(0, int(q.result))
                out.params[name] = (n, ctypes.string_at(region.at(out_off), min(n, MAX_PARAMS) * size))
            else:
                info = ParamInfo.from_buffer_copy(ctypes.string_at(region.at(out_off), size))
                data = ctypes.string_at(region.at(out_off) + size, max(0, min(int(info.total), MAX_GLOBAL)))
                out.globals[name[len("pl_global_"):]] = (bytes(info), data)
        return out
    finally:
        region.close()


DESCRIBE_TIMEOUT = 60.0  # seconds: a library whose constructors spin is killed


def _wait(pid: int, timeout: float) -> int:
    """Wait status of `pid`, killing it first if it runs longer than `timeout` seconds."""
    fd = exit_watch(pid)
    try:
        if not select.select([fd], [], [], timeout)[0]:
            os.kill(pid, signal.SIGKILL)
    finally:
        os.close(fd)
    return os.waitpid(pid, 0)[1]


def spawn(prog: Path, build, entry: str, region: Region, stdout_fd: int, go_fd: int | None = None,
          done_fd: int | None = None) -> int:
    """Start the runner on the region; returns its pid. go_fd: the read end of a pipe on which
    the caller writes one byte once the argument buffers are in the region (it fills them while
    the runner starts); the runner waits for it before it touches them. done_fd (with go_fd):
    serve launches, one per byte on go_fd, each answered by its status byte on done_fd."""
    # Fresh descriptors above 9, so the dup2s onto 1, 3, 4 and 5 never overwrite each other's source.
    sources = (stdout_fd, region.fd) + ((go_fd,) if go_fd is not None else ()) \
        + ((done_fd,) if done_fd is not None else ())
    fds = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in sources]
    mode = [] if go_fd is None else ["--serve"] if done_fd is not None else ["--go"]
    try:
        return os.posix_spawn(str(prog), [str(prog), str(build.library), entry] + mode, {},
                              file_actions=[(os.POSIX_SPAWN_DUP2, fd, target)
                                            for fd, target in zip(fds, (1, 3, 4, 5))])
    finally:
        for fd in fds:
            os.close(fd)


class Served:
    """A runner kept between launches of one kernel of one build: spawning one (exec, loading the
    libraries, mapping the arguments) costs more than a decode kernel's whole run. It owns its
    region, maps the argument buffers once while their layout stays the same, and runs a launch
    per byte on `go`, answering its status on `done`. Only a runner that could not fork (`locked`)
    and whose last launch ended clean is kept; any fault, timeout or error retires it, so a
    launch never starts in a process a failed one left behind. Globals are rewritten every
    launch (all of them: those the caller never set get the library's initial bytes), so a
    kernel sees the same memory as in a fresh runner."""

    def __init__(self, build, entry: str, size: int):
        self.key = (str(build.library), entry)
        self.entry = entry
        self.owner = os.getpid()
        self.region = new_region(size)
        self.printed = tempfile.TemporaryFile()
        self.pid = -1
        self.go = self.done = self.watch = -1
        self.launches = 0
        self.cpu_ns = 0  # the runner's CPU time after its last launch

    def count_cpu(self, now_ns: int) -> None:
        """The runner's CPU time after a launch, as it reported it (served_cpu_seconds)."""
        self.cpu_ns = max(self.cpu_ns, now_ns)

    def start(self, prog: Path, build) -> None:
        """Spawn the runner on the region (its first launch already laid out in it)."""
        go_read, self.go = os.pipe()
        self.done, done_write = os.pipe()
        try:
            self.pid = spawn(prog, build, self.entry, self.region, self.printed.fileno(),
                             go_fd=go_read, done_fd=done_write)
            self.watch = exit_watch(self.pid)
            _LIVE.add(self)
        finally:
            os.close(go_read)
            os.close(done_write)

    def printed_text(self) -> bytes:
        """What the kernel printed since the last call (the runner shares this file's offset)."""
        self.printed.seek(0)
        text = self.printed.read()
        self.printed.seek(0)
        self.printed.truncate()
        return text

    def kill(self) -> None:
        """Stop the runner (if it is ours); its region stays mapped here for the Diag."""
        if self.pid > 0 and self.owner == os.getpid():
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        self.pid = -1
        _LIVE.discard(self)

    def close(self) -> None:
        """Stop the runner and release everything it held."""
        self.kill()
        for fd in (self.go, self.done, self.watch):
            if fd >= 0:
                os.close(fd)
        self.go = self.done = self.watch = -1
        self.region.close()
        self.printed.close()


_SERVED: list[Served] = []  # idle served runners, the most recently used last
_SERVED_LOCK = threading.Lock()
_LIVE: set = set()  # served runners started and not yet reaped (idle or in a launch)
KEEP_SERVED = 4
KEEP_SERVED_BYTES = 256 << 20  # an idle runner holds its region: a huge one is not worth keeping


def serve_enabled() -> bool:
    """PAGEDLAB_CUDA_SERVE=0: every launch in a fresh runner (as every launch of a grading
    child is). Off where there is no pidfd to watch a runner with (macOS)."""
    return os.environ.get("PAGEDLAB_CUDA_SERVE", "1") != "0" and hasattr(os, "pidfd_open")


def served_cpu_seconds() -> float:
    """CPU seconds of the served runners not reaped yet, as of their last launch. Reaped, a
    runner's time is in RUSAGE_CHILDREN instead, so this plus that counts each launch once."""
    return sum(s.cpu_ns for s in list(_LIVE)) / 1e9


def take_served(build, entry: str, size: int) -> Served | None:
    """An idle served runner of this kernel whose region holds `size` bytes (it is then the
    caller's alone until keep_served), else None. A runner whose region is too small is retired."""
    key = (str(build.library), entry)
    with _SERVED_LOCK:
        mine = [s for s in _SERVED if s.key == key]
        if not mine:
            return None
        served = mine[-1]
        _SERVED.remove(served)
    # Its spawning thread may have ended since (the runner dies with it: PR_SET_PDEATHSIG).
    if served.region.size >= size and not select.select([served.watch], [], [], 0)[0]:
        return served
    served.close()
    return None


def keep_served(served: Served) -> None:
    """Keep an idle served runner for its kernel's next launch (the least recently used beyond
    KEEP_SERVED is stopped; one whose region exceeds KEEP_SERVED_BYTES is not kept at all)."""
    if served.region.size > KEEP_SERVED_BYTES:
        served.close()
        return
    with _SERVED_LOCK:
        _SERVED.append(served)
        old = _SERVED[:-KEEP_SERVED] if len(_SERVED) > KEEP_SERVED else []
        del _SERVED[:len(old)]
    for s in old:
        s.close()


def close_served() -> None:
    """Stop every idle served runner (tests; the runners also end when this process does)."""
    with _SERVED_LOCK:
        old = list(_SERVED)
        _SERVED.clear()
    for s in old:
        s.close()


def _forget_served_in_child() -> None:
    # A forked child must not drive its parent's runners: drop its copies of their descriptors
    # (the runners stay the parent's and end when the parent closes its own).
    global _SERVED_LOCK
    _SERVED_LOCK = threading.Lock()
    old = list(_SERVED)
    _SERVED.clear()
    _LIVE.clear()
    for s in old:
        s.close()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_served_in_child)


def exit_watch(pid: int) -> int:
    """A descriptor that becomes readable when process `pid` ends (for the watchdog's select)."""
    return os.pidfd_open(pid)


def header_of(region: Region) -> Header:
    return Header.from_address(region.base)


def to_user(offset: int, regions, buffers) -> int:
    """Where an offset into the region lands among the caller's own arrays: the argument buffer
    nearest to it, shifted back to that array's address."""
    best = None
    for (lo, hi, _), off in zip(regions, buffers, strict=True):
        dist = off - offset if offset < off else max(0, offset - (off + hi - lo))
        if best is None or dist < best[0]:
            best = (dist, lo + (offset - off))
    return best[1] if best else offset


def runner_to_user(addr: int, regions, buffers, segments) -> int:
    """An address the runner reported, among the caller's arrays: the nearest argument buffer
    in the runner's address space (where the kernel computed it), shifted to that array."""
    best = None
    for (lo, hi, _), data, seg in zip(regions, buffers, segments, strict=True):
        if not seg.runner_addr:
            continue
        start = seg.runner_addr + (data - seg.off)
        dist = start - addr if addr < start else max(0, addr - (start + hi - lo))
        if best is None or dist < best[0]:
            best = (dist, lo + (addr - start))
    return best[1] if best else addr
