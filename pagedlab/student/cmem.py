"""A tracked C heap: real `malloc`/`calloc`/`free` from libc, with Valgrind-style bookkeeping.

The HW3 memory manager is written against C memory on purpose: a Sequence, its L1 and L2 tables
and the ref-count array live at real addresses, and forgetting a `free` leaks for real. What
Python adds is a ledger, so a student gets the errors Valgrind would have printed:

- every live allocation is known (address, size, where it was allocated): `live_bytes()`,
  `live_allocations()` and `leak_report()` are the "definitely lost" report;
- `free` of an address that was never allocated, of an interior pointer, or a second `free` of
  the same block raises `InvalidFree` / `DoubleFree` instead of corrupting libc's heap;
- `malloc` fills new memory with 0xCD ("allocated, never written") and `free` poisons the block
  with 0xDD and keeps it in a quarantine for a while, so a pointer read out of freed memory shows
  up as 0xdddddddddddddddd and the block's address is not handed out again at once;
- a struct view read after its block was freed shows the poison (an int field reads
  `FREED_INT` = -572662307, a pointer field `FREED_POINTER`), and following such a pointer
  raises `UseAfterFree`;
- the pointer types used by `pagedlab.hw3` (`pointer_type`) and `view` check every access
  against the ledger: indexing a NULL, freed, never-allocated or out-of-bounds pointer raises
  `NullPointer` / `UseAfterFree` / `InvalidAccess` (an `HeapError`) rather than crashing Python.

What is *not* checked: raw `ctypes` access (`c_int32.from_address`, `ctypes.memmove`, plain
`ctypes.POINTER` types) goes straight to memory, exactly like C. Writes into the pool are the
pool's business (`pagedlab.engine.pool` keeps guard zones around it). Once a freed block leaves the
quarantine (see `QUARANTINE_BYTES`) it is really returned to libc, and a later double free of
that address is reported as a free of an unknown address.
"""

from __future__ import annotations

import bisect
import ctypes
import ctypes.util
import sys
from collections import OrderedDict
from dataclasses import dataclass

UNINIT_BYTE = 0xCD   # malloc'd, never written
FREED_BYTE = 0xDD    # freed (poison)
QUARANTINE_BYTES = 8 << 20  # freed blocks kept poisoned (not reused) up to this many bytes

if sys.platform == "win32":  # pragma: no cover - the course targets Linux and macOS
    _libc = ctypes.cdll.msvcrt
else:
    _libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_libc.free.restype = None
_libc.free.argtypes = [ctypes.c_void_p]

_PTR_SIZE = ctypes.sizeof(ctypes.c_void_p)
FREED_POINTER = int.from_bytes(bytes([FREED_BYTE]) * _PTR_SIZE, "little")   # 0xdddd...
FREED_INT = ctypes.c_int32(int.from_bytes(bytes([FREED_BYTE]) * 4, "little")).value  # -572662307


class HeapError(RuntimeError):
    """Misuse of the C heap that C would turn into corruption or a segfault."""


class DoubleFree(HeapError):
    pass


class InvalidFree(HeapError):
    pass


class UseAfterFree(HeapError):
    pass


class NullPointer(HeapError):
    pass


class InvalidAccess(HeapError):
    pass


@dataclass(frozen=True)
class Allocation:
    address: int
    size: int
    where: str       # "file.py:line in function" of the caller of malloc/calloc
    freed_at: str = ""

    def __str__(self) -> str:
        return f"{self.size} bytes at {self.address:#x}, allocated at {self.where}"


@dataclass(frozen=True)
class HeapSnapshot:
    """Live allocations and call counters at one moment (see `snapshot`, `changes_since`)."""

    live: frozenset  # of (address, size)
    mallocs: int
    frees: int


# -- the ledger ---------------------------------------------------------------------------------
_live: dict[int, Allocation] = {}
_live_bases: list[int] = []             # sorted addresses of live blocks
# Freed blocks, oldest first. Only a fault's or a bad access's report looks a block up by an
# address inside it (sorting then), so a free keeps no sorted index: Task 5's checks free 10^5 blocks.
_quarantine: OrderedDict[int, Allocation] = OrderedDict()
_quarantine_index: tuple[int, list[int]] = (-1, [])  # (frees when sorted, sorted addresses)
_quarantine_bytes = 0
_counts = {"mallocs": 0, "frees": 0}


def _caller() -> str:
    frame = sys._getframe(2)
    here = __file__
    while frame is not None and frame.f_code.co_filename == here:
        frame = frame.f_back
    if frame is None:
        return "?"
    name = frame.f_code.co_filename.replace("\\", "/").rsplit("/", 1)[-1]
    return f"{name}:{frame.f_lineno} in {frame.f_code.co_name}"


def address(obj) -> int:
    """The address held by a pointer, of a struct view, or an int; NULL (None) is 0."""
    if obj is None:
        return 0
    if isinstance(obj, int):
        return obj
    if isinstance(obj, ctypes._Pointer):
        return ctypes.c_size_t.from_buffer(obj).value
    if isinstance(obj, ctypes.c_void_p):
        return obj.value or 0
    if isinstance(obj, (ctypes.Structure, ctypes.Union, ctypes.Array, ctypes._SimpleCData)):
        return ctypes.addressof(obj)
    raise TypeError(f"expected an address (int), a ctypes pointer or a struct view, not {type(obj).__name__}")


# The C track's shared arena when its library runs in a runner process (pagedlab.engine.carena): blocks
# then come from memory mapped at the same address there, so C pointers and views agree.
_arena = None
_arenas: list = []  # every arena ever used: its blocks go back to it, whatever is active now


def _use_arena(arena) -> None:
    global _arena
    _arena = arena
    if arena is not None and arena not in _arenas:
        _arenas.append(arena)


def _raw_alloc(size: int, fill: int, own_pages: bool = False) -> int:
    # With the C track's runner (an active arena) every block gets pages of its own: the engine a
    # check builds is freed by the C code too, and its blocks must be fenceable as the C code's.
    arena = _c_arena() if own_pages else _arena
    if arena is not None:
        addr = arena.alloc_pages(max(size, 1))
    else:
        addr = _libc.malloc(max(size, 1))
    if not addr:
        raise MemoryError(f"malloc({size}) failed")
    ctypes.memset(addr, fill, size)
    return addr


_c_arena_source = None  # set by pagedlab.engine.ctrack: carena.for_c_blocks (this package imports no harness)


def _c_arena():
    """Where the C track's blocks come from (`pagedlab.engine.carena.for_c_blocks`), known to `free`."""
    arena = _c_arena_source() if _c_arena_source is not None else None
    if arena is not None and arena not in _arenas:
        _arenas.append(arena)
    return arena


def _c_alloc(size: int, *, zeroed: bool, where: str) -> int:
    """A block for the C track's malloc/calloc (`pagedlab.engine.ctrack`), on pages of its own: its
    runtime can then make it unreadable once freed, for the rest of the call that freed it."""
    size = _check_size(size)
    return _record(_raw_alloc(size, 0 if zeroed else UNINIT_BYTE, own_pages=True), size, where)


def page_span(addr: int) -> int:
    """The bytes, from the page holding `addr`, that only its block (a C block, freed by now)
    occupies; 0 when it shares a page with another block."""
    owner = next((a for a in _arenas if a.owns(addr)), None)
    return owner.page_span(addr) if owner is not None else 0


def _record(addr: int, size: int, where: str) -> int:
    _live[addr] = Allocation(addr, size, where)
    bisect.insort(_live_bases, addr)
    _counts["mallocs"] += 1
    return addr


def _check_size(size, what="size") -> int:
    if isinstance(size, bool) or not isinstance(size, int):
        raise TypeError(f"{what} must be an int number of bytes, not {type(size).__name__}")
    if size < 0:
        raise ValueError(f"{what} must be >= 0, got {size}")
    return size


def malloc(size: int, *, where: str | None = None) -> int:
    """Allocate `size` bytes (contents 0xCD: uninitialised) and return the address.

    `where` names the caller when it is not Python code (the C track passes "file.c:line in fn").
    """
    size = _check_size(size)
    return _record(_raw_alloc(size, UNINIT_BYTE), size, where or _caller())


def calloc(count: int, size: int, *, where: str | None = None) -> int:
    """Allocate `count * size` zeroed bytes and return the address."""
    total = _check_size(count, "count") * _check_size(size)
    return _record(_raw_alloc(total, 0), total, where or _caller())


def free(ptr, *, where: str | None = None) -> None:
    """Free a block returned by malloc/calloc (an int address, a pointer or a struct view).

    `free(None)` / `free(0)` does nothing, as in C.
    """
    addr = address(ptr)
    if addr == 0:
        return
    block = _live.pop(addr, None)
    if block is None:
        _raise_bad_free(addr)
    del _live_bases[bisect.bisect_left(_live_bases, addr)]
    _counts["frees"] += 1
    ctypes.memset(addr, FREED_BYTE, block.size)
    _quarantine_add(Allocation(addr, block.size, block.where, where or _caller()))


def _quarantine_sorted() -> list[int]:
    """The quarantine's addresses, sorted once per change (a report in a loop sorts once)."""
    global _quarantine_index
    if _quarantine_index[0] != _counts["frees"]:
        _quarantine_index = (_counts["frees"], sorted(_quarantine))
    return _quarantine_index[1]


def freed_block_at(addr: int) -> Allocation | None:
    """The freed block (still in the quarantine) that holds `addr`, or None."""
    return _containing(_quarantine_sorted(), _quarantine, addr, 1)


def _raise_bad_free(addr: int):
    old = _quarantine.get(addr)
    if old is not None:
        raise DoubleFree(
            f"double free of {addr:#x}: this block ({old.size} bytes, allocated at {old.where}) "
            f"was already freed at {old.freed_at}"
        )
    inside = _containing(_live_bases, _live, addr, 1)
    if inside is not None:
        raise InvalidFree(
            f"free({addr:#x}) of an interior pointer: it points {addr - inside.address} bytes into "
            f"the block {inside}; free only what malloc/calloc returned"
        )
    raise InvalidFree(
        f"free({addr:#x}) of an address that malloc/calloc never returned "
        f"(a struct field, the pool, or a pointer that was never set?)"
    )


_quarantine_cost: dict[int, int] = {}  # address -> bytes it holds (a C block: whole pages)


def _quarantine_add(block: Allocation) -> None:
    global _quarantine_bytes
    _quarantine[block.address] = block
    owner = next((a for a in _arenas if a.owns(block.address)), None)
    cost = max(block.size, owner.footprint(block.address) if owner is not None else 0)
    _quarantine_cost[block.address] = cost
    _quarantine_bytes += cost
    while _quarantine_bytes > QUARANTINE_BYTES and len(_quarantine) > 1:
        addr, old = _quarantine.popitem(last=False)
        _quarantine_bytes -= _quarantine_cost.pop(addr, old.size)
        owner = next((a for a in _arenas if a.owns(addr)), None)
        if owner is not None:
            owner.free(addr)
        else:
            _libc.free(addr)


def _containing(bases: list[int], table: dict, addr: int, size: int):
    i = bisect.bisect_right(bases, addr) - 1
    if i < 0:
        return None
    block = table[bases[i]]
    if addr + size <= block.address + max(block.size, 0) and addr >= block.address:
        return block
    return None


def check_access(addr: int, size: int, what: str = "access") -> None:
    """Raise a `HeapError` unless [addr, addr+size) lies inside one live allocation."""
    block = _live.get(addr)
    if block is not None and size <= block.size:
        return
    if _containing(_live_bases, _live, addr, size) is not None:
        return
    _raise_bad_access(addr, size, what)


def _raise_bad_access(addr: int, size: int, what: str):
    try:
        _raise_bad_access_at(addr, size, what)
    except HeapError as exc:
        exc.args = (f"{exc.args[0]} [in {_caller()}]",)
        raise


def _raise_bad_access_at(addr: int, size: int, what: str):
    if addr == 0:
        raise NullPointer(f"{what} through a NULL pointer")
    old = _containing(_quarantine_sorted(), _quarantine, addr, 1)
    if old is not None:
        raise UseAfterFree(
            f"use after free: {what} of {size} bytes at {addr:#x}, inside a block of {old.size} "
            f"bytes allocated at {old.where} and freed at {old.freed_at}"
        )
    near = _containing(_live_bases, _live, addr, 1)
    if near is not None:
        raise InvalidAccess(
            f"out of bounds: {what} of {size} bytes at offset {addr - near.address} of the block {near}"
        )
    pattern = ""
    if addr == FREED_POINTER:
        raise UseAfterFree(
            f"use after free: {what} at {addr:#x}, the poison of freed memory: this pointer was "
            f"read out of a block that had been freed"
        )
    if addr == int.from_bytes(bytes([UNINIT_BYTE]) * _PTR_SIZE, "little"):
        pattern = " (0xcd... is malloc'd memory never written: an uninitialised pointer)"
    raise InvalidAccess(f"{what} at {addr:#x}, which is not inside any live heap allocation{pattern}")


# -- typed helpers ------------------------------------------------------------------------------
def view(ctype, addr):
    """A struct/array view of type `ctype` at `addr`, after checking the memory is live."""
    addr = address(addr)
    check_access(addr, ctypes.sizeof(ctype), f"reading a {ctype.__name__}")
    return ctype.from_address(addr)


def new(ctype):
    """`malloc(sizeof(ctype))` as a view (contents uninitialised, like C)."""
    addr = _record(_raw_alloc(ctypes.sizeof(ctype), UNINIT_BYTE), ctypes.sizeof(ctype), _caller())
    return ctype.from_address(addr)


def malloc_array(count: int, ctype):
    """`malloc(count * sizeof(ctype))` as a checked `ctype*` pointer (uninitialised)."""
    size = _check_size(count, "count") * ctypes.sizeof(ctype)
    addr = _record(_raw_alloc(size, UNINIT_BYTE), size, _caller())
    return pointer_type(ctype).from_address_value(addr)


def calloc_array(count: int, ctype):
    """`calloc(count, sizeof(ctype))` as a checked `ctype*` pointer (all zero: 0 / NULL)."""
    size = _check_size(count, "count") * ctypes.sizeof(ctype)
    addr = _record(_raw_alloc(size, 0), size, _caller())
    return pointer_type(ctype).from_address_value(addr)


_BYTEORDER = sys.byteorder
_pointer_getitem = ctypes._Pointer.__getitem__
_pointer_setitem = ctypes._Pointer.__setitem__


class _CheckedPointer(ctypes._Pointer):
    """Base of the checked pointer types: indexing is bounds- and liveness-checked."""

    _type_ = ctypes.c_char  # replaced in every subclass
    c_name = "char*"
    _item = 1               # sizeof(_type_)

    @classmethod
    def from_address_value(cls, addr: int):
        p = cls()
        ctypes.c_size_t.from_buffer(p).value = addr
        return p

    def __getitem__(self, index):
        base = int.from_bytes(bytes(self), _BYTEORDER)
        block = _live.get(base)
        # Fast path (a base pointer, an in-bounds int index) inlined: first-fit scans live here.
        if block is None or index.__class__ is not int or index < 0 or (index + 1) * self._item > block.size:
            _check_index(self, base, index, "read")
        return _pointer_getitem(self, index)

    def __setitem__(self, index, value):
        base = int.from_bytes(bytes(self), _BYTEORDER)
        block = _live.get(base)
        if block is None or index.__class__ is not int or index < 0 or (index + 1) * self._item > block.size:
            _check_index(self, base, index, "write")
        _pointer_setitem(self, index, value)

    @property
    def contents(self):
        base = ctypes.c_size_t.from_buffer(self).value
        check_access(base, ctypes.sizeof(self._type_), f"dereferencing a {self.c_name}")
        return self._type_.from_address(base)

    @contents.setter
    def contents(self, value):
        ctypes._Pointer.contents.__set__(self, value)

    def __repr__(self) -> str:
        addr = ctypes.c_size_t.from_buffer(self).value
        return f"<{self.c_name} {addr:#x}>" if addr else f"<{self.c_name} NULL>"


def _check_index(ptr, base: int, index, what: str) -> None:
    item = ctypes.sizeof(ptr._type_)
    if isinstance(index, slice):
        start, stop = index.start or 0, index.stop
        if stop is None or stop <= start:
            return
        check_access(base + start * item, (stop - start) * item, f"{what} of [{start}:{stop}] through a {ptr.c_name}")
        return
    block = _live.get(base)
    if block is not None:
        if 0 <= index and (index + 1) * item <= block.size:
            return  # fast path: a base pointer, in bounds
        raise InvalidAccess(
            f"out of bounds: {what} of [{index}] through a {ptr.c_name} to {block.size // item} "
            f"elements ({block}) [in {_caller()}]"
        )
    check_access(base + index * item, item, f"{what} of [{index}] through a {ptr.c_name}")


_pointer_types: dict = {}
_C_NAMES = {ctypes.c_int: "int", ctypes.c_char: "char", ctypes.c_uint8: "uint8_t",
            ctypes.c_int64: "int64_t", ctypes.c_float: "float", ctypes.c_double: "double"}


def pointer_type(ctype):
    """The checked pointer type `ctype*` (one class per `ctype`, so struct fields match)."""
    cls = _pointer_types.get(ctype)
    if cls is None:
        c_name = getattr(ctype, "c_name", _C_NAMES.get(ctype, ctype.__name__)) + "*"
        name = c_name.replace("*", "Ptr")
        cls = type(name, (_CheckedPointer,), {"_type_": ctype, "c_name": c_name,
                                              "_item": ctypes.sizeof(ctype)})
        _pointer_types[ctype] = cls
    return cls


def ref(obj):
    """A checked pointer to a struct view (C's `&obj`)."""
    return pointer_type(type(obj)).from_address_value(ctypes.addressof(obj))


# -- reports ------------------------------------------------------------------------------------
def live_bytes() -> int:
    return sum(b.size for b in _live.values())


def live_allocations() -> list[Allocation]:
    """Every block allocated and not yet freed, by address."""
    return [_live[a] for a in _live_bases]


def is_live(addr) -> bool:
    return address(addr) in _live


def allocation_at(addr) -> Allocation | None:
    """The live block that starts at `addr`, or None."""
    return _live.get(address(addr))


def snapshot() -> HeapSnapshot:
    return HeapSnapshot(frozenset((a, b.size) for a, b in _live.items()), _counts["mallocs"], _counts["frees"])


@dataclass(frozen=True)
class HeapChanges:
    allocated: list  # Allocation, still live, allocated since the snapshot
    freed: list      # (address, size) live at the snapshot and freed since
    mallocs: int     # malloc/calloc calls since the snapshot (including ones freed again)
    frees: int

    def __bool__(self) -> bool:
        return bool(self.allocated or self.freed or self.mallocs or self.frees)

    def __str__(self) -> str:
        if not self:
            return "no heap activity"
        parts = [f"{self.mallocs} malloc/calloc and {self.frees} free calls"]
        parts += [f"still live: {a}" for a in self.allocated]
        parts += [f"freed: {s} bytes at {a:#x}" for a, s in self.freed]
        return "; ".join(parts)


def changes_since(snap: HeapSnapshot) -> HeapChanges:
    now = {(a, b.size) for a, b in _live.items()}
    allocated = [_live[a] for a, _ in sorted(now - snap.live)]
    freed = sorted(snap.live - now)
    return HeapChanges(allocated, freed, _counts["mallocs"] - snap.mallocs, _counts["frees"] - snap.frees)


def leak_report(since: HeapSnapshot | None = None) -> str:
    """Valgrind-style summary of blocks still allocated (since `since`, else all)."""
    blocks = changes_since(since).allocated if since else live_allocations()
    if not blocks:
        return "All heap blocks were freed -- no leaks are possible (0 bytes lost)."
    lines = [f"{sum(b.size for b in blocks)} bytes in {len(blocks)} blocks are definitely lost:"]
    lines += [f"  {b}" for b in blocks]
    return "\n".join(lines)
