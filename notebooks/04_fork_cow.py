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
# # 04 · Fork, reference counts and copy-on-write
#
# You click **Regenerate** in a chat window, or ask for "three different titles for my essay".
# The server now runs several *branches* of one conversation. Every branch starts from the same
# prompt, so every branch starts with **the same KV cache**. Copying those blocks once per branch
# would multiply the memory of the prompt by the number of branches for nothing.
#
# Paging makes sharing cheap. A branch is a new sequence whose block table points at the *same*
# physical blocks as its parent; the blocks only need to know how many sequences use them. That
# count is the **reference count**, one `int` per physical block in `engine.ref_count`.
#
# The catch comes with the first token a branch generates: if the last prompt block is shared and
# only partly full, writing into it would change the other branches' history too. So the branch
# first takes a private copy of that one block and writes there: **copy-on-write** (CoW), the same
# trick an operating system uses after `fork()`.
#
# In this notebook:
#
# 1. fork = share every block + count one more owner (**Task 3 · fork_sequence**),
# 2. copy-on-write, step by step,
# 3. **Task 4 · append_kv**: address translation, new pages, CoW, and the out-of-memory rule,
# 4. parallel sampling on your own engine: three samples, one prompt, blocks saved.
#
# vLLM uses exactly this for parallel sampling and beam search (Kwon et al., *Efficient Memory
# Management for Large Language Model Serving with PagedAttention*, SOSP 2023, §4.4).

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
# ## Fork: share the blocks, count the owners
#
# Sequence 0 holds a 37-record prompt: logical blocks 0 and 1 are full (16 + 16 records) and
# logical block 2 holds 5 records. Fork it into sequence 1 and nothing in the **pool** changes.
# The child gets
#
# - its own `Sequence` and its own L1 table (16 pointers),
# - its own L2 table for every non-NULL L2 table of the parent, holding the *same block ids*,
# - and every inherited block gets `ref_count += 1`.
#
# `free_local_blocks` does not move: no physical block was taken. The picture below is drawn by
# hand (no engine involved): striped blocks belong to both sequences and show their count.

# %%
# A hand-made engine state: 8 blocks, sequence 0 maps blocks 2, 5, 6 (in logical order).
parent = viz.SeqView.from_blocks(0, [2, 5, 6], kv_count=37)
child = viz.SeqView.from_blocks(1, [2, 5, 6], kv_count=37)
refs_before = [0, 0, 1, 0, 0, 1, 1, 0]
refs_after = [0, 0, 2, 0, 0, 2, 2, 0]
before = viz.EngineView(8, 5, refs_before, [parent])
after = viz.EngineView(8, 5, refs_after, [parent, child])

fig, axes = plt.subplots(1, 2, figsize=(12, 2.2))
viz.draw_pool(before, ax=axes[0], cols=8, title="before fork: seq 0 owns 3 blocks")
viz.draw_pool(after, ax=axes[1], cols=8, title="after fork(0 → 1): same 3 blocks, ref count 2")
plt.tight_layout()
plt.show()

# %% [markdown]
# Two details that the checks look at:
#
# - The child's L2 tables are **new allocations** filled with `-1` first and then the mapped
#   entries copied. Sharing the parent's L2 *tables* (copying only the L1 pointers) would look
#   the same today, but the first `append_kv` of either sequence would then edit the other's
#   table, and `free_sequence` would free the same L2 table twice.
# - Only the *mapped* entries count owners: a `-1` entry is not a block.
#
# ### ✏️ Task 3 · fork_sequence
#
# Open **`exercises/memory_manager.py`** and write `fork_sequence(engine, parent_seq_id,
# new_seq_id)`:
#
# | step | what |
# |---|---|
# | validate | `None` (and nothing changed) if the engine is `None`, the parent does not exist, or `new_seq_id` is already active |
# | allocate | a `Sequence` (`cmem.new`) and an L1 table of 16 NULLs (`cmem.calloc_array(L1_PT_SIZE, IntPtr)`) |
# | copy | for each non-NULL parent L2: `new_l2_table()`, then copy the mapped entries, `ref_count[block] += 1` for each |
# | finish | same `kv_count`, `seq_id = new_seq_id`, append at the tail of `active_seqs`, return the child |
#
# Run the cell until every check passes.

# %%
pagedlab.graded.run("task3");

# %% [markdown]
# ## Copy-on-write, step by step
#
# Sequences A (id 1) and B (id 2) share physical block 8 with `ref_count[8] = 2`; it is their
# logical block 2 and holds 5 records. A generates a token: record 37 goes to logical block
# `37 // 16 = 2`, offset `37 % 16 = 5`.
#
# | step | what `append_kv(engine, A, x)` does | state afterwards |
# |---|---|---|
# | 1. translate | `logical = 37 // 16 = 2`, `offset = 5`; L1 slot `2 // 16 = 0`, L2 slot `2 % 16 = 2` → block 8 | nothing changed yet |
# | 2. probe | block 8 is mapped but `ref_count[8] = 2 > 1`: A must not write there. A new block is needed: is `free_local_blocks > 0`? If not, return `-1` **now** | nothing changed yet |
# | 3. take | first-fit: the lowest block with `ref_count == 0`, say 12 | `ref_count[12] = 1`, one block fewer free |
# | 4. copy | `memmove(block 12, block 8, 64)`: exactly `BLOCK_SIZE` = 64 bytes, the 16 records | block 12 = block 8 |
# | 5. let go | `ref_count[8] -= 1` (B still uses it, so it stays ≥ 1 and nothing is freed) | `ref_count[8] = 1` |
# | 6. remap | A's L2 entry: 8 → 12 | B untouched |
# | 7. write | the record at `pool + 12 * 64 + 5 * 4`; `kv_count += 1` | A has 38 records |
#
# The next time B appends into logical block 2, `ref_count[8]` is 1: B owns the block alone and
# writes **in place**, no copy. The last owner of a shared block never copies.

# %%
seq_a = viz.SeqView.from_blocks(1, [3, 4, 8], kv_count=37)
seq_b = viz.SeqView.from_blocks(2, [3, 4, 8], kv_count=37)
refs = [0] * 16
for b in (3, 4, 8):
    refs[b] = 2
shared = viz.EngineView(16, 13, refs, [seq_a, seq_b])

seq_a_after = viz.SeqView.from_blocks(1, [3, 4, 12], kv_count=38)
refs_after = list(refs)
refs_after[8], refs_after[12] = 1, 1
copied = viz.EngineView(16, 12, refs_after, [seq_a_after, seq_b])

fig, axes = plt.subplots(2, 1, figsize=(9, 2.7))
viz.draw_pool(shared, ax=axes[0], title="before: A (seq 1) and B (seq 2) share blocks 3, 4, 8 (×2)")
viz.draw_pool(copied, ax=axes[1], title="after A appends record 37: A's copy of block 8 is block 12")
plt.tight_layout()
plt.show()

# %% [markdown]
# Why copy all 64 bytes and not just the 5 records that are in use? It is what the handout asks,
# it is what a GPU does (a block is copied as a unit), and it never depends on `kv_count` being
# right. The graded check fills the pool with a pattern that differs in every word, so copying
# from the wrong block, or the wrong number of bytes, shows.
#
# ### ✏️ Task 4 · append_kv
#
# Write `append_kv(engine, seq_id, kv_data)` in **`exercises/memory_manager.py`**. In order:
#
# 1. `-1` if `kv_data` is not a value a C `int` holds (`is_c_int`, as in Task 2: the record
#    is an int32, so `2**31`, `'7'` or `2.5` are bad input); find the sequence (`-1` if
#    missing); `logical, offset = divmod(kv_count, 16)`;
#    `-1` if `logical >= 256`;
# 2. **probe before you touch anything**: a new block is needed if the L2 table is NULL or the
#    entry is `-1` (new page), or if the entry's block has `ref_count > 1` (copy-on-write). If one
#    is needed and `free_local_blocks == 0`, return `-1` with **nothing** changed: no L2 table
#    allocated, no count moved;
# 3. allocate the L2 table if it is NULL (`new_l2_table()`);
# 4. new page: `take_block(engine)`, map it. CoW: `take_block`, `ctypes.memmove` 64 bytes from
#    the old block, old `ref_count -= 1`, remap;
# 5. write the record with `ctypes.c_int32.from_address(block_address(engine, block) + offset * 4)`
#    and `kv_count += 1`; return 0.
#
# The first check replays the handout's example: record 613 goes to `block_table[2][6]`, slot 5.

# %%
pagedlab.graded.run("task4");

# %% [markdown]
# ## Parallel sampling on your engine
#
# Now your own functions do everything. A 37-record prompt (sequence 0) is forked into three
# samples (1, 2, 3), then the prompt sequence itself is freed: the samples keep its blocks alive
# (each block's count drops from 4 to 3, nothing returns to the free pool). The records
# `create_sequence` "holds" are whatever the pool contained (the harness's magic pattern stands
# in for the prompt's KV data; prefill never writes the pool in HW3).

# %%
pagedlab.graded.require("task1", "task2", "task3")  # checked in a separate process first
mm = pagedlab.load("memory_manager")  # pick up your latest edits
pool = Pool(16 * hw3.BLOCK_SIZE)       # 16 blocks of 64 bytes
engine = mm.llm_init(pool.addr, pool.size)

mm.create_sequence(engine, 0, 37)
for sample in (1, 2, 3):
    mm.fork_sequence(engine, 0, sample)
print("after 3 forks:  ref counts", hw3.ref_counts(engine)[:6], " free", engine.free_local_blocks)
mm.free_sequence(engine, 0)
print("prompt freed:   ref counts", hw3.ref_counts(engine)[:6], " free", engine.free_local_blocks)

viz.draw_engine(engine, [1], title="3 samples share the prompt's blocks")
plt.show()

# %% [markdown]
# Each sample now generates its own tokens. Watch the first round: samples 1 and 2 find block 2
# shared and copy it; sample 3 finds it with `ref_count == 1` (it is the last owner) and writes in
# place. The pool diff proves that a CoW touches exactly one block: 16 words = 64 bytes.

# %%
pagedlab.graded.require("task2", "task4")  # append_kv takes its blocks with Task 2's take_block


def what_happened(before, after, seq_id):
    # Compare the sequence's mapping before/after one append and name the event.
    old = dict(before.seq(seq_id).mapping)
    new = dict(after.seq(seq_id).mapping)
    moved = [(lg, old[lg], b) for lg, b in new.items() if lg in old and old[lg] != b]
    added = [(lg, b) for lg, b in new.items() if lg not in old]
    if moved:
        lg, a, b = moved[0]
        return f"copy-on-write: logical {lg} moves from block {a} to block {b}"
    if added:
        lg, b = added[0]
        return f"new page: logical {lg} -> block {b}"
    return "written in place"


for sample in (1, 2, 3):
    before, pool_before = hw3.state(engine), pool.snapshot()
    assert mm.append_kv(engine, sample, 1000 * sample) == 0
    after, diff = hw3.state(engine), pool.diff(pool_before)
    print(f"sample {sample}: {what_happened(before, after, sample)}")
    print(f"          pool words changed: {len(diff.words)} in block(s) {diff.blocks}; "
          f"ref counts now {hw3.ref_counts(engine)[:6]}")
    old, new = dict(before.seq(sample).mapping)[2], dict(after.seq(sample).mapping)[2]
    if old != new:
        same = sum(a == b for a, b in zip(pool.words(old), pool.words(new)))
        print(f"          block {new} equals block {old} in {same} of 16 words; "
              f"word 5 holds the new record {pool.words(new)[5]}")

# %%
pagedlab.graded.require("task2", "task4")
# Each sample generates 11 more tokens: block 2 fills up (48 records) and the 49th record
# of each sample needs a new page.
for step in range(1, 12):
    for sample in (1, 2, 3):
        before = hw3.state(engine)
        assert mm.append_kv(engine, sample, 1000 * sample + step) == 0
        event = what_happened(before, hw3.state(engine), sample)
        if event != "written in place":
            print(f"token {step:2d} of sample {sample}: {event}")

used = engine.total_local_blocks - engine.free_local_blocks
private = sum(len(hw3.mapping(s)) for s in hw3.sequences(engine))
print(f"\nblocks in use: {used}; without sharing the 3 samples would need {private}: "
      f"{private - used} blocks ({(private - used) / private:.0%}) saved")
viz.draw_pool(engine, title="3 samples of 49 records: blocks 0-1 still shared (×3)")
plt.show()

# %% [markdown]
# The two full prompt blocks stay shared for as long as the samples live; only the partial block
# and the newly generated blocks are private. The longer the prompt compared with the outputs,
# the bigger the saving (notebook 09 measures it on realistic request lengths).
#
# Clean up (Task 5, next notebook, is `llm_destroy`; here we free the samples one by one):

# %%
pagedlab.graded.require("task2")
for sample in (1, 2, 3):
    mm.free_sequence(engine, sample)
print("free blocks:", engine.free_local_blocks, "of", engine.total_local_blocks)
cmem.free(engine.ref_count)
cmem.free(engine)

# %% [markdown]
# ## Takeaways
#
# - Fork copies **tables**, not blocks: one new L1, one new L2 per non-NULL L2, `ref_count += 1`
#   per mapped block.
# - A block with `ref_count > 1` is read-only for everyone. The first writer copies exactly one
#   block (64 bytes) and moves its own reference; the last owner writes in place.
# - `append_kv` decides whether it needs a block *before* it changes anything, so an
#   out-of-memory append is a clean `-1`. Notebook 05 looks at that rule in detail.
