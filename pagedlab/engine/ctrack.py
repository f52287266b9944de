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
shared arena mapped at the same address in both (`pagedlab.engine.carena`), so the struct views here and
the pointers there name the same bytes; the heap and printf hooks are messages back to this
process (see `use_runner`). In a notebook or the explorer it is loaded here, in-process.

Builds are cached by content hash ($PAGEDLAB_CACHE/c, else ~/.cache/pagedlab/c).

This module is the facade (`load`, `CEngine`); the parts are `cbuild` (the compiler), `heap` (the
malloc/free hooks and the call outcomes), `cframes` (crashes at the C line) and `wire` (the
runner process and its wire format). Their public names are importable from here too.
"""

from __future__ import annotations

import ctypes
import keyword
import operator
import os
import signal
import sys
import types
from pathlib import Path

from .. import cmem
from ..harness import hw3
from . import carena

# The parts' public names, for callers of the facade (pagedlab.engine.ctrack.X).
from .cbuild import (  # noqa: F401
    ALTERNATE_FILES,
    C_API,
    C_SOURCE,
    INCLUDE,
    MODULE,
    Build,
    CCompileError,
    available,
    build,
    cache_dir,
    expect_layout,
    find_compiler,
)
from .cframes import (
    CFrame,  # noqa: F401
    fault_words,
    frames_in,
    freed_read,
)
from .heap import (  # noqa: F401
    CALL_TIMEOUT,
    HOOK,
    OUT_HOOK,
    PL_EXIT,
    PL_HEAP,
    PL_MISSING,
    PL_OK,
    PL_SIGNAL,
    PL_TIMEOUT,
    PL_TODO,
    TIMEOUT_ENV,
    CCrash,
    CExit,
    CTimeout,
    Diag,
    bytes_allocated,
    call_lock,
    call_timeout,
    heap_callback,
    heap_state,
    out_callback,
)
from .wire import (  # noqa: F401
    TRUSTED_ENV,
    Runner,
    RunnerGone,
    runner_mode,
    runner_name,
    runner_program,
    runners,
    use_runner,
    use_runner_for,
)

# ---------------------------------------------------------------------------------------------
# The module
# ---------------------------------------------------------------------------------------------
_libraries: dict[Path, ctypes.CDLL] = {}


def _library(b: Build) -> ctypes.CDLL:
    lib = _libraries.get(b.library)
    if lib is None:
        lib = ctypes.CDLL(str(b.library), mode=getattr(os, "RTLD_LOCAL", 0) | getattr(os, "RTLD_NOW", 2))
        lib.pl_set_hook.argtypes = [HOOK, OUT_HOOK, ctypes.c_double]
        lib.pl_set_hook.restype = None
        lib.pl_base.restype = ctypes.c_uint64
        lib.pl_layout.restype = ctypes.c_size_t
        lib.pl_layout.argtypes = [ctypes.c_int]
        expect_layout([lib.pl_layout(i) for i in range(4)])
        P, I, S = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
        signatures = {"llm_init": [P, S, P], "create_sequence": [P, I, I, P], "free_sequence": [P, I, P],
                      "fork_sequence": [P, I, I, P], "append_kv": [P, I, I, P], "llm_destroy": [P, P]}
        for name, args in signatures.items():
            fn = getattr(lib, f"pl_call_{name}")
            fn.argtypes, fn.restype = args, ctypes.c_int
        _libraries[b.library] = lib
    lib.pl_set_hook(heap_callback, out_callback, call_timeout())
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
        super().__init__(f"pagedlab_c.{MODULE}", f"{b.source} compiled by pagedlab.engine.ctrack")
        self.build = b
        self.source = b.source
        self.warnings = b.warnings
        self.__file__ = str(b.source)
        self._runner = None
        if runner_mode():  # the graded check child: the library runs in a process of its own
            key = (b.library, call_timeout())
            self._runner = runners.get(key) or runners.setdefault(key, Runner(b, call_timeout()))
            with call_lock:
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
        with call_lock:
            heap_state.error = None
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
        if status == PL_HEAP and heap_state.error is not None:
            exc, (file, line, function) = heap_state.error, heap_state.where
            heap_state.error = None
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
        mine = [f for f in frames_in(self.build.library, self._base, addresses, span)
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
            words = freed_read(d.signal, d.fault_addr, regs) or fault_words(d.signal, d.code, d.fault_addr, regs)
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
