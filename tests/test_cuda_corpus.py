"""A corpus of small CUDA kernels, one feature each, run on the CPU executor under every schedule.

The kernels (tests/cuda_kernels/corpus/*.cu, written for pagedlab) cover what course material
and samples use: cooperative groups, CUDA's headers, vector and half types, parameter types only
the compiler knows (typedefs, macros, -D, structs by value), `__constant__` and templates through
RawModule, views with offsets, and the classics (tiled matmul, transpose, five reductions, scan,
histogram, bitonic sort, softmax, layernorm, stencil, Black-Scholes). Each result is compared
with a numpy reference (float64 where it matters, tolerance stated); outputs start as NaN or a
sentinel so unwritten elements show. Every file is also compiled for the GPU by NVRTC.
"""

from __future__ import annotations

import functools
import warnings
from pathlib import Path

import numpy as np
import pytest

from pagedlab.cuda import SCHEDULES, KernelCrash, KernelTimeout, RawModule, compile_ptx

CORPUS = Path(__file__).parent / "cuda_kernels" / "corpus"
NAME_EXPRESSIONS = {"module.cu": ("scale_by<float>", "scale_by<double>", "block_sum<64>")}


@functools.cache
def module(file: str, options: tuple = ()) -> RawModule:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # legacy.cu's deprecation note
        return RawModule(code=(CORPUS / file).read_text(), options=options, backend="cpu",
                         filename=file, name_expressions=NAME_EXPRESSIONS.get(file, ())).compile()


def kernel(file: str, name: str, options: tuple = ()):
    return module(file, options).get_function(name)


def nan(*shape, dtype=np.float32):
    return np.full(shape, np.nan, dtype)


CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


# ---- basics.cu ---------------------------------------------------------------------------------
@case
def vector_add(s):
    rng = np.random.default_rng(1)
    a, b = rng.random(1000, np.float32), rng.random(1000, np.float32)
    c = nan(1000)
    kernel("basics.cu", "vector_add")((8,), (128,), (a, b, c, np.int32(1000)), schedule=s)
    np.testing.assert_array_equal(c, a + b)


@case
def grid_stride_loop(s):
    rng = np.random.default_rng(2)
    x, y = rng.random(5000, np.float32), rng.random(5000, np.float32)
    want = np.float32(2.5) * x + y
    kernel("basics.cu", "saxpy_grid_stride")((3,), (64,), (np.float32(2.5), x, y, np.int32(5000)),
                                             schedule=s)
    np.testing.assert_array_equal(y, want)


@case
def typedef_parameters(s):
    x = np.arange(100, dtype=np.float32)
    out = nan(100)
    kernel("basics.cu", "typedef_scale")((1,), (128,), (out, x, np.uint32(100), np.float32(3)),
                                         schedule=s)
    np.testing.assert_array_equal(out, x * 3)


@case
def macro_and_define_option(s):
    k = kernel("basics.cu", "macro_types", ("-DTYPE=double",))
    assert [p.ctype for p in k.params] == ["float*", "const double*", "double", "int"]
    x = np.linspace(0, 1, 50)
    out = nan(50)
    k((1,), (64,), (out, x, np.float64(0.5), np.int32(50)), schedule=s)
    np.testing.assert_array_equal(out, (x + 0.5).astype(np.float32))
    with pytest.raises(TypeError, match="double"):  # the -D type is checked, not the default
        k((1,), (64,), (out, x.astype(np.float32), np.float32(0.5), np.int32(50)))


@case
def struct_by_value(s):
    affine = np.dtype([("scale", "f4"), ("offset", "i4"), ("bias", "f8")])
    p = np.array((2.0, 3, 0.25), dtype=affine)[()]
    x = np.arange(40, dtype=np.float32)
    out = nan(40)
    k = kernel("basics.cu", "struct_by_value")
    k((1,), (64,), (out, x, p, np.int32(40)), schedule=s)
    want = (np.roll(x, -3).astype(np.float64) * 2.0 + 0.25).astype(np.float32)
    np.testing.assert_array_equal(out, want)
    with pytest.raises(TypeError, match="16 bytes by value"):
        k((1,), (64,), (out, x, np.zeros(3, np.float32), np.int32(40)))


@case
def vectors_by_value(s):
    out = nan(3)
    f3 = np.array([1.0, 2.0, 3.0], np.float32)
    d3 = np.zeros((), np.dtype([("x", "f8"), ("y", "f8"), ("z", "f8")]))
    d3["x"], d3["y"], d3["z"] = 10.0, 2.0, 3.0
    k2 = np.array([6, 7], np.int32).tobytes()
    kernel("basics.cu", "vectors_by_value")((1,), (32,), (out, f3, d3[()], k2), schedule=s)
    np.testing.assert_array_equal(out, [7.0, 4.0, 42.0])


@case
def no_library_names_leak(s):
    a, b = np.arange(8, dtype=np.float32), np.full(8, 4, np.float32)
    out = nan(8)
    kernel("basics.cu", "no_library_leaks")((1,), (8,), (out, a, b, np.int32(8)), schedule=s)
    np.testing.assert_array_equal(out, a + 0.25 * (b - a) + np.clip(np.arange(8), 2, 5))


@case
def fortran_order_arrays(s):
    x = np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    out = np.asfortranarray(nan(3, 4))
    kernel("basics.cu", "raw_memory_index")((1,), (32,), (out, x, np.int32(12)), schedule=s)
    # The kernel indexes raw memory: element k of Fortran order is x.ravel(order="F")[k].
    np.testing.assert_array_equal(out.ravel(order="F"), x.ravel(order="F") * 10 + np.arange(12))


@case
def offset_view_reads_before_start(s):
    base = np.arange(1, 41, dtype=np.float32)
    out_base = nan(40)
    view, out = base[5:30], out_base[5:30]  # the kernel reads view[-2], view[-1] and past the end
    kernel("basics.cu", "read_before_start")((1,), (32,), (out, view, np.int32(25), np.int32(2)),
                                             schedule=s)
    want = np.array([base[5 + i - 2:5 + i + 3].sum() for i in range(25)], np.float32)
    np.testing.assert_array_equal(out, want)
    assert np.isnan(out_base[:5]).all() and np.isnan(out_base[30:]).all()


@case
def wide_and_narrow_scalars(s):
    out = np.zeros(32, np.uint64)
    kernel("basics.cu", "unsigned_long_params")(
        (1,), (32,), (out, np.uint64(2**40), np.int64(3), np.int16(-1)), schedule=s)
    np.testing.assert_array_equal(out, np.uint64(2**40) + 3 * np.arange(32, dtype=np.uint64) - np.uint64(1))


@case
def clock_t_parameter(s):
    k = kernel("basics.cu", "timed_copy")
    p = k.params[2]  # clock_t, resolved by the compiler: long (LP64)
    assert p.pointer and p.dtype == np.int64 and p.name == "ticks"
    x = np.arange(50, dtype=np.float32)
    out, ticks = nan(50), np.full(2, -1, np.int64)
    k((2,), (32,), (out, x, ticks, np.int32(50)), schedule=s)
    np.testing.assert_array_equal(out, x)
    assert (ticks >= 1).all()  # clock() never runs backwards; +1 from clock64()


# ---- headers.cu ------------------------------------------------------------------------------
@case
def cuda_runtime_and_math_constants(s):
    r = np.linspace(0, 2, 30, dtype=np.float32)
    out = nan(30)
    kernel("headers.cu", "circle_areas")((1,), (32,), (out, r, np.int32(30)), schedule=s)
    np.testing.assert_allclose(out, np.pi * r.astype(np.float64) ** 2, rtol=1e-6)


@case
def cucomplex(s):
    rng = np.random.default_rng(3)
    a = (rng.standard_normal(20) + 1j * rng.standard_normal(20)).astype(np.complex64)
    b = (rng.standard_normal(20) + 1j * rng.standard_normal(20)).astype(np.complex64)
    z = np.full(20, np.nan, np.complex64)
    # complex64 arrays are float2 arrays: pass their float32 view
    kernel("headers.cu", "complex_mul")((1,), (32,), (z.view(np.float32), a.view(np.float32),
                                                     b.view(np.float32), np.int32(20)), schedule=s)
    np.testing.assert_allclose(z, a.astype(np.complex128) * b + np.conj(a), rtol=1e-5, atol=1e-6)


@case
def half_precision(s):
    rng = np.random.default_rng(4)
    a = rng.standard_normal(64).astype(np.float16)
    b = rng.standard_normal(64).astype(np.float16)
    out = np.full(64, np.nan, np.float16)
    f = nan(64)
    kernel("headers.cu", "half_math")((1,), (64,), (out, a, b, f, np.int32(64)), schedule=s)
    # one rounding per half operation, as on the GPU
    np.testing.assert_array_equal(out, ((a + b) * np.float16(0.5)).astype(np.float16))
    np.testing.assert_array_equal(f, (a * a).astype(np.float32) + (b * b).astype(np.float32))


@case
def bfloat16(s):
    x = np.array([1.0, 1.00390625, 1.01171875, -3.14159, 65504.0, 1e-3, np.inf, 0.0], np.float32)
    bits = np.full(8, 0xFFFF, np.uint16)
    back = nan(8)
    kernel("headers.cu", "bf16_round")((1,), (8,), (bits, x, back, np.int32(8)), schedule=s)
    u = x.view(np.uint32).astype(np.uint64)
    want = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
    np.testing.assert_array_equal(bits, want)
    np.testing.assert_array_equal(back, (want.astype(np.uint32) << 16).view(np.float32))


# ---- vectors.cu ------------------------------------------------------------------------------
# CUDA's vector_types.h: sizes and alignments of x1..x4 for each element type (LP64).
VECTOR_LAYOUT = [
    (1, 1), (2, 2), (3, 1), (4, 4), (1, 1), (2, 2), (3, 1), (4, 4),
    (2, 2), (4, 4), (6, 2), (8, 8), (2, 2), (4, 4), (6, 2), (8, 8),
    (4, 4), (8, 8), (12, 4), (16, 16), (4, 4), (8, 8), (12, 4), (16, 16),
    (8, 8), (16, 16), (24, 8), (32, 16), (8, 8), (16, 16), (24, 8), (32, 16),
    (8, 8), (16, 16), (24, 8), (32, 16), (8, 8), (16, 16), (24, 8), (32, 16),
    (4, 4), (8, 8), (12, 4), (16, 16), (8, 8), (16, 16), (24, 8), (32, 16),
]


@case
def all_vector_types(s):
    sizes, aligns, sums = np.full(48, -1, np.int32), np.full(48, -1, np.int32), nan(13)
    kernel("vectors.cu", "vector_type_layout")((1,), (32,), (sizes, aligns, sums), schedule=s)
    assert list(zip(sizes.tolist(), aligns.tolist(), strict=True)) == VECTOR_LAYOUT
    exact = np.array([-2, 255, 1, 65006, 10, 4000000001, -4999999998, 7, 2, 30, 8, 1.5, 6])
    np.testing.assert_array_equal(sums, exact.astype(np.float32))  # stored as float


@case
def float4_global(s):
    x = np.arange(64, dtype=np.float32)
    out = nan(64)
    kernel("vectors.cu", "float4_scale")((1,), (32,), (out, x, np.float32(0.5), np.int32(16)),
                                         schedule=s)
    np.testing.assert_array_equal(out, x * 0.5)


@case
def shared_memory_is_16_byte_aligned(s):
    x = np.arange(128, dtype=np.float32)
    out, mod = nan(32), np.full(1, 99, np.uint64)
    kernel("vectors.cu", "shared_float4_tile")((2,), (64,), (out, x, mod), schedule=s)
    assert mod[0] == 0
    np.testing.assert_array_equal(out, x.reshape(32, 4).sum(axis=1))


@case
def shared_alignas_32(s):
    mod, out = np.full(1, 99, np.uint64), nan(16)
    kernel("vectors.cu", "shared_alignas32")((1,), (16,), (mod, out), schedule=s)
    assert mod[0] == 0
    np.testing.assert_array_equal(out, np.r_[np.arange(8, 16), np.arange(8)].astype(np.float32))


@case
def misaligned_access_is_reported(s):
    with pytest.raises(KernelCrash, match="misaligned"):
        kernel("vectors.cu", "misaligned_float4")((1,), (32,), (nan(32, 4), np.int32(1)), schedule=s)
    out = nan(32, 4)  # the same kernel with an aligned offset runs
    kernel("vectors.cu", "misaligned_float4")((1,), (32,), (out, np.int32(4)), schedule=s)
    want = np.where(np.arange(32) % 8 == 7, 2.0, 1.0)  # float4 k of tile + 4: tile[4k+4 .. 4k+7]
    np.testing.assert_array_equal(out, np.repeat(want[:, None], 4, 1).astype(np.float32))


# ---- shared.cu -------------------------------------------------------------------------------
@case
def extern_shared_short(s):
    x = np.arange(-64, 64, dtype=np.int16)
    out = np.full(128, 7777, np.int16)
    kernel("shared.cu", "dyn_shared_short")((2,), (64,), (out, x), shared_mem=64 * 2, schedule=s)
    np.testing.assert_array_equal(out, x.reshape(2, 64)[:, ::-1].ravel())


@case
def extern_shared_long(s):
    x = np.arange(96, dtype=np.int64) * 2**33
    out = np.zeros(96, np.int64)
    kernel("shared.cu", "dyn_shared_long")((3,), (32,), (out, x), shared_mem=32 * 8, schedule=s)
    np.testing.assert_array_equal(out, np.roll(x.reshape(3, 32) * 3, -1, axis=1).ravel())


@case
def syncthreads_count_and_or(s):
    flags = (np.arange(64) % 3 == 0).astype(np.int32)
    out = np.full(3, -5, np.int32)
    kernel("shared.cu", "barrier_votes")((1,), (64,), (out, flags), schedule=s)
    np.testing.assert_array_equal(out, [flags.sum(), 0, 1])


# ---- reductions.cu ---------------------------------------------------------------------------
RED_X = np.random.default_rng(5).random(3000).astype(np.float32)
RED_WANT = RED_X.astype(np.float64).sum()


def _reduction(name, s, blocks=12, block=256, dtype=np.float32, shared=0):
    partial = nan(blocks, dtype=dtype)
    kernel("reductions.cu", name)((blocks,), (block,), (partial, RED_X, np.int32(RED_X.size)),
                                  shared_mem=shared, schedule=s)
    np.testing.assert_allclose(partial.astype(np.float64).sum(), RED_WANT, rtol=1e-5)


@case
def reduce_atomic(s):
    total = np.zeros(1, np.float32)
    kernel("reductions.cu", "reduce_atomic")((12,), (256,), (total, RED_X, np.int32(RED_X.size)),
                                             schedule=s)
    np.testing.assert_allclose(total[0], RED_WANT, rtol=1e-5)


@case
def reduce_shared_tree(s):
    _reduction("reduce_shared_tree", s, shared=256 * 4)


@case
def reduce_warp_shuffle(s):
    _reduction("reduce_warp_shuffle", s)


@case
def reduce_cooperative_groups(s):
    _reduction("reduce_cg", s)


@case
def reduce_coarsened(s):
    _reduction("reduce_coarsened", s, blocks=3, dtype=np.float64)


# ---- groups.cu ------------------------------------------------------------------------------
@case
def cg_thread_block(s):
    out = np.full((2, 64, 4), -1, np.int32)
    kernel("groups.cu", "cg_block")((2,), (16, 4), (out,), schedule=s)
    r = np.arange(64)
    for b in range(2):
        np.testing.assert_array_equal(out[b, :, 0], (r + 1) % 64)
        np.testing.assert_array_equal(out[b, :, 1], 64)
        np.testing.assert_array_equal(out[b, :, 2], b * 1000 + (r // 16) * 100 + r % 16)
        np.testing.assert_array_equal(out[b, :, 3], 64)


@case
def cg_tile_shuffles(s):
    out = np.full((64, 6), -1, np.int32)
    kernel("groups.cu", "cg_tile_shuffles")((1,), (64,), (out,), schedule=s)
    r = np.arange(64)
    base, rank = r // 16 * 16, r % 16
    np.testing.assert_array_equal(out[:, 0], (base + 3) * 10)
    np.testing.assert_array_equal(out[:, 1], np.where(rank + 2 < 16, r + 2, r) * 10)
    np.testing.assert_array_equal(out[:, 2], np.where(rank >= 1, r - 1, r) * 10)
    np.testing.assert_array_equal(out[:, 3], (base + (rank ^ 5)) * 10)
    np.testing.assert_array_equal(out[:, 4], r // 16 * 100 + rank)
    np.testing.assert_array_equal(out[:, 5], 4 * 100 + 16)


@case
def cg_dynamic_tile(s):
    out = np.full(64, -1, np.int32)
    kernel("groups.cu", "cg_dynamic_tile")((1,), (64,), (out, np.int32(8)), schedule=s)
    np.testing.assert_array_equal(out, np.repeat(np.arange(64).reshape(8, 8).sum(axis=1), 8))


@case
def cg_tile_votes(s):
    pred = (np.arange(32) % 8 < np.repeat([0, 3, 8, 1], 8)).astype(np.int32)
    out = np.full((32, 3), 7, np.uint32)
    kernel("groups.cu", "cg_tile_votes")((1,), (32,), (out, pred), schedule=s)
    bits = [int(sum(int(p) << k for k, p in enumerate(pred[t * 8:t * 8 + 8]))) for t in range(4)]
    np.testing.assert_array_equal(out[:, 0], np.repeat([b != 0 for b in bits], 8))
    np.testing.assert_array_equal(out[:, 1], np.repeat([b == 0xFF for b in bits], 8))
    np.testing.assert_array_equal(out[:, 2], np.repeat(bits, 8))


@case
def cg_reduce_plus_less_greater(s):
    x = np.random.default_rng(6).integers(-100, 100, 32).astype(np.int32)
    out = np.full((32, 3), 12345, np.int32)
    kernel("groups.cu", "cg_reduce_ops")((1,), (32,), (out, x), schedule=s)
    g = x.reshape(8, 4)
    np.testing.assert_array_equal(out, np.repeat(np.stack([g.sum(1), g.min(1), g.max(1)], 1), 4, 0))


@case
def cg_coalesced_threads(s):
    x = np.random.default_rng(7).integers(-5, 5, 200).astype(np.int32)
    out, count = np.full(200, -99, np.int32), np.zeros(1, np.int32)
    kernel("groups.cu", "cg_coalesced_filter")((4,), (64,), (out, count, x, np.int32(200)), schedule=s)
    kept = x[x > 0]
    assert count[0] == kept.size
    np.testing.assert_array_equal(np.sort(out[:kept.size]), np.sort(kept))  # order varies, as on a GPU
    assert (out[kept.size:] == -99).all()


@case
def cg_thread_group_of_the_block(s):
    x = np.random.default_rng(17).integers(-50, 50, 256).astype(np.int32)
    out = np.full(2, -1, np.int32)
    kernel("groups.cu", "cg_generic_group")((2,), (128,), (out, x), schedule=s)
    np.testing.assert_array_equal(out, x.reshape(2, 128).sum(1))


@case
def cg_tile_scans(s):
    x = np.random.default_rng(18).integers(0, 20, 64).astype(np.int32)
    inc, exc = np.full(64, -1, np.int32), np.full(64, -1, np.int32)
    kernel("groups.cu", "cg_tile_scan")((1,), (64,), (inc, exc, x), schedule=s)
    g = x.reshape(4, 16)
    np.testing.assert_array_equal(inc, np.cumsum(g, 1).ravel())
    np.testing.assert_array_equal(exc, (np.cumsum(g, 1) - g).ravel())


@case
def cg_grid_sync_is_refused(s):
    with pytest.raises(KernelCrash, match=r"this_grid\(\).sync\(\) is not supported.*two launches"):
        kernel("groups.cu", "cg_grid_sync")((2,), (32,), (np.zeros(64, np.int32),), schedule=s)


# ---- legacy.cu --------------------------------------------------------------------------------
@case
def legacy_shuffles_without_mask(s):
    x = np.arange(64, dtype=np.float32)
    out = nan(64)
    kernel("legacy.cu", "legacy_warp_sum")((1,), (64,), (out, x), schedule=s)
    sums = x.reshape(2, 32).sum(1)
    want = np.repeat(sums, 32)
    np.testing.assert_array_equal(out, want)


# ---- module.cu -------------------------------------------------------------------------------
@case
def constant_memory_from_host(s):
    m = module("module.cu")
    c = m.get_global("coeffs")
    assert c.dtype == np.float32 and c.shape == (4,)
    c[:] = [1.0, -2.0, 0.5, 0.25]
    m.get_global("degree")[:] = 3
    x = np.linspace(-1, 1, 40, dtype=np.float32)
    y = nan(40)
    m.get_function("poly_eval")((1,), (64,), (y, x, np.int32(40)), schedule=s)
    xd = x.astype(np.float64)
    np.testing.assert_allclose(y, 1 - 2 * xd + 0.5 * xd**2 + 0.25 * xd**3, rtol=1e-6, atol=1e-6)


@case
def template_kernels(s):
    m = module("module.cu")
    xf, xd = np.arange(10, dtype=np.float32), np.arange(10, dtype=np.float64)
    of, od = nan(10), nan(10, dtype=np.float64)
    m.get_function("scale_by<float>")((1,), (32,), (of, xf, np.float32(1.5), np.int32(10)), schedule=s)
    m.get_function("scale_by<double>")((1,), (32,), (od, xd, np.float64(-2), np.int32(10)), schedule=s)
    np.testing.assert_array_equal(of, xf * 1.5)
    np.testing.assert_array_equal(od, xd * -2)
    with pytest.raises(TypeError, match="float64"):
        m.get_function("scale_by<float>")((1,), (32,), (of, xd, np.float32(1), np.int32(10)))


@case
def template_block_size(s):
    x = np.random.default_rng(8).random(256).astype(np.float32)
    partial = nan(4)
    module("module.cu").get_function("block_sum<64>")((4,), (64,), (partial, x), schedule=s)
    np.testing.assert_allclose(partial, x.reshape(4, 64).astype(np.float64).sum(1), rtol=1e-6)


@case
def device_table(s):
    m = module("module.cu")
    np.testing.assert_array_equal(m.get_global("lookup"), np.arange(8) ** 2)
    idx = np.arange(20, dtype=np.int32)
    out = np.full(20, -1, np.int32)
    m.get_function("table_lookup")((1,), (32,), (out, idx, np.int32(20)), schedule=s)
    np.testing.assert_array_equal(out, (idx & 7) ** 2)


# ---- classics.cu -----------------------------------------------------------------------------
@case
def tiled_matmul(s):
    rng = np.random.default_rng(9)
    M, N, K = 40, 36, 50  # not multiples of the tile: edges are exercised
    A, B = rng.standard_normal((M, K), np.float32), rng.standard_normal((K, N), np.float32)
    C = nan(M, N)
    kernel("classics.cu", "matmul_tiled")((3, 3), (16, 16), (A, B, C, np.int32(M), np.int32(N),
                                                           np.int32(K)), schedule=s)
    np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)


@case
def transpose_padded(s):
    x = np.arange(20 * 33, dtype=np.float32).reshape(20, 33)
    out = nan(33, 20)
    kernel("classics.cu", "transpose_padded")((3, 2), (16, 16), (out, x, np.int32(20), np.int32(33)),
                                              schedule=s)
    np.testing.assert_array_equal(out, x.T)


@case
def inclusive_scan(s):
    x = np.random.default_rng(10).integers(0, 100, 200).astype(np.int32)
    out = np.full(200, -1, np.int32)
    kernel("classics.cu", "scan_block")((1,), (256,), (out, x, np.int32(200)), schedule=s)
    np.testing.assert_array_equal(out, np.cumsum(x))


@case
def histogram_privatised(s):
    data = np.random.default_rng(11).integers(0, 256, 5000).astype(np.uint8)
    hist = np.zeros(32, np.uint32)
    kernel("classics.cu", "histogram_private")((4,), (128,), (hist, data, np.int32(5000), np.int32(32)),
                                               shared_mem=32 * 4, schedule=s)
    np.testing.assert_array_equal(hist, np.bincount(data % 32, minlength=32))


@case
def bitonic_sort(s):
    keys = np.random.default_rng(12).standard_normal(2 * 128).astype(np.float32)
    want = np.sort(keys.reshape(2, 128), axis=1).ravel()
    kernel("classics.cu", "bitonic_sort")((2,), (128,), (keys,), shared_mem=128 * 4, schedule=s)
    np.testing.assert_array_equal(keys, want)


@case
def softmax(s):
    x = np.random.default_rng(13).standard_normal((6, 300)).astype(np.float32) * 4
    out = nan(6, 300)
    kernel("classics.cu", "softmax_rows")((6,), (128,), (out, x, np.int32(300)), schedule=s)
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(1, keepdims=True), rtol=2e-6, atol=1e-9)


@case
def layernorm(s):
    rng = np.random.default_rng(14)
    x = rng.standard_normal((10, 96)).astype(np.float32)
    g, b = rng.random(96).astype(np.float32), rng.standard_normal(96).astype(np.float32)
    out = nan(10, 96)
    kernel("classics.cu", "layernorm_rows")((3,), (128,), (out, x, g, b, np.int32(10), np.int32(96),
                                                         np.float32(1e-5)), schedule=s)
    xd = x.astype(np.float64)
    want = (xd - xd.mean(1, keepdims=True)) / np.sqrt(xd.var(1, keepdims=True) + 1e-5) * g + b
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@case
def stencil_with_halo(s):
    x = np.random.default_rng(15).random(300).astype(np.float32)
    out = nan(300)
    kernel("classics.cu", "stencil_halo")((5,), (64,), (out, x, np.int32(300)),
                                          shared_mem=(64 + 6) * 4, schedule=s)
    padded = np.pad(x.astype(np.float64), 3)
    want = sum(padded[k:k + 300] for k in range(7))
    np.testing.assert_allclose(out, want, rtol=1e-6)


@case
def black_scholes(s):
    rng = np.random.default_rng(16)
    n = 500
    S, K = rng.uniform(5, 30, n).astype(np.float32), rng.uniform(1, 100, n).astype(np.float32)
    T = rng.uniform(0.25, 10, n).astype(np.float32)
    call, put = nan(n), nan(n)
    r, v = 0.02, 0.30
    kernel("classics.cu", "black_scholes")((4,), (128,), (call, put, S, K, T, np.float32(r),
                                                         np.float32(v), np.int32(n)), schedule=s)
    from math import erfc
    Sd, Kd, Td = S.astype(np.float64), K.astype(np.float64), T.astype(np.float64)
    cnd = np.vectorize(lambda d: 0.5 * erfc(-d / np.sqrt(2)))
    d1 = (np.log(Sd / Kd) + (r + 0.5 * v * v) * Td) / (v * np.sqrt(Td))
    d2 = d1 - v * np.sqrt(Td)
    want_call = Sd * cnd(d1) - Kd * np.exp(-r * Td) * cnd(d2)
    want_put = Kd * np.exp(-r * Td) * cnd(-d2) - Sd * cnd(-d1)
    np.testing.assert_allclose(call, want_call, rtol=1e-4, atol=2e-4)
    np.testing.assert_allclose(put, want_put, rtol=1e-4, atol=2e-4)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("name", list(CASES))
def test_corpus(name, schedule):
    CASES[name](schedule)


def test_corpus_size():
    kernels = sum(len([ln for ln in f.read_text().splitlines() if ln.startswith("__global__")
                       or ln.startswith("template")]) for f in CORPUS.glob("*.cu"))
    assert len(CASES) >= 40 and kernels >= 40


@pytest.mark.parametrize("file", sorted(p.name for p in CORPUS.glob("*.cu")))
def test_corpus_compiles_for_the_gpu(file):
    pytest.importorskip("cuda.bindings", reason="NVRTC binding not installed (pip install 'pagedlab[dev]')")
    from pagedlab.cuda.nvrtc import cuda_include_dirs
    if not cuda_include_dirs():
        pytest.skip("CUDA's headers for NVRTC are not installed (pip install 'pagedlab[dev]': "
                    "nvidia-cuda-runtime, nvidia-cuda-cccl)")
    code = (CORPUS / file).read_text()
    if file == "legacy.cu":  # NVRTC 13 has no mask-less shuffles: the reason for the warning
        from pagedlab.cuda import CompileError
        with pytest.raises(CompileError, match="__shfl_down.* is undefined"):
            compile_ptx(code, name=file)
        return
    compile_ptx(code, name=file)


def test_legacy_shuffles_warn():
    code = (CORPUS / "legacy.cu").read_text()
    with pytest.warns(FutureWarning, match=r"__shfl_down.*__shfl_down_sync"):
        RawModule(code=code, backend="cpu", filename="legacy_warn.cu").compile()


def test_watchdog_reports_progress():
    """A slow launch that is getting somewhere is told apart from one that hangs."""
    out = nan(256 * 64)
    with pytest.raises(KernelTimeout, match=r"(\d+) of 256 blocks had finished.*Raise the limit"):
        kernel("classics.cu", "busy_blocks")((256,), (64,), (out, np.int32(400000)), timeout=0.6)


def test_parameter_types_come_from_the_compiler():
    k = kernel("basics.cu", "typedef_scale")
    assert [(p.name, p.ctype) for p in k.params] == [
        ("out", "float*"), ("in", "const float*"), ("n", "unsigned int"), ("factor", "float")]
    with pytest.raises(TypeError, match=r"numpy.uint32"):
        k((1,), (32,), (nan(4), nan(4), np.int32(4), np.float32(1)))
