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
# # 02 · The two-level block table
#
# A sequence thinks its KV cache is one long array of records: record 0, 1, 2, … In memory the
# records sit in 64-byte **physical blocks** (16 records each) scattered anywhere in the pool. The
# **block table** translates between the two, exactly like a page table translates virtual
# addresses to physical frames.
#
# This notebook has two graded tasks: **Task 1** builds the engine, **Task 2** creates and frees
# sequences.

# %%
# %matplotlib inline
import matplotlib.pyplot as plt

import pagedlab
from pagedlab import cmem, viz
from pagedlab.engine.pool import Pool
from pagedlab.harness import hw3

# Your exercises/memory_manager.py (PAGEDLAB_IMPL, or impl=, picks another folder).
mm = pagedlab.load("memory_manager")
print("memory_manager loaded from", mm.__file__)
print(pagedlab.track.describe())  # Part A: memory_manager.py, or llm_memory.c on the C track

# %% [markdown]
# ## Why two levels?
#
# A sequence may grow to 256 logical blocks (4,096 records). A flat table of 256 block ids per
# sequence would be mostly empty for short sequences. HW3 splits the index in two, as an x86 page
# table does:
#
# - the **L1 table** is an array of 16 pointers; slot `i` covers logical blocks `16i … 16i+15`
#   and is `NULL` until one of them is used;
# - each **L2 table** is an array of 16 block ids, `-1` where nothing is mapped yet.
#
# A short sequence allocates one L2 table; a sequence with 40 blocks allocates three. In C the
# types are `int **block_table` (L1) and `int *` (each L2); here `seq.block_table[l1]` is falsy
# when NULL and `seq.block_table[l1][l2]` is a block id.
#
# ## Translating one record, step by step
#
# Take the handout's example: a sequence holds `kv_count == 613` records and appends one more.
# Records count from 0, so the new one is record 613. Where in the pool does it go?

# %%
# NBVAL_CHECK_OUTPUT
import random

from pagedlab.hw3 import BLOCK_SIZE, KV_PER_BLOCK, L2_PT_SIZE


def translate(record, block_table):
    logical, offset = divmod(record, KV_PER_BLOCK)
    l1, l2 = divmod(logical, L2_PT_SIZE)
    block = block_table[l1][l2]
    print(f"record {record}:")
    print(f"  logical block  = {record} // {KV_PER_BLOCK} = {logical}")
    print(f"  offset         = {record} % {KV_PER_BLOCK} = {offset}")
    print(f"  L1 index       = {logical} // {L2_PT_SIZE} = {l1}")
    print(f"  L2 index       = {logical} % {L2_PT_SIZE} = {l2}")
    print(f"  physical block = block_table[{l1}][{l2}] = {block}")
    print(f"  byte address   = pool + {block} * {BLOCK_SIZE} + {offset} * 4 = pool + {block * BLOCK_SIZE + offset * 4}")
    return block, offset


# Sequence 7: 39 logical blocks (records 0-613) scattered over a pool of 64 blocks; the last,
# logical block 38, landed in physical block 3. Its block table, one L2 table per 16 blocks:
rng = random.Random(3)
blocks = rng.sample([b for b in range(64) if b != 3], 38) + [3]
example_table = {l1: (blocks[16 * l1:16 * l1 + 16] + [-1] * 16)[:16] for l1 in range(3)}
for l1, l2_table in example_table.items():
    print(f"L1[{l1}] -> L2 table {l2_table}")
block, offset = translate(613, example_table)

# %% [markdown]
# The same sequence as a picture: its 39 logical blocks (records 0–613, so `kv_count` = 614) are
# the `blocks` printed above. The red frames follow the translation path: L1 slot 2, then entry 6
# of that L2 table, which holds block 3.

# %%
example = viz.SeqView.from_blocks(7, blocks, kv_count=614)
viz.draw_block_table(example, 7, highlight=(2, 6),
                     title="seq 7 (kv_count = 614): record 613 -> L1[2] -> L2[6] -> block 3, offset 5")
plt.show()

# %% [markdown]
# Notice what the table does *not* need: the blocks need not be in order, adjacent, or even
# distinct from another sequence's (notebook 04 shares them). L1 slots 3–15 are `NULL` and cost
# nothing.
#
# ## ✏️ Task 1 · `llm_init`
#
# Open **`exercises/memory_manager.py`** and implement `llm_init(pool_addr, pool_size)`.
#
# The harness owns a raw pool of `pool_size` bytes at address `pool_addr`. Your engine manages it:
#
# - return `None` if `pool_addr` is None/0 or `pool_size < BLOCK_SIZE` (not even one block);
# - allocate the engine with `cmem.new(LLMEngine)` and store `pool_base_ptr`;
# - `total_local_blocks = free_local_blocks = pool_size // BLOCK_SIZE` (a partial block at the
#   end is unusable);
# - `ref_count`: one zeroed int per block, `cmem.calloc_array(n, ctypes.c_int)`;
# - `active_seqs` is the dummy head of an empty circular list: its `prev` and `next` point to
#   itself. `list_init` (given) does exactly that.
#
# Then run the graded cell. Re-run it after every edit: it re-loads your file.

# %%
pagedlab.graded.run("task1");

# %% [markdown]
# ## ✏️ Task 2 · `create_sequence` and `free_sequence`
#
# **Prefill.** When a prompt arrives its length is known, so `create_sequence(engine, seq_id,
# initial_kv_len)` maps all `ceil(initial_kv_len / 16)` blocks at once. Three rules carry most of
# the grade:
#
# 1. **Check before allocate.** Reject in this order and return `None` having changed *nothing*:
#    engine None → bad input → `initial_kv_len <= 0` → `seq_id` already active → more than 256
#    blocks needed, or more than `free_local_blocks`. Only then allocate anything. *Bad input* is
#    an argument a C `int` parameter could never receive: Python would pass `'7'`, `2.5`, `2**40`,
#    `True` or `None` along, C could not. Test `seq_id` and `initial_kv_len` with the given
#    `is_c_int(value)` first (the checks call `create_sequence(engine, '7', 5)` and expect `None`,
#    not a `TypeError`).
# 2. **First-fit.** Each block is the *lowest-numbered* block whose `ref_count` is 0 (write it in
#    `take_block`; `drop_block` is its inverse). Mapping a block sets its ref count to 1 and
#    decrements `free_local_blocks`.
# 3. **Never write the pool here.** The harness fills it with magic numbers and checks they
#    survive: only `append_kv` writes records.
#
# Allocate the Sequence (`cmem.new(Sequence)`), its L1 table (16 NULLs,
# `cmem.calloc_array(L1_PT_SIZE, IntPtr)`) and each L2 table when its first block is mapped
# (`new_l2_table`: 16 × `-1`; `malloc` memory is garbage until you write it). Set `kv_count` and
# link the sequence at the **tail** of `active_seqs` with `list_add_tail`.
#
# **Free.** `free_sequence(engine, seq_id)` returns `-1` if there is no such sequence. Otherwise
# unlink it, and visit **all 16 L1 slots**: a `NULL` slot can sit before a mapped one (a sequence
# built by appends may skip ahead), so never `break` at the first NULL. Each mapped block loses a
# reference; one that reaches 0 is free again (`free_local_blocks += 1`). Free every L2 table, the
# L1 table and the Sequence, then return 0.
#
# Six stubs belong to this task; the small helpers are reused by Tasks 3–5, so keep them honest:
#
# | stub | job |
# |---|---|
# | `take_block(engine, start=0)` | first-fit: lowest block with ref 0 → ref 1, one fewer free block |
# | `drop_block(engine, block)` | ref −1; at 0 the block is free again |
# | `new_l2_table()` | 16 ints from `cmem.malloc_array`, all set to `-1` |
# | `create_sequence(engine, seq_id, initial_kv_len)` | validate, then build and link the sequence |
# | `destroy_sequence(engine, seq)` | unlink, drop every mapped block, free L2s, L1, the Sequence |
# | `free_sequence(engine, seq_id)` | find (`find_sequence` is given) and destroy, or `-1` |

# %%
pagedlab.graded.run("task2");

# %% [markdown]
# ## Your engine, in pictures
#
# A pool of 32 blocks. Three prompts arrive, the second finishes, and a fourth, longer prompt
# arrives. Predict before running: which physical blocks does sequence 4 get?

# %%
pagedlab.graded.require("task1", "task2")  # the demo below runs your engine in this kernel
mm = pagedlab.load("memory_manager")  # pick up your latest edits
pool = Pool(32 * hw3.BLOCK_SIZE)
heap = cmem.snapshot()  # what the heap held before: the harness frees the rest at the end
engine = mm.llm_init(pool.addr, pool.size)

mm.create_sequence(engine, 1, 40)   # 3 blocks
mm.create_sequence(engine, 2, 20)   # 2 blocks
mm.create_sequence(engine, 3, 50)   # 4 blocks
mm.free_sequence(engine, 2)         # leaves a 2-block hole
mm.create_sequence(engine, 4, 70)   # 5 blocks: first-fit fills the hole first
print("blocks of seq 4:", [b for _, b in sorted(hw3.mapping(hw3.find(engine, 4)).items())])
print("free_local_blocks =", engine.free_local_blocks)

fig, ax = plt.subplots(figsize=(10, 2.4))
viz.draw_pool(engine, ax=ax)
plt.show()

# %% [markdown]
# Sequence 4 starts in the hole sequence 2 left (blocks 3 and 4) and continues after sequence 3:
# its logical blocks are contiguous, its physical blocks are not, and nothing had to move. Its
# block table:

# %%
viz.draw_block_table(engine, 4, highlight=(0, 2))
plt.show()

# %% [markdown]
# A sequence longer than 16 blocks needs a second L2 table. Try it: create a sequence of 300
# records (19 blocks) and draw its table.

# %%
pagedlab.graded.require("task2")
mm.create_sequence(engine, 5, 300)
viz.draw_block_table(engine, 5)
plt.show()

for seq_id in (1, 3, 4, 5):  # llm_destroy is Task 5 (notebook 05): free one by one for now
    mm.free_sequence(engine, seq_id)
print("after freeing everything: free_local_blocks =", engine.free_local_blocks)
hw3.sweep(heap)  # the harness frees what the demo allocated until you write llm_destroy

# %% [markdown] tags=["instructor"]
# ## For instructors: the explorer
#
# Step through the API live. Fork and append become available once Tasks 3–4 (notebook 04) are
# done; until then the log shows the `NotImplementedError` they raise. (Cells tagged
# `instructor` are left out of the student edition by `pagedlab release`.)

# %% tags=["instructor"]
# NBVAL_IGNORE_OUTPUT
from pagedlab.explorer import Explorer

explorer = Explorer(pool_blocks=32)
explorer.create(1, 40)
explorer.create(2, 20)
explorer
