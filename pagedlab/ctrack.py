"""The C track: a student's `llm_memory.c` as a `memory_manager` module.

The HW3 handout is C. This module compiles a folder's `llm_memory.c` against the shipped header
(`pagedlab/include/hw3.h`, the same layout as `pagedlab.hw3`) with the system C compiler
(`-std=c11 -Wall -Wextra -g`, warnings shown to the student), loads it with ctypes and exposes
the Python call shape the graded checks, the explorer and the pictures use: struct views in,
struct views (or None / -1) out. So the C file is graded by the very checks the Python file is.

Two things make C errors readable instead of fatal:

- `pl_heap.h` is force-included, so the student's malloc/calloc/realloc/free become calls into
  `pagedlab.cmem` with the C file, line and function: leaks, double frees and frees of bad
  pointers are reported at the C line (Valgrind style), and the checks' heap accounting sees
  C allocations exactly as it sees Python ones;
- every API call runs through a C trampoline (`pl_runtime.c`) that catches SIGSEGV, SIGBUS,
  SIGFPE, SIGILL, SIGABRT and a per-call time limit, jumps back, and reports here; the program
  counter becomes `llm_memory.c:LINE` through the debug info (addr2line). The exception is
  raised from a frame that carries the C file and line, so the checks' "your code raised ... at
  file:line" and a notebook traceback both point at the C source.

Where the library runs: in the graded check child, in a runner process with no Python in it
(`pagedlab/include/pl_runner.c`, sealed like the kernel runner), its heap and the pools in a
shared arena mapped at the same address in both (`pagedlab.carena`), so the struct views here and
the pointers there name the same bytes; the heap and printf hooks are messages back to this
process (see `use_runner`). In a notebook or the explorer it is loaded here, in-process.

Builds are cached by content hash ($PAGEDLAB_CACHE/c, else ~/.cache/pagedlab/c).
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import keyword
import operator
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import types
from dataclasses import dataclass
from pathlib import Path

from . import carena, cmem
from .harness import hw3

INCLUDE = Path(__file__).resolve().parent / "include"
C_SOURCE = "llm_memory.c"
MODULE = "memory_manager"
# Student files a C file can stand in for (the grader's intake and missing-file test read this).
ALTERNATE_FILES = {"memory_manager.py": (C_SOURCE,)}
STUDENT_FLAGS = ["-std=c11", "-Wall", "-Wextra", "-g", "-O0", "-fPIC", "-fno-omit-frame-pointer"]
RUNTIME_FLAGS = ["-std=gnu11", "-g", "-O1", "-fPIC", "-w"]
# -Bsymbolic: the library's calls to its own functions never bind to another loaded student's.
LINK_FLAGS = (["-dynamiclib", "-undefined", "dynamic_lookup"] if sys.platform == "darwin"
              else ["-shared", "-Wl,-Bsymbolic", "-Wl,-z,defs"])
TIMEOUT_ENV = "PAGEDLAB_C_CALL_TIMEOUT"
CALL_TIMEOUT = 2.0  # seconds one API call may run (the reference needs microseconds; 12 hung
# checks must still fit a task's 30 s)

PL_OK, PL_HEAP, PL_SIGNAL, PL_TIMEOUT, PL_MISSING, PL_BUSY, PL_EXIT, PL_TODO = range(8)
HEAP_MALLOC, HEAP_CALLOC, HEAP_REALLOC, HEAP_FREE = range(4)
SI_KERNEL = 0x80


class CCompileError(RuntimeError):
    """The C file did not compile or link; the message is the compiler's."""


class CCrash(RuntimeError):
    """The C code crashed (a signal) during a call; the message names the C line."""


class CExit(CCrash):
    """The C code called exit(): it would have ended the process, so the call was stopped."""


class CTimeout(CCrash):
    """A C call ran past its time limit (an infinite loop?); the message names the C line."""


def available() -> bool:
    """True when a C compiler is on PATH (or $CC names one)."""
    try:
        find_compiler()
    except CCompileError:
        return False
    return True


def find_compiler() -> str:
    env = os.environ.get("CC")
    for name in ([env] if env else ["cc", "gcc", "clang"]):
        path = shutil.which(name)
        if path:
            return path
    raise CCompileError("no C compiler found (looked for $CC, cc, gcc, clang): on Debian/Ubuntu "
                        "`apt install gcc`, on macOS `xcode-select --install`")


def cache_dir() -> Path:
    root = os.environ.get("PAGEDLAB_CACHE")
    base = Path(root).expanduser() / "c" if root else Path.home() / ".cache" / "pagedlab" / "c"
    try:
        base.mkdir(parents=True, exist_ok=True)
        if os.access(base, os.W_OK):
            return base
    except OSError:
        pass
    base = Path(tempfile.gettempdir()) / f"pagedlab-{os.getuid() if hasattr(os, 'getuid') else 'user'}" / "c"
    base.mkdir(parents=True, exist_ok=True)
    return base


# ---------------------------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Build:
    source: Path
    library: Path
    warnings: str
    seconds: float  # 0.0 when it came from the cache


def _run(cmd: list[str], cwd: Path, what: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=120)
    if proc.returncode != 0:
        log = proc.stderr.strip() or proc.stdout.strip()
        exc = CCompileError(f"{what} failed:\n{log}")
        exc.c_compile_log = log  # the compiler's own words, for the checks' one report of them
        exc.c_phase = what.split(" ", 1)[0]  # compiling | linking | building
        first = re.search(r"^[^\s:]*?llm_memory\.c:(\d+):(?:\d+:)? (?:fatal )?error", log, re.MULTILINE)
        exc.line = int(first.group(1)) if first else 0  # the first error, for the checks' "at file:line"
        raise exc
    return proc.stderr.strip()


def _runtime_object(cc: str, out: Path) -> Path:
    """pagedlab's C runtime, compiled once per compiler and runtime source: it is the same in every
    student's library and costs twice what a student's file does to compile."""
    digest = hashlib.sha256()
    # Every file of include/, not only what pl_runtime.c includes today: a header it starts to
    # include later must not leave a stale runtime in the cache.
    sources = sorted(p for p in INCLUDE.iterdir() if p.is_file())
    for part in [cc.encode(), " ".join(RUNTIME_FLAGS).encode()] + [p.name.encode() + p.read_bytes() for p in sources]:
        digest.update(part + b"\0")
    obj = out / f"pl_runtime-{digest.hexdigest()[:20]}.o"
    if not obj.is_file():
        with tempfile.TemporaryDirectory(dir=out) as tmp:
            _run([cc, *RUNTIME_FLAGS, "-I", str(INCLUDE), "-c", str(INCLUDE / "pl_runtime.c"), "-o",
                  str(Path(tmp) / "runtime.o")], Path(tmp), "compiling pagedlab's C runtime")
            os.replace(Path(tmp) / "runtime.o", obj)  # whole or absent: another build may be linking it
    return obj


def build(source: str | os.PathLike) -> Build:
    """Compile `source` (a student's llm_memory.c) with the tracked heap and the crash runtime."""
    source = Path(source).resolve()
    if not source.is_file():
        raise FileNotFoundError(f"{source} does not exist")
    cc = find_compiler()
    digest = hashlib.sha256()
    for part in [source.read_bytes(), str(source).encode(), cc.encode(), " ".join(STUDENT_FLAGS).encode()]:
        digest.update(part + b"\0")
    for name in ("hw3.h", "pl_heap.h", "pl_runtime.c"):
        digest.update((INCLUDE / name).read_bytes() + b"\0")
    key = digest.hexdigest()[:20]
    out = cache_dir()
    library, log = out / f"llm_memory-{key}.so", out / f"llm_memory-{key}.warnings"
    if library.is_file() and log.is_file():
        return Build(source, library, log.read_text(), 0.0)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        tmp = Path(tmp)
        # Compiled from its own folder, so __FILE__ and the debug info say "llm_memory.c".
        warnings = _run([cc, *STUDENT_FLAGS, "-include", "pl_heap.h", "-I", str(INCLUDE), "-c", source.name,
                         "-o", str(tmp / "student.o")], source.parent, f"compiling {source.name}")
        runtime = _runtime_object(cc, out)
        _run([cc, *LINK_FLAGS, str(tmp / "student.o"), str(runtime), "-o", str(tmp / "lib.so"),
              "-ldl", "-lpthread"], tmp, f"linking {source.name}")
        (tmp / "warnings").write_text(warnings)
        os.replace(tmp / "lib.so", library)
        os.replace(tmp / "warnings", log)
    return Build(source, library, warnings, round(time.perf_counter() - began, 3))


# ---------------------------------------------------------------------------------------------
# The runtime's report (pl_runtime.c's struct pl_diag) and the heap hook
# ---------------------------------------------------------------------------------------------
class Diag(ctypes.Structure):
    _fields_ = [("status", ctypes.c_int32), ("signal", ctypes.c_int32), ("code", ctypes.c_int32),
                ("nframes", ctypes.c_int32), ("nregs", ctypes.c_int32), ("exit_line", ctypes.c_int32),
                ("exit_file", ctypes.c_char * 256), ("exit_func", ctypes.c_char * 64),
                ("fault_addr", ctypes.c_uint64), ("pc", ctypes.c_uint64),
                ("frames", ctypes.c_uint64 * 48), ("regs", ctypes.c_uint64 * 32)]


HOOK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t,
                        ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p))


class _HeapState:
    error: BaseException | None = None
    where: tuple = ("", 0, "")  # (file, line, function) of the failing heap call
    bytes_allocated = 0         # by C code through the hook, ever (Valgrind's "bytes allocated")


_state = _HeapState()


def bytes_allocated() -> int:
    """Bytes the C code has obtained from malloc/calloc/realloc in this process (freed or not)."""
    return _state.bytes_allocated


def _heap_hook(kind, ptr, count, size, file, line, func, out):
    """malloc/calloc/realloc/free of the student's C code, in cmem's ledger. Never raises: a heap
    error is kept for the trampoline's caller, and 1 makes the C side jump back at once."""
    failed, out[0] = _heap_request(kind, ptr, count, size, file, line, func)
    return failed


def _heap_request(kind, ptr, count, size, file, line, func) -> tuple[int, int | None]:
    """(failed, address) for one heap call of the C code, in-process or from the runner."""
    out = None
    try:
        filename = (file or b"?").decode(errors="replace")
        function = (func or b"?").decode(errors="replace")
        where = f"{os.path.basename(filename)}:{line} in {function}"
        try:
            if kind == HEAP_MALLOC:
                out = _guarded(cmem._c_alloc(size, zeroed=False, where=where), size)
            elif kind == HEAP_CALLOC:
                if size and count > (1 << 62) // size:
                    raise MemoryError("calloc size overflows")
                out = _guarded(cmem._c_alloc(count * size, zeroed=True, where=where), count * size)
            elif kind == HEAP_REALLOC:
                out = _realloc(ptr or 0, size, where)
            else:
                _expect_not_poison(ptr or 0, "free")
                _expect_guard(ptr or 0, where)
                cmem.free(ptr or 0, where=where)
                # The bytes the runtime may make unreadable until the call returns (its pages).
                out = cmem.page_span(ptr) if ptr else 0
        except MemoryError:
            out = None  # what C's allocator says when it cannot: NULL
        else:
            if kind != HEAP_FREE and out:
                _state.bytes_allocated += size * (count if kind == HEAP_CALLOC else 1)
        return 0, out
    except BaseException as exc:  # noqa: BLE001 - reported once control is back in Python
        _state.error = exc
        _state.where = (filename if "filename" in locals() else "?", line, function if "function" in locals() else "?")
        return 1, None


def _expect_not_poison(ptr: int, call: str) -> None:
    if ptr == cmem.FREED_POINTER:
        raise cmem.UseAfterFree(f"use after free: {call}({ptr:#x}) of a pointer read out of freed memory "
                                f"(0xdddd... is the poison free() leaves): free the inner tables before "
                                f"the struct that holds them")
    if ptr == int.from_bytes(bytes([cmem.UNINIT_BYTE]) * 8, "little"):
        raise cmem.InvalidFree(f"{call}({ptr:#x}) of an uninitialised pointer (0xcdcd... is malloc'd "
                               f"memory never written)")


# The slack libc leaves after a block (malloc_usable_size - size; the arena's blocks have the same
# sizes) is filled with GUARD_BYTE when C
# code allocates it and checked when it is freed: an off-by-one write past the end of an L2 table
# (`i <= L2_PT_SIZE`) is reported at free time with the block's C line, before it can corrupt
# libc's heap. Writes beyond the slack are not caught here (ASan does: pagedlab.cnative).
GUARD_BYTE = 0xFB
_guards: dict[int, tuple] = {}  # address -> (size, slack, allocation) of blocks C code allocated
try:
    _usable = ctypes.CDLL(None).malloc_usable_size
    _usable.argtypes, _usable.restype = [ctypes.c_void_p], ctypes.c_size_t
except AttributeError:  # not glibc: no slack guard
    _usable = None


def _guarded(addr: int | None, size: int) -> int | None:
    arena = carena.for_c_blocks()  # where the C code's blocks come from (libc where it is None)
    usable = arena.usable if arena is not None and addr and arena.owns(addr) else _usable
    if addr and usable is not None:
        slack = min(usable(addr) - size, 64)
        if slack > 0:
            ctypes.memset(addr + size, GUARD_BYTE, slack)
            _guards[addr] = (size, slack, cmem.allocation_at(addr))
    return addr


def _expect_guard(addr: int, where: str) -> None:
    guard = _guards.pop(addr, None)
    # A stale entry (the harness freed the block and the address came back from Python) is not ours.
    if guard is None or cmem.allocation_at(addr) is not guard[2]:
        return
    size, slack, _ = guard
    tail = ctypes.string_at(addr + size, slack)
    if tail != bytes([GUARD_BYTE]) * slack:
        last = max(i for i, b in enumerate(tail) if b != GUARD_BYTE)
        block = cmem.allocation_at(addr)
        raise cmem.InvalidAccess(
            f"heap buffer overflow: up to {last + 1} bytes were written past the end of the block "
            f"{block} (found when it was freed at {where}); an index one past the end, "
            f"e.g. `i <= L2_PT_SIZE` instead of `i < L2_PT_SIZE`?")


def _realloc(ptr: int, size: int, where: str) -> int | None:
    _expect_not_poison(ptr, "realloc")
    _expect_guard(ptr, where)
    if not ptr:
        return _guarded(cmem._c_alloc(size, zeroed=False, where=where), size)
    old = cmem.allocation_at(ptr)
    if old is None:
        cmem.free(ptr, where=where)  # raises the right error (double free / never allocated)
    if size == 0:
        cmem.free(ptr, where=where)
        return None
    new = _guarded(cmem._c_alloc(size, zeroed=False, where=where), size)
    ctypes.memmove(new, ptr, min(old.size, size))
    cmem.free(ptr, where=where)
    return new


OUT_HOOK = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p)


def _out_hook(stream, text):
    """printf & co. of the C code, into Python's streams (a notebook shows them)."""
    try:
        (sys.stderr if stream == 2 else sys.stdout).write((text or b"").decode(errors="replace"))
    except BaseException:  # noqa: BLE001 - printing must never unwind through C
        pass


# The C code's blocks come from pages of their own (carena.for_c_blocks), so a block freed during
# a call can be made unreadable for the rest of it (pl_runtime.c's pl_free).
cmem._c_arena_source = carena.for_c_blocks
_hook = HOOK(_heap_hook)  # one for every library; kept alive for the life of the process
_out = OUT_HOOK(_out_hook)
_lock = threading.RLock()


def call_timeout() -> float:
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    try:
        value = float(text) if text else CALL_TIMEOUT
    except ValueError:
        raise ValueError(f"{TIMEOUT_ENV} must be a number of seconds, got {text!r}") from None
    return value if value > 0 else CALL_TIMEOUT


# ---------------------------------------------------------------------------------------------
# Runner mode: the library runs in pl_runner.c's process, with no Python in it
# ---------------------------------------------------------------------------------------------
RUNNER_SOURCE = INCLUDE / "pl_runner.c"
SEAL_HEADER = INCLUDE.parent / "cuda" / "pl_seal.h"
RUNNER_FLAGS = ["-std=gnu11", "-O1", "-w"]
# Records (pl_runner.c's struct pl_rec and struct pl_req): fixed sizes, little-endian.
RECORD_BYTES, REQUEST_BYTES, PAYLOAD_BYTES = 1280, 32, 1240
_REC_HEAD = struct.Struct("<IiiiQQQ")   # kind, a, b, c, x, y, z
_REQ = struct.Struct("<IiQQQ")
REC_READY, REC_ERROR, REC_HEAP, REC_OUT, REC_DONE = range(1, 6)
REQ_CALL, REQ_HEAP_REPLY = 1, 2
# Seconds past the runner's own per-call limit before this side gives up on it (a library that
# blocks SIGALRM): the runner is killed and the call reported as a timeout.
RUNNER_SLACK = 2.0


def runner_mode() -> bool:
    """Whether C libraries run in a runner process (the shared arena is active): in the graded
    check child, which calls `use_runner` before any check runs."""
    return carena.current() is not None


def use_runner(on: bool = True) -> None:
    """From now on, load C libraries into runner processes (on=False: in-process again, for
    tests). Before any Pool or cmem block the C code will see is made: those must come from the
    shared arena.

    Why not always: in a notebook or the explorer the library runs in the student's own kernel,
    where nothing of a grader lives, and in-process calls cost nothing per malloc (the runner's
    cost a round trip each). The check child holds the grader's drivers and the student's record:
    there the library must not share an interpreter with them."""
    carena.activate(on)


def use_runner_for(folder) -> None:
    """What the check child does before its checks run: a folder whose Part A is graded from C
    (`track.decide`; the grader sends its decision as PAGEDLAB_TRACK) gets the runner. Linux
    only (memfd, fixed shared mappings, seccomp): elsewhere (a student's
    Mac) the library is loaded in-process, as in a notebook; graders run on Linux."""
    from . import track

    if sys.platform.startswith("linux") and track.decide(folder).name == "c":
        use_runner()


def runner_name() -> str:
    """pl_runner.c's program name for this compiler and source (a content hash)."""
    digest = hashlib.sha256()
    for part in [find_compiler().encode(), " ".join(RUNNER_FLAGS).encode(), RUNNER_SOURCE.read_bytes(),
                 SEAL_HEADER.read_bytes()]:
        digest.update(part + b"\0")
    return f"pl-runner-{digest.hexdigest()[:20]}"


# Root's folder of pagedlab's own builds, handed to a grading child (sandbox.trusted_builds.CHILD_ENV,
# cuda.compiler.TRUSTED_ENV: the same name).
TRUSTED_ENV = "PAGEDLAB_TRUSTED_BUILDS"


def _trusted_runner(name: str) -> Path | None:
    """Root's build of the runner, when the grader handed this process its folder of trusted
    builds (sandbox.trusted_builds: root's own, nobody else's to write)."""
    folder = os.environ.get(TRUSTED_ENV)
    path = Path(folder) / name if folder else None
    return path if path is not None and os.access(path, os.X_OK) else None


def runner_program(into: Path | None = None, copy_from: Path | None = None) -> Path:
    """pl_runner.c compiled once per compiler and source: root's trusted build in a grading child
    that was given one (the job's cache is the sandbox user's to write: a program planted there
    would run unsealed as the runner), else built in the build cache; or in `into`, copied from
    `copy_from` when it has it (sandbox.trusted_builds fills root's folder so)."""
    name = runner_name()
    if into is None and (found := _trusted_runner(name)):
        return found
    out = into or cache_dir()
    program = out / name
    if program.is_file():
        return program
    original = copy_from / name if copy_from is not None and Path(copy_from).resolve() != out.resolve() else None
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        if original is not None and original.is_file():
            shutil.copy(original, Path(tmp) / "runner")  # with its mode
        else:
            _run([find_compiler(), *RUNNER_FLAGS, "-I", str(SEAL_HEADER.parent), str(RUNNER_SOURCE), "-o",
                  str(Path(tmp) / "runner"), *([] if sys.platform == "darwin" else ["-ldl"])], Path(tmp),
                 "building pagedlab's C runner")
        os.replace(Path(tmp) / "runner", program)
    return program


class RunnerGone(CCrash):
    """The runner process ended (or broke the protocol) during a call: the C code killed it."""


class _Runner:
    """One runner process for one library: started on first use and again after it died."""

    def __init__(self, b: Build, seconds: float):
        self.build, self.seconds = b, seconds
        self.pid = 0
        self.base = self.span = 0
        self.diag = Diag()

    def start(self) -> None:
        if self.pid:
            return
        arena = carena.current()
        program = runner_program()
        req_r, req_w = os.pipe()
        rec_r, rec_w = os.pipe()
        # Above 9, so the dup2s onto 3, 4 and 5 never overwrite each other's source.
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (arena.fd, req_r, rec_w)]
        try:
            self.pid = os.posix_spawn(
                str(program), [str(program), str(self.build.library), hex(arena.base), str(arena.size),
                               repr(self.seconds), str(os.getpid())], {},
                file_actions=[(os.POSIX_SPAWN_DUP2, high[0], 3), (os.POSIX_SPAWN_DUP2, high[1], 4),
                              (os.POSIX_SPAWN_DUP2, high[2], 5)])
        except BaseException:
            os.close(req_w)
            os.close(rec_r)
            raise
        finally:
            for fd in (*high, req_r, rec_w):
                os.close(fd)
        self.req, self.rec = req_w, rec_r
        deadline = time.monotonic() + max(30.0, self.seconds + RUNNER_SLACK)
        try:
            kind, a, b_, _, x, y, _, payload = self._read(deadline, "loading the library")
            if kind == REC_ERROR:
                why = payload.split(b"\0", 1)[0].decode(errors="replace")[:500]
                raise CCrash(f"the C library could not start in its runner process: {why}")
            if kind != REC_READY:
                raise RunnerGone(f"the C runner process sent a record of kind {kind} before it was ready")
            _expect_layout(list(struct.unpack_from("<4Q", payload)))
            self.base, self.span, self.locked = x, y, (a, b_)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> str:
        """End the runner; how it ended, in words."""
        if not self.pid:
            return "not running"
        for fd in (self.req, self.rec):
            os.close(fd)
        pid, self.pid = self.pid, 0
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
            if not done:
                time.sleep(0.01)
                done, status = os.waitpid(pid, os.WNOHANG)
            if not done:
                os.kill(pid, signal.SIGKILL)
                _, status = os.waitpid(pid, 0)
                return "it was still running and was killed"
        except ChildProcessError:
            return "it ended"
        if os.WIFSIGNALED(status):
            try:
                name = signal.Signals(os.WTERMSIG(status)).name
            except ValueError:
                name = f"signal {os.WTERMSIG(status)}"
            return f"it was killed by {name}"
        return f"it exited with status {os.WEXITSTATUS(status)}"

    def _read(self, deadline: float, during: str):
        """One whole record, or RunnerGone / CTimeout (the runner is stopped then)."""
        data = b""
        while len(data) < RECORD_BYTES:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.rec], [], [], left)[0]:
                self.stop()
                raise CTimeout(f"{during} did not return within {self.seconds:g} s and the C code did not stop "
                               f"at the time limit, so its runner process was killed (an infinite loop with "
                               f"SIGALRM blocked?)")
            chunk = os.read(self.rec, RECORD_BYTES - len(data))
            if not chunk:
                how = self.stop()
                raise RunnerGone(f"{during} ended the process that runs the C code ({how}): the C code "
                                 f"ended its own process (_exit, a signal it sent itself, or a crash the "
                                 f"trampoline could not catch)")
            data += chunk
        return (*_REC_HEAD.unpack_from(data), data[_REC_HEAD.size:_REC_HEAD.size + PAYLOAD_BYTES])

    def _send(self, kind: int, a: int, x: int = 0, y: int = 0, z: int = 0) -> None:
        data = _REQ.pack(kind, a, x & (2**64 - 1), y & (2**64 - 1), z & (2**64 - 1))
        try:
            while data:
                data = data[os.write(self.req, data):]
        except OSError:
            how = self.stop()
            raise RunnerGone(f"the process that runs the C code is gone ({how})") from None

    def call(self, name: str, args) -> tuple[int, int]:
        """(status, returned value) of pl_call_NAME(args) in the runner; self.diag filled in."""
        self.start()
        self._send(REQ_CALL, C_API.index(name), *args)  # pl_runner.c's NAMES
        deadline = time.monotonic() + self.seconds + RUNNER_SLACK
        during = f"{name}()"
        while True:
            kind, a, b_, _, x, y, z, payload = self._read(deadline, during)
            if kind == REC_HEAP and 0 <= a <= HEAP_FREE:
                file, func = payload[:256].split(b"\0", 1)[0], payload[256:320].split(b"\0", 1)[0]
                failed, out = _heap_request(a, x, y, z, file, b_, func)
                self._send(REQ_HEAP_REPLY, failed, out or 0)
            elif kind == REC_OUT and a in (1, 2) and 0 <= b_ <= PAYLOAD_BYTES:
                _out_hook(a, payload[:b_])
            elif kind == REC_DONE:
                self.diag = Diag.from_buffer_copy(payload[:ctypes.sizeof(Diag)])
                return a, x
            else:
                how = self.stop()
                raise RunnerGone(f"{during}: the process that runs the C code sent a malformed record "
                                 f"(kind {kind}); it was stopped ({how})")


_runners: dict[tuple, _Runner] = {}


# ---------------------------------------------------------------------------------------------
# From a program counter to llm_memory.c:LINE
# ---------------------------------------------------------------------------------------------
class _DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]


_libdl = ctypes.CDLL(None)


@dataclass(frozen=True)
class CFrame:
    function: str
    file: str      # as in the debug info
    line: int

    def __str__(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line} in {self.function}"


def _frames_in(library: Path, base: int, addresses: list[tuple[int, bool]], span: int | None = None) -> list[CFrame]:
    """Source positions of the addresses that fall in `library` (exact PC or return address).
    `span`: the library is loaded in the runner at `base`, `span` bytes long (not here)."""
    offsets = []
    for addr, exact in addresses[:64]:
        if span is not None:
            if base < addr <= base + span:
                offsets.append(addr - base - (0 if exact else 1))
            continue
        info = _DlInfo()
        if not _libdl.dladdr(ctypes.c_void_p(addr), ctypes.byref(info)) or not info.fname:
            continue
        if info.fbase != base:
            continue
        offsets.append(addr - base - (0 if exact else 1))
    if not offsets:
        return []
    tool = shutil.which("addr2line")
    if tool is None:
        return []
    try:
        proc = subprocess.run([tool, "-e", str(library), "-f", "-C", *[hex(o) for o in offsets]],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    lines = proc.stdout.splitlines()
    frames = []
    for function, position in zip(lines[0::2], lines[1::2], strict=False):
        file, _, number = position.partition(" ")[0].rpartition(":")
        if number.isdigit():
            frames.append(CFrame(function, file, int(number)))
    return frames


def _source_line(path: Path, line: int) -> str:
    try:
        return path.read_text(errors="replace").splitlines()[line - 1].strip()
    except (OSError, IndexError):
        return ""


_REG_ERR = 19  # x86-64 Linux: gregs[REG_ERR], the page fault's error code (bit 1: a write)


def _freed_read(sig: int, addr: int, regs: list[int]) -> str:
    """A fault inside a block freed earlier in the call (its pages fenced, pl_runtime.c): the
    access itself, at the line that made it, in words; "" for any other fault."""
    if sig != signal.SIGSEGV or not addr:
        return ""
    block = cmem.freed_block_at(addr)
    if block is None:
        return ""
    access = "an access to"
    if sys.platform.startswith("linux") and os.uname().machine == "x86_64" and len(regs) > _REG_ERR:
        access = "a write to" if regs[_REG_ERR] & 2 else "a read of"
    return (f"{access} freed memory (use after free): {addr - block.address} bytes into the "
            f"{block.size}-byte block allocated at {block.where} and freed at {block.freed_at}")


def _fault_words(sig: int, code: int, addr: int, regs: list[int]) -> str:
    """What the faulting access was, in words a student can act on."""
    poisoned = {r >> 32 for r in regs}
    if sig in (signal.SIGSEGV, signal.SIGBUS):
        if code == SI_KERNEL or addr == 0 and 0xDDDDDDDD in poisoned:
            if 0xDDDDDDDD in poisoned:
                return ("a pointer read out of freed memory (0xdddd..., the poison of free): use after free")
            if 0xCDCDCDCD in poisoned:
                return "an uninitialised pointer (0xcdcd..., malloc'd memory never written)"
            return "a wild pointer (a non-canonical address)"
        if addr < 4096:
            return (f"a NULL pointer dereference (address {addr:#x}: "
                    + ("NULL itself)" if addr == 0 else f"a field at offset {addr} of a NULL struct pointer)"))
        if addr >> 32 in (0xDDDDDDDD, 0xCDCDCDCD):
            return f"address {addr:#x}: a pointer from freed (0xdd) or uninitialised (0xcd) memory"
        return f"address {addr:#x}, which is not mapped (a stale or wild pointer?)"
    if sig == signal.SIGFPE:
        return "an arithmetic error (integer division or modulo by zero?)"
    if sig == signal.SIGABRT:
        return "abort() was called (a failed assert?)"
    if sig == signal.SIGILL:
        return "an illegal instruction (a function that fell off its end without a return?)"
    return "a fatal signal"


# ---------------------------------------------------------------------------------------------
# The module
# ---------------------------------------------------------------------------------------------
_libraries: dict[Path, ctypes.CDLL] = {}


def _expect_layout(got: list[int]) -> None:
    """`got`: the library's pl_layout(0..3), the sizes and offsets hw3.h gives the structs."""
    want = [ctypes.sizeof(hw3.Sequence), hw3.Sequence.node.offset, ctypes.sizeof(hw3.LLMEngine),
            hw3.LLMEngine.active_seqs.offset]
    if got != want:
        raise RuntimeError(f"hw3.h and pagedlab.hw3 disagree on the struct layout: C {got}, Python {want}")


def _library(b: Build) -> ctypes.CDLL:
    lib = _libraries.get(b.library)
    if lib is None:
        lib = ctypes.CDLL(str(b.library), mode=getattr(os, "RTLD_LOCAL", 0) | getattr(os, "RTLD_NOW", 2))
        lib.pl_set_hook.argtypes = [HOOK, OUT_HOOK, ctypes.c_double]
        lib.pl_set_hook.restype = None
        lib.pl_base.restype = ctypes.c_uint64
        lib.pl_layout.restype = ctypes.c_size_t
        lib.pl_layout.argtypes = [ctypes.c_int]
        _expect_layout([lib.pl_layout(i) for i in range(4)])
        P, I, S = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
        signatures = {"llm_init": [P, S, P], "create_sequence": [P, I, I, P], "free_sequence": [P, I, P],
                      "fork_sequence": [P, I, I, P], "append_kv": [P, I, I, P], "llm_destroy": [P, P]}
        for name, args in signatures.items():
            fn = getattr(lib, f"pl_call_{name}")
            fn.argtypes, fn.restype = args, ctypes.c_int
        _libraries[b.library] = lib
    lib.pl_set_hook(_hook, _out, call_timeout())
    return lib


def _c_int(value, name: str) -> int:
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int (a C int), not {type(value).__name__}") from None
    if isinstance(value, bool) or not -(2**31) <= number < 2**31:
        raise ValueError(f"{name} must fit a C int (-2**31 .. 2**31-1), got {value!r}")
    return number


def _all_c_ints(*values) -> bool:
    """Whether C's `int` parameters could receive these (the Python track's is_c_int)."""
    try:
        for value in values:
            _c_int(value, "argument")
    except (TypeError, ValueError):
        return False
    return True


def _pointer(value, name: str) -> int:
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"{name} must be an address >= 0, got {value}")
        return value
    if isinstance(value, (ctypes.Structure, ctypes._Pointer, ctypes.c_void_p)):
        return cmem.address(value)
    raise TypeError(f"{name} must be a struct view, an address (int) or None, not {type(value).__name__}")


def _raise_at(exc: BaseException, path: Path, line: int, function: str):
    """Raise `exc` from a frame that says `path:line in function`, so tracebacks and the checks'
    messages point at the C source (the frame's code is compiled with the C file's name)."""
    name = function if function.isidentifier() and not keyword.iskeyword(function) else "c_code"
    line = min(line, 1 << 20)  # a line number from C's report: no source is that long
    code = compile("\n" * max(line - 1, 0) + f"def {name}(): raise _pl_exc\n", str(path), "exec")
    namespace = {"_pl_exc": exc.with_traceback(None)}  # the C line, not cmem's, is the innermost frame
    exec(code, namespace)  # noqa: S102 - defines one function that raises `exc`
    namespace[name]()


class NoCVersion(AttributeError):
    """A function of memory_manager.py that llm_memory.c cannot offer: the task that needs it was
    added after the C track was built (the C API is pagedlab/include/hw3.h, a `pl_call_NAME`
    trampoline in pagedlab/include/pl_runtime.c and a method of CEngine). Not the student's bug:
    its message is shown as it is, never as "your code raised"."""

    plain_text = True


class CEngine(types.ModuleType):
    """A compiled llm_memory.c with the memory_manager call shape (see the module docstring)."""

    def __init__(self, b: Build):
        super().__init__(f"pagedlab_c.{MODULE}", f"{b.source} compiled by pagedlab.ctrack")
        self.build = b
        self.source = b.source
        self.warnings = b.warnings
        self.__file__ = str(b.source)
        self._runner = None
        if runner_mode():  # the graded check child: the library runs in a process of its own
            key = (b.library, call_timeout())
            self._runner = _runners.get(key) or _runners.setdefault(key, _Runner(b, call_timeout()))
            with _lock:
                self._runner.start()
        else:
            self._lib = _library(b)
            self._base = self._lib.pl_base()
            self._diag = Diag.in_dll(self._lib, "pl_diag")
        for name in ("BLOCK_SIZE", "KV_PER_BLOCK", "L1_PT_SIZE", "L2_PT_SIZE", "MAX_LOGICAL_BLOCKS",
                     "ListNode", "Sequence", "LLMEngine", "container_of"):
            setattr(self, name, getattr(hw3, name))

    def __repr__(self) -> str:
        return f"<C memory_manager from {self.source}>"

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        offered = ", ".join(f"{n}()" for n in C_API)
        raise NoCVersion(
            f"no C version of this task: {self.source.name} stands in for memory_manager.py only for "
            f"{offered}, and this task calls {name}(), which the C track does not have. Your C code is "
            f"not at fault: this task needs memory_manager.py, graded as the Python track (write python "
            f"in exercises/track.txt, or pass --track python)")

    # -- calling -----------------------------------------------------------------------------
    def _call(self, name: str, *args, out) -> None:
        with _lock:
            _state.error = None
            arena = carena.for_c_blocks()
            if arena is not None:
                arena.calls += 1  # blocks freed in the call may be fenced until it returns
            try:
                if self._runner is not None:
                    status, out.value = self._runner.call(name, args)
                    self._diag, self._base = self._runner.diag, self._runner.base
                else:
                    status = getattr(self._lib, f"pl_call_{name}")(*args, ctypes.byref(out))
            finally:
                if arena is not None:
                    arena.calls -= 1
            if status == PL_OK:
                return
            error = self._error(name, status)
        exc, where = error
        if where is None:
            raise exc
        _raise_at(exc, *where)

    def _error(self, name: str, status: int):
        if status == PL_MISSING:
            return NotImplementedError(f"{self.source.name} defines no function {name}()"), None
        if status == PL_HEAP and _state.error is not None:
            exc, (file, line, function) = _state.error, _state.where
            _state.error = None
            path = self.source.parent / file if file and file != "?" else self.source
            return exc, (path, line, function)
        if status in (PL_SIGNAL, PL_TIMEOUT):
            return self._crash(name, status)
        if status == PL_TODO:  # a stub's PL_NOT_IMPLEMENTED("Task N: ..."), as Python's raise
            d = self._diag
            label, function = d.exit_file.decode(errors="replace"), d.exit_func.decode(errors="replace")
            return NotImplementedError(label), (self.source, d.exit_line, function)
        if status == PL_EXIT:
            d = self._diag
            file, function = d.exit_file.decode(errors="replace"), d.exit_func.decode(errors="replace")
            exc = CExit(f"{name}() called exit({d.code}) in {function}, {os.path.basename(file)}:{d.exit_line}: "
                        f"exit() would end the whole program; return an error value (NULL / -1) instead")
            return exc, (self.source.parent / file, d.exit_line, function)
        return RuntimeError(f"the C runtime refused the call to {name} (status {status})"), None

    def _crash(self, name: str, status: int):
        d = self._diag
        frames = list(d.frames[:max(0, min(d.nframes, len(d.frames)))])
        addresses = [(a, a == d.pc) for a in frames]
        span = self._runner.span if self._runner is not None else None
        mine = [f for f in _frames_in(self.build.library, self._base, addresses, span)
                if os.path.basename(f.file) == self.source.name]
        where = mine[0] if mine else None
        regs = list(d.regs[:max(0, min(d.nregs, len(d.regs)))])
        if where is not None:
            callers = "".join(f", called from {f.function} ({os.path.basename(f.file)}:{f.line})" for f in mine[1:3])
            place = f"{where.function}, {self.source.name}:{where.line}{callers}"
        else:
            place = f"no line of {self.source.name} on the stack (addr2line missing, or inside a library)"
        if status == PL_TIMEOUT:
            what = f"{name}() did not return within {call_timeout():g} s (an infinite loop?): it was running {place}"
            exc_type = CTimeout
        else:
            try:
                signame = signal.Signals(d.signal).name
            except ValueError:
                signame = f"signal {d.signal}"
            words = _freed_read(d.signal, d.fault_addr, regs) or _fault_words(d.signal, d.code, d.fault_addr, regs)
            if d.signal == signal.SIGSEGV and d.nframes >= 40 and len(mine) >= 3 and len({f.function for f in mine[:3]}) == 1:
                words = "a stack overflow (a function that calls itself without end?)"
            what = f"{name}() crashed with {signame}, {words}, in {place}"
            exc_type = CCrash
        what += "; the C code was stopped there, so the engine may be half-updated"
        exc = exc_type(what)
        if where is None:
            return exc, None
        return exc, (self.source, where.line, where.function)

    @staticmethod
    def _view(struct_type, address: int | None, name: str):
        if not address:
            return None
        try:
            return cmem.view(struct_type, address)
        except cmem.HeapError as exc:
            raise cmem.InvalidAccess(f"{name} returned {address:#x}, which is not a live {struct_type.__name__} "
                                     f"from malloc: {exc}") from None

    # -- the API -----------------------------------------------------------------------------
    def llm_init(self, pool_addr, pool_size):
        pool = _pointer(pool_addr, "pool_addr")
        try:
            size = operator.index(pool_size)
        except TypeError:
            raise TypeError(f"pool_size must be an int (a size_t), not {type(pool_size).__name__}") from None
        if size < 0 or size >= 2**63:
            raise ValueError(f"pool_size must be a byte count >= 0, got {pool_size!r}")
        out = ctypes.c_void_p()
        self._call("llm_init", pool, size, out=out)
        return self._view(hw3.LLMEngine, out.value, "llm_init")

    def create_sequence(self, engine, seq_id, initial_kv_len):
        if not _all_c_ints(seq_id, initial_kv_len):
            return None  # C could not even be called with these: bad input, nothing changes
        out = ctypes.c_void_p()
        self._call("create_sequence", _pointer(engine, "engine"), _c_int(seq_id, "seq_id"),
                   _c_int(initial_kv_len, "initial_kv_len"), out=out)
        return self._view(hw3.Sequence, out.value, "create_sequence")

    def free_sequence(self, engine, seq_id):
        if not _all_c_ints(seq_id):
            return -1
        out = ctypes.c_int()
        self._call("free_sequence", _pointer(engine, "engine"), _c_int(seq_id, "seq_id"), out=out)
        return out.value

    def fork_sequence(self, engine, parent_seq_id, new_seq_id):
        if not _all_c_ints(parent_seq_id, new_seq_id):
            return None
        out = ctypes.c_void_p()
        self._call("fork_sequence", _pointer(engine, "engine"), _c_int(parent_seq_id, "parent_seq_id"),
                   _c_int(new_seq_id, "new_seq_id"), out=out)
        return self._view(hw3.Sequence, out.value, "fork_sequence")

    def append_kv(self, engine, seq_id, kv_data):
        if not _all_c_ints(seq_id, kv_data):
            return -1
        out = ctypes.c_int()
        self._call("append_kv", _pointer(engine, "engine"), _c_int(seq_id, "seq_id"),
                   _c_int(kv_data, "kv_data"), out=out)
        return out.value

    def llm_destroy(self, engine):
        out = ctypes.c_int()
        self._call("llm_destroy", _pointer(engine, "engine"), out=out)
        return out.value

    def find_sequence(self, engine, seq_id):
        """Harness-side lookup (read only), as the Python module's given helper."""
        return hw3.find(engine, seq_id)

    @staticmethod
    def list_for_each(head):
        """Harness-side walk (read only) of an intrusive list, as memory_manager.py's given helper
        (`next` is read before a node is yielded, so the caller may unlink and free it): the C
        file's own loops are `for` statements, and notebooks 03 and 05 walk lists with this."""
        node = head.next.contents
        while ctypes.addressof(node) != ctypes.addressof(head):
            following = node.next.contents
            yield node
            node = following


# The functions the C track offers (CEngine's methods that call into llm_memory.c).
C_API = ("llm_init", "create_sequence", "free_sequence", "fork_sequence", "append_kv", "llm_destroy")


def load(source: str | os.PathLike, *, show_warnings: bool = True) -> CEngine:
    """Compile (or take from the cache) and load a llm_memory.c; compiler warnings go to stderr."""
    try:
        b = build(source)
    except CCompileError as exc:
        if not getattr(exc, "line", 0):
            raise
        _raise_at(exc, Path(source).resolve(), exc.line, "compile")
    if b.warnings and show_warnings:
        print(f"{b.source.name}: compiler warnings (-Wall -Wextra):\n{b.warnings}", file=sys.stderr)
    return CEngine(b)
