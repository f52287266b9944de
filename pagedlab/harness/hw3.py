"""Harness side of HW3: read-only walks of an engine, and engines and sequences built the way a
correct implementation would build them, so each task can be checked without the student's
other tasks.

Not for student files: `new_engine` is a correct `llm_init`, `build_sequence` most of
`create_sequence`, `teardown` most of `llm_destroy`. The checks, the block-table bridge and the
pictures use them; the student API (`pagedlab.student`) does not include them. The struct names
are re-exported so the harness reads `hw3.Sequence` as before.
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


def new_engine(pool_addr: int, pool_size: int):
    """Harness-built engine (as a correct `llm_init` would), so Tasks 2-5 can be checked alone."""
    engine = cmem.new(LLMEngine)
    engine.pool_base_ptr = pool_addr
    engine.total_local_blocks = engine.free_local_blocks = pool_size // BLOCK_SIZE
    engine.ref_count = cmem.calloc_array(pool_size // BLOCK_SIZE, ctypes.c_int)
    head = ListNodePtr.from_address_value(ctypes.addressof(engine.active_seqs))
    engine.active_seqs.prev = engine.active_seqs.next = head
    return engine


def teardown(engine) -> None:
    """Harness-side best-effort free of an engine and what it reaches (after a check)."""
    if engine is None or not cmem.is_live(engine):
        return
    try:
        seqs = sequences(engine)
    except (CorruptEngine, cmem.HeapError):
        seqs = []
    for seq in seqs:
        try:
            for table in l2_tables(seq).values():
                if cmem.is_live(table):
                    cmem.free(table)
            if cmem.is_live(seq.block_table):
                cmem.free(seq.block_table)
            if cmem.is_live(seq):
                cmem.free(seq)
        except cmem.HeapError:
            pass
    if cmem.is_live(engine.ref_count):
        cmem.free(engine.ref_count)
    cmem.free(engine)


def build_sequence(engine, seq_id: int, kv_count: int, blocks) -> Sequence:
    """Harness-built Sequence with an exact layout: `blocks` is a list (logical i -> block) or a
    dict {logical: block}, so a check can set up scattered blocks, L1 holes or shared blocks
    without relying on the student's create_sequence. Ref counts and the free count follow."""
    table = dict(enumerate(blocks)) if not isinstance(blocks, dict) else dict(blocks)
    seq = cmem.new(Sequence)
    seq.seq_id, seq.kv_count = seq_id, kv_count
    seq.block_table = cmem.calloc_array(L1_PT_SIZE, IntPtr)
    for logical, block in sorted(table.items()):
        i, j = divmod(logical, L2_PT_SIZE)
        if not seq.block_table[i]:
            l2 = cmem.malloc_array(L2_PT_SIZE, ctypes.c_int)
            for k in range(L2_PT_SIZE):
                l2[k] = UNMAPPED
            seq.block_table[i] = l2
        seq.block_table[i][j] = block
        if engine.ref_count[block] == 0:
            engine.free_local_blocks -= 1
        engine.ref_count[block] += 1
    head = engine.active_seqs
    last = head.prev.contents
    me = ListNodePtr.from_address_value(ctypes.addressof(seq.node))
    seq.node.prev = cmem.ref(last)
    seq.node.next = cmem.ref(head)
    last.next = me
    head.prev = me
    return seq
