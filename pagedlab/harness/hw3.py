"""Harness side of HW3: read-only walks of an engine, and engines built from data.

A check sets up its scenario as data (`EngineLayout`: the fields, the ref counts, which block
each sequence maps at which L1 and L2 slot, the list order) and `engine_from` writes exactly that
into new memory; `snapshot` reads an engine back as such data; `sweep` frees what a check
allocated. Nothing here computes what a task computes (no ref counting, no first-fit, no walk
that frees an engine), so nothing here answers a task even if a student's code calls it. The
student API (`pagedlab.student`) does not include this module all the same. The struct names are
re-exported so the harness reads `hw3.Sequence` as before.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from ..student import cmem
from ..student.hw3 import (  # noqa: F401 - re-exported for the harness
    BLOCK_SIZE,
    KV_PER_BLOCK,
    L1_PT_SIZE,
    L2_PT_SIZE,
    MAX_LOGICAL_BLOCKS,
    UNMAPPED,
    IntPtr,
    IntPtrPtr,
    ListNode,
    ListNodePtr,
    LLMEngine,
    LLMEnginePtr,
    Sequence,
    SequencePtr,
    addr,
    container_of,
    naive_cast,
    offsetof,
)


# -- harness-side walks (read only) -------------------------------------------------------------
class CorruptEngine(RuntimeError):
    """The engine's list or tables cannot be walked (a broken link, a cycle, a bad pointer)."""


def sequences(engine) -> list:
    """The live Sequences of `engine`, in list order (head.next first), as checked views."""
    if engine is None:
        return []
    head = ctypes.addressof(engine.active_seqs)
    out, seen = [], {head}
    node = cmem.address(engine.active_seqs.next)
    limit = len(cmem.live_allocations()) + 1
    while node != head:
        if node in seen or len(out) > limit:
            raise CorruptEngine("the active_seqs list does not lead back to its head (a cycle or a lost link)")
        seen.add(node)
        try:
            seq = cmem.view(Sequence, node - Sequence.node.offset)
        except cmem.HeapError as exc:
            raise CorruptEngine(f"active_seqs holds a node that is not inside a live Sequence: {exc}") from None
        out.append(seq)
        node = cmem.address(seq.node.next)
    return out


def find(engine, seq_id: int):
    """The live Sequence with `seq_id`, or None (harness-side lookup)."""
    for seq in sequences(engine):
        if seq.seq_id == seq_id:
            return seq
    return None


def mapping(seq) -> dict:
    """{logical block: physical block} of every mapped L2 entry of `seq` (all 16 L1 slots)."""
    out = {}
    l1 = seq.block_table
    if not l1:
        return out
    for i in range(L1_PT_SIZE):
        l2 = l1[i]
        if not l2:
            continue
        for j in range(L2_PT_SIZE):
            block = l2[j]
            if block != UNMAPPED:
                out[i * L2_PT_SIZE + j] = block
    return out


def l2_tables(seq) -> dict:
    """{L1 slot: address of its L2 table} for the non-NULL L1 slots of `seq`."""
    l1 = seq.block_table
    if not l1:
        return {}
    return {i: cmem.address(l1[i]) for i in range(L1_PT_SIZE) if l1[i]}


def ref_counts(engine) -> list[int]:
    n = engine.total_local_blocks
    if n <= 0:
        return []
    return list(engine.ref_count[0:n])


def blocks_needed(kv_count: int) -> int:
    return -(-kv_count // KV_PER_BLOCK)


def block_address(engine, block: int) -> int:
    return engine.pool_base_ptr + block * BLOCK_SIZE


@dataclass(frozen=True)
class SeqState:
    seq_id: int
    kv_count: int
    mapping: tuple        # ((logical, block), ...)
    l2_slots: tuple       # L1 slots holding an L2 table
    address: int


@dataclass(frozen=True)
class EngineState:
    """Everything a caller can observe about an engine (pool and heap are separate)."""

    total: int
    free: int
    refs: tuple
    seqs: tuple           # SeqState, list order

    def seq(self, seq_id: int) -> SeqState | None:
        return next((s for s in self.seqs if s.seq_id == seq_id), None)


def state(engine) -> EngineState:
    seqs = tuple(
        SeqState(s.seq_id, s.kv_count, tuple(sorted(mapping(s).items())),
                 tuple(sorted(l2_tables(s))), ctypes.addressof(s))
        for s in sequences(engine)
    )
    return EngineState(engine.total_local_blocks, engine.free_local_blocks,
                       tuple(ref_counts(engine)), seqs)


@dataclass(frozen=True)
class SeqLayout:
    """One sequence as data: its id, kv_count and L2 tables by L1 slot (every other L1 slot NULL).
    `tables` is ((L1 slot, (the 16 L2 entries, block ids or UNMAPPED)), ...)."""

    seq_id: int
    kv_count: int
    tables: tuple


@dataclass(frozen=True)
class EngineLayout:
    """An engine as data: every field a caller can see, written as given (nothing derived)."""

    total: int
    free: int
    refs: tuple          # ref_count[0:total]
    seqs: tuple          # SeqLayout, in list order (head.next first)


def snapshot(engine) -> EngineLayout:
    """The engine's state as data, read raw (each L2 table's 16 entries as they are)."""
    seqs = []
    for s in sequences(engine):
        tables = tuple((slot, tuple(s.block_table[slot][j] for j in range(L2_PT_SIZE)))
                       for slot in sorted(l2_tables(s)))
        seqs.append(SeqLayout(s.seq_id, s.kv_count, tables))
    return EngineLayout(engine.total_local_blocks, engine.free_local_blocks, tuple(ref_counts(engine)), tuple(seqs))


# Addresses of what `engine_from` allocated, by engine address (for `release`).
_BUILT: dict[int, list[int]] = {}


def engine_from(pool_addr: int, layout: EngineLayout):
    """A new engine over the pool at `pool_addr` holding exactly `layout`: the fields, the ref
    counts, each sequence's L1 and L2 tables and the list order are written as given; nothing is
    computed from them (a layout that breaks an invariant is built broken). The checks and the
    notebooks build their scenarios with it, so a task is checked without the student's other
    tasks; it never changes an engine it did not just create."""
    built = []

    def keep(ptr):
        built.append(cmem.address(ptr))
        return ptr

    engine = keep(cmem.new(LLMEngine))
    engine.pool_base_ptr = pool_addr
    engine.total_local_blocks, engine.free_local_blocks = layout.total, layout.free
    engine.ref_count = keep(cmem.calloc_array(layout.total, ctypes.c_int))
    for block, count in enumerate(layout.refs):
        engine.ref_count[block] = count
    head = ListNodePtr.from_address_value(ctypes.addressof(engine.active_seqs))
    engine.active_seqs.prev = engine.active_seqs.next = head
    for entry in layout.seqs:
        seq = keep(cmem.new(Sequence))
        seq.seq_id, seq.kv_count = entry.seq_id, entry.kv_count
        seq.block_table = keep(cmem.calloc_array(L1_PT_SIZE, IntPtr))
        for slot, entries in entry.tables:
            l2 = keep(cmem.malloc_array(L2_PT_SIZE, ctypes.c_int))
            for j, block in enumerate(entries):
                l2[j] = block
            seq.block_table[slot] = l2
        last = engine.active_seqs.prev.contents
        me = ListNodePtr.from_address_value(ctypes.addressof(seq.node))
        seq.node.prev = cmem.ref(last)
        seq.node.next = head
        last.next = me
        engine.active_seqs.prev = me
    _BUILT[built[0]] = built
    return engine


def release(engine) -> None:
    """Free what `engine_from` allocated for `engine` and is still live (it walks nothing: what
    other code added to the engine stays allocated; `sweep` frees that)."""
    if engine is None:
        return
    for where in _BUILT.pop(cmem.address(engine), []):
        if cmem.is_live(where):
            cmem.free(where)


def sweep(since: cmem.HeapSnapshot) -> None:
    """Free every tracked allocation made since `since` and still live (after a check or a
    demo: whatever the engine's code or the harness allocated, without walking any engine)."""
    for block in cmem.changes_since(since).allocated:
        if cmem.is_live(block.address):
            cmem.free(block.address)
    for where in [a for a in _BUILT if not cmem.is_live(a)]:
        del _BUILT[where]
