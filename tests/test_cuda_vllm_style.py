"""The CPU executor runs kernels written in vLLM's style unchanged (tests/cuda_kernels/
vllm_style.cu), decides refusals on what the compiler reads, and reports global-memory races
(tests/cuda_kernels/global_races.cu) and shuffles from lanes that do not exist."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

from pagedlab.cuda import (
    CompileError,
    KernelCrash,
    OutOfBoundsError,
    RaceError,
    RawKernel,
    RawModule,
    WarpSyncError,
    device_ptr,
)

KERNELS = Path(__file__).parent / "cuda_kernels"
VLLM = (KERNELS / "vllm_style.cu").read_text()
RACES = (KERNELS / "global_races.cu").read_text()
DECODE = "lab::paged_decode_kernel<float, 64, 16, 128>"
SCHEDULES = ("round_robin", "random:3")


@functools.cache
def vllm(options=()) -> RawModule:
    return RawModule(code=VLLM, backend="cpu", filename="vllm_style.cu", options=options,
                     name_expressions=[DECODE, "lab::to_bf16_scaled<64>"]).compile()


@functools.cache
def races() -> RawModule:
    return RawModule(code=RACES, backend="cpu", filename="global_races.cu").compile()


def line_of(text: str, needle: str) -> int:
    return next(i for i, ln in enumerate(text.splitlines(), 1) if needle in ln)


# ---- vLLM-style kernels run right -----------------------------------------------------------
def decode_case(rng, num_seqs=3, num_heads=4, num_kv_heads=2, head=64, block=16, num_blocks=32):
    lens = np.array([1, 37, 130][:num_seqs], np.int32)
    max_blocks = int(-(-lens.max() // block))
    tables = rng.permutation(num_blocks)[:num_seqs * max_blocks].reshape(num_seqs, max_blocks)
    k = rng.standard_normal((num_blocks, num_kv_heads, block, head)).astype(np.float32)
    v = rng.standard_normal((num_blocks, num_kv_heads, block, head)).astype(np.float32)
    q = rng.standard_normal((num_seqs, num_heads, head)).astype(np.float32)
    return q, k, v, tables.astype(np.int32), lens, max_blocks


def dense_reference(q, k, v, tables, lens, scale):
    num_seqs, num_heads, head = q.shape
    group = num_heads // k.shape[1]
    out = np.zeros(q.shape, np.float64)
    for s in range(num_seqs):
        toks = np.arange(lens[s])
        blocks, slots = tables[s, toks // k.shape[2]], toks % k.shape[2]
        for h in range(num_heads):
            keys = k[blocks, h // group, slots].astype(np.float64)
            vals = v[blocks, h // group, slots].astype(np.float64)
            logits = keys @ q[s, h].astype(np.float64) * scale
            p = np.exp(logits - logits.max())
            out[s, h] = p @ vals / p.sum()
    return out


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("check", (None, "all"))
def test_paged_decode_template_in_a_namespace_matches_float64(schedule, check):
    # extern __shared__ inside a kernel template in `namespace lab`: the glue defines lab::shared_mem
    q, k, v, tables, lens, max_blocks = decode_case(np.random.default_rng(0))
    out = np.full(q.shape, np.nan, np.float32)
    scale = np.float32(1 / 8)
    vllm().get_function(DECODE)(
        (q.shape[1], q.shape[0]), (128,),
        (out, q, k, v, tables, lens, scale, np.int32(k.shape[1]), np.int32(max_blocks)),
        shared_mem=int(lens.max()) * 4, schedule=schedule, check=check)
    np.testing.assert_allclose(out, dense_reference(q, k, v, tables, lens, 1 / 8), atol=2e-5)


@pytest.mark.parametrize("check", (None, "all"))
def test_bf16_path_runs_on_sm80_by_default(check):
    x = np.random.default_rng(1).standard_normal(256).astype(np.float32)
    out = np.zeros(256, np.uint16)  # bf16 bits
    vllm().get_function("lab::to_bf16_scaled<64>")((2,), (64,), (out, x, np.float32(3.0), np.int32(128)),
                                                    check=check)
    got = (out.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_allclose(got, x * 3.0, rtol=2 ** -7)


def test_arch_option_selects_the_path():
    k = RawModule(code=VLLM, backend="cpu", options=("-arch=sm_75",),
                  name_expressions=["lab::to_bf16_scaled<64>"]).get_function("lab::to_bf16_scaled<64>")
    with pytest.raises(KernelCrash, match=r"assertion `false` failed"):
        k((1,), (64,), (np.zeros(128, np.uint16), np.zeros(128, np.float32), np.float32(1), np.int32(64)))
    fine = RawModule(code=VLLM, backend="cpu", options=("--gpu-architecture=compute_86",),
                     name_expressions=["lab::to_bf16_scaled<64>"]).get_function("lab::to_bf16_scaled<64>")
    fine((1,), (64,), (np.zeros(128, np.uint16), np.ones(128, np.float32), np.float32(1), np.int32(64)))


@pytest.mark.parametrize("check", (None, "all"))
def test_copy_blocks_through_a_table_of_device_pointers(check):
    rng = np.random.default_rng(2)
    keys = [rng.standard_normal((6, 32)).astype(np.float32) for _ in range(3)]
    values = [rng.standard_normal((6, 32)).astype(np.float32) for _ in range(3)]
    want_k = [a.copy() for a in keys]
    want_v = [a.copy() for a in values]
    mapping = np.array([[0, 4], [2, 5]], np.int64)
    for a in want_k + want_v:
        a[mapping[:, 1]] = a[mapping[:, 0]]
    kp = np.array([device_ptr(a) for a in keys], np.int64)
    vp = np.array([device_ptr(a) for a in values], np.int64)
    before = kp.copy()
    RawKernel(VLLM, "copy_blocks", backend="cpu")((3, 2), (64,), (kp, vp, mapping, np.int32(32)),
                                                 check=check)
    for got, want in zip(keys + values, want_k + want_v, strict=True):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(kp, before)  # the table still holds the caller's addresses


def test_plain_kernel_inside_nested_namespaces_with_its_own_shared_array():
    code = ("namespace lab { namespace ops {\n"
            "__global__ void reverse(float* o) {\n"
            "    extern __shared__ float buf[];\n"
            "    buf[threadIdx.x] = threadIdx.x;\n    __syncthreads();\n"
            "    o[threadIdx.x] = buf[blockDim.x - 1 - threadIdx.x];\n}\n} }\n")
    for check in (None, "all"):
        out = np.zeros(32, np.float32)
        RawKernel(code, "reverse", backend="cpu")((1,), (32,), (out,), shared_mem=128, check=check)
        np.testing.assert_array_equal(out, np.arange(32)[::-1])


def test_void_global_specifier_order_is_a_kernel():
    code = "void __global__ iota(int* o) { o[threadIdx.x] = threadIdx.x; }\n"
    out = np.zeros(32, np.int32)
    RawKernel(code, "iota", backend="cpu")((1,), (32,), (out,))
    np.testing.assert_array_equal(out, np.arange(32))


# ---- refusals read the preprocessed source ------------------------------------------------------
def test_a_refused_include_taken_by_a_define_is_refused_on_its_line():
    with pytest.raises(CompileError, match=rf"vllm_style.cu:{line_of(VLLM, '#include <cuda/barrier>')}: "
                                           r"libcu\+\+'s asynchronous barriers"):
        vllm(("-DENABLE_ASYNC_COPY",))


def test_launch_inside_an_expanded_macro_is_refused():
    code = ("#define LAUNCH(k) k<<<1, 32>>>(o)\n__global__ void child(int* o) {}\n"
            "__global__ void parent(int* o) {\n  LAUNCH(child);\n}\n")
    with pytest.raises(CompileError, match=r"parent.cu:4: a kernel launch inside a kernel"):
        RawKernel(code, "parent", backend="cpu")((1,), (1,), (np.zeros(1, np.int32),))


@pytest.mark.parametrize("ptx, instead", [
    ('"mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1}, {%2}, {%3}, {%4, %5};" : '
     '"=r"(w), "=r"(w) : "r"(w), "r"(w), "r"(w), "r"(w)', "shared-memory tile product"),
    ('"cp.async.cg.shared.global [%0], [%1], 16;" :: "l"(o), "l"(o)', r"ordinary loads and stores, then __syncthreads\(\)"),
])
def test_inline_ptx_outside_the_run_set_is_refused_by_name(ptx, instead):
    code = ("__global__ void k(unsigned* o, float f) {\n  unsigned w = o[0];\n"
            "  unsigned short lo, hi;\n  asm volatile(\n" f"      {ptx});\n  o[0] = w;\n}}\n")
    with pytest.raises(CompileError, match=rf"k.cu:4: inline PTX `.*` is not supported .*{instead}") as err:
        RawKernel(code, "k", backend="cpu")((1,), (1,), (np.zeros(1, np.uint32), np.float32(1)))
    assert "constraint" not in str(err.value) and "error:" not in str(err.value)


HALF_HELPERS = """
#include <cuda_fp16.h>
// A dtype header's PTX helpers, as LLM kernels carry them; the float kernel never calls them.
inline __device__ unsigned pack_halves(unsigned short lo, unsigned short hi) {
    unsigned w;
    asm volatile("mov.b32 %0, {%1, %2};" : "=r"(w) : "h"(lo), "h"(hi));
    return w;
}
inline __device__ void tile_mma(unsigned* d, const unsigned* a) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f16.f16.f16.f16 {%0}, {%1}, {%2}, {%3};"
                 : "=r"(d[0]) : "r"(a[0]), "r"(a[1]), "r"(a[2]));
}
__global__ void twice(float* o) { o[threadIdx.x] = 2.f * threadIdx.x; }
__global__ void packed(unsigned* o) { o[0] = pack_halves(1, 2); }
"""


def test_inline_ptx_only_in_helpers_the_kernel_never_calls_compiles():
    out = np.zeros(32, np.float32)
    RawKernel(HALF_HELPERS.split("__global__ void packed")[0], "twice", backend="cpu")((1,), (32,), (out,))
    np.testing.assert_array_equal(out, 2 * np.arange(32))
    packed = np.zeros(1, np.uint32)
    RawKernel(HALF_HELPERS, "packed", backend="cpu")((1,), (1,), (packed,))  # mov.b32 pack runs
    assert packed[0] == 1 | 2 << 16
    with pytest.raises(CompileError, match=r"mma.cu:10: inline PTX `mma\.sync") as err:
        RawKernel(HALF_HELPERS + "__global__ void mma(unsigned* d) { tile_mma(d, d); }\n", "mma",
                  backend="cpu", filename="mma.cu")((1,), (1,), (np.zeros(4, np.uint32),))
    assert "constraint" not in str(err.value)


# ---- global-memory races ----------------------------------------------------------------------
def run_race(name, args, grid, block, **launch):
    races().get_function(name)(grid, block, args, **launch)


X = np.ones(256, np.float32)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_warps_adding_into_out_without_atomics_is_a_race(schedule):
    line = line_of(RACES, "out[0] += v")
    with pytest.raises(RaceError, match=r"global-memory race .* element 0 of argument `out`") as err:
        run_race("warps_add_plain", (np.zeros(1, np.float32), X, np.int32(256)), (2,), (128,),
                 check="race", schedule=schedule)
    assert err.value.lines == (line, line)
    out = np.zeros(1, np.float32)
    run_race("warps_add_atomic", (out, X, np.int32(256)), (2,), (128,), check="all", schedule=schedule)
    assert out[0] == 256


def test_in_place_reduction_across_blocks_is_a_race():
    with pytest.raises(RaceError, match=r"different blocks"):
        run_race("reduce_in_place", (np.ones(256, np.float32), np.int32(256)), (4,), (64,), check="race")
    data, partial = np.ones(256, np.float32), np.zeros(4, np.float32)
    run_race("reduce_in_place_per_block", (data, partial, np.int32(256)), (4,), (64,), check="all")
    np.testing.assert_array_equal(partial, 64)


def test_neighbour_counts_with_plain_increments_are_a_race():
    cell = (np.arange(256) % 8).astype(np.int32)
    with pytest.raises(RaceError, match=r"argument `count`"):
        run_race("neighbour_counts_plain", (np.zeros(8, np.int32), cell, np.int32(256)), (4,), (64,),
                 check="race")
    count = np.zeros(8, np.int32)
    run_race("neighbour_counts_atomic", (count, cell, np.int32(256)), (4,), (64,), check="all")
    np.testing.assert_array_equal(count, 32)


def test_last_block_reduction_published_with_a_fence_is_not_a_race():
    total, ticket = np.zeros(1, np.float32), np.zeros(1, np.uint32)
    run_race("last_block_sums", (np.zeros(4, np.float32), ticket, total, X, np.int32(256)), (4,), (64,),
             check="all")
    assert total[0] == 256 and ticket[0] == 0


def test_interleaved_schedule_loses_updates_with_checks_off():
    cell = (np.arange(256) % 8).astype(np.int32)
    plain, fixed = np.zeros(8, np.int32), np.zeros(8, np.int32)
    run_race("neighbour_counts_plain", (plain, cell, np.int32(256)), (1,), (256,), schedule="interleaved")
    run_race("neighbour_counts_atomic", (fixed, cell, np.int32(256)), (1,), (256,), schedule="interleaved")
    assert (plain < 32).all()
    np.testing.assert_array_equal(fixed, 32)


# ---- shuffles in a partial warp ---------------------------------------------------------------------
SHUFFLE = """
__global__ void warp_total(float* out, const float* x) {
    float v = x[threadIdx.x];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (threadIdx.x % 32 == 0) out[threadIdx.x / 32] = v;
}
"""


def test_full_mask_shuffle_from_a_lane_that_does_not_exist_is_reported():
    k = RawKernel(SHUFFLE, "warp_total", backend="cpu")
    with pytest.raises(WarpSyncError, match=r"warp_total.cu:4: thread 32 .* reads lane 16, which does not exist"):
        k((1,), (48,), (np.zeros(2, np.float32), np.ones(48, np.float32)))
    out = np.zeros(2, np.float32)
    k((1,), (64,), (out, np.ones(64, np.float32)))
    np.testing.assert_array_equal(out, 32)


# ---- a write one past a thread's local array ------------------------------------------------------
LOCAL = """
#define V_VEC_SIZE 4
__global__ void gather_rows(float* out, const float* x) {
    float acc[V_VEC_SIZE];
    for (int j = 0; j <= V_VEC_SIZE; ++j) acc[j] = x[threadIdx.x * (V_VEC_SIZE + 1) + j];
    out[threadIdx.x] = acc[0] + acc[V_VEC_SIZE - 1];
}
"""


def test_write_past_a_local_array_is_reported_with_checks_on():
    with pytest.raises(OutOfBoundsError, match=r"index 4 into an array of type 'float \[4\]' at gather_rows.cu:5") as err:
        RawKernel(LOCAL, "gather_rows", backend="cpu")(
            (1,), (32,), (np.zeros(32, np.float32), np.ones(32 * 5, np.float32)), check="all")
    assert err.value.lines == (5,)
    fixed = LOCAL.replace("j <= V_VEC_SIZE", "j < V_VEC_SIZE")
    out = np.zeros(32, np.float32)
    RawKernel(fixed, "gather_rows", backend="cpu")((1,), (32,), (out, np.ones(32 * 5, np.float32)), check="all")
    np.testing.assert_array_equal(out, 2)
