"""Harness side of HW3: read-only walks of an engine, and engines built from bytes and data.

Nothing here makes an engine from a block count: that is Task 1. Every engine a check starts from
is bytes the grader wrote where no student code runs (`pagedlab.grader.trusted.engines`), copied into
heap blocks by `load`; every other engine of a scenario is `derive`d from one, its struct's bytes
copied (the pool, the block count) and the rest written as data says (`EngineLayout`: the ref
counts, the free count, which block each sequence maps at which L1 and L2 slot, the list order).
`snapshot` reads an engine back as such data; `sweep` frees what a check allocated. Nothing here
computes what a task computes (no ref counting, no first-fit, no walk that frees an engine), and
the harness keeps no record of which blocks make up which engine: the heap's ledger labels every
block it allocates alike (`BUILT_BY`), the engine under test, its twin (`twins`) and the engines
it was derived from. The student API (`pagedlab.student`) does not include this module all the
same. The struct names are re-exported so the harness reads `hw3.Sequence` as before.
"""

from __future__ import annotations

import ctypes
import random
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
        # One checked read per table (a slice is bounds-checked once): Task 5's destroy checks
        # snapshot engines of 65+ sequences, and per-entry reads were most of their time.
        l1 = s.block_table[0:L1_PT_SIZE] if s.block_table else []
        tables = tuple((slot, tuple(l2[0:L2_PT_SIZE])) for slot, l2 in enumerate(l1) if l2)
        seqs.append(SeqLayout(s.seq_id, s.kv_count, tables))
    return EngineLayout(engine.total_local_blocks, engine.free_local_blocks, tuple(ref_counts(engine)), tuple(seqs))


# Every block the harness allocates carries this label in the heap's ledger (`cmem`): the ledger
# a student's code may read tells no engine of a check from another.
BUILT_BY = "the harness (a check's scenario, built from data)"
_IMAGE_BLOCKS, _IMAGE_BYTES = 8, 1 << 20
_POINTER = ctypes.sizeof(ctypes.c_void_p)


def _slot(blocks, block, offset) -> None:
    """A pointer-sized slot inside block `block` of an image, or ValueError."""
    if not (isinstance(block, int) and isinstance(offset, int) and 0 <= block < len(blocks)
            and 0 <= offset <= blocks[block][0] - _POINTER and offset % _POINTER == 0):
        raise ValueError(f"an engine image names a pointer slot outside its blocks: {block}, {offset}")


def load(pool_addr: int, image: dict):
    """The engine in `image` (root's bytes: `pagedlab.grader.trusted.engines`), copied into new heap
    blocks: block 0 is the engine; each "pointers" entry [block, offset, target, target offset]
    sets a pointer slot to another block's address plus an offset, each "pool" entry [block,
    offset] to `pool_addr`. A copy, nothing computed: what the bytes say is what it holds."""
    blocks = image["blocks"]
    if not 1 <= len(blocks) <= _IMAGE_BLOCKS or sum(size for size, _ in blocks) > _IMAGE_BYTES:
        raise ValueError("an engine image is 1 to 8 blocks, at most 1 MB")
    raw = [bytes.fromhex(data) for _, data in blocks]
    if any(data and len(data) != size for (size, _), data in zip(blocks, raw, strict=True)) or \
            blocks[0][0] < ctypes.sizeof(LLMEngine):
        raise ValueError("an engine image's bytes do not fill its blocks (block 0 is an LLMEngine)")
    addresses = []
    for (size, _), data in zip(blocks, raw, strict=True):
        addresses.append(cmem.malloc(size, where=BUILT_BY) if data else cmem.calloc(1, size, where=BUILT_BY))
        if data:
            ctypes.memmove(addresses[-1], data, size)
    for block, offset, target, target_offset in image.get("pointers", ()):
        _slot(blocks, block, offset)
        if not (isinstance(target, int) and 0 <= target < len(blocks) and 0 <= target_offset < blocks[target][0]):
            raise ValueError(f"an engine image points outside its blocks: {target}, {target_offset}")
        ctypes.c_size_t.from_address(addresses[block] + offset).value = addresses[target] + target_offset
    for block, offset in image.get("pool", ()):
        _slot(blocks, block, offset)
        ctypes.c_size_t.from_address(addresses[block] + offset).value = pool_addr
    return LLMEngine.from_address(addresses[0])


def derive(engine, layout: EngineLayout):
    """A new engine copied from `engine` (its struct's bytes: the pool, the block count) that
    holds `layout`: the ref counts, the free count and each sequence's L1 and L2 tables written as
    given, the sequences linked in list order; nothing computed from them (a layout that breaks an
    invariant is built broken). `engine` is left as it was: it never changes an engine in place."""
    return _derived(engine, layout, 1)[0]


def twins(engine, layout: EngineLayout) -> tuple:
    """Two engines as `derive` makes them, their blocks allocated together in a shuffled order:
    neither their labels, sizes, addresses nor allocation order tell one from the other. A
    destroy check hands one to llm_destroy and expects the other untouched."""
    return tuple(_derived(engine, layout, 2))


def _derived(source, layout: EngineLayout, copies: int) -> list:
    total = source.total_local_blocks
    if layout.total != total or len(layout.refs) != total:
        raise ValueError(f"a layout of {layout.total} blocks ({len(layout.refs)} ref counts) for an engine of {total}")
    for entry in layout.seqs:
        slots = [slot for slot, _ in entry.tables]
        if len(set(slots)) != len(slots) or not all(0 <= slot < L1_PT_SIZE for slot in slots) or \
                not all(len(entries) == L2_PT_SIZE for _, entries in entry.tables):
            raise ValueError(f"sequence {entry.seq_id}: each L2 table sits at its own L1 slot and holds 16 entries")
    fields = ctypes.string_at(ctypes.addressof(source), ctypes.sizeof(LLMEngine))
    plan = []  # (copy, what, which, size): every block of every copy, allocated in a shuffled order
    for copy in range(copies):
        plan += [(copy, "engine", 0, ctypes.sizeof(LLMEngine)), (copy, "refs", 0, 4 * total)]
        for i, entry in enumerate(layout.seqs):
            plan += [(copy, "seq", i, ctypes.sizeof(Sequence)), (copy, "l1", i, _POINTER * L1_PT_SIZE)]
            plan += [(copy, "l2", (i, slot), 4 * L2_PT_SIZE) for slot, _ in entry.tables]
    random.SystemRandom().shuffle(plan)
    at = {(copy, what, which): cmem.malloc(size, where=BUILT_BY) for copy, what, which, size in plan}
    built = []
    for copy in range(copies):
        engine = LLMEngine.from_address(at[copy, "engine", 0])
        ctypes.memmove(ctypes.addressof(engine), fields, len(fields))
        engine.free_local_blocks = layout.free
        (ctypes.c_int * total).from_address(at[copy, "refs", 0])[:] = list(layout.refs)
        engine.ref_count = IntPtr.from_address_value(at[copy, "refs", 0])
        head = ListNodePtr.from_address_value(ctypes.addressof(engine.active_seqs))
        engine.active_seqs.prev = engine.active_seqs.next = head
        for i, entry in enumerate(layout.seqs):
            seq = Sequence.from_address(at[copy, "seq", i])
            seq.seq_id, seq.kv_count = entry.seq_id, entry.kv_count
            l1 = at[copy, "l1", i]
            ctypes.memset(l1, 0, _POINTER * L1_PT_SIZE)
            seq.block_table = IntPtrPtr.from_address_value(l1)
            for slot, entries in entry.tables:
                l2 = at[copy, "l2", (i, slot)]
                (ctypes.c_int * L2_PT_SIZE).from_address(l2)[:] = list(entries)
                ctypes.c_size_t.from_address(l1 + _POINTER * slot).value = l2
            last = engine.active_seqs.prev.contents
            me = ListNodePtr.from_address_value(ctypes.addressof(seq.node))
            seq.node.prev = cmem.ref(last)
            seq.node.next = head
            last.next = me
            engine.active_seqs.prev = me
        built.append(engine)
    return built


def sweep(since: cmem.HeapSnapshot) -> None:
    """Free every tracked allocation made since `since` and still live (after a check or a
    demo: whatever the engine's code or the harness allocated, without walking any engine)."""
    for block in cmem.changes_since(since).allocated:
        if cmem.is_live(block.address):
            cmem.free(block.address)
