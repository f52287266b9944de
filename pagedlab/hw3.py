"""The HW3 "header": constants and the C structs of the memory manager, as ctypes types.

The layouts match what a 64-bit C compiler produces for the HW3 header, padding included:

    struct list_node { struct list_node *prev, *next; };               16 bytes
    typedef struct Sequence { int seq_id; int **block_table; int kv_count;
                              struct list_node node; } Sequence;         40 bytes, node at 24
    typedef struct { void *pool_base_ptr; int total_local_blocks; int free_local_blocks;
                     int *ref_count; struct list_node active_seqs; } LLMEngine;   40 bytes

Pointer fields use `pagedlab.cmem`'s checked pointer types: `seq.block_table[l1]` is an `int*`
that is falsy when NULL, `seq.block_table[l1][l2]` an int, and indexing a NULL, freed or
out-of-bounds pointer raises a `cmem.HeapError` instead of crashing Python.

The second half of the file is harness code (read-only walks of an engine) used by the graded
checks, the block-table bridge and the pictures; it never calls the student's functions.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from . import cmem

BLOCK_SIZE = 64          # bytes per physical block
KV_PER_BLOCK = 16        # int32 KV records per block
L1_PT_SIZE = 16          # pointers in an L1 table
L2_PT_SIZE = 16          # block ids in an L2 table
MAX_LOGICAL_BLOCKS = L1_PT_SIZE * L2_PT_SIZE  # 256 logical blocks per sequence
UNMAPPED = -1            # an L2 entry that maps no block


class ListNode(ctypes.Structure):
    """`struct list_node`: the link embedded in whatever sits on a list."""


ListNodePtr = cmem.pointer_type(ListNode)
ListNode._fields_ = [("prev", ListNodePtr), ("next", ListNodePtr)]

IntPtr = cmem.pointer_type(ctypes.c_int)      # int*   (an L2 table, the ref-count array)
IntPtrPtr = cmem.pointer_type(IntPtr)          # int**  (an L1 table)


class Sequence(ctypes.Structure):
    _fields_ = [
        ("seq_id", ctypes.c_int),
        ("block_table", IntPtrPtr),
        ("kv_count", ctypes.c_int),
        ("node", ListNode),
    ]


class LLMEngine(ctypes.Structure):
    _fields_ = [
        ("pool_base_ptr", ctypes.c_void_p),
        ("total_local_blocks", ctypes.c_int),
        ("free_local_blocks", ctypes.c_int),
        ("ref_count", IntPtr),
        ("active_seqs", ListNode),
    ]


SequencePtr = cmem.pointer_type(Sequence)
LLMEnginePtr = cmem.pointer_type(LLMEngine)


def offsetof(struct_type, member: str) -> int:
    """C's `offsetof(type, member)`."""
    return getattr(struct_type, member).offset


def addr(view) -> int:
    """Address of a struct view (or pointer); 0 for None."""
    return cmem.address(view)


def container_of(node, struct_type=Sequence, member: str = "node"):
    """The struct embedding `node` (a ListNode view or address): address - offsetof(member)."""
    return cmem.view(struct_type, cmem.address(node) - offsetof(struct_type, member))


def naive_cast(node):
    """What `(Sequence *)node` reads: the node's own bytes taken as a Sequence (the naive-cast bug of notebook 03).

    Its `seq_id` is the low half of `node.prev`, its `block_table` is `node.next`.
    """
    return Sequence.from_address(cmem.address(node))


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
