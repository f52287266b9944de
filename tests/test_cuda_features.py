"""RawModule, compiler-resolved parameter types and the rules around them, on the CPU."""

from __future__ import annotations

import numpy as np
import pytest

from pagedlab.cuda import KernelTimeout, RawKernel, RawModule, WarpSyncError
from pagedlab.cuda.compiler import dynamic_shared_arrays, global_variables

TEMPLATE = r"""
template <typename T> __global__ void fill(T* out, T v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = v;
}
__constant__ float gains[3] = {1.0f, 2.0f, 3.0f};
__device__ double offset;
struct Pair { int key; float value; };
__global__ void apply(float* out, const Pair* pairs, int n) {
    int i = threadIdx.x;
    if (i < n) out[i] = pairs[i].value * gains[pairs[i].key % 3] + (float)offset;
}
"""


@pytest.fixture(scope="module")
def mod():
    return RawModule(code=TEMPLATE, name_expressions=["fill<int>", "fill<float>"],
                     backend="cpu", filename="features.cu").compile()


def test_template_instances_are_distinct_kernels(mod):
    a, b = np.zeros(5, np.int32), np.zeros(5, np.float32)
    mod.get_function("fill<int>")((1,), (32,), (a, np.int32(7), np.int32(5)))
    mod.get_function("fill<float>")((1,), (32,), (b, np.float32(0.5), np.int32(5)))
    assert a.tolist() == [7] * 5 and b.tolist() == [0.5] * 5
    assert [p.ctype for p in mod.get_function("fill<int>").params] == ["int*", "int", "int"]


def test_unknown_names_are_refused_with_what_exists(mod):
    with pytest.raises(ValueError, match=r"fill<double>.*name_expressions.*fill<int>"):
        mod.get_function("fill<double>")
    with pytest.raises(ValueError, match=r"no file-scope.*'nope'.*gains, offset"):
        mod.get_global("nope")
    with pytest.raises(TypeError, match="list of strings"):
        RawModule(code=TEMPLATE, name_expressions="fill<int>", backend="cpu")
    with pytest.raises(ValueError, match="template kernel: use RawModule"):
        RawKernel(TEMPLATE, "fill", backend="cpu")


def test_globals_and_struct_arrays(mod):
    g = mod.get_global("gains")
    assert g.dtype == np.float32 and g.tolist() == [1.0, 2.0, 3.0]  # the initialiser
    g[2] = 10.0
    mod.get_global("offset")[0] = 0.25
    pair = np.dtype([("key", "i4"), ("value", "f4")])
    pairs = np.zeros(4, pair)
    pairs["key"], pairs["value"] = [0, 1, 2, 5], [1.0, 1.0, 1.0, 2.0]
    out = np.full(4, np.nan, np.float32)
    mod.get_function("apply")((1,), (32,), (out, pairs, np.int32(4)))
    np.testing.assert_array_equal(out, [1.25, 2.25, 10.25, 20.25])
    assert mod.get_global("offset", dtype=np.uint8).size == 8
    # Any array of whole structs goes, as with CuPy; 12 bytes are not whole 8-byte ones.
    mod.get_function("apply")((1,), (32,), (out, pairs.view(np.float32), np.int32(4)))
    np.testing.assert_array_equal(out, [1.25, 2.25, 10.25, 20.25])
    with pytest.raises(TypeError, match="8-byte structs.*12 bytes.*not a whole number"):
        mod.get_function("apply")((1,), (32,), (out, np.zeros(3, np.float32), np.int32(4)))


def test_writes_before_a_view_reach_the_whole_array():
    k = RawKernel(r"""__global__ void left(float* p) { if (threadIdx.x == 0) p[-1] = 42.0f; }""",
                  "left", backend="cpu")
    base = np.zeros(8, np.float32)
    k((1,), (32,), (base[3:],))
    assert base.tolist() == [0, 0, 42, 0, 0, 0, 0, 0]  # as on a GPU, element 2 of the array


def test_source_scanners():
    code = """extern __shared__ __align__(16) unsigned long long s_a[];
              extern __shared__ short s_b[];
              __constant__ float4 c4[2];
              __device__ int f(int x) { __shared__ int local[4]; return x; }
              namespace ns { __device__ int hidden; }"""
    assert [(d.name, d.ctype) for d in dynamic_shared_arrays(code)] == [
        ("s_a", "unsigned long long"), ("s_b", "short")]
    assert global_variables(code) == ["c4"]


COALESCE = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void groups(int* size, int* rank) {
    int t = threadIdx.x;
    if (t % 2 == 0) {
        cg::coalesced_group g = cg::coalesced_threads();
        size[t] = g.size(); rank[t] = g.thread_rank();
    } else if (t % 4 == 1) {
        cg::coalesced_group g = cg::coalesced_threads();
        size[t] = g.size(); rank[t] = g.thread_rank();
    }
}
__global__ void tile_sync_skipped(int* out) {
    cg::thread_block_tile<4> t = cg::tiled_partition<4>(cg::this_thread_block());
    if (t.thread_rank() < 2) t.sync();
    out[threadIdx.x] = 1;
}
"""


def test_coalesced_groups_follow_the_branch():
    m = RawModule(code=COALESCE, backend="cpu", filename="coalesce.cu")
    size, rank = np.full(64, -1, np.int32), np.full(64, -1, np.int32)
    m.get_function("groups")((1,), (64,), (size, rank))
    t = np.arange(64)
    want_size = np.where(t % 2 == 0, 16, np.where(t % 4 == 1, 8, -1))
    want_rank = np.where(t % 2 == 0, (t % 32) // 2, np.where(t % 4 == 1, (t % 32) // 4, -1))
    np.testing.assert_array_equal(size, want_size)
    np.testing.assert_array_equal(rank, want_rank)


def test_a_tile_sync_not_every_lane_reaches_is_reported():
    m = RawModule(code=COALESCE, backend="cpu", filename="coalesce.cu")
    with pytest.raises(WarpSyncError, match=r"lanes 0-1 of its warp wait.*mask 0x0000000f\) at coalesce.cu:16"):
        m.get_function("tile_sync_skipped")((1,), (32,), (np.zeros(32, np.int32),))


def test_watchdog_says_when_nothing_finished():
    k = RawKernel(r"""__global__ void spin(volatile int* flag) { while (flag[0] == 0) {} }""",
                  "spin", backend="cpu")
    with pytest.raises(KernelTimeout, match=r"none of its 4 blocks had finished.*never ends"):
        k((4,), (32,), (np.zeros(1, np.int32),), timeout=0.5)


def test_by_value_sizes_are_checked():
    k = RawKernel(r"""struct P { double a; int b; };
                     __global__ void use(double* out, P p) { out[0] = p.a + p.b; }""",
                  "use", backend="cpu")
    out = np.zeros(1)
    k((1,), (1,), (out, np.array((1.5, 2, 0), dtype=[("a", "f8"), ("b", "i4"), ("pad", "i4")])[()]))
    assert out[0] == 3.5
    with pytest.raises(TypeError, match="16 bytes by value.*12 bytes"):
        k((1,), (1,), (out, np.array((1.5, 2), dtype=[("a", "f8"), ("b", "i4")])[()]))
    with pytest.raises(TypeError, match="structured scalar"):
        k((1,), (1,), (out, 3.5))


POISON = r"""
__global__ void fresh(float* out, int bad) {
    extern __shared__ float a[];
    extern __shared__ int b_arr[];
    __shared__ float st[4];
    int t = threadIdx.x, base = blockIdx.x * 3 * blockDim.x;
    out[base + t] = a[t];
    out[base + blockDim.x + t] = st[t % 4];
    __syncthreads();
    a[t] = 1.0f; st[t % 4] = 2.0f; b_arr[t] = 5;
    if (bad && blockIdx.x == 3 && t == 0) a[blockDim.x + 100] = 0.0f;
    __syncthreads();
    out[base + 2 * blockDim.x + t] = a[blockDim.x + 1];
}
"""


def test_every_block_starts_with_poisoned_shared_memory_and_intact_canaries():
    """The canary tails are kept between blocks, not rewritten: check that nothing leaks."""
    from pagedlab.cuda import SharedMemoryError
    k = RawKernel(POISON, "fresh", backend="cpu")
    out = np.zeros(8 * 3 * 32, np.float32)
    k((8,), (32,), (out, np.int32(0)), shared_mem=32 * 4, workers=1)
    assert np.isnan(out).all()  # earlier blocks' 1.0/2.0 never show, the canary reads NaN
    with pytest.raises(SharedMemoryError, match="block \\(3, 0, 0\\).*offset 528"):
        k((8,), (32,), (out, np.int32(1)), shared_mem=32 * 4, workers=1)


def test_driver_api_header_compiles_on_the_cpu():
    """<cuda.h> is a host header (NVRTC cannot open it: it needs stdlib.h); nvcc and the CPU
    executor compile kernels that include it."""
    k = RawKernel("#include <cuda.h>\n__global__ void k(CUdeviceptr* p) { p[0] = CUDA_VERSION; }",
                  "k", backend="cpu")
    out = np.zeros(1, np.uint64)
    k((1,), (1,), (out,))
    assert out[0] >= 12000
