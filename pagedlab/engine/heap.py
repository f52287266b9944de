"""The C library's malloc/free, routed through pagedlab's tracked heap.

`pl_heap.h` turns the student's malloc/calloc/realloc/free into calls to one hook with the C
file, line and function; the hook allocates from `pagedlab.cmem` (or the shared arena in runner
mode), so leaks, double frees and frees of bad pointers are reported at the C line, and the
checks' heap accounting sees C allocations as it sees Python ones. Guard bytes after each block
catch a small overrun at free time. Also here: what a C call's outcome codes mean (PL_*), and the
errors a crash, an exit() or a hang becomes.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading

from .. import cmem
from . import carena

TIMEOUT_ENV = "PAGEDLAB_C_CALL_TIMEOUT"
CALL_TIMEOUT = 2.0  # seconds one API call may run (the reference needs microseconds; 12 hung
# checks must still fit a task's 30 s)

PL_OK, PL_HEAP, PL_SIGNAL, PL_TIMEOUT, PL_MISSING, PL_BUSY, PL_EXIT, PL_TODO = range(8)
HEAP_MALLOC, HEAP_CALLOC, HEAP_REALLOC, HEAP_FREE = range(4)
SI_KERNEL = 0x80


class CCrash(RuntimeError):
    """The C code crashed (a signal) during a call; the message names the C line."""


class CExit(CCrash):
    """The C code called exit(): it would have ended the process, so the call was stopped."""


class CTimeout(CCrash):
    """A C call ran past its time limit (an infinite loop?); the message names the C line."""


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


heap_state = _HeapState()


def bytes_allocated() -> int:
    """Bytes the C code has obtained from malloc/calloc/realloc in this process (freed or not)."""
    return heap_state.bytes_allocated


def _heap_hook(kind, ptr, count, size, file, line, func, out):
    """malloc/calloc/realloc/free of the student's C code, in cmem's ledger. Never raises: a heap
    error is kept for the trampoline's caller, and 1 makes the C side jump back at once."""
    failed, out[0] = heap_request(kind, ptr, count, size, file, line, func)
    return failed


def heap_request(kind, ptr, count, size, file, line, func) -> tuple[int, int | None]:
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
                heap_state.bytes_allocated += size * (count if kind == HEAP_CALLOC else 1)
        return 0, out
    except BaseException as exc:  # noqa: BLE001 - reported once control is back in Python
        heap_state.error = exc
        heap_state.where = (filename if "filename" in locals() else "?", line, function if "function" in locals() else "?")
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
# libc's heap. Writes beyond the slack are not caught here (ASan does: pagedlab.engine.cnative).
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


def out_hook(stream, text):
    """printf & co. of the C code, into Python's streams (a notebook shows them)."""
    try:
        (sys.stderr if stream == 2 else sys.stdout).write((text or b"").decode(errors="replace"))
    except BaseException:  # noqa: BLE001 - printing must never unwind through C
        pass


# The C code's blocks come from pages of their own (carena.for_c_blocks), so a block freed during
# a call can be made unreadable for the rest of it (pl_runtime.c's pl_free).
cmem._c_arena_source = carena.for_c_blocks
heap_callback = HOOK(_heap_hook)  # one for every library; kept alive for the life of the process
out_callback = OUT_HOOK(out_hook)
call_lock = threading.RLock()


def call_timeout() -> float:
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    try:
        value = float(text) if text else CALL_TIMEOUT
    except ValueError:
        raise ValueError(f"{TIMEOUT_ENV} must be a number of seconds, got {text!r}") from None
    return value if value > 0 else CALL_TIMEOUT
