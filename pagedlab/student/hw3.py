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

The harness side (read-only walks of an engine, and engines and sequences built without the
student's code) lives in `pagedlab.harness.hw3`, outside what student files may import.
"""

from __future__ import annotations

import ctypes

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
