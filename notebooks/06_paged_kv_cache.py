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
# # 06 · From block tables to tensors: the paged KV cache
#
# So far a "KV record" was one `int32`. In a real model each token stores, for every layer, a
# **key** and a **value** vector per kv head. This notebook makes the step from the HW3 engine to
# the tensors vLLM keeps on the GPU:
#
# 1. the cache layout `[num_blocks, block_size, num_kv_heads, head_size]`,
# 2. the **slot** of a token: where its K/V row lives (**Task 6**),
# 3. writing new K/V into the cache (**Task 7**),
# 4. driving it all from the block tables of *your* engine.
#
# The block ids are the same numbers your `memory_manager` hands out: a physical block of the HW3
# pool (16 records) is the same block of the tensor cache (16 tokens).

# %%
# %matplotlib inline
import matplotlib.pyplot as plt
import torch

import pagedlab
from pagedlab import block_tables, hw3, viz
from pagedlab.engine.pool import Pool

# Your exercises/paged_attention.py (Tasks 6-9) and memory_manager.py (Tasks 1-5, used at the end).
pa = pagedlab.load("paged_attention")
mm = pagedlab.load("memory_manager")
print("paged_attention loaded from", pa.__file__)
print("memory_manager loaded from", mm.__file__)
print(pagedlab.track.describe())  # Part A: memory_manager.py, or llm_memory.c on the C track

# %% [markdown]
# ## The layout: `[num_blocks, block_size, num_kv_heads, head_size]`
#
# vLLM v1 (and flash-attention's paged API) stores each layer's cache as two tensors, `k_cache`
# and `v_cache`, with the **token** dimension before the heads ("NHD"):
#
# ```
# k_cache[block, row, kv_head, :]   = key of token (row) of physical block (block), for one kv head
#         └─ physical block id      └─ 0 .. block_size-1
# ```
#
# A physical block is `block_size` consecutive tokens of *one* sequence, all heads. Flatten the
# first two dimensions and every token position in the cache gets one number, its **slot**:
# `slot = block * block_size + row`. `k_cache.view(-1, num_kv_heads, head_size)[slot]` is then
# the key of that token, for all kv heads, without copying anything.

# %%
num_blocks, block_size, num_kv_heads, head_size = 6, 4, 2, 3
k_cache = torch.arange(num_blocks * block_size * num_kv_heads * head_size, dtype=torch.float32)
k_cache = k_cache.view(num_blocks, block_size, num_kv_heads, head_size)
print("shape  ", tuple(k_cache.shape))
print("strides", k_cache.stride(), "(elements to step one index in each dimension)")
flat = k_cache.view(-1, num_kv_heads, head_size)   # [num_blocks * block_size, kv heads, head]
print("flat   ", tuple(flat.shape), "- same memory:", flat.data_ptr() == k_cache.data_ptr())
print("block 2, row 1:", k_cache[2, 1].tolist())
print("slot 2*4+1 = 9:", flat[9].tolist())

# %% [markdown]
# ## The slot of a token
#
# Token position `p` of a sequence is in its logical block `p // block_size`, at row
# `p % block_size`. The block table row maps the logical block to a physical one:
#
# $$\text{slot}(p) = \text{block\_table}[p \,/\!/\, \text{block\_size}] \cdot \text{block\_size} + p \bmod \text{block\_size}$$
#
# It is the same translation as HW3's `append_kv`, with a one-level table (vLLM keeps each
# sequence's block table as a flat row of a tensor) and a tensor row instead of an `int32`.
# Worked example: a sequence whose blocks are `[5, 2, 7]`, block size 16, 40 tokens.

# %%
# NBVAL_CHECK_OUTPUT
table = [5, 2, 7]
bs = 16
for p in (0, 15, 16, 17, 31, 32, 39):
    logical, row = divmod(p, bs)
    slot = table[logical] * bs + row
    print(f"p = {p:2d}: logical block {logical}, row {row:2d} -> physical block {table[logical]} "
          f"-> slot {table[logical]} * {bs} + {row:2d} = {slot:3d}")

# %% [markdown]
# Positions 15 and 16 are neighbours in the sequence but 15 → slot 95 and 16 → slot 32 are far
# apart in memory: neighbours inside a block are contiguous, blocks are anywhere.
#
# ### ✏️ Task 6 · slot_mapping
#
# Open **`exercises/paged_attention.py`** and write `slot_mapping(block_table, positions,
# block_size)`: one sequence's block table row (1-D, `-1` padded) and any 1-D tensor of positions
# (any order) → an `int64` tensor of slots, same shape as `positions`. No Python loop is needed:
# integer division, indexing with a tensor, multiply, add.

# %%
pagedlab.graded.run("task6");

# %% [markdown]
# ### ✏️ Task 7 · write_kv
#
# During a step, the model computes K and V for the new tokens, `[num_tokens, num_kv_heads,
# head_size]`, and stores each token's rows at its slot (vLLM's `reshape_and_cache` kernel does
# this on the GPU). Write `write_kv(k_cache, v_cache, k, v, slots)`:
#
# - view each cache as `[num_blocks * block_size, num_kv_heads, head_size]` (`.view(-1, ...)`: a
#   view, so writing to it writes the cache);
# - assign `k[i]` to row `slots[i]` — one indexed assignment for all tokens;
# - a **negative slot** is a padding token (batches are padded to one length): skip it;
# - nothing else in the cache may change (the check fills the cache with NaN and looks).

# %%
pagedlab.graded.run("task7");

# %% [markdown]
# ## Driving the cache from your engine
#
# `pagedlab.block_tables.block_table_rows(engine)` reads your engine's sequences into an `int32
# [num_seqs, max_blocks]` tensor, one row per sequence (padding `-1`): exactly what the attention
# code of notebooks 07 and 08 consumes. Below: a 12-block engine, three sequences (one a fork),
# and a K/V cache with as many blocks as the pool, starting as NaN (= never written).

# %%
pagedlab.graded.require("task1", "task2", "task3")  # checked in a separate process first
mm = pagedlab.load("memory_manager")
pa = pagedlab.load("paged_attention")
pool = Pool(12 * hw3.BLOCK_SIZE)
engine = mm.llm_init(pool.addr, pool.size)
mm.create_sequence(engine, 0, 37)     # blocks 0, 1, 2
mm.create_sequence(engine, 1, 20)     # blocks 3, 4
mm.fork_sequence(engine, 0, 2)        # shares 0, 1, 2
mm.free_sequence(engine, 1)           # a hole at 3, 4
mm.create_sequence(engine, 3, 50)     # first-fit: 3, 4, then 5, 6

ids = block_tables.seq_ids(engine)
rows = torch.from_numpy(block_tables.block_table_rows(engine))
lens = block_tables.seq_lens(engine)
print("sequences", ids, " seq_lens", lens.tolist())
print(rows)

# %%
pagedlab.graded.require("task6", "task7")
BS, KVH, D = hw3.KV_PER_BLOCK, 2, 8   # the engine's 16 records per block = 16 tokens per block
k_cache = torch.full((engine.total_local_blocks, BS, KVH, D), float("nan"))
v_cache = torch.full_like(k_cache, float("nan"))
gen = torch.Generator().manual_seed(0)
owner = {}  # slot -> sequence id that wrote it

for i, sid in enumerate(ids):
    if sid == 2:
        continue  # the fork: its tokens are sequence 0's, already in the shared blocks
    n = int(lens[i])
    slots = pa.slot_mapping(rows[i], torch.arange(n), BS)
    k, v = torch.randn(n, KVH, D, generator=gen), torch.randn(n, KVH, D, generator=gen)
    pa.write_kv(k_cache, v_cache, k, v, slots)
    owner.update({int(s): sid for s in slots})
print("rows written:", len(owner), "of", k_cache.shape[0] * BS)


# %%
def draw_cache_rows(k_cache, owner, title):
    # One square per cache row (slot): coloured by the sequence that wrote it, grey if NaN.
    blocks, bs = k_cache.shape[:2]
    written = ~torch.isnan(k_cache[:, :, 0, 0])
    fig, ax = plt.subplots(figsize=(8, 0.36 * blocks + 0.8))
    for b in range(blocks):
        for r in range(bs):
            slot = b * bs + r
            colour = viz.seq_color(owner[slot]) if written[b, r] and slot in owner else viz.FREE_COLOR
            ax.add_patch(plt.Rectangle((r, blocks - 1 - b), 0.92, 0.85, color=colour))
        ax.text(-0.4, blocks - 1 - b + 0.42, f"block {b}", ha="right", va="center", fontsize=8)
    ax.set_xlim(-2.6, bs)
    ax.set_ylim(0, blocks)
    ax.set_xticks([r + 0.46 for r in range(bs)], range(bs), fontsize=7)
    ax.set_xlabel("row in block (token p % 16)", fontsize=8)
    ax.set_yticks([])
    for side in ax.spines.values():
        side.set_visible(False)
    handles = [plt.Rectangle((0, 0), 1, 1, color=viz.seq_color(s)) for s in sorted(set(owner.values()))]
    ax.legend(handles + [plt.Rectangle((0, 0), 1, 1, color=viz.FREE_COLOR)],
              [f"seq {s}" for s in sorted(set(owner.values()))] + ["empty (NaN)"],
              loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
    ax.set_title(title, fontsize=9)
    plt.show()


draw_cache_rows(k_cache, owner, "K cache rows after writing sequences 0 and 3 (seq 2 reads seq 0's)")

# %% [markdown]
# Sequence 3's 50 tokens fill blocks 3, 4 and 5 and the first two rows of block 6 (first-fit put
# it in the hole sequence 1 left). Sequence 2 wrote nothing: its table points at sequence 0's
# blocks, so reading its 37 tokens through its table returns sequence 0's keys, as a fork should.
#
# ### Copy-on-write reaches the tensors too
#
# When sequence 2 generates its first token, your `append_kv` copies the shared partial block
# (block 2) into a fresh one. The tensor cache has to follow: copy the block's K/V rows, then
# write the new token at its slot. (vLLM's scheduler collects such copies and a `copy_blocks`
# kernel performs them before the step.)

# %%
pagedlab.graded.require("task2", "task4", "task6", "task7")
before = rows[ids.index(2)].clone()
mm.append_kv(engine, 2, 1)              # the HW3 record; the engine copies the block (CoW)
rows = torch.from_numpy(block_tables.block_table_rows(engine))
ids, lens = block_tables.seq_ids(engine), block_tables.seq_lens(engine)
after = rows[ids.index(2)]
changed = [(int(a), int(b)) for a, b in zip(before, after) if a != b and a >= 0]
print("sequence 2's table:", before.tolist(), "->", after.tolist(), " copies:", changed)

for src, dst in changed:                 # copy the K/V rows of the block, as copy_blocks does
    k_cache[dst], v_cache[dst] = k_cache[src], v_cache[src]
    owner.update({dst * BS + r: 2 for r in range(BS) if src * BS + r in owner})
n = int(lens[ids.index(2)])
slot = pa.slot_mapping(after, torch.tensor([n - 1]), BS)
pa.write_kv(k_cache, v_cache, torch.randn(1, KVH, D, generator=gen), torch.randn(1, KVH, D, generator=gen), slot)
owner[int(slot)] = 2
print("sequence 2's new token (position", n - 1, ") -> slot", int(slot))
draw_cache_rows(k_cache, owner, "after sequence 2's first own token: its copy of block 2, plus one row")

# %%
pagedlab.graded.require("task2", "task5")
print("llm_destroy ->", mm.llm_destroy(engine))

# %% [markdown]
# ## Takeaways
#
# - A layer's KV cache is `[num_blocks, block_size, num_kv_heads, head_size]`; a physical block
#   is `block_size` tokens of one sequence, all kv heads.
# - `slot = block_table[p // block_size] * block_size + p % block_size`: the only address
#   computation paged attention needs.
# - Writing K/V is a scatter to slots; reading a sequence back (notebook 07) is a gather from
#   them. Forked sequences share slots until copy-on-write gives them their own block.
