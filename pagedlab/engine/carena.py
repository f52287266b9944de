"""The C track's shared arena: memory mapped at the same address in the check child and in the
runner process that runs the student's C library (pagedlab.engine.ctrack, runner mode).

While an arena is active, `pagedlab.cmem`'s blocks and `pagedlab.engine.pool.Pool`'s bytes come from it,
so a pointer the C code stores and a struct view the checks read name the same bytes in both
processes, and nothing else of the child (no Python object) is in memory the runner can see.

The allocator keeps one free list per block size, glibc's block sizes (usable size =
max(24, round16(size + 8) - 8)), so the slack after a block that ctrack fills with a guard is the
one libc would have left, and an off-by-one write past an L2 table is still caught at its free.

Blocks the student's C code allocates come from `alloc_pages` instead: each on pages of its own,
at their end. While a C call runs, the runtime (pl_runtime.c) makes a block that call freed
unreadable (mprotect), so the line that reads freed memory faults right there, instead of a
pointer read out of it faulting later somewhere else; the pages are readable again when the call
returns. In a notebook the arena is not shared with anyone: `for_c_blocks` maps it all the same.
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
PAGE = mmap.PAGESIZE


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
        self._regions: dict[int, tuple[int, int]] = {}  # live page block -> (first page, pages)
        self._free_regions: dict[int, list[int]] = {}   # pages -> first pages of free regions
        # C calls running: a region freed in one may still be unreadable (fenced) until it returns,
        # so none is handed out again before then.
        self.calls = 0

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

    def alloc_pages(self, size: int) -> int:
        """A block of at least `size` bytes (16-aligned) that shares no page with any other block:
        it ends 8 bytes before the end of its pages, as a glibc block ends before the next one's
        header; or 0 when the arena is full."""
        usable = usable_size(size)
        pages = -(-(usable + 16) // PAGE)
        spare = self._free_regions.get(pages) if not self.calls else None
        if spare:
            start = spare.pop()
        else:
            start = -(-self._top // PAGE) * PAGE
            if start + pages * PAGE > self.end:
                return 0
            self._top = start + pages * PAGE
        end = start + pages * PAGE
        addr = end - usable - 8
        self._usable[addr] = usable
        self._regions[addr] = (start, pages)
        ctypes.memset(addr + size, 0xCD, end - addr - size)  # as `alloc`: the slack reads as 0xCD
        return addr

    def page_span(self, addr: int) -> int:
        """For a live page block: the bytes from the page holding `addr` to the end of its pages
        (what the runtime may make unreadable once the block is freed); 0 for any other block."""
        region = self._regions.get(addr)
        if region is None:
            return 0
        start, pages = region
        return start + pages * PAGE - addr // PAGE * PAGE

    def footprint(self, addr: int) -> int:
        """Bytes of the arena a live block holds (whole pages for a page block)."""
        region = self._regions.get(addr)
        return region[1] * PAGE if region else self._usable.get(addr, 0)

    def free(self, addr: int) -> None:
        usable = self._usable.pop(addr, None)
        region = self._regions.pop(addr, None)
        if region is not None:
            self._free_regions.setdefault(region[1], []).append(region[0])
        elif usable is not None:
            self._free.setdefault(usable, []).append(addr)

    def usable(self, addr: int) -> int:
        return self._usable.get(addr, 0)


_current: Arena | None = None
_made: list[Arena] = []  # every arena of this process: blocks may outlive the mode that made them


def current() -> Arena | None:
    """The active arena (runner mode), or None (blocks come from libc, as outside grading)."""
    return _current


def for_c_blocks() -> Arena | None:
    """The arena the C code's blocks come from: the active one, else this process's own (the one
    runner mode would activate), made on first use; None where there is no memfd (not Linux):
    C blocks then come from libc and a read of freed memory is found by its poison only."""
    if _current is not None:
        return _current
    if not _made:
        if not hasattr(os, "memfd_create"):
            return None
        try:
            _made.append(Arena())
        except (OSError, MemoryError):
            return None
    return _made[0]


def activate(on: bool = True) -> Arena | None:
    """Make cmem and Pool allocate from the arena (mapped on first use), or from libc again
    (on=False: tests; blocks already in the arena stay there until freed)."""
    global _current
    from ..student import cmem

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
