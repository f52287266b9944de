"""Collapsed kernels (pagedlab/cuda/collapse.py): a block's threads run as loops over thread
ids instead of fibers, for unchecked round_robin launches of kernels in the collapsible class.

Every kernel here is run both ways (PAGEDLAB_CUDA_COLLAPSE=0 forces fibers at launch) on
random inputs with NaN-poisoned outputs, and the results must be bit-identical; kernels outside
the class, checked launches and the other schedules must run on fibers, with their errors.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pagedlab import cuda
from pagedlab.cuda import BarrierError, RaceError, RawKernel, collapse

ROOT = Path(__file__).resolve().parent.parent

CLASS = r'''
#define FULL 0xffffffffu
#define TILE 16

__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
  return v;
}

__device__ float scaled(float v, float s) { return v * s + 1.0f; }

// block-wide sum through shared memory and barriers, one row per block
extern "C" __global__ void row_sum(float* out, const float* x, int n) {
  __shared__ float part[32];
  const int tid = threadIdx.x;
  float acc = 0.f;
  for (int i = tid; i < n; i += blockDim.x) acc += x[blockIdx.x * n + i];
  acc = warp_sum(acc);
  if (tid % 32 == 0) part[tid / 32] = acc;
  __syncthreads();
  float total = 0.f;
  if (tid < 32) {
    total = tid < blockDim.x / 32 ? part[tid] : 0.f;
  }
  total = warp_sum(total);
  if (tid == 0) out[blockIdx.x] = scaled(total, 0.5f);
}

// every shuffle kind, widths, votes
extern "C" __global__ void shuffles(float* out, int* votes, const float* x, int w) {
  const int t = threadIdx.x + blockIdx.x * blockDim.x;
  const float v = x[t];
  float a = __shfl_down_sync(FULL, v, 3);
  float b = __shfl_up_sync(0xffffffff, v, 5, 16);
  float c = __shfl_sync(FULL, v, (threadIdx.x * 7) % 32);
  float d = __shfl_xor_sync(FULL, v, 9, 8);
  int e = __shfl_sync(FULL, t, w);
  unsigned bal = __ballot_sync(FULL, v > 0.f);
  int any = __any_sync(FULL, v > 1.5f);
  int all = __all_sync(FULL, v > -3.f);
  out[4 * t + 0] = a + b;
  out[4 * t + 1] = c - d;
  out[4 * t + 2] = (float)e;
  out[4 * t + 3] = a * c;
  votes[3 * t + 0] = (int)bal;
  votes[3 * t + 1] = any;
  votes[3 * t + 2] = -all;
}

// tiled matrix multiply: 2-D blocks, a uniform loop with barriers inside
extern "C" __global__ void matmul(float* C, const float* A, const float* B, int n) {
  __shared__ float As[TILE][TILE];
  __shared__ float Bs[TILE][TILE];
  const int row = blockIdx.y * TILE + threadIdx.y;
  const int col = blockIdx.x * TILE + threadIdx.x;
  float acc = 0.f;
  for (int k0 = 0; k0 < n; k0 += TILE) {
    As[threadIdx.y][threadIdx.x] = A[row * n + k0 + threadIdx.x];
    Bs[threadIdx.y][threadIdx.x] = B[(k0 + threadIdx.y) * n + col];
    __syncthreads();
    for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads();
  }
  C[row * n + col] = acc;
}

// a thread's columns over many rows (the decode kernel's V loop): interchanged
extern "C" __global__ void columns(float* out, const float* x, const float* wgt, int rows, int cols) {
  const int tid = threadIdx.x;
  const float* base = x + (long long)blockIdx.x * rows * cols;
  float* o = out + (long long)blockIdx.x * cols;
  for (int c = tid; c < cols; c += blockDim.x) {
    float acc = 0.f;
    for (int r0 = 0; r0 < rows; r0 += 4) {
      const float* p = base + r0 * cols + c;
      const int m = rows - r0 < 4 ? rows - r0 : 4;
      for (int i = 0; i < m; ++i) acc += wgt[r0 + i] * p[i * cols];
    }
    o[c] = acc;
  }
}

// a thread's rows, a dot product each (the decode kernel's K loop): groups of threads
extern "C" __global__ void rows_dot(float* out, const float* x, const float* q, int rows, int cols) {
  __shared__ float qs[256];
  for (int d = threadIdx.x; d < cols; d += blockDim.x) qs[d] = q[d];
  __syncthreads();
  float best = -1e30f;
  for (int r = threadIdx.x; r < rows; r += blockDim.x) {
    const float* row = x + ((long long)blockIdx.x * rows + r) * cols;
    float dot = 0.f;
    for (int d = 0; d < cols; ++d) dot += qs[d] * row[d];
    out[blockIdx.x * rows + r] = dot;
    best = fmaxf(best, dot);
  }
  best = warp_sum(best);
  if (threadIdx.x % 32 == 0) out[gridDim.x * rows + blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32] = best;
}
'''

OUTSIDE = r'''
extern "C" __global__ void count(int* n) { atomicAdd(n, 1); }

extern "C" __global__ void divergent(float* out) {
  if (threadIdx.x < 16) __syncthreads();
  out[threadIdx.x] = 1.f;
}

extern "C" __global__ void vote_in_condition(float* out, const float* x) {
  if (__any_sync(0xffffffffu, x[threadIdx.x] > 0.f)) out[threadIdx.x] = 1.f;
  else out[threadIdx.x] = 2.f;
}

extern "C" __global__ void racy(float* out, const float* x) {
  __shared__ float s[64];
  s[threadIdx.x] = x[threadIdx.x];
  out[threadIdx.x] = s[(threadIdx.x + 1) % 64];  // no barrier: a race
}
'''


def kernel(code, name):
    return RawKernel(code, name, backend="cpu", filename="collapse_test.cu")


def both(monkeypatch, k, grid, block, args, outs, **launch):
    """Run collapsed, then on fibers; return both copies of every output array."""
    results = []
    for mode in ("1", "0"):
        monkeypatch.setenv("PAGEDLAB_CUDA_COLLAPSE", mode)
        for o in outs:
            o[...] = np.nan if o.dtype.kind == "f" else -7
        k(grid, block, args, **launch)
        assert k.last_mode == ("collapsed" if mode == "1" else "fibers")
        results.append([o.copy() for o in outs])
    monkeypatch.delenv("PAGEDLAB_CUDA_COLLAPSE")
    return results


def assert_same(results):
    got, want = results
    for g, w in zip(got, want, strict=True):
        assert g.tobytes() == w.tobytes(), np.abs(g.astype(np.float64) - w).max()
        assert not (g.dtype.kind == "f" and np.isnan(g).any())


@pytest.mark.parametrize("seed", [0, 1])
def test_collapsed_kernels_match_fibers_bit_for_bit(monkeypatch, seed):
    rng = np.random.default_rng(seed)
    k = kernel(CLASS, "row_sum")
    assert k.collapsible == ""
    x = rng.standard_normal((5, 1000)).astype(np.float32)
    out = np.empty(5, np.float32)
    for block in (32, 96, 256):
        assert_same(both(monkeypatch, k, (5,), (block,), (out, x, np.int32(1000)), [out]))
    np.testing.assert_allclose(out, x.astype(np.float64).sum(1) * 0.5 + 1, rtol=1e-4)

    k = kernel(CLASS, "shuffles")
    x = (rng.standard_normal(128) * 2).astype(np.float32)
    out, votes = np.empty(512, np.float32), np.empty(384, np.int32)
    assert_same(both(monkeypatch, k, (2,), (64,), (out, votes, x, np.int32(seed * 11)), [out, votes]))

    k = kernel(CLASS, "matmul")
    n = 48
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    c = np.empty((n, n), np.float32)
    assert_same(both(monkeypatch, k, (3, 3), (16, 16), (c, a, b, np.int32(n)), [c]))
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)

    k = kernel(CLASS, "columns")
    x = rng.standard_normal((3, 37, 200)).astype(np.float32)
    wgt = rng.standard_normal(37).astype(np.float32)
    out = np.empty((3, 200), np.float32)
    assert_same(both(monkeypatch, k, (3,), (64,), (out, x, wgt, np.int32(37), np.int32(200)), [out]))
    np.testing.assert_allclose(out, np.einsum("r,brc->bc", wgt.astype(np.float64), x), rtol=1e-4, atol=1e-4)

    k = kernel(CLASS, "rows_dot")
    x = rng.standard_normal((2, 300, 64)).astype(np.float32)
    q = rng.standard_normal(64).astype(np.float32)
    out = np.empty(2 * 300 + 2 * 4, np.float32)
    assert_same(both(monkeypatch, k, (2,), (128,), (out, x, q, np.int32(300), np.int32(64)), [out]))


def test_the_decode_kernel_runs_collapsed_and_bit_identical(monkeypatch):
    import sys
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_cuda_cpu as b

    code = (ROOT / "solutions" / "paged_attention.cu").read_text()
    got = collapse.collapse(code, "paged_attention_v1", "paged_attention.cu")
    assert not isinstance(got, str), got
    assert got.interchanged == 2  # the K loop (groups of threads) and the V loop (all threads)
    k = RawKernel(code, "paged_attention_v1", backend="cpu", filename="paged_attention.cu")
    assert k.collapsible == ""
    grid, args, smem = b.attention_args()
    res = both(monkeypatch, k, grid, (128,), args, [args[0]], shared_mem=smem)
    assert_same(res)
    ref = b.reference(*b.attention_inputs())
    assert np.abs(res[0][0] - ref).max() / np.abs(ref).max() < 1e-5


def test_kernels_outside_the_class_run_on_fibers():
    for name, why in (("count", "atomicAdd"), ("divergent", "differ between threads"),
                      ("vote_in_condition", "in a condition")):
        k = kernel(OUTSIDE, name)
        assert why in k.collapsible
    k = kernel(OUTSIDE, "vote_in_condition")
    out = np.zeros(64, np.float32)
    k((1,), (64,), (out, np.r_[-np.ones(32), np.arange(32)].astype(np.float32)))
    assert k.last_mode == "fibers" and (out == np.r_[np.full(32, 2.), np.ones(32)]).all()
    n = np.zeros(1, np.int32)
    k = kernel(OUTSIDE, "count")
    k((3,), (64,), (n,))
    assert k.last_mode == "fibers" and n[0] == 192
    k = kernel(OUTSIDE, "divergent")
    with pytest.raises(BarrierError):
        k((1,), (32,), (np.zeros(32, np.float32),))
    assert k.last_mode == "fibers"


def test_checked_launches_other_schedules_and_partial_warps_use_fibers():
    k = kernel(OUTSIDE, "racy")
    assert k.collapsible == ""
    x = np.arange(64, dtype=np.float32)
    out = np.full(64, np.nan, np.float32)
    k((1,), (64,), (out, x))
    assert k.last_mode == "collapsed"
    with pytest.raises(RaceError):
        k((1,), (64,), (out, x), check="race")
    assert k.last_mode == "fibers"
    k((1,), (64,), (out, x), schedule="reversed")
    assert k.last_mode == "fibers"
    k((1,), (48,), (out, x))
    assert k.last_mode == "fibers"


def test_a_missing_barrier_shows_as_on_fibers(monkeypatch):
    """The notebook's missing-barrier demo: collapsed round_robin reproduces the fibers'
    round_robin result exactly, wrong answer included."""
    code = (ROOT / "pagedlab" / "kernels_demo" / "planted_missing_barrier.cu").read_text()
    k = RawKernel(code, "softmax_rows", backend="cpu", filename="planted_missing_barrier.cu")
    assert k.collapsible == ""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 300)).astype(np.float32)
    out = np.empty_like(x)
    assert_same(both(monkeypatch, k, (4,), (128,), (out, x, np.int32(300)), [out]))


def test_the_v2_kernels_run_collapsed_and_bit_identical(monkeypatch):
    """paged_attention_v2.cu: barriers inside __device__ helpers (inlined), a block that leaves
    early (every thread of it: a uniform return), the reduce kernel."""
    from pagedlab.cuda import executor
    from pagedlab.drivers.kernel_batch import make_kernel_batch
    from pagedlab.kernels import decode_on_executor

    code = (ROOT / "solutions" / "paged_attention_v2.cu").read_text()
    for name in cuda.signature.kernel_names(code):
        assert not isinstance(collapse.collapse(code, name, "paged_attention_v2.cu"), str), name
    modes = []
    real = executor.use_collapsed
    monkeypatch.setattr(executor, "use_collapsed", lambda *a: modes.append(real(*a)) or modes[-1])
    batch = make_kernel_batch([5, 700, 1300], num_heads=4, num_kv_heads=2, head_size=64,
                              block_size=16, seed=4)
    outs = []
    for mode in ("1", "0"):
        monkeypatch.setenv("PAGEDLAB_CUDA_COLLAPSE", mode)
        outs.append(decode_on_executor(*batch.numpy(), impl="solutions", version="v2",
                                       partition_size=512))
    assert modes == [True, True, False, False]
    assert outs[0].tobytes() == outs[1].tobytes()
    from pagedlab.grader.trusted.attention import kernel_expected

    np.testing.assert_allclose(outs[0], kernel_expected(batch), rtol=1e-4, atol=1e-5)


def test_graded_kernel_checks_run_on_fibers_even_where_round_robin_is_unchecked(monkeypatch):
    """Tasks 10 and 14 launch inside `cuda.fibers_only()`: a grade never depends on the
    collapsing pass. Today round_robin comes first and is checked (so on fibers anyway); here the
    order is turned round, round_robin unchecked second, where it would collapse without the guard."""
    from pagedlab import kernels
    from pagedlab.cuda import executor
    from pagedlab.drivers import paged_attention_cu, paged_attention_v2_cu, record
    from pagedlab.drivers.kernel_batch import make_kernel_batch
    from pagedlab.grader import registry

    modes = []
    real = executor.use_collapsed
    monkeypatch.setattr(executor, "use_collapsed", lambda *a: modes.append(real(*a)) or modes[-1])
    order = lambda: ("warp0_first", "round_robin")  # noqa: E731
    monkeypatch.setattr(paged_attention_cu, "check_schedules", order)
    monkeypatch.setattr(paged_attention_v2_cu, "check_schedules", order)
    # The recorder sees a collapse where nothing forbids one: the same kernel, outside a check.
    batch = make_kernel_batch([20, 37], num_heads=2, head_size=32, seed=5).numpy()
    kernels.decode_on_executor(*batch, impl=str(ROOT / "solutions"), schedule="round_robin")
    assert modes == [True], modes
    modes.clear()
    for task in ("task10", "task14"):
        check = registry.checks_of(task)[0]
        record.drive(check, "solutions", 0)
    assert modes and not any(modes), f"{modes.count(True)} of {len(modes)} graded launches ran collapsed"
