"""The C track's shared arena: memory mapped at the same address in the check child and in the
runner process that runs the student's C library (pagedlab.ctrack, runner mode).

While an arena is active, `pagedlab.cmem`'s blocks and `pagedlab.pool.Pool`'s bytes come from it,
so a pointer the C code stores and a struct view the checks read name the same bytes in both
processes, and nothing else of the child (no Python object) is in memory the runner can see.

The allocator keeps one free list per block size, glibc's block sizes (usable size =
max(24, round16(size + 8) - 8)), so the slack after a block that ctrack fills with a guard is the
one libc would have left, and an off-by-one write past an L2 table is still caught at its free.
"""

from __future__ import annotations

import ctypes
import mmap
import os

ARENA_BYTES = 256 << 20   # address space; pages cost memory only once written
# Fixed, high, unlikely-to-be-used addresses: the first one free in this process is taken.
CANDIDATES = tuple(a << 40 for a in (0x20, 0x28, 0x30, 0x38, 0x40, 0x48))
MAP_FIXED_NOREPLACE = 0x100000
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
MAP_FAILED = ctypes.c_void_p(-1).value


def usable_size(size: int) -> int:
    """What glibc's malloc_usable_size gives for a request of `size` bytes (64-bit)."""
    return max(24, (size + 8 + 15) // 16 * 16 - 8)


class Arena:
    def __init__(self, size: int = ARENA_BYTES):
        self.size = size
        self.fd = os.memfd_create("pagedlab-c-arena", os.MFD_CLOEXEC)
        self.base = 0
        try:
            os.ftruncate(self.fd, size)
            for want in CANDIDATES:
                got = _libc.mmap(want, size, mmap.PROT_READ | mmap.PROT_WRITE,
                                 mmap.MAP_SHARED | MAP_FIXED_NOREPLACE, self.fd, 0)
                if got == want:
                    self.base = want
                    break
                if got not in (None, MAP_FAILED):  # a kernel that ignores the flag put it elsewhere
                    _libc.munmap(got, size)
            if not self.base:
                raise MemoryError(f"no free address for the C track's shared arena among "
                                  f"{[hex(a) for a in CANDIDATES]}")
        except BaseException:
            os.close(self.fd)
            raise
        self.end = self.base + size
        self._top = self.base + 4096  # the first page stays unused: no block at the arena's start
        self._free: dict[int, list[int]] = {}   # usable size -> free block addresses
        self._usable: dict[int, int] = {}       # live block address -> usable size

    def owns(self, addr: int) -> bool:
        return self.base <= addr < self.end

    def alloc(self, size: int) -> int:
        """A block of at least `size` bytes (16-aligned), or 0 when the arena is full."""
        usable = usable_size(size)
        spare = self._free.get(usable)
        if spare:
            addr = spare.pop()
        else:
            addr = self._top + 8  # 8 bytes before each block: glibc's header, left as a gap
            if addr + usable > self.end:
                return 0
            self._top = addr + usable
        self._usable[addr] = usable
        # The slack past `size` reads as uninitialised memory (0xCD), never as a fresh page's
        # zeros: code reading one past a table (L1[16]) meets a wild pointer, not a NULL.
        ctypes.memset(addr + size, 0xCD, usable - size)
        return addr

    def free(self, addr: int) -> None:
        usable = self._usable.pop(addr, None)
        if usable is not None:
            self._free.setdefault(usable, []).append(addr)

    def usable(self, addr: int) -> int:
        return self._usable.get(addr, 0)


_current: Arena | None = None
_made: list[Arena] = []  # every arena of this process: blocks may outlive the mode that made them


def current() -> Arena | None:
    """The active arena (runner mode), or None (blocks come from libc, as outside grading)."""
    return _current


def activate(on: bool = True) -> Arena | None:
    """Make cmem and Pool allocate from the arena (mapped on first use), or from libc again
    (on=False: tests; blocks already in the arena stay there until freed)."""
    global _current
    from .student import cmem

    if not on:
        _current = None
        cmem._use_arena(None)
        return None
    if _current is None:
        _current = _made[0] if _made else Arena()
        if not _made:
            _made.append(_current)
        cmem._use_arena(_current)
    return _current
