"""Idioms of public kernels the CPU executor runs unchanged (tests/cuda_kernels/public_idioms.cu,
written here in the style of the CUDA samples, GEMM ladders, vLLM 2025 and CUB's examples),
each compared with numpy, with the checks off and with check="all"."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

from pagedlab.cuda import RawModule

SOURCE = (Path(__file__).parent / "cuda_kernels" / "public_idioms.cu").read_text()
GEMM = "gemm_long_template_header<float, 16, 16, 8, 8, 8, 2, 2, 4, 4, 64>"
CHECKS = (None, "all")


@functools.cache
def idioms() -> RawModule:
    return RawModule(code=SOURCE, backend="cpu", filename="public_idioms.cu",
                     name_expressions=[GEMM]).compile()


def fn(name):
    return idioms().get_function(name)


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
