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
