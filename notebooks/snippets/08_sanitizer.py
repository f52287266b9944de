# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# <!-- Snippet for notebook 08 (issue 16): a section to paste after "A divergent barrier".
#      Self-contained: it repeats the few imports it needs. -->
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

from pagedlab import cuda, kernels
from pagedlab.loader import kernel_source
from pagedlab.reference import make_paged_batch

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
#
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
    float acc = 0.f;
    for (int i = 0; i < d; ++i) {
      const float key = k[t * d + i];  // keys A: lanes are tokens
      acc += q[i] * key;
    }
    s[t] = acc;
  }
}

extern "C" __global__ void warp_per_token(const float* q, const float* k, float* s, int n, int d) {
  int t = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  if (t < n) {  // the same for every lane of a warp
    float acc = 0.f;
    for (int i = lane; i < d; i += 32) {
      const float key = k[t * d + i];  // keys B: lanes are dimensions
      acc += q[i] * key;
    }
    for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_xor_sync(0xffffffff, acc, offset);
    if (lane == 0) s[t] = acc;
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
