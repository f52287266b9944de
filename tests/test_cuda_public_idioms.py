"""Idioms of public kernels the CPU executor runs unchanged (tests/cuda_kernels/public_idioms.cu,
written here in the style of the CUDA samples, GEMM ladders, vLLM 2025 and CUB's examples),
each compared with numpy, with the checks off and with check="all"."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

from pagedlab.cuda import OutOfBoundsError, RaceError, RawModule

SOURCE = (Path(__file__).parent / "cuda_kernels" / "public_idioms.cu").read_text()
GEMM = "gemm_long_template_header<float, 16, 16, 8, 8, 8, 2, 2, 4, 4, 64>"
CUB = "cub_scan_and_reduce<64, 4>"
CHECKS = (None, "all")


@functools.cache
def idioms() -> RawModule:
    return RawModule(code=SOURCE, backend="cpu", filename="public_idioms.cu",
                     name_expressions=[GEMM, CUB]).compile()


def fn(name):
    return idioms().get_function(name)


def line_of(needle: str) -> int:
    return next(i for i, ln in enumerate(SOURCE.splitlines(), 1) if needle in ln)


@pytest.mark.parametrize("check", CHECKS)
def test_extern_shared_with_the_type_before_shared(check):
    x = np.random.default_rng(1).standard_normal(300).astype(np.float32)
    partial = np.full(5, np.nan, np.float32)
    fn("block_sums_type_first")((5,), (64,), (partial, x, np.uint32(300)), shared_mem=64 * 4,
                                check=check)
    want = np.pad(x.astype(np.float64), (0, 20)).reshape(5, 64).sum(1)
    np.testing.assert_allclose(partial, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("check", CHECKS)
def test_template_kernel_with_a_long_header(check):
    assert len(SOURCE[SOURCE.index("template <typename T, size_t BLOCK"):SOURCE.index("__global__ void gemm")]) > 300
    rng = np.random.default_rng(2)
    m, n, k = 20, 24, 12
    A, B = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    C = rng.standard_normal((m, n)).astype(np.float32)
    want = 1.5 * (A.astype(np.float64) @ B) - 0.5 * C
    fn(GEMM)((2, 2), (16, 16), (np.uint64(m), np.uint64(n), np.uint64(k), np.float32(1.5), A, B,
                                np.float32(-0.5), C), check=check)
    np.testing.assert_allclose(C, want, rtol=1e-5, atol=1e-5)
    out = np.zeros(8, np.float32)  # the plain kernel after it is still found by its name
    fn("plain_after_long_template")((1,), (8,), (out,), check=check)
    np.testing.assert_array_equal(out, 2 * np.arange(8))


# ---- the sanitizer follows compute-sanitizer's severity rule for identical writes ----------------
def test_lanes_storing_the_same_reduce_result_is_not_a_race():
    # compute-sanitizer rates a hazard with "no impact on program execution" (a write of the value
    # already there) INFO, which it does not report by default; a write that changes it, ERROR.
    x = np.random.default_rng(3).standard_normal((6, 200)).astype(np.float32)
    out = np.full(6, np.nan, np.float32)
    fn("row_sums_all_lanes_store")((6,), (128,), (out, x, np.int32(200)), check="all")
    np.testing.assert_allclose(out, x.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)
    with pytest.raises(RaceError, match=r"WAW.*warp_sums") as err:
        fn("row_sums_lanes_store_partials")((6,), (128,), (out, x, np.int32(200)), check="race")
    line = line_of("warp_sums[warp.meta_group_rank()] = v;")
    assert err.value.lines == (line, line)


@pytest.mark.parametrize("check", CHECKS)
def test_memcpy_past_a_local_array_is_an_out_of_bounds_write(check):
    words = np.random.default_rng(4).standard_normal(64).astype(np.float32).view(np.uint32)
    out = np.full(2, np.nan, np.float32)
    with pytest.raises(OutOfBoundsError, match=r"memcpy of 128 bytes into `data`, which has 16 bytes "
                                               r"at public_idioms.cu:\d+") as err:
        fn("unpack_words")((1,), (2,), (out, words, np.int32(128)), check=check)
    assert err.value.lines == (line_of("memcpy(&data, &bits"),)
    assert "misaligned" not in str(err.value)
    fn("unpack_words")((1,), (2,), (out, words, np.int32(16)), check=check)  # 16 bytes fit
    w = words.view(np.float32).reshape(2, 32)
    np.testing.assert_array_equal(out, w[:, 0] + w[:, 3])


# ---- CUB -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("check", CHECKS)
def test_cub_load_scan_store_and_reductions(check):
    n = 3 * 256 - 37  # the last block is partial: guarded loads and stores
    x = np.random.default_rng(5).integers(0, 100, n).astype(np.int32)
    scanned = np.full(n + 8, -1, np.int32)  # past n stays untouched
    totals, maxima = np.full(6, -1, np.int32), np.full(3, -1, np.int32)
    warp_totals = np.full(6, -1, np.int32)
    fn(CUB)((3,), (64,), (scanned, totals, maxima, warp_totals, x, np.int32(n)), check=check)
    blocks = [x[i:i + 256] for i in range(0, n, 256)]
    np.testing.assert_array_equal(scanned[:n], np.concatenate([np.cumsum(b) for b in blocks]))
    assert (scanned[n:] == -1).all()
    np.testing.assert_array_equal(totals[:3], [b.sum() for b in blocks])
    np.testing.assert_array_equal(maxima, [np.cumsum(b).max() for b in blocks])
    np.testing.assert_array_equal(totals[3:], 256)
    valid_threads = [min(64, -(-len(b) // 4)) for b in blocks]
    want = [min(32, max(0, v - 32 * w)) for v in valid_threads for w in range(2)]
    np.testing.assert_array_equal(warp_totals, want)


def test_cub_temp_storage_reused_without_a_barrier_is_a_race():
    x = np.arange(64, dtype=np.int32)
    with pytest.raises(RaceError, match=r"WAR.*temp") as err:
        fn("cub_reuse_without_barrier")((1,), (64,), (np.zeros(2, np.int32), x), check="race")
    assert set(err.value.lines) == {line_of("int a = BlockReduceT(temp)"), line_of("int b = BlockReduceT(temp)")}
    out = np.zeros(2, np.int32)
    fn("cub_reuse_without_barrier")((1,), (64,), (out, x))  # checks off: it still computes
    assert out.tolist() == [x.sum(), 63]


@pytest.mark.parametrize("check", CHECKS)
def test_cub_seeded_exclusive_scan_with_an_operator(check):
    x = np.random.default_rng(6).integers(-50, 50, 96).astype(np.int32)
    out, agg = np.zeros(96, np.int32), np.zeros(1, np.int32)
    fn("cub_exclusive_max_scan")((1,), (96,), (out, agg, x), check=check)
    want = np.maximum.accumulate(np.concatenate([[-1000], x]))
    np.testing.assert_array_equal(out, want[:-1])
    assert agg[0] == want[-1]


# ---- labeled_partition ----------------------------------------------------------------------------------
@pytest.mark.parametrize("check", CHECKS)
def test_labeled_partition_aggregates_atomics_per_bucket(check):
    bucket = np.random.default_rng(7).integers(-1, 4, 150).astype(np.int32)  # -1: inactive lane
    slot, counter = np.full(150, -1, np.int32), np.zeros(4, np.int32)
    fn("bucket_slots")((3,), (64,), (slot, counter, bucket, np.int32(150)), check=check)
    np.testing.assert_array_equal(counter, np.bincount(bucket[bucket >= 0], minlength=4))
    for k in range(4):  # every member of a bucket got its own slot, 0 .. count-1
        np.testing.assert_array_equal(np.sort(slot[bucket == k]), np.arange(counter[k]))
    assert (slot[bucket < 0] == -1).all()


# ---- half2 / bf162 intrinsics, bit for bit ----------------------------------------------------------------
from fractions import Fraction  # noqa: E402


def bf16_bits(x) -> np.ndarray:
    """float32 -> bfloat16 bits, round to nearest even (NaN: the canonical 0x7fff)."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    out = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(np.asarray(x, np.float32)), np.uint16(0x7FFF), out)


def bf16_value(b) -> np.ndarray:
    return (np.asarray(b, np.uint16).astype(np.uint32) << 16).view(np.float32)


def exact_round(q: Fraction, kind: str) -> int:
    """Bits of the 16-bit float nearest to the exact value q (ties to even)."""
    approx = np.float32(float(q))
    if kind == "f16" and abs(q) >= 65520:  # past the largest half by half an ulp: infinity
        return 0xFC00 if q < 0 else 0x7C00
    if kind == "f16":
        h = np.float16(approx)
        cands = [h, np.nextafter(h, np.float16(np.inf)), np.nextafter(h, np.float16(-np.inf))]
        cands = [int(np.array(c, np.float16).view(np.uint16)) for c in cands]
        val = lambda b: np.array(b, np.uint16).view(np.float16).astype(np.float64)  # noqa: E731
    else:
        b0 = int(bf16_bits(approx))
        cands = [b0, b0 + 1, b0 - 1]
        val = lambda b: float(bf16_value(b))  # noqa: E731
    cands = [b for b in cands if np.isfinite(val(b))]
    return min(cands, key=lambda b: (abs(Fraction(float(val(b))) - q), b & 1))


def pairs(rng, n, kind):
    vals = rng.standard_normal((3, 2 * n)) * np.array([1.0, 4.0, 0.5])[:, None]
    vals[0, 5], vals[1, 7] = np.nan, -0.0  # a NaN lane and a signed zero
    vals[:, 9] = [300.0, 300.0, 1.0]        # a sum that saturates and a big product
    if kind == "f16":
        return vals.astype(np.float16)
    return bf16_bits(vals.astype(np.float32))


def as_f64(bits, kind):
    return (bits.view(np.float16) if kind == "f16" else bf16_value(bits)).astype(np.float64)


def pair_reference(a, b, c, kind):
    """The twelve operations of pair_ops, from the float values, each rounded once."""
    x, y, z = (as_f64(v, kind) for v in (a, b, c))
    rnd = (lambda v: np.asarray(v, np.float32).astype(np.float16).view(np.uint16)) if kind == "f16" \
        else (lambda v: bf16_bits(np.asarray(v, np.float32)))
    f32 = lambda v: v.astype(np.float32)  # noqa: E731
    fma = np.array([exact_round(Fraction(float(p)) * Fraction(float(q)) + Fraction(float(r)), kind)
                    if np.isfinite([p, q, r]).all() else rnd(p * q + r) for p, q, r in zip(x, y, z)],
                   np.uint16)
    nan = np.isnan(x) | np.isnan(y)
    lt = np.where(x < y, 1.0, 0.0)
    return [rnd(f32(x) + f32(y)), rnd(f32(x) - f32(y)), rnd(f32(x) * f32(y)), rnd(f32(x) / f32(y)), fma,
            rnd(np.fmax(x, y)), rnd(np.fmin(x, y)), rnd(np.abs(x)), rnd(lt),
            rnd(np.nan_to_num(np.clip(f32(x) + f32(y), 0, 1), nan=0.0)),  # .sat: NaN -> +0
            np.where(as_f64(fma, kind) < 0, np.uint16(0), fma),
            np.where(nan, np.uint16(0x7FFF), rnd(np.fmax(x, y)))]


@pytest.mark.parametrize("kind", ["f16", "bf16"])
@pytest.mark.parametrize("check", CHECKS)
def test_pair_intrinsics_round_like_the_gpu(kind, check):
    n = 40
    a, b, c = pairs(np.random.default_rng(8 if kind == "f16" else 9), n, kind)
    out = np.full(12 * 2 * n, 0x5555, np.uint16)
    if kind == "f16":
        masks = np.zeros(n, np.uint32)
        fn("half2_intrinsics")((1,), (64,), (out.view(np.float16), masks, a, b, c, np.int32(n)), check=check)
    else:
        fn("bf162_intrinsics")((1,), (64,), (out, a, b, c, np.int32(n)), check=check)
    got = out.reshape(12, 2 * n)
    for k, want in enumerate(pair_reference(a, b, c, kind)):
        bad = np.isnan(as_f64(want, kind))  # NaN results: compare as NaN, not bit for bit
        np.testing.assert_array_equal(np.isnan(as_f64(got[k], kind)), bad, err_msg=f"op {k} NaN lanes")
        if k == 11:
            np.testing.assert_array_equal(got[k][bad], 0x7FFF, err_msg="canonical NaN")
        np.testing.assert_array_equal(got[k][~bad], want[~bad], err_msg=f"{kind} op {k}")
    if kind == "f16":
        x, y = as_f64(a, kind).reshape(n, 2), as_f64(b, kind).reshape(n, 2)
        ge = np.where(x[:, 0] >= y[:, 0], 0xFFFF, 0) | np.where(x[:, 1] >= y[:, 1], 0xFFFF0000, 0)
        gt = (x > y).all(1)
        np.testing.assert_array_equal(masks, ge.astype(np.uint32) ^ np.where(gt, 0x10000000, 0).astype(np.uint32))


@pytest.mark.parametrize("check", CHECKS)
def test_narrowing_conversions_in_every_mode(check):
    import test_cuda_ptx as ref  # the directed-rounding references of the PTX cvt tests
    x = ref.awkward_floats(64, seed=11)
    x = x[np.abs(x) < 1e30]
    h, b = np.zeros(4 * x.size, np.float16), np.zeros(4 * x.size, np.uint16)
    ints = np.zeros(2 * x.size, np.int32)
    fn("narrow_modes")((2,), (64,), (h, b, ints, x, np.int32(x.size)), check=check)
    for m, mode in enumerate(("rn", "rz", "rm", "rp")):
        np.testing.assert_array_equal(h.view(np.uint16)[m::4], ref.half_directed(x, mode), err_msg=mode)
        np.testing.assert_array_equal(b[m::4], ref.bf16_directed(x, mode), err_msg=mode)
    hv = h[0::4].astype(np.float64)
    want = np.where(np.isinf(hv), np.sign(hv) * 2 ** 31, np.trunc(np.nan_to_num(hv)))
    np.testing.assert_array_equal(ints[0::2], np.clip(want, -2 ** 31, 2 ** 31 - 1).astype(np.int64))
    np.testing.assert_array_equal(ints[1::2], np.floor(bf16_value(b[0::4]).astype(np.float64)))


# ---- FP8 -------------------------------------------------------------------------------------------------
def fp8_table(kind: str) -> np.ndarray:
    """The value of each of the 256 bytes (OCP e4m3 / e5m2, as CUDA's)."""
    man, bias = (3, 7) if kind == "e4m3" else (2, 15)
    b = np.arange(256)
    e, m, s = (b & 0x7F) >> man, b & ((1 << man) - 1), np.where(b & 0x80, -1.0, 1.0)
    v = np.where(e == 0, m * 2.0 ** (1 - bias - man), (m + 2 ** man) * 2.0 ** (e - bias - man)) * s
    if kind == "e4m3":
        v[(b & 0x7F) == 0x7F] = np.nan
    else:
        v[e == 31] = np.where(m[e == 31] == 0, s[e == 31] * np.inf, np.nan)
    return v


def fp8_reference(x: np.ndarray, kind: str, satfinite: bool) -> np.ndarray:
    """Nearest byte by brute force over the 256 values, ties to the even code."""
    table = fp8_table(kind)
    finite = np.flatnonzero(np.isfinite(table))
    biggest = np.nanmax(table[np.isfinite(table)])
    out = []
    for v in x.astype(np.float64):
        if np.isnan(v):
            out.append(0x7F)
            continue
        if abs(v) > biggest:  # past the largest finite value: it rounds to it if it is nearer
            half_ulp = (biggest - np.max(table[finite][table[finite] < biggest])) / 2
            code = int(np.flatnonzero(table == np.copysign(biggest, v))[0])
            tie_down = code % 2 == 0  # a tie goes to the even code: e4m3's 448 is, e5m2's 57344 is not
            if satfinite or abs(v) < biggest + half_ulp or (abs(v) == biggest + half_ulp and tie_down):
                out.append(code)
            else:  # NaN (e4m3) or infinity (e5m2), with the sign, as CUDA's converter
                out.append((0x7F if kind == "e4m3" else 0x7C) | (0x80 if v < 0 else 0))
            continue
        d = np.abs(table[finite] - v)
        best = finite[d == d.min()]
        best = best[np.signbit(table[best]) == np.signbit(v)] if len(best) > 1 else best
        best = best[best % 2 == 0] if len(best) > 1 else best
        out.append(int(best[0]))
    return np.array(out, np.uint8)


@pytest.mark.parametrize("check", CHECKS)
def test_fp8_conversions_bit_for_bit(check):
    rng = np.random.default_rng(10)
    x = np.concatenate([rng.standard_normal(80) * 10.0 ** rng.integers(-3, 3, 80),
                        [0.0, -0.0, 448, 464, 480, -500, 57344, 61440, 1e6, 2.0 ** -9, 2.0 ** -10,
                         3 * 2.0 ** -11, np.inf, -np.inf, np.nan]]).astype(np.float32)
    n = x.size
    e4m3, e5m2, nosat = (np.zeros(n, np.uint8) for _ in range(3))
    back, back_f = np.zeros(n, np.float16), np.zeros(n, np.float32)
    fn("fp8_round_trip")((2,), (64,), (e4m3, e5m2, nosat, back, back_f, x, np.float32(1.0), np.int32(n)),
                         check=check)
    np.testing.assert_array_equal(e4m3, fp8_reference(x, "e4m3", True))
    np.testing.assert_array_equal(e5m2, fp8_reference(x, "e5m2", True))
    np.testing.assert_array_equal(nosat, fp8_reference(x, "e4m3", False))
    np.testing.assert_array_equal(back.astype(np.float64), fp8_table("e4m3")[e4m3])  # widening: exact
    np.testing.assert_array_equal(back_f.astype(np.float64), fp8_table("e5m2")[e5m2])


# ---- WMMA --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("check", CHECKS)
def test_wmma_tile_product_with_an_elementwise_epilogue(check):
    rng = np.random.default_rng(11)
    m, n, k = 32, 48, 32
    a = rng.standard_normal((m, k)).astype(np.float16)
    bt = rng.standard_normal((n, k)).astype(np.float16)  # B column-major = B^T row-major
    c = rng.standard_normal((m, n)).astype(np.float32)
    want = 0.5 * (a.astype(np.float64) @ bt.T.astype(np.float64)) + c
    fn("wmma_gemm")((2,), (96,), (c, a, bt, np.int32(m), np.int32(n), np.int32(k), np.float32(0.5)),
                    check=check)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)  # exact products, float sums
