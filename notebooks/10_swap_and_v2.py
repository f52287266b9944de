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
# # 10 · Serving under memory pressure: swap or recompute, and the v2 kernel
#
# Everything so far assumed that a sequence, once admitted, keeps its blocks until it finishes.
# A server cannot promise that. It admits requests while their *prompts* fit, and then every
# running sequence grows by one token per step. Sooner or later a sequence needs one more block
# and the pool is empty. This notebook is about that moment, and about a second problem long
# contexts bring: the Part C kernel gives each (head, sequence) pair one thread block, which is
# too few blocks when a handful of sequences carry thousands of tokens each.
#
# | part | what | your task |
# |---|---|---|
# | 1 | a scheduler that preempts: the timeline of a busy server | — |
# | 2 | moving a sequence group between a "GPU" and a "CPU" engine; the batched block copy | **Task 13** in `exercises/swap.py` |
# | 3 | where swapping beats recomputing, and where it does not | — |
# | 4 | the v2 kernel: split the context, merge with log-sum-exp | **Task 14** in `exercises/paged_attention_v2.cu` |
#
# Run the cells top to bottom. The library code used here: `pagedlab.scheduler` (the
# simulation), `pagedlab.kernels` (the host side of both kernels), `pagedlab.viz` (pictures).

# %%
import math
import time

import matplotlib.pyplot as plt
import numpy as np
import torch

import pagedlab
from pagedlab import cmem, kernels, viz
from pagedlab import scheduler as sch
from pagedlab.engine.pool import Pool
from pagedlab.harness import hw3
from pagedlab.reference import make_paged_batch, max_relative_error, scenes

# Your exercises/swap.py (PAGEDLAB_IMPL, or impl=, picks another folder).
swap = pagedlab.load("swap")
print("swap loaded from", swap.__file__)

# %% [markdown]
# ## Part 1 · When the cache runs out
#
# A step of a continuous-batching server goes like this (the order of vLLM's v0 scheduler as seed
# 003 walks through it; `pagedlab.scheduler`'s docstring lists where the simulation simplifies):
#
# 1. **running** sequences, oldest first: each needs a slot for the token it writes this step. A
#    sequence whose last block is full needs a new block. If none is free, the scheduler
#    **preempts the newest running sequence** and tries again; the newest has waited least, so
#    first-come-first-served loses least. It may end up preempting the very sequence that asked.
# 2. **swapped** sequences come back (swap in), oldest first, if no one was preempted this step.
# 3. **waiting** requests are prefilled, oldest first, while their prompts fit, and only when
#    nothing is swapped out and nothing was preempted in this step (otherwise a new request could
#    take the blocks an older, preempted one is waiting for).
# 4. The block copies decided above run (swap in, swap out, copy-on-write copies), *then* the
#    model runs once over the whole batch.
#
# A preempted sequence loses its blocks in one of two ways:
#
# - **recompute**: drop its K/V. It goes back to the front of the waiting queue and, when admitted
#   again, its prompt *and every token it had generated* are prefilled again. Costs compute.
# - **swap**: copy its blocks into a second pool in host memory, the *swap space* (vLLM's default is
#   4 GiB of CPU memory per GPU, its `swap_space` option), and copy them back later. Costs PCIe
#   transfers, recomputes nothing.
#   If the swap space is full, vLLM falls back to recompute.
#
# `pagedlab.scheduler.simulate` plays exactly these rules on block counts. Its clock is a cost
# model, not a measurement; every default is written down in `sch.CostModel` (an 8B model in
# fp16, 128 KiB of K/V per token, on one H100-class GPU). Read it:

# %%
print(sch.CostModel.__doc__)
cost = sch.CostModel()
print(f"one block of 16 tokens = {16 * cost.kv_bytes_per_token / 2**20:.0f} MiB of K/V")
print(f"a decode step with 64 sequences of 1000 tokens: {1e3 * cost.step_time(64, 64 * 1000):.1f} ms")
print(f"prefilling a 1000-token prompt alone:            {1e3 * cost.step_time(1000, 0):.1f} ms")
print(f"swapping 1000 tokens out (63 blocks) over PCIe:   {1e3 * cost.swap_time(63, 16):.1f} ms")

# %% [markdown]
# Reading the model: a decode step is **memory-bound** (it reads 16 GB of weights whatever the
# batch), so a few hundred extra tokens of prefill ride along almost for free, while a long prompt
# makes the step **compute-bound**. A swap always costs its bytes over PCIe. Keep that in mind for
# Part 3.
#
# Now a busy server: 120 requests arriving at 40 per second, prompts around 600 tokens, answers
# around 300, and a KV cache of 1,500 blocks (24,000 tokens, 3 GiB at 128 KiB per token).

# %%
requests = sch.synthetic_requests(120, prompt_len=600, output_len=300, rate=40, seed=10)
runs = {policy: sch.simulate(requests, num_gpu_blocks=1500, num_cpu_blocks=6000, policy=policy)
        for policy in sch.POLICIES}
for report in runs.values():
    print(report.summary())


# %%
def draw_timeline(report, ax_queues, ax_blocks, num_gpu_blocks):
    """Running / swapped / waiting sequences (stacked) and free GPU blocks, step by step."""
    t = np.array([s.time for s in report.timeline])
    running = np.array([s.running for s in report.timeline])
    swapped = np.array([s.swapped for s in report.timeline])
    waiting = np.array([s.waiting for s in report.timeline])
    ax_queues.stackplot(t, running, swapped, waiting, labels=["running", "swapped out", "waiting"],
                        colors=["#2ca02c", "#ff7f0e", "#c7c7c7"], step="post")
    for s in report.timeline:
        if s.preempted:
            ax_queues.axvline(s.time, color="#d62728", lw=0.4, alpha=0.5)
    ax_queues.set_ylabel("sequences")
    ax_queues.set_title(f"policy = {report.policy}: {report.preemptions} preemptions (red lines), "
                        f"{report.recomputed_tokens} tokens recomputed, {report.swap_bytes / 2**30:.1f} GiB swapped")
    ax_queues.legend(loc="upper right", fontsize=8)
    ax_blocks.plot(t, [s.free_gpu_blocks for s in report.timeline], color="#1f77b4", drawstyle="steps-post")
    ax_blocks.set_ylim(0, num_gpu_blocks)
    ax_blocks.set_ylabel("free GPU blocks")


fig, axes = plt.subplots(4, 1, figsize=(11, 9), sharex=True,
                         gridspec_kw={"height_ratios": [3, 1, 3, 1]})
for i, report in enumerate(runs.values()):
    draw_timeline(report, axes[2 * i], axes[2 * i + 1], 1500)
axes[-1].set_xlabel("model time (s)")
fig.tight_layout()
plt.show()


# %% [markdown]
# What to look for:
#
# - the free-block line hugs zero while requests keep arriving: the cache is the bottleneck, and
#   every red line is a step in which some sequence could not get its next block;
# - under `swap`, preempted sequences sit in the orange band and come back before any new request
#   is admitted (the grey band waits meanwhile); under `recompute` they rejoin the grey queue at its
#   front and pay a prefill again;
# - the totals differ in *what* was paid: GiB over PCIe versus tokens of recompute.
#
# ## Part 2 · Task 13: swapping a sequence group
#
# In vLLM the block manager and the cache engine split the work of a swap. The block manager
# decides which GPU blocks go to which CPU blocks and updates the block tables (pure bookkeeping);
# the cache engine then copies the bytes, one copy per block pair, before the model runs. You write
# both halves on the HW3 structures: a **GPU engine** and a **CPU engine**, each an `LLMEngine` over
# its own pool, with the very same `Sequence` structs and two-level block tables.
#
# ### Which sequences move: the group
#
# Forked sequences (parallel sampling, beam search) share blocks. Suppose only one of two forked
# siblings moved to the CPU. The blocks they share could not leave the GPU (the sibling still
# reads them), so swapping would free only the blocks private to the one that moved, and the CPU
# would need its own copies of the shared ones: sharing lost, memory spent twice, bytes copied for
# nothing. So in this course, as in vLLM (whose scheduler swaps a whole `SequenceGroup`), **a
# sequence group swaps as a unit**. The group of a sequence is every sequence reachable from it
# through shared blocks (siblings of siblings included). All of them move together, each distinct
# block is copied exactly once, and every block keeps its ref count: one per member that maps it.
#
# Here is a group on a small GPU engine (built by the harness, so this runs before you write
# anything): sequence 1 forked twice; child 3 wrote past the fork (copy-on-write gave it block 10),
# child 4 owns two blocks of its own, and sequence 6 shares one block with child 4 only.

# %%
def rig(gpu_blocks=32, cpu_blocks=24, seed=0):
    """A GPU engine and a CPU engine, each over its own pool of random words."""
    rng = np.random.default_rng(seed)
    pools = Pool(gpu_blocks * hw3.BLOCK_SIZE), Pool(cpu_blocks * hw3.BLOCK_SIZE)
    for pool in pools:
        pool.bytes[:] = rng.integers(0, 256, pool.size, dtype=np.uint8)
    return pools, [scenes.engine(p) for p in pools]


heap = cmem.snapshot()  # the harness frees everything the demo allocated at the end
(gpu_pool, cpu_pool), (gpu, cpu) = rig()
gpu = scenes.engine(gpu_pool, [                    # (id, kv_count, blocks): built from this data
    (1, 50, [3, 6, 1, 8]),                         # the parent
    (2, 20, [0]),                                  # unrelated
    (3, 51, [3, 6, 1, 10]),                        # child, copy-on-write on its last block
    (4, 60, [3, 6, 11, 12]),                       # child with two blocks of its own
    (5, 70, [13, 14, 15, 16, 17]),                 # unrelated
    (6, 33, [12, 20, 21])])                        # shares block 12 with child 4 only
cpu = scenes.engine(cpu_pool, [(100, 40, [1, 3, 4])])  # swapped out earlier: CPU holes at 0 and 2


def draw_both(title):
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 2.8))
    viz.draw_pool(gpu, ax=a, cols=16, title=f"GPU engine ({gpu.free_local_blocks} free)")
    viz.draw_pool(cpu, ax=b, cols=12, title=f"CPU engine, swap space ({cpu.free_local_blocks} free)")
    fig.suptitle(title)
    plt.show()


draw_both("before swap_out(gpu, cpu, 4)")

# %% [markdown]
# ### What to write in `exercises/swap.py`
#
# The registry walk, list linking and a generator over a sequence's mapped entries are given
# (`registry`, `find`, `unlink`, `link_tail`, `entries`). You write three functions:
#
# 1. `sequence_group(engine, seq_id)`: the members, in list order. Start from `seq_id`'s blocks and
#    keep adding any sequence that maps one of the blocks reached so far, until nothing new joins.
# 2. `move_group(src, dst, seq_id)` (`swap_out` and `swap_in` are this, in each direction):
#    - **check first, then move**. Return `None` and change nothing (no list link, no ref count,
#      no pool byte, no heap block) if an engine is `None`, `src is dst`, `seq_id` is not on `src`,
#      a member's id is already on `dst`, or the group's *distinct* blocks exceed
#      `dst.free_local_blocks`;
#    - walk the members in list order and each member's logical blocks in order. The first time you
#      meet a source block, take the first-fit block on `dst` (lowest index with ref count 0) and
#      copy its 64 bytes across (`ctypes.memmove` between the two pools, `block_address` gives the
#      addresses). Every time, point the L2 entry at the new block, add one ref on `dst`, drop one
#      on `src` (a source block reaching 0 is free again);
#    - move each member from `src`'s list to the tail of `dst`'s;
#    - return the mapping as a list of `(src block, dst block)` pairs in the order the blocks were
#      met. That list is exactly what vLLM hands its cache engine (`blocks_to_swap_out`).
# 3. `copy_blocks(engine, pairs)`: the cache engine's batched copy for copy-on-write. Check every
#    pair first (both ids in range, no destination twice, no destination that is also a source;
#    all copies read the blocks as they were before the call), then copy 64 bytes per pair and
#    return how many. Ref counts are not touched: the block manager already did that.

# %% [markdown]
# ### Graded cell: Task 13
#
# The checks build their own engines (with scattered blocks, L1 holes, forked groups, chains of
# siblings and a swap space one block too small) and compare everything your functions do with the
# rules above: the mapping, both engines' lists, ref counts and free counts, every pool word, and
# the heap. Run it whenever you want feedback; every ✗ says which rule, what was expected and what
# your code did.

# %%
pagedlab.graded.run("task13")

# %% [markdown]
# ### Your functions at work
#
# With the checks passing, the next cells run *your* `swap_out` on the group of sequence 4 drawn
# above:

# %%
pagedlab.graded.require("task13")  # your swap code runs in this kernel below
mapping = swap.swap_out(gpu, cpu, 4)
print("group moved:", [s.seq_id for s in hw3.sequences(cpu)][1:])
print("mapping (gpu block -> cpu block):", mapping)
print("CPU ref counts of the moved blocks:", {d: cpu.ref_count[d] for _, d in mapping})
draw_both("after swap_out(gpu, cpu, 4)")

# %% [markdown]
# Four sequences moved (1, 3, 4 and 6). Their block tables hold 15 entries, but only 9 distinct
# blocks crossed: blocks 3 and 6 are mapped by three members and moved once, with ref count 3 on
# the CPU. The unrelated sequences 2
# and 5 stayed. The mapping is first-fit on the CPU: blocks 0 and 2 (the holes) first, then 5, 6, ...
#
# Swapping back in takes new GPU blocks: the old ones may have been handed out meanwhile.

# %%
pagedlab.graded.require("task13")
gpu = scenes.with_sequence(gpu, 7, 40, [1, 3, 6])  # a new request takes some freed blocks
back = swap.swap_in(cpu, gpu, 1)
print("mapping (cpu block -> gpu block):", back)
records_ok = all(gpu_pool.words(g) == cpu_pool.words(c) for c, g in back)
print("every record came back intact:", records_ok)
draw_both("after a new request took blocks 1, 3, 6 and swap_in(cpu, gpu, 1)")

# %% [markdown]
# And a swap that does not fit changes nothing. The next cell fills the CPU so that the group of
# sequence 1 (9 distinct blocks) finds one block too few: `swap_out` must return `None`, with both
# engines, both pools and the heap exactly as they were.

# %%
pagedlab.graded.require("task13")
room = cpu.free_local_blocks
cpu = scenes.with_sequence(cpu, 200, 16 * (room - 8),
                           list(range(cpu.total_local_blocks - (room - 8), cpu.total_local_blocks)))
before = (hw3.state(gpu), hw3.state(cpu), gpu_pool.snapshot(), cpu_pool.snapshot())
print("CPU free blocks:", cpu.free_local_blocks, "- swap_out(gpu, cpu, 1) returns", swap.swap_out(gpu, cpu, 1))
print("unchanged:", (hw3.state(gpu), hw3.state(cpu)) == before[:2],
      not gpu_pool.diff(before[2]), not cpu_pool.diff(before[3]))

# %% [markdown]
# `copy_blocks` on its own: block 4 is copied to two fresh blocks (a beam that forked twice wrote
# into its shared last block), and block 3 to another.

# %%
pagedlab.graded.require("task13")
(pool, _), (engine, _) = rig(16, 1, seed=1)
print("copied:", swap.copy_blocks(engine, [(4, 7), (4, 8), (3, 12)]))
print("block 7 == block 4:", pool.words(7) == pool.words(4), "| block 12 == block 3:", pool.words(12) == pool.words(3))
print("refused (destination 2 is also a source):", swap.copy_blocks(engine, [(1, 2), (2, 5)]))
hw3.sweep(heap)

# %% [markdown]
# ## Part 3 · Where each policy wins
#
# Both policies pay in proportion to the preempted sequence's context: swap in bytes over PCIe
# (out, and later back in), recompute in prefill compute. A back-of-the-envelope break-even, per
# token of context, with the cost model of Part 1:
#
# - recompute: 2 × 8e9 FLOPs at 4e14 FLOP/s = **40 µs per token**, once the step is compute-bound
#   (a step reads 16 GB of weights in 4.8 ms anyway, so the first ~120 tokens of a step are free);
# - swap: 128 KiB out and 128 KiB back, plus one copy latency (10 µs) per 16-token block each way:
#   2 × 131072 / bandwidth + 1.25 µs per token.
#
# They are equal at a bandwidth of 2 × 131072 / (40 − 1.25) µs ≈ **6.8 GB/s**: below it recompute
# is cheaper, above it swap. The cell below checks that with the whole simulation: for each PCIe
# bandwidth and prompt length it serves the same 80 requests with both policies, with a GPU cache
# with room for about 12 average requests at their full length, and shows the mean normalized
# latency (latency per output token) under swap divided by that under recompute. Blue means swap
# wins, red means recompute wins.

# %%
print(f"break-even bandwidth: {2 * cost.kv_bytes_per_token / (cost.flops_per_token / cost.compute - 2 * cost.copy_latency / 16) / 1e9:.1f} GB/s")
bandwidths = [1e9, 4e9, 1.6e10, 2.5e10, 6.4e10]          # bytes/s per direction: PCIe 3.0 x1 ... PCIe 5.0 x16
prompts = [64, 256, 1024, 2048]
ratio = np.zeros((len(prompts), len(bandwidths)))
for i, prompt in enumerate(prompts):
    reqs = sch.synthetic_requests(80, prompt_len=prompt, output_len=200, rate=30, seed=20 + i)
    blocks = int(12 * np.mean([-(-(r.prompt_len + r.output_len) // 16) for r in reqs]))
    for j, bw in enumerate(bandwidths):
        c = sch.CostModel(pcie_bandwidth=bw)
        lat = {p: sch.simulate(reqs, num_gpu_blocks=blocks, num_cpu_blocks=20000, policy=p,
                               cost=c).mean_normalized_latency for p in sch.POLICIES}
        ratio[i, j] = lat["swap"] / lat["recompute"]

fig, ax = plt.subplots(figsize=(8, 3.6))
im = ax.imshow(np.log2(ratio), cmap="coolwarm", vmin=-0.8, vmax=0.8, aspect="auto")
for (i, j), r in np.ndenumerate(ratio):
    ax.text(j, i, f"{r:.2f}", ha="center", va="center", fontsize=9)
ax.set_xticks(range(len(bandwidths)), [f"{bw / 1e9:g} GB/s" for bw in bandwidths])
ax.set_yticks(range(len(prompts)), [f"prompt ~{p}" for p in prompts])
ax.set_xlabel("PCIe bandwidth (per direction)")
ax.set_title("swap latency / recompute latency (< 1: swap wins)")
fig.colorbar(im, ax=ax, label="log2 ratio")
plt.show()

# %% [markdown]
# Reading the map:
#
# - the line between red and blue sits between 4 and 16 GB/s, where the envelope put it. A PCIe 4.0
#   x16 link (32 GB/s raw, about 25 in practice) is well past it: with a dedicated link, swap wins;
#   a slow or shared link (a GPU behind a x4 slot, several GPUs behind one switch) flips it;
# - prompt length moves the *size* of the difference more than its sign: both costs grow linearly
#   with the context, but with long prompts fewer requests share the cache, so fewer are preempted
#   and the policy matters less. Short contexts are where recompute's free ride (tokens hidden in a
#   memory-bound step) shows.
#
# What the vLLM paper found on real hardware (Kwon et al., SOSP 2023, §7.3 and Fig. 19): swapping
# suffered with small blocks, whose many small transfers under-use PCIe, while recomputation cost
# the same whatever the block size, and with the usual block sizes (16 to 64 tokens) the two ended
# up close. Our model has that mechanism in `copy_latency` (one copy per block, as vLLM's
# `swap_blocks` loops over the block pairs): try `simulate(..., block_size=4)` below. Assumptions of
# the whole study: the cost model of Part 1, swaps not overlapped with compute, FCFS with the newest
# sequence preempted, a swap space big enough (20,000 blocks) to never force a fallback.
#
# Second, memory size, for 100 requests of about 800 + 250 tokens (6,600 blocks if all ran at
# once). A bigger cache runs more sequences at once and preempts less; once everything fits
# (7,000 blocks) nobody is preempted and the policy no longer matters.

# %%
reqs = sch.synthetic_requests(100, prompt_len=800, output_len=250, rate=40, seed=30)
sizes = [600, 1000, 2000, 4000, 7000]
fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.4))
for policy, color in zip(sch.POLICIES, ("#d62728", "#1f77b4"), strict=True):
    reps = [sch.simulate(reqs, num_gpu_blocks=n, num_cpu_blocks=6000, policy=policy) for n in sizes]
    a.plot(sizes, [r.preemptions for r in reps], "o-", color=color, label=policy)
    b.plot(sizes, [1e3 * r.mean_normalized_latency for r in reps], "o-", color=color, label=policy)
a.set(xlabel="GPU KV blocks (16 tokens each)", ylabel="preemptions", title="how often")
b.set(xlabel="GPU KV blocks (16 tokens each)", ylabel="ms per output token", title="what it costs")
a.legend()
b.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# Try it: change `CostModel(copy_latency=...)` to see the block-size effect the paper reports (set
# the simulation's `block_size` to 4 or 8), or shrink `num_cpu_blocks` until swaps fall back to
# recompute.
#
# ## Part 4 · Task 14: the v2 kernel
#
# ### Why v2 exists: blocks per decode step against SMs
#
# The Part C kernel (`paged_attention_v1`) launches one thread block per (query head, sequence):
# `num_heads × num_seqs` blocks per decode step, each walking the whole context. A GPU runs a
# block on one streaming multiprocessor (SM). An H100 SXM has 132 SMs, an A100 108, an L4 58. With
# Llama-3-8B's 32 query heads:

# %%
gpus = {"H100 SXM": 132, "A100": 108, "L4": 58}
num_heads = 32
print(f"{'batch':>5} {'context':>8} | {'v1 blocks':>9} {'tokens/block':>12} | {'v2 blocks':>9} {'tokens/block':>12} "
      f"| {'H100 SMs busy (v1)':>18} | auto picks")
for batch in (1, 4, 16, 64):
    for context in (1024, 8192, 32768):
        v1 = num_heads * batch
        parts = math.ceil(context / kernels.PARTITION_SIZE)
        v2 = v1 * parts
        busy = min(v1, gpus["H100 SXM"]) / gpus["H100 SXM"]
        print(f"{batch:>5} {context:>8} | {v1:>9} {context:>12} | {v2:>9} {min(context, kernels.PARTITION_SIZE):>12} "
              f"| {busy:>17.0%} | {kernels.choose_version(batch, num_heads, context)}")

# %% [markdown]
# One sequence of 8K tokens gets 32 blocks from v1: a quarter of an H100's SMs work, each walking
# 8,192 tokens (in fp16, 8192 × 128 × 2 × 2 bytes = 4 MiB of K and V per block), and the rest idle.
# v2 splits every context into **partitions** of `PARTITION_SIZE = 512` tokens (vLLM's value) and
# gives each its own block: grid `(num_heads, num_seqs, max_num_partitions)`, here 32 × 1 × 16 = 512
# blocks of 512 tokens. A second, small kernel merges the partitions.
#
# vLLM picks between them with a simple rule (in `vllm/attention/ops/paged_attn.py`; seed 002 quotes
# it): **v1 if the longest context is at most 8,192 tokens and either it fits in one partition or
# `num_seqs × num_heads > 512`**, else v2. One partition means nothing to split; more than 512
# blocks already fill the GPU, and v2's extra launch and temporaries would be pure overhead. Past
# 8,192 tokens v1's per-block work (and its logits in shared memory) grows too large.
# `kernels.choose_version` is that rule; `paged_attention_decode(..., version="auto")` uses it.

# %% [markdown]
# ### Splitting a softmax and putting it back together
#
# Take one (sequence, head). Partition $p$ owns tokens $[pP, \min((p+1)P, n))$ and computes, from
# its logits $x_t$ alone:
#
# $$m_p = \max_t x_t, \qquad \ell_p = \sum_t e^{x_t - m_p}, \qquad o_p = \sum_t e^{x_t - m_p}\, v_t .$$
#
# Each partition subtracted its *own* max, so the partial results are in different units. With the
# global max $M = \max_p m_p$, the factor $e^{m_p - M}$ converts partition $p$ to the common unit:
#
# $$\text{out} = \frac{\sum_p e^{m_p - M}\, o_p}{\sum_p e^{m_p - M}\, \ell_p}
#             = \frac{\sum_t e^{x_t - M}\, v_t}{\sum_t e^{x_t - M}} .$$
#
# That is the whole reduce kernel ("log-sum-exp rescaling": $M + \log \sum_p e^{m_p - M}\ell_p$ is
# the log of the full softmax denominator). Two things to notice. Every exponent is $\le 0$, so
# nothing overflows, whatever the logits. And $o_p$ is *not* divided by $\ell_p$ here, so the merge
# divides once; vLLM's v2 stores each partition's already-normalised output instead and multiplies
# by $\ell_p$ in the reduce, the same algebra in a different order. The picture:

# %%
n, P = 1300, kernels.PARTITION_SIZE   # a 1300-token sequence in a batch whose longest has 2048
fig, ax = plt.subplots(figsize=(11, 3.0))
colors = ["#1f77b4", "#2ca02c", "#ff7f0e"]
for p in range(math.ceil(n / P)):
    lo, hi = p * P, min((p + 1) * P, n)
    ax.add_patch(plt.Rectangle((lo, 1.3), hi - lo, 0.8, color=colors[p], alpha=0.35))
    ax.text((lo + hi) / 2, 1.7, f"block (h, s, p={p})\ntokens {lo}..{hi - 1}", ha="center", va="center", fontsize=9)
    ax.annotate("", xy=(n / 2, 0.55), xytext=((lo + hi) / 2, 1.25), arrowprops={"arrowstyle": "->", "color": colors[p]})
    ax.text((lo + hi) / 2 + 30, 1.0, f"$m_{p}, \\ell_{p}, o_{p}$", color=colors[p], fontsize=10)
ax.add_patch(plt.Rectangle((3 * P, 1.3), P, 0.8, fill=False, hatch="//", ec="#7f7f7f"))
ax.text(3.5 * P, 1.7, "block (h, s, p=3)\nstarts past len: returns", ha="center", va="center", fontsize=9)
for b in range(0, 4 * P, 16 * 8):
    ax.plot([b, b], [1.3, 2.1], color="white", lw=0.6)
ax.add_patch(plt.Rectangle((n / 2 - 420, 0.05), 840, 0.5, color="#7f7f7f", alpha=0.35))
ax.text(n / 2, 0.3, "reduce block (h, s) reads p = 0..2: $M = \\max_p m_p$, "
        "out $= \\sum_p e^{m_p-M} o_p \\,/\\, \\sum_p e^{m_p-M} \\ell_p$", ha="center", va="center", fontsize=9)
ax.axvline(n, color="k", lw=1)
ax.text(n + 8, 2.2, f"len = {n}", fontsize=8)
ax.set_xlim(-10, 4 * P + 10)
ax.set_ylim(0, 2.45)
ax.set_yticks([])
ax.set_xlabel("token position (PARTITION_SIZE = 512; white ticks every 8 cache blocks of 16 tokens)")
ax.set_title("v2: grid (num_heads, num_seqs, max_num_partitions = 4), then a reduce grid (num_heads, num_seqs)")
plt.show()

# %% [markdown]
# The same merge in numpy, in float64, on logits large enough to overflow `exp` if the max were
# not subtracted, and what you get if you forget the rescaling:

# %%
rng = np.random.default_rng(0)
x = rng.normal(0, 4, 1300) + 800.0          # exp(800) overflows float64
v = rng.normal(size=1300)
parts = [slice(p * 512, min((p + 1) * 512, 1300)) for p in range(3)]
m = np.array([x[s].max() for s in parts])
ell = np.array([np.exp(x[s] - mp).sum() for s, mp in zip(parts, m, strict=True)])
o = np.array([np.exp(x[s] - mp) @ v[s] for s, mp in zip(parts, m, strict=True)])
w = np.exp(m - m.max())
full = np.exp(x - x.max()) @ v / np.exp(x - x.max()).sum()
print("partition maxima m_p:", m.round(2))
print("merged:", (w @ o) / (w @ ell), " full softmax:", full)
print("without the rescaling (w = 1):", o.sum() / ell.sum())

# %% [markdown]
# ### What to write in `exercises/paged_attention_v2.cu`
#
# The file holds two kernels. The layouts are Part C's; the temporaries are
# `max_logits`, `exp_sums` `[num_seqs, num_heads, max_num_partitions]` and `tmp_out`
# `[num_seqs, num_heads, max_num_partitions, head_size]`, and `slot` (given) is this block's index
# into them. Given: the kernel arguments, the loading of `q_shared`, and `block_max` / `block_sum`
# (the warp-shuffle reductions of Task 10 as helpers, each ending with a barrier). You write five
# fenced parts, in the order they appear in the file:
#
# 1. **the token range**: partition `blockIdx.z` owns `[start, end)`; a block whose partition starts
#    at or past the sequence's length returns at once, writing nothing;
# 2. **the partition's logits**: your Task 10 loop over the tokens `[start, end)`, shifted so that
#    token `t` goes to `logits[t - start]`, keeping each thread's max in `thread_max`;
# 3. **the partition's statistics**: `m` (block max of the logits), then `logits[i] = exp(logits[i]
#    - m)` and their sum `l`; one thread stores both at `slot`;
# 4. **the unnormalised output**: `tmp_out[slot, d] = Σ logits[i] · v[token, d]`, walking the
#    partition block by block through the block table (the partition starts on a block boundary,
#    because `partition_size` is a multiple of `block_size`), and not divided by `l`;
# 5. **the reduce** (`paged_attention_v2_reduce`, grid `(num_heads, num_seqs)`): the sequence has
#    `ceil(len / partition_size)` partitions, only those may be read; `M` = their max; `weights[p] =
#    exp(m[p] - M)` in the dynamic shared array; `total = Σ weights[p] · l[p]`; `out[d] = Σ weights[p]
#    · o[p, d] / total`.
#
# The host side (`pagedlab.kernels`) validates everything first, including the temporaries (float32,
# C-contiguous, exact shapes, room for enough partitions, no two of them overlapping) and
# `partition_size` (a multiple of `block_size` whose logits fit in shared memory), then launches both
# kernels with everything poisoned with NaN.

# %% [markdown]
# ### Graded cell: Task 14
#
# The checks run your two kernels under every thread schedule on lengths at partition edges
# (k·P − 1, k·P, k·P + 1 for P = 64 and 512), contexts of 8,192 and 4,097 tokens beside a 1-token
# one, grouped-query heads, block sizes 8 to 32 and head sizes up to 256, shared blocks and a custom
# scale, all against float64 dense attention (relative error ≤ 2e-5). One check also reads your
# temporaries: each partition's max, exp-sum and unnormalised output, and nothing written past a
# sequence's end.

# %%
pagedlab.graded.run("task14")

# %% [markdown]
# ### Your kernels at work
#
# A long context through the public API, and a look inside the temporaries of a short batch: one
# sequence of 130 tokens (three partitions of 64) and one of a single token, whose other two
# partition slots stay unwritten (NaN) because their blocks returned at once.

# %%
pagedlab.graded.require("task14")  # your kernels run below
batch = make_paged_batch([4100, 1, 513], num_heads=4, num_kv_heads=2, head_size=64, block_size=16, seed=7)
out = kernels.paged_attention_decode(*batch.numpy(), backend="cpu", version="v2")
print("max relative error vs float64 dense attention:", f"{max_relative_error(out, batch.expected()):.2e}")

small = make_paged_batch([130, 1], num_heads=1, head_size=8, block_size=16, seed=8)
out, ws = kernels.decode_v2_on_executor(*small.numpy(), partition_size=64)
print("max_logits [seq, head, partition]:\n", ws.max_logits[:, 0])
print("exp_sums:\n", ws.exp_sums[:, 0])
print("never written (partitions past the end):\n", kernels.unwritten(ws.exp_sums)[:, 0])
print("agrees with dense attention:", torch.allclose(torch.from_numpy(out[0:1]).double(), small.expected()[0:1], atol=1e-5))

# %% [markdown]
# ### v1 and v2 on one long context
#
# Back to the 8K-token sequence of the start of Part 4, through your v1 (Task 10) and v2 kernels.
# On the CPU executor the same launches have the same shape: blocks, and tokens per block. The
# executor runs blocks on as many workers as the machine has cores, so on a laptop both kernels
# have enough blocks to keep every core busy and their times are close; it is a GPU with 132 SMs
# that v1 leaves idle.

# %%
pagedlab.graded.require("task10", "task14")  # your kernels run below
batch = make_paged_batch([8192], num_heads=4, num_kv_heads=1, head_size=128, block_size=16, seed=5)
args = batch.numpy()
for version in ("v1", "v2"):
    kernels.decode_on_executor(*args, version=version)  # build once, untimed
    start = time.perf_counter()
    out = kernels.decode_on_executor(*args, version=version)
    took = time.perf_counter() - start
    blocks = 4 if version == "v1" else 4 * 16
    print(f"{version}: {blocks:>3} blocks x {8192 * 4 // blocks:>5} tokens each, {took:.3f} s on the CPU executor, "
          f"max relative error vs float64 {max_relative_error(out, batch.expected()):.1e}")

# %% [markdown]
# ## What to take away
#
# - When the KV cache is full, a server preempts. Swapping keeps the work and pays PCIe; recomputing
#   keeps the link free and pays compute. Short contexts favour recompute, long ones swap, and a slow
#   link moves the line. A sequence group moves as a unit so that shared blocks stay shared.
# - The block manager (tables, ref counts) and the cache engine (bytes: swaps and copy-on-write
#   copies in batches) are separate jobs; `move_group` did both, `copy_blocks` the second alone.
# - Split-K attention turns "one block per head per sequence" into "one block per partition", so a
#   few long sequences can fill a big GPU; the partial softmaxes merge exactly with one rescaling
#   factor per partition.
