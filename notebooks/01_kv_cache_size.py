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
# # 01 · How big is the KV cache, and where does the memory go?
#
# Before writing an allocator it is worth knowing what it allocates. This notebook computes the
# KV cache of one token from a model's configuration, and then looks at three ways memory is
# wasted when every request gets one contiguous reservation, the problem PagedAttention was built
# to solve. No graded task here.
#
# Figures marked *paper* come from Kwon et al., "Efficient Memory Management for Large Language Model Serving with PagedAttention", SOSP 2023.

# %%
# %matplotlib inline
import matplotlib.pyplot as plt

import pagedlab
from pagedlab import viz

# Your exercises/memory_manager.py (PAGEDLAB_IMPL, or impl=, picks another folder).
mm = pagedlab.load("memory_manager")
print("memory_manager loaded from", mm.__file__)


# %% [markdown]
# ## Bytes per token
#
# For every token, every layer stores one **key** and one **value** vector per **KV head**:
#
# $$\text{bytes per token} = \text{layers} \times \text{KV heads} \times \text{head dim} \times 2\ (K, V) \times \text{bytes per element}$$
#
# The catch is the middle factor. Modern models use **grouped-query attention (GQA)**: several
# query heads share one key/value head. Llama-3-8B has 32 query heads but only 8 KV heads, so
# each group of 4 query heads reads the same K and V. Only the 8 KV heads are cached.

# %%
# NBVAL_CHECK_OUTPUT
def kv_bytes_per_token(layers, kv_heads, head_dim, dtype_bytes=2):
    return layers * kv_heads * head_dim * 2 * dtype_bytes  # 2: one K and one V vector


# Llama-3-8B, from its published config.json (bfloat16: 2 bytes per element)
llama3_8b = dict(num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                 hidden_size=4096)
head_dim = llama3_8b["hidden_size"] // llama3_8b["num_attention_heads"]  # 128

right = kv_bytes_per_token(llama3_8b["num_hidden_layers"], llama3_8b["num_key_value_heads"], head_dim)
naive = kv_bytes_per_token(llama3_8b["num_hidden_layers"], llama3_8b["num_attention_heads"], head_dim)
print(f"with the 8 KV heads (GQA): 32 x 8 x {head_dim} x 2 x 2 = {right:,} B = {right // 1024} KiB per token")
print(f"with the 32 query heads:   32 x 32 x {head_dim} x 2 x 2 = {naive:,} B = {naive // 1024} KiB per token")
print(f"the naive figure is {naive // right}x too high")
print(f"an 8,192-token context: {8192 * right / 2**30:.1f} GiB of KV cache")

# %% [markdown]
# You will find "512 KB per token for Llama-3-8B" in some write-ups: that is the naive line, which
# counts the 32 *query* heads. Queries are never cached (each one is used once, for the token
# being generated), and the 4 query heads of a group share a single cached K/V head. So the real
# figure is **128 KiB**, a quarter of it. GQA exists precisely to shrink this cache.
#
# A few models side by side (configurations as published in each model's `config.json`; OPT-13B
# predates GQA, so every head is a KV head):

# %%
# NBVAL_CHECK_OUTPUT
models = {  # name: (layers, query heads, KV heads, head dim)
    "OPT-13B": (40, 40, 40, 128),
    "Mistral-7B-v0.1": (32, 32, 8, 128),
    "Llama-3-8B": (32, 32, 8, 128),
    "Llama-3-70B": (80, 64, 8, 128),
}
print(f"{'model':16s} {'layers':>6s} {'q heads':>8s} {'KV heads':>9s} {'KiB/token':>10s} {'GiB per 4k tokens':>18s}")
for name, (layers, q_heads, kv_heads, dim) in models.items():
    b = kv_bytes_per_token(layers, kv_heads, dim)
    print(f"{name:16s} {layers:6d} {q_heads:8d} {kv_heads:9d} {b / 1024:10.0f} {4096 * b / 2**30:18.2f}")

# %% [markdown]
# OPT-13B's 800 KiB per token is the number the vLLM paper works with: *paper* §3 computes
# 2 × 5120 × 40 × 2 bytes = 800 KB per token (KB of 1,024 bytes), so one 2,048-token request can
# need up to 1.6 GB, on a GPU whose memory also holds 26 GB of weights.
#
# ## One reservation per request
#
# Before vLLM, serving systems stored each request's KV cache in **one contiguous chunk**, as
# tensors want. But the final length of a request is unknown when it arrives: the model decides
# when to stop. So the system reserves for the worst case, the model's maximum length. That wastes
# memory in three ways:
#
# | waste | what it is |
# |---|---|
# | **reservation** | slots reserved for tokens the request *will* generate later: useful eventually, idle now |
# | **internal fragmentation** | slots reserved that will *never* be used: the request stops long before the maximum |
# | **external fragmentation** | free memory between chunks that no waiting request can use, because each needs one contiguous piece |
#
# Paging removes all three at once: a request holds only the blocks its tokens fill, and any free
# block serves any request. What is left is the unfilled end of each request's *last* block, on
# average half a block.
#
# A chat that says "Hello" and ends after 5 tokens, in a server with a 2,048-token maximum:

# %%
# NBVAL_CHECK_OUTPUT
tokens, max_len, block = 5, 2048, 16
paged_slots = -(-tokens // block) * block
print(f"contiguous: {max_len} slots reserved, {tokens} used -> {tokens / max_len:.2%} useful")
print(f"paged:      {paged_slots} slots (one block), {tokens} used -> {tokens / paged_slots:.0%} useful")
print(f"with Llama-3-8B that is {max_len * right / 2**20:.0f} MiB against {paged_slots * right / 2**20:.0f} MiB")

# %% [markdown]
# ## The three kinds of waste, in one picture
#
# A toy memory of 96 token slots and four requests. `A`, `B` and `D` are running (the number is
# tokens stored now / final length, which the server does not know yet); `C` just finished and
# left its space; `E` (24 tokens in the end) is waiting to be admitted.

# %%
from matplotlib.patches import Patch, Rectangle

colors = dict(viz.BAR_COLORS, free="#f4f4f4")
# (start, length, category, label) per memory layout; 96 slots each
layouts = {
    "contiguous:\nreserve the max (32)": [
        (0, 10, "tokens", "A 10/14"), (10, 4, "reserved for later tokens", ""),
        (14, 18, "reserved, never used", ""),
        (32, 25, "tokens", "B 25/30"), (57, 5, "reserved for later tokens", ""),
        (62, 2, "reserved, never used", ""),
        (64, 6, "tokens", "D 6/20"), (70, 14, "reserved for later tokens", ""),
        (84, 12, "reserved, never used", "")],
    "contiguous:\nreserve the exact length": [
        (0, 10, "tokens", "A"), (10, 4, "reserved for later tokens", ""),
        (14, 16, "free gaps", "C's hole"),
        (30, 25, "tokens", "B"), (55, 5, "reserved for later tokens", ""),
        (60, 6, "tokens", "D"), (66, 14, "reserved for later tokens", ""),
        (80, 16, "free gaps", "free")],
}
# paging: block i holds slots 8i..8i+7; (owner, tokens in the block) for blocks 0..8, 9-11 free
paged_blocks = [("A", 8), ("B", 8), ("D", 6), ("B", 8), ("E", 8), ("A", 2), ("B", 8), ("E", 4),
                ("B", 1)]
paged = []
for i, (_owner, n) in enumerate(paged_blocks):
    paged.append((8 * i, n, "tokens", ""))
    if n < 8:
        paged.append((8 * i + n, 8 - n, "last block, partly used", ""))
paged.append((72, 24, "free", "free: any request can use it"))
layouts["paged: blocks of 8,\nE admitted"] = paged

outcome = ["E (32) waits:\nmemory is full", "E (24) waits:\nno 24-slot hole", "E runs"]
fig, ax = plt.subplots(figsize=(12, 3.2))
for row, (name, segments) in enumerate(layouts.items()):
    y = -row * 1.4
    for start, length, category, label in segments:
        ax.add_patch(Rectangle((start, y), length, 1, facecolor=colors[category],
                               edgecolor="white", lw=1))
        if label:
            ax.text(start + length / 2, y + 0.5, label, ha="center", va="center", fontsize=7.5)
    ax.text(-1.5, y + 0.5, name, ha="right", va="center", fontsize=8.5)
    ax.text(97.5, y + 0.5, outcome[row], ha="left", va="center", fontsize=8.5, style="italic")
chunks = [[(0, 32), (32, 32), (64, 32)], [(0, 14), (30, 30), (60, 20)]]  # contiguous rows
for row, spans in enumerate(chunks):
    for start, length in spans:
        ax.add_patch(Rectangle((start, -row * 1.4), length, 1, fill=False, lw=0.8))
for i, (owner, _) in enumerate(paged_blocks):  # whole blocks: outline and owner
    ax.add_patch(Rectangle((8 * i, -2 * 1.4), 8, 1, fill=False, edgecolor="black", lw=0.8))
    ax.text(8 * i + 4, -2 * 1.4 + 0.5, owner, ha="center", va="center", fontsize=8)
ax.set_xlim(-30, 118)
ax.set_ylim(-2 * 1.4 - 0.3, 1.2)
ax.axis("off")
ax.legend(handles=[Patch(color=c, label=k) for k, c in colors.items()], loc="upper center",
          bbox_to_anchor=(0.6, 0.0), ncol=3, fontsize=8, frameon=False)
plt.show()

# %% [markdown]
# - **Top, reserve the max:** every request holds 32 slots, so three requests fill the memory and
#   `E` waits, although only 41 of the 96 slots hold tokens. `A` will never use 18 of its slots
#   (internal fragmentation); `D` holds 14 slots for tokens it has not generated yet (reservation).
# - **Middle, reserve the exact length** (if only we knew it): no internal waste, but 32 slots are
#   free in two holes of 16, and `E` needs 24 *contiguous* slots, so it still waits.
# - **Bottom, paging:** each request holds whole 8-slot blocks anywhere in memory. The only waste is
#   the unfilled end of each request's last block, `E` runs, and 24 slots remain for anyone.

# %% [markdown]
# ## A small simulated server
#
# `pagedlab.simulator` replays a queue of requests through a server with a fixed KV budget
# (15,728 token slots: what a 12 GiB budget holds for OPT-13B). Every running request generates one
# token per step; finished requests leave and waiting ones are admitted. Request lengths are
# synthetic, drawn to match the average prompt and output lengths the paper reports for ShareGPT.
# We compare:
#
# - **contiguous max**: reserve the model's maximum length (2,048) per request;
# - **contiguous pow2**: reserve the prompt plus the output length rounded up to a power of two;
# - **contiguous oracle**: reserve exactly the final length (impossible: nobody knows it in advance);
# - **paged**: 16-token blocks, taken one at a time as tokens arrive.
#
# The bars show where the memory goes, averaged over the time the server is busy.

# %%
from pagedlab import simulator as sim

prompts, outputs = sim.sample_requests(sim.SHAREGPT, 2000, seed=0)
# Contiguous chunks go first-fit into the lowest hole that fits (notebook 09 uses your Task 12
# buddy allocator instead).
runs = [sim.simulate(prompts, outputs, policy, allocator="first-fit") for policy in ("max", "pow2", "oracle", "paged")]

rows = {}
for r in runs:
    paged = r.policy == "paged"  # paging's only internal waste is the end of the last block
    rows[f"{r.label}\n{r.mean_running:.0f} requests running"] = {
        "tokens": r.token_share * 100,
        "reserved for later tokens": r.reservation_share * 100,
        "reserved, never used": 0 if paged else r.internal_share * 100,
        "last block, partly used": r.internal_share * 100 if paged else 0,
        "free gaps": r.external_share * 100,
    }
fig, ax = plt.subplots(figsize=(9, 3.6))
viz.draw_memory_bars(rows, ax=ax, unit="% of KV memory (time average)",
                     title="Where the KV memory goes: 2,000 ShareGPT-like requests, 15,728 slots")
plt.show()

# %% [markdown]
# Read the bars from left to right:
#
# - **contiguous max** keeps only about a fifth of its memory full of tokens; most of it is
#   reserved for lengths the requests never reach (internal fragmentation). The *paper*
#   (Figure 2) measured the same effect in real systems: only **20.4%–38.2%** of the KV memory held
#   token states. Those systems place chunks with a buddy allocator, which rounds each one up to
#   a power of two; first-fit here does not, so pow2 and oracle keep a little more. Notebook 09
#   places the chunks with your buddy allocator (Task 12) and lands on the paper's numbers.
# - **contiguous oracle**, even knowing every length in advance, still reserves space for tokens
#   not generated yet, and the chunks leave gaps (external fragmentation).
# - **paged** wastes only the partly filled last block of each running request. The *paper*
#   reports **96.3%** of the KV memory holding tokens for vLLM, close to what we see.
#
# The last column is what a server cares about: with the same memory, paging runs several times
# more requests at once. Notebook 09 repeats this study at full size and compares it number by
# number with the paper. Next, notebook 02: the block table that makes paging work.
