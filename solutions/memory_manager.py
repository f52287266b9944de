"""HW3: a vLLM-style paged KV-cache memory manager, written against C memory.

Everything here works on real addresses, as the C version does:

- the pool is raw memory owned by the harness; you get its address (`pool_addr`), never a
  Python object, and you write a KV record with `ctypes.c_int32.from_address(...)`;
- the engine, every Sequence and every L1/L2 table come from `cmem` (a tracked C heap:
  `cmem.new`, `cmem.calloc_array`, `cmem.malloc_array`, `cmem.free`). Whatever you allocate
  you must free, or the teardown check reports the leak, Valgrind-style;
- structs are ctypes views with the C field names: `engine.ref_count[i]`,
  `seq.block_table[l1]` (an `int*`, falsy when NULL), `seq.block_table[l1][l2]` (a block id,
  `-1` when unmapped). `None` plays NULL.

The registry of live sequences is a Linux-style intrusive list: each Sequence embeds a
`ListNode`, and `container_of` turns a node back into its Sequence. The list helpers and the
lookup are given; Tasks 1-5 are yours.
"""

import ctypes
import operator

from pagedlab.student import cmem
from pagedlab.student.hw3 import (
    BLOCK_SIZE,
    KV_PER_BLOCK,
    L1_PT_SIZE,
    L2_PT_SIZE,
    MAX_LOGICAL_BLOCKS,
    IntPtr,
    ListNode,
    ListNodePtr,
    LLMEngine,
    Sequence,
    offsetof,
)

# ---------------------------------------------------------------------------------------------
# Given: an intrusive doubly linked list (Linux list.h). A list is circular through a dummy
# head node; an empty list is a head whose prev and next point to itself.
# ---------------------------------------------------------------------------------------------


def node_ptr(node: ListNode):
    """C's `&node` for a ListNode view (what a `prev`/`next` field holds)."""
    return cmem.ref(node)


def list_init(head: ListNode) -> None:
    head.prev = head.next = node_ptr(head)


def list_empty(head: ListNode) -> bool:
    return cmem.address(head.next) == ctypes.addressof(head)


def list_add_tail(node: ListNode, head: ListNode) -> None:
    """Insert `node` just before `head`, i.e. at the tail of the list."""
    last = head.prev.contents
    node.prev = node_ptr(last)
    node.next = node_ptr(head)
    last.next = node_ptr(node)
    head.prev = node_ptr(node)


def list_del(node: ListNode) -> None:
    """Unlink `node` from whatever list it is on."""
    before, after = node.prev.contents, node.next.contents
    before.next = node_ptr(after)
    after.prev = node_ptr(before)
    node.prev = node.next = None


def list_for_each(head: ListNode):
    """Yield every node after `head`. Reads `next` before yielding, so the caller may unlink
    and free the node it was given (Linux's list_for_each_safe)."""
    node = head.next.contents
    while ctypes.addressof(node) != ctypes.addressof(head):
        following = node.next.contents
        yield node
        node = following


def container_of(node: ListNode, struct_type=Sequence, member: str = "node"):
    """The struct that embeds `node`: step back by offsetof(struct_type, member) bytes."""
    return cmem.view(struct_type, ctypes.addressof(node) - offsetof(struct_type, member))


def find_sequence(engine: LLMEngine, seq_id: int):
    """The active Sequence with `seq_id`, or None."""
    for node in list_for_each(engine.active_seqs):
        seq = container_of(node, Sequence, "node")
        if seq.seq_id == seq_id:
            return seq
    return None


def is_c_int(value) -> bool:
    """True for an integer a C `int` parameter could receive (ids, lengths, KV records).

    Python would happily pass "7", 2.5 or 2**40 along; C could not, so those are bad input.
    """
    try:
        number = operator.index(value)
    except TypeError:
        return False
    return not isinstance(value, bool) and -(2**31) <= number < 2**31


def block_address(engine: LLMEngine, block: int) -> int:
    """Address of physical block `block` inside the pool."""
    return engine.pool_base_ptr + block * BLOCK_SIZE


# ---------------------------------------------------------------------------------------------
# Task 1: engine initialization
# ---------------------------------------------------------------------------------------------


def llm_init(pool_addr, pool_size):
    """Set up an engine over the pool at `pool_addr` (the pool itself is the caller's).

    None if `pool_addr` is None/0 or `pool_size < BLOCK_SIZE`. Otherwise the engine comes from
    `cmem.new(LLMEngine)`; total = free = pool_size // BLOCK_SIZE; `ref_count` is a zeroed array
    of that many ints (`cmem.calloc_array(n, ctypes.c_int)`); `active_seqs` an empty list.
    """
    ### BEGIN SOLUTION Task 1: llm_init
    if not isinstance(pool_addr, int) or not isinstance(pool_size, int):
        return None
    if not pool_addr or pool_size < BLOCK_SIZE:
        return None
    engine = cmem.new(LLMEngine)
    engine.pool_base_ptr = pool_addr
    engine.total_local_blocks = pool_size // BLOCK_SIZE
    engine.free_local_blocks = engine.total_local_blocks
    engine.ref_count = cmem.calloc_array(engine.total_local_blocks, ctypes.c_int)
    list_init(engine.active_seqs)
    return engine
    ### END SOLUTION


# ---------------------------------------------------------------------------------------------
# Task 2: creating and freeing sequences (plus the helpers Tasks 3-5 reuse)
# ---------------------------------------------------------------------------------------------


def take_block(engine: LLMEngine, start: int = 0) -> int:
    """First-fit: claim the lowest block with ref count 0 (ref 1, one fewer free block).

    Callers check `free_local_blocks` first, so a free block always exists here. A caller that
    takes several blocks in a row may pass `start` = the block it just took + 1: nothing below
    that block became free in between, so resuming there finds the same block as a scan from 0.
    """
    ### BEGIN SOLUTION Task 2: take_block (first-fit)
    refs = engine.ref_count
    for block in range(start, engine.total_local_blocks):
        if refs[block] == 0:
            refs[block] = 1
            engine.free_local_blocks -= 1
            return block
    raise RuntimeError("take_block called with no free block: check free_local_blocks first")
    ### END SOLUTION


def drop_block(engine: LLMEngine, block: int) -> None:
    """One owner fewer for `block`; when the last owner goes, the block is free again."""
    ### BEGIN SOLUTION Task 2: drop_block
    engine.ref_count[block] -= 1
    if engine.ref_count[block] == 0:
        engine.free_local_blocks += 1
    ### END SOLUTION


def new_l2_table():
    """A fresh L2 table from the heap: 16 ints, all -1 (unmapped). malloc'd memory is garbage
    (0xCD bytes) until you write it."""
    ### BEGIN SOLUTION Task 2: new_l2_table
    table = cmem.malloc_array(L2_PT_SIZE, ctypes.c_int)
    for i in range(L2_PT_SIZE):
        table[i] = -1
    return table
    ### END SOLUTION


def create_sequence(engine, seq_id, initial_kv_len):
    """Prefill: a new sequence holding `initial_kv_len` records, all blocks mapped at once.

    Check before allocate: None (with nothing changed) if engine is None, `seq_id` or
    `initial_kv_len` is a value a C int cannot hold (test with the given `is_c_int`: "7", 2.5,
    2**40, True and None are bad input), `initial_kv_len <= 0`, `seq_id` is active, or
    ceil(len / 16) blocks exceed 256 or `free_local_blocks`. Then the
    Sequence (`cmem.new(Sequence)`), its L1 table (16 NULL pointers:
    `cmem.calloc_array(L1_PT_SIZE, IntPtr)`), an L2 table whenever a block needs one, and one
    first-fit block per logical block. Never write the pool here. Append at the list tail.
    """
    ### BEGIN SOLUTION Task 2: create_sequence
    if engine is None or not is_c_int(seq_id) or not is_c_int(initial_kv_len):
        return None
    if initial_kv_len <= 0:
        return None
    if find_sequence(engine, seq_id) is not None:
        return None
    needed = (initial_kv_len + KV_PER_BLOCK - 1) // KV_PER_BLOCK
    if needed > MAX_LOGICAL_BLOCKS or needed > engine.free_local_blocks:
        return None

    seq = cmem.new(Sequence)
    seq.seq_id = seq_id
    seq.kv_count = initial_kv_len
    seq.block_table = cmem.calloc_array(L1_PT_SIZE, IntPtr)  # 16 NULL L2 pointers
    block = -1
    for logical in range(needed):
        l1, l2 = divmod(logical, L2_PT_SIZE)
        if not seq.block_table[l1]:
            seq.block_table[l1] = new_l2_table()
        block = take_block(engine, block + 1)  # first-fit, resuming after the last block taken
        seq.block_table[l1][l2] = block
    list_add_tail(seq.node, engine.active_seqs)
    return seq
    ### END SOLUTION


def destroy_sequence(engine: LLMEngine, seq: Sequence) -> None:
    """Unlink `seq`, drop every block it maps, free each L2 table, the L1 table and `seq`.

    Visit all 16 L1 slots: a NULL slot may come before a mapped one.
    """
    ### BEGIN SOLUTION Task 2: destroy_sequence
    list_del(seq.node)
    l1_table = seq.block_table
    for l1 in range(L1_PT_SIZE):  # all 16 slots: a NULL may sit before a mapped one
        l2_table = l1_table[l1]
        if not l2_table:
            continue
        for l2 in range(L2_PT_SIZE):
            if l2_table[l2] != -1:
                drop_block(engine, l2_table[l2])
        cmem.free(l2_table)
    cmem.free(l1_table)
    cmem.free(seq)
    ### END SOLUTION


def free_sequence(engine, seq_id):
    """Free sequence `seq_id`: 0, or -1 (nothing changed) if the engine is None or there is none."""
    ### BEGIN SOLUTION Task 2: free_sequence
    if engine is None:
        return -1
    seq = find_sequence(engine, seq_id)
    if seq is None:
        return -1
    destroy_sequence(engine, seq)
    return 0
    ### END SOLUTION


# ---------------------------------------------------------------------------------------------
# Task 3: fork (share every block, count the new owner)
# ---------------------------------------------------------------------------------------------


def fork_sequence(engine, parent_seq_id, new_seq_id):
    """A child that shares every block of `parent_seq_id` (parallel sampling, beam search).

    None (nothing changed) unless the parent exists and `new_seq_id` is unused. The child gets
    its own Sequence and L1 table, and a new L2 table (all -1, then the mapped entries copied)
    for each non-NULL L2 of the parent; each inherited block gains one ref. Same kv_count;
    the child goes at the list tail.
    """
    ### BEGIN SOLUTION Task 3: fork_sequence
    if engine is None or not is_c_int(parent_seq_id) or not is_c_int(new_seq_id):
        return None
    parent = find_sequence(engine, parent_seq_id)
    if parent is None or find_sequence(engine, new_seq_id) is not None:
        return None

    child = cmem.new(Sequence)
    child.seq_id = new_seq_id
    child.kv_count = parent.kv_count
    child.block_table = cmem.calloc_array(L1_PT_SIZE, IntPtr)
    for l1 in range(L1_PT_SIZE):
        parent_l2 = parent.block_table[l1]
        if not parent_l2:
            continue
        child_l2 = new_l2_table()
        for l2 in range(L2_PT_SIZE):
            block = parent_l2[l2]
            if block != -1:
                child_l2[l2] = block
                engine.ref_count[block] += 1
        child.block_table[l1] = child_l2
    list_add_tail(child.node, engine.active_seqs)
    return child
    ### END SOLUTION


# ---------------------------------------------------------------------------------------------
# Task 4: append one KV record (address translation, new pages, copy-on-write)
# ---------------------------------------------------------------------------------------------


def append_kv(engine, seq_id, kv_data):
    """Decode step: store `kv_data` (an int32) as record number `kv_count` of the sequence.

    logical = kv_count // 16, offset = kv_count % 16; L1 slot = logical // 16, L2 slot =
    logical % 16. -1 if `kv_data` is not a C int (`is_c_int`), the sequence is missing or
    logical >= 256. A block is needed when the
    L2 slot is -1 (new page) or maps a block with ref > 1 (copy-on-write); if one is needed and
    none is free, return -1 having changed nothing (no L2 table either). Copy-on-write copies
    exactly BLOCK_SIZE bytes (`ctypes.memmove`) into a first-fit block and moves this sequence's
    reference there. Then write the record (`ctypes.c_int32.from_address(...)`), kv_count += 1.
    """
    ### BEGIN SOLUTION Task 4: append_kv
    if engine is None or not is_c_int(kv_data):
        return -1
    seq = find_sequence(engine, seq_id)
    if seq is None:
        return -1
    logical, offset = divmod(seq.kv_count, KV_PER_BLOCK)
    if logical >= MAX_LOGICAL_BLOCKS:
        return -1
    l1, l2 = divmod(logical, L2_PT_SIZE)

    # Probe before touching anything: does this record need a block we do not have?
    l2_table = seq.block_table[l1]
    block = l2_table[l2] if l2_table else -1
    new_page = block == -1
    copy_on_write = not new_page and engine.ref_count[block] > 1
    if (new_page or copy_on_write) and engine.free_local_blocks == 0:
        return -1

    if not l2_table:
        l2_table = new_l2_table()
        seq.block_table[l1] = l2_table
    if new_page:
        block = take_block(engine)
        l2_table[l2] = block
    elif copy_on_write:
        shared = block
        block = take_block(engine)
        ctypes.memmove(block_address(engine, block), block_address(engine, shared), BLOCK_SIZE)
        engine.ref_count[shared] -= 1  # still >= 1: the other owners keep it
        l2_table[l2] = block

    record = ctypes.c_int32.from_address(block_address(engine, block) + offset * 4)
    record.value = kv_data
    seq.kv_count += 1
    return 0
    ### END SOLUTION


# ---------------------------------------------------------------------------------------------
# Task 5: tear the engine down (the pool belongs to the caller)
# ---------------------------------------------------------------------------------------------


def llm_destroy(engine):
    """Free every remaining sequence, the ref-count array and the engine: 0 (-1 for None).

    Never free the dummy head (it lives inside the engine) or the pool (the caller owns it).
    """
    ### BEGIN SOLUTION Task 5: llm_destroy
    if engine is None:
        return -1
    for node in list_for_each(engine.active_seqs):
        destroy_sequence(engine, container_of(node, Sequence, "node"))
    cmem.free(engine.ref_count)
    cmem.free(engine)
    return 0
    ### END SOLUTION


__all__ = [
    "BLOCK_SIZE", "KV_PER_BLOCK", "L1_PT_SIZE", "L2_PT_SIZE", "MAX_LOGICAL_BLOCKS",
    "ListNode", "ListNodePtr", "Sequence", "LLMEngine",
    "list_init", "list_empty", "list_add_tail", "list_del", "list_for_each", "container_of",
    "find_sequence", "block_address",
    "llm_init", "create_sequence", "free_sequence", "fork_sequence", "append_kv", "llm_destroy",
]
