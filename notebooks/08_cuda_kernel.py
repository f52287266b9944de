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
# # 08 · The CUDA paged-attention kernel
#
# The torch version of notebook 07 gathers every sequence's K/V into a new tensor before it
# attends: one extra copy of the whole cache per step. vLLM's `paged_attention_v1` kernel instead
# reads each key and value **where it lies**, following the block table inside the kernel. This
# notebook is about that kernel, simplified to float32:
#
# 1. reading the kernel: grid, threads, shared memory, warp shuffles;
# 2. running CUDA C **without a GPU**: pagedlab's CPU executor, and why it runs the same kernel in
#    several thread orders;
# 3. **Task 10**: the three missing parts of the kernel;
# 4. the GPU path: NVRTC compile check, CuPy when a GPU is present;
# 5. the kernel against dense attention, and on block tables from your own engine.

# %%
# %matplotlib inline
import matplotlib.pyplot as plt
import numpy as np

import pagedlab
from pagedlab import block_tables, cuda, hw3, kernels, viz
from pagedlab.engine.pool import Pool
from pagedlab.loader import kernel_source, source_path
from pagedlab.reference import dense_attention, make_paged_batch, max_relative_error

# Your exercises/paged_attention.cu and memory_manager.py (PAGEDLAB_IMPL, or impl=, picks another folder).
mm = pagedlab.load("memory_manager")
print("paged_attention.cu loaded from", source_path("paged_attention.cu"))
print("memory_manager loaded from", mm.__file__)
print(pagedlab.track.describe())  # Part A: memory_manager.py, or llm_memory.c on the C track

# %% [markdown]
# ## Reading the kernel
#
# One **thread block** computes one query head of one sequence: the grid is `(num_heads,
# num_seqs)`, so `blockIdx.x` is the head and `blockIdx.y` the sequence. Each block has 128
# threads (4 warps of 32). Inside a block:
#
# | step | who does what | memory |
# |---|---|---|
# | load q | threads copy the head's query (`head_size` floats) into `q_shared` | static `__shared__` |
# | 1. logits | thread `tid` scores tokens `tid, tid+128, …`: finds the key via `block_table[t / block_size]`, dot product with q, times `scale` | one float per token in **dynamic** `extern __shared__ float logits[]` (`seq_len × 4` bytes, sized at launch) |
# | 2. softmax | block-wide max: each warp reduces with `__shfl_xor_sync` (5 butterfly steps), lane 0 puts the warp's value in `partial[warp]`, then every thread reduces the 4 partials; the same for the sum of `exp(logit - max)` | `partial[4]` |
# | 3. output | thread `tid` owns output dimensions `tid, tid+128, …` and sums `p_t · v_t[d]` over the tokens, walking the sequence block by block | writes `out` |
#
# `__syncthreads()` separates steps that read what *other* threads wrote. The kernel text below is
# **your** file (the parts that say `YOUR CODE HERE` in your `exercises/` copy are Task 10).

# %%
source = kernel_source("paged_attention.cu")
lines = source.splitlines()
start = next(i for i, line in enumerate(lines) if line.startswith('extern "C"'))
for number, line in enumerate(lines[start:], start=start + 1):
    print(f"{number:4d}  {line}")

# %% [markdown]
# ## Running CUDA C on a CPU
#
# `pagedlab.cuda.RawKernel(code, name)` has CuPy's call shape: `kernel(grid, block, args,
# shared_mem=...)`. Without a GPU it compiles the **unchanged** `.cu` text with your C++ compiler
# and a prelude that defines CUDA's keywords, then runs every CUDA thread as a fiber. It is built
# to be strict where a GPU would let a bug slip:
#
# - `__syncthreads()` is a real barrier: every thread of the block must reach the *same* one, or
#   you get a `BarrierError` naming who waits where;
# - warp shuffles are real rendezvous among the lanes of the mask (`WarpSyncError` otherwise);
# - shared memory starts as NaN; writing past the launch's dynamic shared memory is a
#   `SharedMemoryError`; a segfault is a `KernelCrash`; an endless loop a `KernelTimeout`
#   (your Jupyter kernel survives all of them);
# - arguments are type-checked against the kernel's parameters (a Python `float` would be a
#   `double` on the GPU: refused).
#
# And it runs the threads in different **schedules**, because on a GPU the order in which warps
# progress is not yours to choose:

# %%
print(cuda.SCHEDULES)

# %% [markdown]
# - `round_robin`: threads run in ascending order, one step each, between rendezvous;
# - `warp0_first`: warp 0 runs ahead whenever it can, then the last warp down;
# - `reversed`: descending thread order;
# - `random:<seed>`: a seeded shuffle.
#
# A correct kernel gives the same answer under all of them. A kernel with a **missing barrier**
# often gives the right answer under one order and a wrong one under another, which is exactly
# how such bugs behave on a real GPU (right on your card, wrong on the grader's).
#
# ### Demo: one barrier missing
#
# Your softmax (step 2) will reuse `partial[]`: first for the warps' maxima, then for their
# sums. The same pattern, in a small kernel shipped for this demo (`softmax_rows`: a softmax of
# one row per thread block), has the barrier between the two uses **missing**: nothing stops a
# warp from storing its sum in the shared array while another warp still reads the maxima
# there. It is not Task 10's kernel; read it whole:

# %%
from importlib.resources import files

planted = (files("pagedlab") / "kernels_demo" / "planted_missing_barrier.cu").read_text()
print(planted[planted.index('extern "C"'):])

# %% [markdown]
# Run it under every schedule, and the same text with the barrier put back where the comment
# `// BARRIER` stands, against a float64 softmax:

# %%
# NBVAL_CHECK_OUTPUT
rng = np.random.default_rng(0)
rows = (2 * rng.standard_normal((3, 500))).astype(np.float32)
exact = np.exp(rows.astype(np.float64) - rows.max(axis=1, keepdims=True))
exact /= exact.sum(axis=1, keepdims=True)
repaired = planted.replace("  // BARRIER\n", "  __syncthreads();\n")
for label, text in (("barrier missing", planted), ("barrier restored", repaired)):
    kernel = cuda.RawKernel(text, "softmax_rows", backend="cpu", filename="softmax_rows.cu")
    for schedule in cuda.SCHEDULES:
        out = np.full_like(rows, np.nan)
        kernel((len(rows),), (128,), (out, rows, np.int32(rows.shape[1])), schedule=schedule, timeout=30)
        err = np.abs(out - exact).max() / np.abs(exact).max()
        print(f"{label:16s} {schedule:12s} {'correct' if err <= 1e-5 else 'WRONG'}")

# %% [markdown]
# Three schedules out of four hide the bug. Under `warp0_first`, warp 0 finishes reading the
# maxima, computes its exponentials and **writes its sum into `scratch[0]` while the other warps
# have not read `scratch[0]` as a maximum yet**. They read warp 0's *sum* where a maximum should
# be, so they subtract a different value than warp 0 did: their exponentials and warp 0's are on
# different scales, and the normalisation mixes them. On a GPU this depends on timing: the kind of bug that passes every test on
# your machine. The graded checks run every schedule.
#
# ### A divergent barrier
#
# A barrier inside a branch that only some threads take is undefined behaviour in CUDA (often a
# hang). The executor reports it, with the lines:

# %%
divergent = r'''
extern "C" __global__ void reverse_halves(float* out, const float* x) {
  __shared__ float buf[64];
  const int tid = threadIdx.x;
  if (tid < 32) {           // only warp 0 stores ...
    buf[tid] = x[tid];
    __syncthreads();        // ... and only warp 0 waits here
  }
  out[tid] = buf[63 - tid];
}
'''
kernel = cuda.RawKernel(divergent, "reverse_halves", backend="cpu", filename="divergent.cu")
x = np.arange(64, dtype=np.float32)
out = np.zeros(64, dtype=np.float32)
try:
    kernel((1,), (64,), (out, x))
except cuda.BarrierError as exc:
    print("BarrierError:", exc)

# %% [markdown]
# ## Debugging with the sanitizer
#
# Running every schedule shows *that* a barrier is missing; it does not say *where*. On a GPU,
# NVIDIA's `compute-sanitizer` does: it watches every memory access. pagedlab's executor can do
# the same on the CPU. Pass `check=` to a launch (or to `RawKernel`):
#
# | check | catches | exception |
# |---|---|---|
# | `"race"` | two threads touch one byte of `__shared__` memory, at least one writing, with no `__syncthreads()` between them (for two lanes of one warp, no `__syncwarp()`/shuffle either) | `cuda.RaceError` |
# | `"memcheck"` | a read or write outside every array passed to the kernel, or past the launch's `shared_mem` | `cuda.OutOfBoundsError` |
# | `"init"` | a read of shared memory no thread of the block has written | `cuda.UninitializedReadError` |
#
# `check="all"` turns on all three. The kernel is compiled a second time so that every load and
# store calls into the executor first; a checked launch is a few times slower, so checks are off
# unless you ask. The race rule does not depend on the order the threads happened to run in,
# so the report is **the same under every schedule**, with both threads and both lines.
#
# A block softmax with the same bug as the demo above: `partial[]` holds the warps' maxima,
# then their sums, and the barrier between the two uses is missing.

# %%
import numpy as np

from pagedlab import cuda
from pagedlab.loader import kernel_source

softmax = r'''
// out = softmax(x) over each block's 128 values (4 warps).
extern "C" __global__ void block_softmax(const float* x, float* out) {
  __shared__ float partial[4];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const float v = x[blockIdx.x * 128 + tid];
  float m = v;
  for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, offset));
  if (lane == 0) partial[warp] = m;
  __syncthreads();
  m = fmaxf(fmaxf(partial[0], partial[1]), fmaxf(partial[2], partial[3]));
  float e = expf(v - m);
  for (int offset = 16; offset > 0; offset /= 2) e += __shfl_xor_sync(0xffffffff, e, offset);
  if (lane == 0) partial[warp] = e;  // BUG: a barrier is missing just above this line
  __syncthreads();
  out[blockIdx.x * 128 + tid] = expf(v - m) / (partial[0] + partial[1] + partial[2] + partial[3]);
}
'''
x = np.random.default_rng(1).standard_normal(2 * 128).astype(np.float32)
out = np.full_like(x, np.nan)
kernel = cuda.RawKernel(softmax, "block_softmax", backend="cpu", filename="softmax.cu")
for schedule in cuda.SCHEDULES:
    try:
        kernel((2,), (128,), (x, out), schedule=schedule, check="race")
    except cuda.RaceError as exc:
        print(f"{schedule:12s} RaceError at lines {exc.lines}")
        report = str(exc)
print()
print(report)

# %% [markdown]
# Read the report from the top: **which** shared variable and element, **who** read and who
# wrote it, **where** (both lines), and what to do: put a `__syncthreads()` between the two
# accesses. Here the read of the maxima out of `partial[]` and the write of a sum into it sit
# in one barrier interval. Without `check=`, only some schedules give a wrong answer.
#
# `memcheck` finds indices that run off an array, reads included (a read past an input array
# returns garbage on a GPU, silently). A classic slip is `<=` in a loop bound:

# %%
double_it = r'''
extern "C" __global__ void double_it(const float* x, float* y, int n) {
  for (int i = threadIdx.x; i <= n; i += blockDim.x) y[i] = 2.f * x[i];
}
'''
x = np.arange(100, dtype=np.float32)
y = np.zeros(101, dtype=np.float32)
try:
    cuda.RawKernel(double_it, "double_it", backend="cpu", filename="double_it.cu")(
        (1,), (64,), (x, y, np.int32(100)), check="memcheck")
except cuda.OutOfBoundsError as exc:
    print("OutOfBoundsError:", exc)

# %% [markdown]
# (`y` has room for 101 floats, so only the read of `x[100]` is out of bounds.) Turn the checks
# on whenever a kernel misbehaves, and once on a kernel you believe is right:
# `with cuda.checking(): ...` turns them on for every launch inside the block, and the graded
# checks of Task 10 run your kernel with them on.

# %% [markdown]
# ## ✏️ Task 10 · the kernel
#
# Open **`exercises/paged_attention.cu`**. Three regions are yours, each marked `YOUR CODE HERE`
# and described by the comment above it. Each ends with a placeholder `return;` (so the untouched
# kernel leaves `out` unwritten): delete it when you write that part.
#
# 1. **logits**: for `t = tid; t < seq_len; t += NUM_THREADS`: the physical block
#    `block_table[t / block_size]`, the key at row `t % block_size` and kv head `kv_head`
#    (strides `block_stride`, `token_stride` are given), `logits[t] = scale * dot(q, k)`, and
#    keep `thread_max`;
# 2. **softmax**: `warp_max`, `partial[warp]`, a barrier, the block max; `exp(logit - max)` into
#    `logits[t]` and `thread_sum`; the same two-level reduction for the sum (mind the barrier of
#    the demo above); `inv_sum = 1 / sum`;
# 3. **output**: for each owned dimension `d`, `sum_t logits[t] * v[t][d]`, walking the sequence
#    block by block, times `inv_sum`, into `out_vec[d]`.
#
# The checks launch your kernel on the CPU executor under **every schedule**, on many shapes
# (head sizes 32–256, GQA, block sizes 8–32, 2048 tokens, shared blocks), and compare with
# float64 dense attention (relative error ≤ 2e-5). The output starts as a special NaN, so an
# element you never write is named as such. A compile error shows the compiler's message with your
# line numbers. The last check is **feedback only** (it earns and costs nothing): it shows how many
# lanes of a warp your kernel's loads use. A kernel whose thread 0 computes everything gets the
# right numbers, but on a GPU it would run one lane of 128.

# %%
pagedlab.graded.run("task10");

# %% [markdown]
# ## The memory-access profile: why vLLM groups threads per key
#
# A GPU serves a warp's 32 loads as **one request**, and global memory moves in **32-byte
# sectors**. If the 32 lanes read 32 consecutive floats (128 bytes) the request costs 4
# sectors; if they read 32 floats far apart it costs 32 sectors, eight times the traffic for
# the same useful bytes. The executor sees every access, so it can count this without a GPU:
# `kernel.profile(grid, block, args, shared_mem=...)` runs one launch and returns, per source
# line, the sectors per warp request (`ideal` = what the same bytes need when packed) and, for
# shared memory, the bank-conflict ways. Here it is for **your** kernel:

# %%
pagedlab.graded.require("task10")  # your kernel runs in this kernel's process below
batch = make_paged_batch([256, 256], num_heads=4, num_kv_heads=4, head_size=128, block_size=16, seed=0)
args = batch.numpy()
plan = kernels.validate(*args)
yours = cuda.RawKernel(kernel_source("paged_attention.cu"), "paged_attention_v1", backend="cpu",
                       filename="paged_attention.cu")
out = np.full(args[0].shape, np.nan, dtype=np.float32)
profile = yours.profile(plan.grid, (kernels.NUM_THREADS,), (out, *args, *plan.scalars),
                        shared_mem=plan.shared_mem)
print(profile)

# %% [markdown]
# Find the line of the key dot product (`... * k[d]`): about **32 sectors per request where 4
# would do**. In the logits loop a warp's 32 lanes are 32 *tokens*, and at each step every lane
# reads dimension `d` of its own key. The 32 keys lie `num_kv_heads * head_size` floats apart,
# so every lane pulls in a sector of its own and uses 4 of its 32 bytes. The value loop is the
# opposite case: lanes are 32 consecutive dimensions `d` of the same token, 4 sectors.
#
# vLLM's kernel is organised around exactly this. It gives each token a **thread group**
# (`THREAD_GROUP_SIZE = WARP_SIZE / BLOCK_SIZE` threads) that splits the key's head dimension,
# each thread loading 16-byte vectors, and it stores the K cache as
# `[num_blocks, num_kv_heads, head_size / x, block_size, x]` (`x` = elements per 16 bytes), so
# the same 16-byte slice of a block's keys sits side by side and a warp's request reads one
# contiguous stretch. The partial dot products are then summed with a few shuffles inside the
# group. The smallest version of the idea, on this course's layout: one **warp per token**, its
# lanes splitting the head dimension, then a warp sum:

# %%
scores = r'''
// s[t] = q . k[t] for n keys of d floats, k row-major [n, d].
extern "C" __global__ void thread_per_token(const float* q, const float* k, float* s, int n, int d) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < n) {
    float sum = 0.f;
    for (int i = 0; i < d; ++i) {
      const float key = k[t * d + i];  // keys A: lanes are tokens
      sum += q[i] * key;
    }
    s[t] = sum;
  }
}

extern "C" __global__ void warp_per_token(const float* q, const float* k, float* s, int n, int d) {
  int t = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  if (t < n) {  // the same for every lane of a warp
    float sum = 0.f;
    for (int i = lane; i < d; i += 32) {
      const float key = k[t * d + i];  // keys B: lanes are dimensions
      sum += q[i] * key;
    }
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffff, sum, offset);
    if (lane == 0) s[t] = sum;
  }
}
'''
n, d = 256, 128
rng = np.random.default_rng(0)
q, k = rng.standard_normal(d).astype(np.float32), rng.standard_normal((n, d)).astype(np.float32)
for name, grid, tag in (("thread_per_token", n // 128, "keys A"), ("warp_per_token", n * 32 // 128, "keys B")):
    s = np.full(n, np.nan, dtype=np.float32)
    kern = cuda.RawKernel(scores, name, backend="cpu", filename="scores.cu")
    prof = kern.profile((grid,), (128,), (q, k, s, np.int32(n), np.int32(d)))
    key_line = next(i + 1 for i, line in enumerate(scores.splitlines()) if tag in line)
    key = prof.line(key_line, "global", "load")
    print(f"{name:17s} key loads: {key.sectors_per_request:4.1f} sectors per request "
          f"(efficiency {key.efficiency:.0%}), max error {np.abs(s - k @ q).max():.1e}")

# %% [markdown]
# Same arithmetic, same answer, an eighth of the memory traffic for the keys. On a GPU,
# attention over a long context is limited by how fast K and V stream in, which is why vLLM
# spends so much care on who reads which bytes. (Shared memory has its own rule: 32 banks of
# 4-byte words; the profile's `bank ways` column shows how many different words of one bank a
# request hits, e.g. 32 for reading a column of a `float tile[32][32]`, 1 after padding it to
# `[32][33]`.)

# %% [markdown]
# ## The GPU path
#
# ### Compile check with NVRTC
#
# On a GPU, CuPy compiles the kernel with **NVRTC**, NVIDIA's runtime compiler, to PTX (the GPU's
# portable assembly). NVRTC comes as a pip wheel and needs no GPU or driver, so we can check right
# here that your kernel is valid CUDA (no `#include`, no host-only calls) and look at the start of
# what a GPU would run:

# %%
ptx = cuda.compile_ptx(kernel_source("paged_attention.cu"), arch="compute_75", name="paged_attention.cu")
print("\n".join(ptx.splitlines()[:28]))
print(f"... {len(ptx.splitlines())} lines of PTX;",
      "shuffles:", ptx.count("shfl.sync"), " barriers:", ptx.count("bar.sync"))

# %% [markdown]
# ### CuPy on a GPU
#
# `pagedlab.kernels.paged_attention_decode(..., backend="auto")` launches through
# `cupy.RawKernel` when CuPy sees a CUDA device (install with `pip install -e '.[gpu]'`), and on
# the CPU executor otherwise. The same kernel text, the same arguments.

# %%
# NBVAL_IGNORE_OUTPUT
pagedlab.graded.require("task10")
gpu_batch = make_paged_batch([100, 7, 300], num_heads=8, num_kv_heads=2, head_size=64, block_size=16, seed=5)
if cuda.cupy_available():
    import cupy

    out_gpu = kernels.paged_attention_decode(*[cupy.asarray(a) for a in gpu_batch.numpy()], backend="cupy")
    err = max_relative_error(cupy.asnumpy(out_gpu), gpu_batch.expected())
    print(f"CuPy on {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}: max relative error {err:.1e}")
else:
    print("No CUDA GPU with CuPy here: the kernels in this notebook run on pagedlab's CPU executor.")

# %% [markdown]
# ## The kernel against dense attention
#
# A batch with grouped-query attention (8 query heads, 2 kv heads), sequence lengths around block
# boundaries and one long sequence, through the host API. The host code checks every argument
# before the launch (dtypes, shapes, block ids in range, shared memory).

# %%
pagedlab.graded.require("task10")
batch = make_paged_batch([1, 15, 16, 17, 300], num_heads=8, num_kv_heads=2, head_size=64,
                         block_size=16, shared_blocks=0, seed=7)
out = kernels.paged_attention_decode(*batch.numpy(), backend="cpu")
expected = batch.expected()
err = max_relative_error(out, expected)
print(f"max relative error vs float64 dense attention: {err:.1e} (tolerance 2e-5)")
print("elements never written:", int(kernels.unwritten(out).sum()))
viz.draw_attention_check(out, expected, name="kernel (CPU executor)", ref_name="dense (float64)",
                         ylabel="(sequence, head) row")
plt.show()

# %% [markdown]
# ## End to end: your allocator, your kernel
#
# Part A's engine decides which physical blocks each sequence owns; Part B's layout stores K/V
# there; the kernel reads them through the block table. Below, your engine serves three
# sequences (one a fork that has already copied its last block), we store random K/V at each
# sequence's slots, and compare the kernel's decode step with dense attention over each
# sequence's own tokens.

# %%
pagedlab.graded.require("task1", "task2", "task3", "task4", "task5", "task10")  # your engine and kernel run below
mm = pagedlab.load("memory_manager")
pool = Pool(24 * hw3.BLOCK_SIZE)
engine = mm.llm_init(pool.addr, pool.size)
mm.create_sequence(engine, 0, 70)
mm.create_sequence(engine, 1, 5)
mm.fork_sequence(engine, 0, 2)
for token in range(20):               # the fork generates 20 tokens: CoW, then new pages
    mm.append_kv(engine, 2, token)

ids = block_tables.seq_ids(engine)
tables = block_tables.block_table_rows(engine)
lens = block_tables.seq_lens(engine)
print("sequences", ids, "seq_lens", lens.tolist())
print(tables)

BS, H, KVH, D = hw3.KV_PER_BLOCK, 4, 2, 32
rng = np.random.default_rng(0)
k_cache = np.full((engine.total_local_blocks, BS, KVH, D), np.nan, dtype=np.float32)
v_cache = np.full_like(k_cache, np.nan)
keys, values = {}, {}
for i, sid in enumerate(ids):
    n = int(lens[i])
    slots = tables[i][np.arange(n) // BS] * BS + np.arange(n) % BS
    if sid == 2:  # the fork's first 70 tokens are sequence 0's (blocks 0-3 shared, block 4 copied)
        keys[sid] = np.concatenate([keys[0], rng.standard_normal((n - 70, KVH, D), dtype=np.float32)])
        values[sid] = np.concatenate([values[0], rng.standard_normal((n - 70, KVH, D), dtype=np.float32)])
    else:
        keys[sid] = rng.standard_normal((n, KVH, D), dtype=np.float32)
        values[sid] = rng.standard_normal((n, KVH, D), dtype=np.float32)
    k_cache.reshape(-1, KVH, D)[slots] = keys[sid]
    v_cache.reshape(-1, KVH, D)[slots] = values[sid]

q = rng.standard_normal((len(ids), H, D), dtype=np.float32)
out = kernels.paged_attention_decode(q, k_cache, v_cache, tables, lens, backend="cpu")
dense = np.stack([dense_attention(q[i:i + 1].astype(np.float64), keys[sid].astype(np.float64),
                                  values[sid].astype(np.float64))[0] for i, sid in enumerate(ids)])
print(f"kernel on your engine's block tables: max relative error {max_relative_error(out, dense):.1e}")
viz.draw_attention_check(out, dense, name="kernel on your blocks", ref_name="dense (float64)",
                         ylabel="(sequence, head) row")
plt.show()
print("llm_destroy ->", mm.llm_destroy(engine))

# %% [markdown]
# Sequence 2 and sequence 0 agree on their first 64 tokens because they read the *same* four
# physical blocks; sequence 2's last 26 tokens live in blocks of its own (one copied by CoW, one
# new page). The kernel never knows: it just follows the table.
#
# ## Takeaways
#
# - One thread block per (head, sequence); 128 threads split the tokens for the logits and the
#   head dimensions for the output; warp shuffles plus a 4-float shared buffer reduce across the
#   block.
# - Every `__syncthreads()` guards a shared buffer that other threads will read or overwrite. A
#   missing one can hide under one thread order: test under several.
# - The same `.cu` text runs on the CPU executor, compiles with NVRTC, and launches with CuPy on a
#   GPU.
