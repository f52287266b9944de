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
# # 07 · Paged attention in torch
#
# A decode step: every running sequence has one new query token, and it attends to **all** of
# its tokens in the cache. With a contiguous cache that is one `scaled_dot_product_attention`
# call. With a paged cache the keys and values of a sequence are scattered over blocks, so first
# they have to be found.
#
# The simplest correct way, and the one we build here, is **gather, then attend**: collect a
# sequence's K/V through its block table into contiguous tensors (**Task 8**), then run ordinary
# attention, with grouped-query attention (**Task 9**). Notebook 08 does the same inside one CUDA
# kernel, without the copy.
#
# Everything is checked against `pagedlab.reference.dense_attention`: torch's SDPA over the
# sequence's tokens as plain tensors, computed in float64.

# %%
# %matplotlib inline
import matplotlib.pyplot as plt
import torch

import pagedlab
from pagedlab import viz
from pagedlab.reference import make_paged_batch, max_relative_error

# Your exercises/paged_attention.py (PAGEDLAB_IMPL, or impl=, picks another folder).
pa = pagedlab.load("paged_attention")
mm = pagedlab.load("memory_manager")
print("paged_attention loaded from", pa.__file__)
print("memory_manager loaded from", mm.__file__)
print(pagedlab.track.describe())  # Part A: memory_manager.py, or llm_memory.c on the C track

# %% [markdown]
# ## A paged batch
#
# `make_paged_batch` fills a shuffled cache with random sequences: the batch is the query, the
# caches, the block tables and the lengths, nothing else, so a sequence's tokens in order come
# out of the cache only through its block table (your gather). Every slot no sequence owns is
# **NaN**, so code that reads a slot it should not gets NaN in its answer.

# %%
batch = make_paged_batch([5, 20, 37], num_heads=4, num_kv_heads=2, head_size=16, block_size=8, seed=0)
print("k_cache     ", tuple(batch.k_cache.shape), "[num_blocks, block_size, num_kv_heads, head_size]")
print("block_tables\n", batch.block_tables)
print("seq_lens    ", batch.seq_lens.tolist())

fig, ax = plt.subplots(figsize=(8, 1.8))
nan_rows = torch.isnan(batch.k_cache[:, :, 0, 0]).T.float()
ax.imshow(nan_rows, cmap="Greys", aspect="auto", vmin=0, vmax=1.6)
ax.set_xlabel("physical block", fontsize=8)
ax.set_ylabel("row", fontsize=8)
ax.set_xticks(range(batch.k_cache.shape[0]))
ax.tick_params(labelsize=7)
ax.set_title("cache rows: white = a token's K/V, grey = NaN (no owner)", fontsize=9)
plt.show()

# %% [markdown]
# ## Gather: a sequence's K/V in token order
#
# For sequence `s` with `n` tokens: positions `0 … n-1` → slots (your `slot_mapping` of
# notebook 06) → rows of the flattened cache. Indexing a tensor with a tensor of indices copies
# those rows, in that order:
#
# ```
# k = k_cache.view(-1, num_kv_heads, head_size)[slots]      # [n, num_kv_heads, head_size]
# ```
#
# Only the first `ceil(n / block_size)` entries of the table are used; the rest is `-1` padding
# (or garbage) and must not be touched.
#
# ### ✏️ Task 8 · gather_kv
#
# In **`exercises/paged_attention.py`** write `gather_kv(k_cache, v_cache, block_table, seq_len)`
# → `(k, v)`, each `[seq_len, num_kv_heads, head_size]`. `block_size` is `k_cache.shape[1]`.

# %%
pagedlab.graded.run("task8");

# %%
pagedlab.graded.require("task6", "task8")  # gather_kv finds its slots with your slot_mapping
pa = pagedlab.load("paged_attention")
for s in range(3):
    k, v = pa.gather_kv(batch.k_cache, batch.v_cache, batch.block_tables[s], int(batch.seq_lens[s]))
    print(f"sequence {s}: gathered {tuple(k.shape)}, its tokens in order: {batch.holds(s, k, v)}")

# %% [markdown]
# ## Attention with grouped-query heads
#
# Modern models keep fewer kv heads than query heads (Llama-3-8B: 32 query heads, 8 kv heads),
# which shrinks the KV cache by the same factor. Query heads are split into `num_kv_heads`
# consecutive groups of `group = num_heads // num_kv_heads`, and every head of a group reads the
# same kv head:
#
# $$\text{kv\_head}(h) = h \,/\!/\, \text{group}$$
#
# For one sequence and query head `h`, with `K`, `V` the gathered `[n, head_size]` of its kv head:
#
# $$\text{out}_h = \text{softmax}\!\left(\text{scale} \cdot K q_h\right)^{\top} V, \qquad \text{scale} = 1/\sqrt{\text{head\_size}}$$
#
# The decode query is the *newest* token, so it may see every token: no causal mask is needed.

# %%
num_heads, num_kv_heads = 8, 2
group = num_heads // num_kv_heads
print("query head -> kv head:", {h: h // group for h in range(num_heads)})

# %% [markdown]
# ### ✏️ Task 9 · paged_attention
#
# Write the body of `paged_attention(q, k_cache, v_cache, block_tables, seq_lens, scale)`:
# `q` is `[num_seqs, num_heads, head_size]`; for each sequence, gather its K/V, compute the
# attention of every query head over its kv head, and write `out[s]` (it starts as NaN, so a
# sequence you skip shows). Compute in the dtype of `q`. A loop over sequences is fine; inside,
# `reshape` the heads to `[num_kv_heads, group, head_size]` and one `einsum` per product handles
# all heads at once (or loop over heads first, then make it faster).

# %%
pagedlab.graded.run("task9");

# %% [markdown]
# ## Checked against dense attention
#
# The reference (`batch.expected()`) runs `dense_attention` in **float64** on each sequence's
# K/V, read from the cache in token order. Your float32 result should agree to about 1e-7
# relative error (float32 has 24 bits of mantissa, ≈ 6e-8, and a softmax over a few hundred terms
# loses a little more); the checks allow `2e-5`. In float64 the two agree to ~1e-16.

# %%
pagedlab.graded.require("task6", "task8", "task9")
pa = pagedlab.load("paged_attention")
batch = make_paged_batch([1, 15, 16, 17, 200], num_heads=8, num_kv_heads=2, head_size=32,
                         block_size=16, shared_blocks=0, seed=1)
expected = batch.expected()   # float64
out32 = pa.paged_attention(batch.q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens)
out64 = pa.paged_attention(batch.q.double(), batch.k_cache.double(), batch.v_cache.double(),
                           batch.block_tables, batch.seq_lens)
err32, err64 = max_relative_error(out32, expected), max_relative_error(out64, expected)
print(f"float32: max relative error {err32:.1e}  (tolerance 2e-5: {'ok' if err32 <= 2e-5 else 'TOO BIG'})")
print(f"float64: max relative error {err64:.1e}  (tolerance 1e-12: {'ok' if err64 <= 1e-12 else 'TOO BIG'})")
viz.draw_attention_check(out32, expected, name="paged (float32)", ref_name="dense (float64)",
                         ylabel="(sequence, head) row")
plt.show()

# %% [markdown]
# The three heatmaps: your output, the reference, and their absolute difference (own colour
# scale). A bug usually has a shape: a stripe of rows (one sequence or one head wrong: a bad
# `kv_head`, a wrong row of the block table), or NaN in the difference (a slot read that no
# sequence owns, or an `out` row never written).
#
# What does a wrong GQA mapping look like? `h % num_kv_heads` instead of `h // group` is a classic:

# %%
pagedlab.graded.require("task6", "task8")


def attention_wrong_gqa(q, k_cache, v_cache, block_tables, seq_lens):
    # Query head h reads kv head h % num_kv_heads: interleaved groups instead of consecutive.
    num_heads, num_kv = q.shape[1], k_cache.shape[2]
    out = torch.empty_like(q)
    for s in range(q.shape[0]):
        k, v = pa.gather_kv(k_cache, v_cache, block_tables[s], int(seq_lens[s]))
        for h in range(num_heads):
            kk, vv = k[:, h % num_kv].to(q.dtype), v[:, h % num_kv].to(q.dtype)
            p = torch.softmax(kk @ q[s, h] / q.shape[-1] ** 0.5, dim=0)
            out[s, h] = p @ vv
    return out


wrong = attention_wrong_gqa(batch.q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens)
print(f"max relative error with h % num_kv_heads: {max_relative_error(wrong, expected):.2f}")
viz.draw_attention_check(wrong, expected, name="h % num_kv_heads", ref_name="dense (float64)",
                         ylabel="(sequence, head) row")
plt.show()

# %% [markdown]
# Heads 0, 2, 5 and 7 happen to get the same kv head under both rules, so their rows are exact;
# heads 1, 3, 4 and 6 are wrong in every sequence. It shows most in sequence 0 (rows 0–7): with a
# single token, the output of a head *is* that token's value row, so reading the wrong kv head
# swaps whole rows. A pattern that repeats with the head index points at the head mapping, not
# at the block table.
#
# ## Takeaways
#
# - A paged cache changes *where* K/V live, never what attention computes: gather through the
#   block table, then it is ordinary attention.
# - GQA: query head `h` reads kv head `h // (num_heads // num_kv_heads)`.
# - Gathering copies every sequence's K/V once per step; the CUDA kernel of notebook 08 reads the
#   blocks in place instead.
