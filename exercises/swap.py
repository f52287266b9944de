"""Part E, Task 13: preempting a sequence by swapping its KV blocks, and the batched block copy.

When every block of the KV cache is taken and a running sequence needs one more, the scheduler
must take memory away from somebody. vLLM's answer is to preempt a sequence, in one of two ways:

- recompute: drop its blocks; later it is prefilled again from its tokens (prompt + output so
  far). Costs GPU compute, moves no bytes;
- swap: copy its blocks to a second pool in host memory ("CPU blocks") and later copy them back.
  Costs PCIe traffic, recomputes nothing.

Here both pools are HW3 engines with the same structs: `gpu` is the small fast one, `cpu` the
swap space. A swap moves a sequence from one engine's registry to the other's, its block table
rewritten to the new block ids, and the 64 bytes of every block copied between the pools.

One decision shapes everything: **a sequence group swaps as a unit**, as in vLLM (its block
manager swaps a whole SequenceGroup). Forked sequences share blocks. Swapping one of them alone
would free no GPU block that a sibling still maps, and the CPU copy would need its own copies
of the shared blocks: sharing lost, memory spent twice. So the group of a sequence is every
sequence reachable from it through shared blocks, and they all move together: each distinct
block is copied once and keeps its ref count (one per sequence of the group that maps it).

`copy_blocks` is the other half of vLLM's cache engine: the block manager decides copy-on-write
and records (src, dst) pairs; the cache engine then copies all of them in one batched call.
"""

import ctypes
import operator

from pagedlab.student import cmem
from pagedlab.student.hw3 import (
    BLOCK_SIZE,
    L1_PT_SIZE,
    L2_PT_SIZE,
    UNMAPPED,
    ListNode,
    LLMEngine,
    Sequence,
)

# ---------------------------------------------------------------------------------------------
# Given: registry helpers (the same intrusive list as memory_manager, over raw nodes).
# ---------------------------------------------------------------------------------------------


def registry(engine: LLMEngine) -> list:
    """The Sequences on `engine`'s active list, head.next first."""
    out = []
    head = ctypes.addressof(engine.active_seqs)
    node = cmem.address(engine.active_seqs.next)
    while node != head:
        seq = cmem.view(Sequence, node - Sequence.node.offset)
        out.append(seq)
        node = cmem.address(seq.node.next)
    return out


def find(engine: LLMEngine, seq_id: int):
    """The Sequence with `seq_id` on `engine`, or None."""
    return next((s for s in registry(engine) if s.seq_id == seq_id), None)


def unlink(seq: Sequence) -> None:
    """Take `seq` off whatever list it is on."""
    before, after = seq.node.prev.contents, seq.node.next.contents
    before.next = cmem.ref(after)
    after.prev = cmem.ref(before)
    seq.node.prev = seq.node.next = None


def link_tail(engine: LLMEngine, seq: Sequence) -> None:
    """Append `seq` at the tail of `engine`'s active list."""
    head: ListNode = engine.active_seqs
    last = head.prev.contents
    seq.node.prev = cmem.ref(last)
    seq.node.next = cmem.ref(head)
    last.next = cmem.ref(seq.node)
    head.prev = cmem.ref(seq.node)


def entries(seq: Sequence):
    """Yield (l2_table, l2_slot, block) for every mapped entry of `seq`, in logical order.

    All 16 L1 slots are visited: a NULL slot may come before a mapped one.
    """
    for table in seq.block_table[0:L1_PT_SIZE]:
        if table:
            for slot, block in enumerate(table[0:L2_PT_SIZE]):
                if block != UNMAPPED:
                    yield table, slot, block


def is_c_int(value) -> bool:
    try:
        number = operator.index(value)
    except TypeError:
        return False
    return not isinstance(value, bool) and -(2**31) <= number < 2**31


def block_address(engine: LLMEngine, block: int) -> int:
    return engine.pool_base_ptr + block * BLOCK_SIZE


# ---------------------------------------------------------------------------------------------
# Task 13: the group of a sequence, moving a group between engines, the batched copy
# ---------------------------------------------------------------------------------------------


def sequence_group(engine, seq_id):
    """The sequences that must swap together with `seq_id`, in registry order.

    That is `seq_id`'s sequence and every sequence that shares a block with a member, again and
    again until nothing new joins (siblings of siblings count: A and C share nothing, but both
    share with B). [] if `engine` is None or has no sequence `seq_id`.
    """
    # YOUR CODE HERE (Task 13: sequence_group)
    raise NotImplementedError("Task 13: sequence_group")


def move_group(src, dst, seq_id):
    """Move `seq_id`'s group from engine `src` to engine `dst`; return the block mapping.

    The mapping is a list of (src block, dst block) pairs, one per distinct block of the group,
    in the order the blocks are met: group members in registry order, each member's logical
    blocks in order. Each new block is first-fit on `dst` (lowest block with ref count 0) at
    the moment it is taken, and gets the block's 64 bytes copied from `src`'s pool.

    Check before moving anything: None, with neither engine (nor either pool, nor the heap)
    changed, if an engine is None, src is dst, `seq_id` is not on `src`, a member's id is
    already on `dst`, or the group's distinct blocks exceed `dst.free_local_blocks`.

    After the move: every member sits at the tail of `dst`'s list (registry order kept) with the
    same kv_count and its block table rewritten to `dst` block ids; each `dst` block's ref count
    equals the number of members that map it (what the `src` block had); every `src` block
    the group held is free again (ref 0) and `free_local_blocks` is right on both engines.
    """
    # YOUR CODE HERE (Task 13: move_group (capacity check, then move blocks once, keep refs))
    raise NotImplementedError("Task 13: move_group (capacity check, then move blocks once, keep refs)")


def swap_out(gpu, cpu, seq_id):
    """Preempt `seq_id` (and its group) by swapping it to CPU memory: the GPU->CPU mapping."""
    return move_group(gpu, cpu, seq_id)


def swap_in(cpu, gpu, seq_id):
    """Resume a swapped group: back to the GPU, new block ids, the CPU->GPU mapping."""
    return move_group(cpu, gpu, seq_id)


def copy_blocks(engine, pairs):
    """Copy block src to block dst (all 64 bytes) for every (src, dst) in `pairs`, in one batch.

    This is the data half of copy-on-write: the block manager already remapped the writer and
    adjusted ref counts, so here only bytes move (ref counts and the free count stay). One source
    may go to several destinations (beam search forks a beam twice). All copies read the blocks
    as they were before the call, so a destination may not be listed twice nor be a source.

    Returns the number of blocks copied, or -1 with nothing copied if `engine` is None, a pair
    is not two C ints, a block id is outside [0, total_local_blocks), a destination repeats, or
    a destination is also a source. Every pair is checked before any byte moves.
    """
    # YOUR CODE HERE (Task 13: copy_blocks (check every pair, then copy))
    raise NotImplementedError("Task 13: copy_blocks (check every pair, then copy)")


__all__ = ["sequence_group", "move_group", "swap_out", "swap_in", "copy_blocks",
           "registry", "find", "entries"]
