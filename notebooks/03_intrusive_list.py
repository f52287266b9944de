# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 03 · The intrusive registry and `container_of`
#
# The engine keeps its active sequences on a list. HW3 uses the kind of list the Linux kernel
# uses everywhere (`include/linux/list.h`): an **intrusive** list. The list does not hold the
# sequences; each sequence holds a small link, a `ListNode`, and the links point at each other.
#
# ```
#             ┌────────── Sequence 1 ──────────┐    ┌────────── Sequence 2 ──────────┐
#  head ⇄     │ seq_id │ block_table │ kv_count │ node │ ⇄ … │ seq_id │ … │ node │ ⇄ head
#  (dummy)    └────────────────────────────────┘    └────────────────────────────────┘
# ```
#
# Walking the list therefore hands you a pointer to a **node**, not to a Sequence. This notebook
# shows how to get back from one to the other, and what goes wrong if you just cast. No graded
# task: the list helpers are given in `exercises/memory_manager.py`, read them as you go.

# %%
# %matplotlib inline
import ctypes

import matplotlib.pyplot as plt

import pagedlab
from pagedlab import cmem, viz
from pagedlab.engine.pool import Pool
from pagedlab.harness import hw3
from pagedlab.hw3 import ListNode, LLMEngine, Sequence
from pagedlab.reference import scenes  # engines start from the judge side's empty engine

# Your exercises/memory_manager.py (PAGEDLAB_IMPL, or impl=, picks another folder).
mm = pagedlab.load("memory_manager")
print("memory_manager loaded from", mm.__file__)
print(pagedlab.track.describe())  # Part A: memory_manager.py, or llm_memory.c on the C track

# %% [markdown]
# ## Layout and padding
#
# `Sequence` is `{int seq_id; int **block_table; int kv_count; struct list_node node;}`. On a
# 64-bit machine an `int` is 4 bytes and a pointer 8, and a pointer must start at a multiple of 8.
# So the compiler inserts 4 bytes of **padding** after `seq_id` and after `kv_count`:

# %%
# NBVAL_CHECK_OUTPUT
for name, _ctype in Sequence._fields_:
    field = getattr(Sequence, name)
    print(f"{name:12s} offset {field.offset:2d}  size {field.size:2d}")
print(f"sizeof(Sequence) = {ctypes.sizeof(Sequence)}, sizeof(ListNode) = {ctypes.sizeof(ListNode)}")
print(f"bytes of padding = {ctypes.sizeof(Sequence) - sum(getattr(Sequence, n).size for n, _ in Sequence._fields_)}")

# %%
viz.draw_struct(Sequence)
plt.show()

# %% [markdown]
# `offsetof(Sequence, node)` is 24: the node starts 24 bytes into the Sequence. In C it comes from
# `<stddef.h>`; here `hw3.offsetof(Sequence, "node")` (ctypes knows every field's offset).
#
# ## `container_of`: from a node back to its Sequence
#
# Given the address of a `node`, the Sequence that embeds it starts `offsetof(Sequence, node)`
# bytes earlier:
#
# ```c
# #define container_of(ptr, type, member) \
#     ((type *)((char *)(ptr) - offsetof(type, member)))
# ```
#
# Let's see it on real memory. The harness builds an engine with two sequences (no code of yours
# runs here), and we walk the list with the given helpers `list_for_each` and `container_of`.

# %%
# NBVAL_IGNORE_OUTPUT
pool = Pool(16 * hw3.BLOCK_SIZE)
# The engine as data: 16 blocks, three in use; sequence 11 maps blocks 0 and 1 in the L2 table
# at L1 slot 0, sequence 12 maps block 2. The harness writes exactly this into memory.
UNMAPPED = [hw3.UNMAPPED] * 14
heap = cmem.snapshot()  # the harness frees what it built at the end
engine = scenes.build(pool, hw3.EngineLayout(
    total=16, free=13, refs=(1, 1, 1) + (0,) * 13,
    seqs=(hw3.SeqLayout(11, 20, tables=((0, (0, 1, *UNMAPPED)),)),
          hw3.SeqLayout(12, 5, tables=((0, (2, -1, *UNMAPPED)),)))))

for node in mm.list_for_each(engine.active_seqs):
    seq = mm.container_of(node, Sequence, "node")
    node_addr, seq_addr = ctypes.addressof(node), ctypes.addressof(seq)
    print(f"node at {node_addr:#x} - {hw3.offsetof(Sequence, 'node')} = Sequence at {seq_addr:#x}"
          f"  -> seq_id {seq.seq_id}, kv_count {seq.kv_count}")

# %% [markdown]
# The same Sequence as a ruler of real addresses (they change from run to run):

# %%
first = hw3.sequences(engine)[0]
_, ax = plt.subplots(figsize=(11, 2.6))
viz.draw_struct(Sequence, ax=ax, base=ctypes.addressof(first), title="Sequence 11 in memory")
ax.set_ylim(-1.5, 2.1)
ax.annotate("list_for_each hands you this address (&node)", xy=(24, 1.02), xytext=(24, 1.7),
            ha="center", fontsize=8, arrowprops=dict(arrowstyle="->"))
ax.annotate("container_of: 24 bytes back", xy=(0, 1.02), xytext=(4, 1.7), ha="left",
            fontsize=8, arrowprops=dict(arrowstyle="->"))
plt.show()

# %% [markdown]
# ## The naive cast
#
# What if we skip the subtraction and write `(Sequence *)node`? C happily reinterprets the 16
# bytes of the node (and whatever follows it) as a Sequence:
#
# | naive field | offset | what is really there |
# |---|---|---|
# | `seq_id` | 0 | the low 4 bytes of `node.prev` (an address) |
# | `block_table` | 8 | `node.next` (the address of the next node) |
# | `kv_count` | 16 | the first 4 bytes *after* the Sequence: someone else's memory |
#
# `hw3.naive_cast(node)` performs exactly that cast. Compare it with the real Sequence:

# %%
# NBVAL_IGNORE_OUTPUT
node = engine.active_seqs.next.contents          # the first node on the list
real = mm.container_of(node, Sequence, "node")
wrong = hw3.naive_cast(node)

print("node bytes :", ctypes.string_at(ctypes.addressof(node), 16).hex(" "))
print(f"node.prev  = {cmem.address(node.prev):#x}   node.next = {cmem.address(node.next):#x}")
print()
print(f"container_of: Sequence at {ctypes.addressof(real):#x}: seq_id = {real.seq_id}, "
      f"block_table = {cmem.address(real.block_table):#x}")
print(f"naive cast:   Sequence at {ctypes.addressof(wrong):#x}: seq_id = {wrong.seq_id}, "
      f"block_table = {cmem.address(wrong.block_table):#x}")
print(f"              low 32 bits of node.prev = {ctypes.c_int32(cmem.address(node.prev)).value}")

# %% [markdown]
# The naive `seq_id` is a slice of an address, so `find_sequence` would never find anything (or,
# worse, find the wrong sequence by coincidence). The naive `block_table` is the address of the
# *next node*. Follow it as `append_kv` would: the "L2 table" is a list node, and the "block id"
# in it is a slice of yet another address.

# %%
# NBVAL_IGNORE_OUTPUT
try:
    l2 = wrong.block_table[0]       # "L1 slot 0": really the first 8 bytes of the next ListNode
    block = l2[0]                   # "L2 entry 0": 4 bytes of whatever that pointer points at
    target = hw3.block_address(engine, block)
    print(f"'L2 table' at {cmem.address(l2):#x}, 'block id' = {block}")
    print(f"append_kv would write its record {target - pool.addr:+,} bytes away from the pool "
          f"(the pool is {pool.size} bytes)")
except cmem.HeapError as exc:       # the tracked heap refuses reads outside live allocations
    print(f"{type(exc).__name__}: {exc}")

# %% [markdown]
# In C the write lands wherever that number points: a segmentation fault if you are lucky, silent
# corruption of someone else's data if you are not. Valgrind would flag it as an invalid write.

# %% [markdown]
# Why put the node at the **end** of the Sequence at all? If it were the first field, the cast
# would happen to work, and that is the trap: one refactoring later it silently breaks. With
# `container_of` the node can live anywhere in the struct, and a struct can even sit on several
# lists at once through several nodes (vLLM's `KVCacheBlock` links itself into a free queue the
# same way; notebook 09).
#
# ## Predict, then check (ungraded)
#
# 1. What are `offsetof(LLMEngine, active_seqs)` and `sizeof(LLMEngine)`? (Fields: `void *pool_base_ptr;
#    int total_local_blocks; int free_local_blocks; int *ref_count; struct list_node active_seqs;`)
# 2. If `Sequence` were reordered as `{int seq_id; int kv_count; int **block_table; struct list_node
#    node;}`, what would its size be?
#
# Write your answers in the cell, then run it.

# %%
my_answers = {"offsetof(LLMEngine, active_seqs)": None, "sizeof(LLMEngine)": None, "sizeof(reordered)": None}


class Reordered(ctypes.Structure):
    _fields_ = [("seq_id", ctypes.c_int), ("kv_count", ctypes.c_int),
                ("block_table", ctypes.c_void_p), ("node", ListNode)]


truth = {"offsetof(LLMEngine, active_seqs)": hw3.offsetof(LLMEngine, "active_seqs"),
         "sizeof(LLMEngine)": ctypes.sizeof(LLMEngine),
         "sizeof(reordered)": ctypes.sizeof(Reordered)}
for question, value in truth.items():
    guess = my_answers[question]
    verdict = "no guess yet" if guess is None else ("✓" if guess == value else f"✗ (you said {guess})")
    print(f"{question:33s} = {value:2d}   {verdict}")

# %% [markdown]
# (The reordered Sequence is 32 bytes: the two ints share one 8-byte slot and no padding is
# needed. Ordering fields from largest to smallest, or pairing small ones, is how C programmers
# save memory in structs allocated millions of times.)
#
# The harness built this engine, so the harness frees it:

# %%
hw3.sweep(heap)
print("live heap bytes after teardown:", cmem.live_bytes())

# %% [markdown]
# ## Takeaways
#
# - Padding aligns pointers: `Sequence` is 40 bytes, and `node` starts at offset 24, not 20.
# - An intrusive list links nodes *inside* the data; `container_of` = node address −
#   `offsetof(type, member)` recovers the data.
# - A plain cast reads the node's pointers as `seq_id` and `block_table`: wrong values at best,
#   wild memory accesses at worst.
#
# Next, notebook 04: sharing blocks between sequences with fork, reference counts and copy-on-write.
