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
    # YOUR CODE HERE (Task 1: llm_init)
    raise NotImplementedError("Task 1: llm_init")


# ---------------------------------------------------------------------------------------------
# Task 2: creating and freeing sequences (plus the helpers Tasks 3-5 reuse)
# ---------------------------------------------------------------------------------------------


def take_block(engine: LLMEngine, start: int = 0) -> int:
    """First-fit: claim the lowest block with ref count 0 (ref 1, one fewer free block).

    Callers check `free_local_blocks` first, so a free block always exists here. A caller that
    takes several blocks in a row may pass `start` = the block it just took + 1: nothing below
    that block became free in between, so resuming there finds the same block as a scan from 0.
    """
    # YOUR CODE HERE (Task 2: take_block (first-fit))
    raise NotImplementedError("Task 2: take_block (first-fit)")


def drop_block(engine: LLMEngine, block: int) -> None:
    """One owner fewer for `block`; when the last owner goes, the block is free again."""
    # YOUR CODE HERE (Task 2: drop_block)
    raise NotImplementedError("Task 2: drop_block")


def new_l2_table():
    """A fresh L2 table from the heap: 16 ints, all -1 (unmapped). malloc'd memory is garbage
    (0xCD bytes) until you write it."""
    # YOUR CODE HERE (Task 2: new_l2_table)
    raise NotImplementedError("Task 2: new_l2_table")


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
    # YOUR CODE HERE (Task 2: create_sequence)
    raise NotImplementedError("Task 2: create_sequence")


def destroy_sequence(engine: LLMEngine, seq: Sequence) -> None:
    """Unlink `seq`, drop every block it maps, free each L2 table, the L1 table and `seq`.

    Visit all 16 L1 slots: a NULL slot may come before a mapped one.
    """
    # YOUR CODE HERE (Task 2: destroy_sequence)
    raise NotImplementedError("Task 2: destroy_sequence")


def free_sequence(engine, seq_id):
    """Free sequence `seq_id`: 0, or -1 (nothing changed) if the engine is None or there is none."""
    # YOUR CODE HERE (Task 2: free_sequence)
    raise NotImplementedError("Task 2: free_sequence")


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
    # YOUR CODE HERE (Task 3: fork_sequence)
    raise NotImplementedError("Task 3: fork_sequence")


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
    # YOUR CODE HERE (Task 4: append_kv)
    raise NotImplementedError("Task 4: append_kv")


# ---------------------------------------------------------------------------------------------
# Task 5: tear the engine down (the pool belongs to the caller)
# ---------------------------------------------------------------------------------------------


def llm_destroy(engine):
    """Free every remaining sequence, the ref-count array and the engine: 0 (-1 for None).

    Never free the dummy head (it lives inside the engine) or the pool (the caller owns it).
    """
    # YOUR CODE HERE (Task 5: llm_destroy)
    raise NotImplementedError("Task 5: llm_destroy")


__all__ = [
    "BLOCK_SIZE", "KV_PER_BLOCK", "L1_PT_SIZE", "L2_PT_SIZE", "MAX_LOGICAL_BLOCKS",
    "ListNode", "ListNodePtr", "Sequence", "LLMEngine",
    "list_init", "list_empty", "list_add_tail", "list_del", "list_for_each", "container_of",
    "find_sequence", "block_address",
    "llm_init", "create_sequence", "free_sequence", "fork_sequence", "append_kv", "llm_destroy",
]
