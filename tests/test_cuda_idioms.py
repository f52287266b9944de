"""Idioms of public CUDA code (tests/cuda_kernels/corpus/idioms.cu and refused/*.cu),
each run under every schedule, with the checks off and with check="all".

Also: every kernel of the corpus (test_cuda_corpus.py's cases) runs clean with check="all" under
every schedule, so the sanitizer raises no false alarm on correct public-style code.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import numpy as np
import pytest

from pagedlab.cuda import (
    SCHEDULES,
    CompileError,
    KernelTimeout,
    RaceError,
    RawKernel,
    RawModule,
    checking,
)

CORPUS = Path(__file__).parent / "cuda_kernels" / "corpus"
IDIOMS = (CORPUS / "idioms.cu").read_text()
EXPRESSIONS = ("reduce_with_helper<float>", "reduce_with_helper<double>", "gather_strided<3>")
CHECKS = (None, "all")


@functools.cache
def idioms() -> RawModule:
    return RawModule(code=IDIOMS, backend="cpu", filename="idioms.cu",
                     name_expressions=EXPRESSIONS).compile()


def line_of(text: str) -> int:
    """The line of idioms.cu holding `text` (so tests do not hard-code line numbers)."""
    return next(i for i, ln in enumerate(IDIOMS.splitlines(), 1) if text in ln)


runs = pytest.mark.parametrize("schedule", SCHEDULES)
checks = pytest.mark.parametrize("check", CHECKS)


# ---- extern __shared__ inside functions ----------------------------------------------------------
@runs
@checks
def test_shared_memory_helper_in_a_class_template(schedule, check):
    x = np.random.default_rng(1).random(256).astype(np.float32)
    partial = np.full(4, np.nan, np.float32)
    idioms().get_function("reduce_with_helper<float>")(
        (4,), (64,), (partial, x, np.int32(256)), shared_mem=64 * 4, schedule=schedule, check=check)
    np.testing.assert_allclose(partial, x.reshape(4, 64).astype(np.float64).sum(1), rtol=1e-5)
    xd = np.arange(200, dtype=np.float64)
    pd = np.full(4, np.nan)
    idioms().get_function("reduce_with_helper<double>")(  # the specialisation's own array
        (4,), (64,), (pd, xd, np.int32(200)), shared_mem=64 * 8, schedule=schedule, check=check)
    np.testing.assert_array_equal(pd, np.pad(xd, (0, 56)).reshape(4, 64).sum(1))


@runs
@checks
def test_shared_memory_declared_in_a_device_function(schedule, check):
    x = np.arange(128, dtype=np.float32)
    out = np.full(128, np.nan, np.float32)
    idioms().get_function("reverse_through_device_fn")((2,), (64,), (out, x), shared_mem=64 * 4,
                                                       schedule=schedule, check=check)
    np.testing.assert_array_equal(out, x.reshape(2, 64)[:, ::-1].ravel())


@runs
@checks
def test_shared_memory_declared_in_a_function_template(schedule, check):
    x = np.arange(96, dtype=np.int32)
    out = np.full(96, -1, np.int32)
    idioms().get_function("rotate_through_template_fn")((3,), (32,), (out, x), shared_mem=32 * 4,
                                                        schedule=schedule, check=check)
    np.testing.assert_array_equal(out, np.roll(x.reshape(3, 32) * 2, -1, axis=1).ravel())


# ---- __constant__: extern "C" blocks, several declarators, one set of values with checks on ------
@runs
@checks
def test_constant_inside_extern_c_block(schedule, check):
    m = idioms()
    gain = m.get_global("c_gain")
    assert gain.dtype == np.float32 and gain.shape == (4,)
    gain[:] = [0.5, -1.0, 2.0, 4.0]
    x = np.arange(10, dtype=np.float32)
    out = np.full(10, np.nan, np.float32)
    m.get_function("apply_gain")((1,), (32,), (out, x, np.int32(10)), schedule=schedule, check=check)
    np.testing.assert_array_equal(out, x * np.resize(gain, 10))


@runs
@checks
def test_every_declarator_of_a_constant_declaration(schedule, check):
    m = idioms()
    for name, value in zip(("c_a", "c_b", "c_c", "c_d"), (0.5, -1.0, 0.25, 4.0), strict=True):
        m.get_global(name)[...] = value  # values set on the host reach checked launches too
    assert m.get_global("c_lo")[0] == 3 and m.get_global("c_hi")[0] == 7  # initialisers
    x = np.linspace(-2, 3, 50, dtype=np.float32)
    out = np.full(50, np.nan, np.float32)
    m.get_function("cubic_clamped")((1,), (64,), (out, x, np.int32(50)), schedule=schedule, check=check)
    v = ((np.float32(0.5) * x - np.float32(1.0)) * x + np.float32(0.25)) * x + np.float32(4.0)
    np.testing.assert_array_equal(out, np.clip(v, 3, 7))


def test_globals_follow_the_host_between_checked_and_unchecked_launches():
    m = RawModule(code=IDIOMS, backend="cpu", filename="idioms.cu", name_expressions=EXPRESSIONS)
    x = np.ones(4, np.float32)
    for k, check in enumerate((None, "all", None, "all")):
        m.get_global("c_gain")[:] = k + 1
        out = np.zeros(4, np.float32)
        m.get_function("apply_gain")((1,), (4,), (out, x, np.int32(4)), check=check)
        assert out.tolist() == [k + 1] * 4, (check, out)


# ---- a static template kernel through name_expressions --------------------------------------------
@runs
@checks
def test_static_template_kernel(schedule, check):
    x = np.arange(60, dtype=np.float32)
    out = np.full(20, np.nan, np.float32)
    idioms().get_function("gather_strided<3>")((1,), (32,), (out, x, np.int32(20)),
                                               schedule=schedule, check=check)
    np.testing.assert_array_equal(out, x[::3])


# ---- a pointer to a struct fed from a float array ---------------------------------------------------
@runs
@checks
def test_struct_pointer_takes_a_float_array(schedule, check):
    rng = np.random.default_rng(2)
    a, b = rng.random((10, 2, 2), np.float32), rng.random((10, 2, 2), np.float32)
    c = np.full((10, 2, 2), np.nan, np.float32)
    idioms().get_function("batched_mat2")((1,), (32,), (a, b, c, np.int32(10)),
                                          schedule=schedule, check=check)
    want = np.einsum("nij,njk->nik", a.astype(np.float64), b)
    np.testing.assert_allclose(c, want, rtol=1e-6)


def test_struct_pointer_refuses_a_partial_struct():
    k = idioms().get_function("batched_mat2")
    a = np.zeros((10, 2, 2), np.float32)
    with pytest.raises(TypeError, match=r"16-byte structs.*24 bytes.*not a whole number"):
        k((1,), (32,), (a, np.zeros(6, np.float32), a, np.int32(10)))


# ---- double-precision cuComplex ------------------------------------------------------------------------
@runs
@checks
def test_double_complex_functions(schedule, check):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(20) + 1j * rng.standard_normal(20)
    y = rng.standard_normal(20) + 1j * rng.standard_normal(20)
    got = y.copy()
    idioms().get_function("complex_axpy_double")(
        (1,), (32,), (got.view(np.float64), x.view(np.float64), np.float64(1.5), np.float64(-0.5),
                      np.int32(20)), schedule=schedule, check=check)
    v = (1.5 - 0.5j) * x + y + np.conj(x) * 1j
    np.testing.assert_allclose(got, v + 1j * np.abs(x), rtol=1e-12)


# ---- the sanitizer: atomics against plain accesses, and no false alarm on half2 -------------------
@runs
def test_histogram_reading_bins_before_the_barrier_is_a_race(schedule):
    data = np.random.default_rng(4).integers(0, 256, 4000).astype(np.uint8)
    hist = np.zeros(32, np.uint32)
    with pytest.raises(RaceError) as err:
        idioms().get_function("histogram_reads_early")(
            (4,), (128,), (hist, data, np.int32(4000), np.int32(32)), shared_mem=32 * 4,
            schedule=schedule, check="all")
    msg = str(err.value)
    atomic, read = line_of("atomicAdd(&bins_smem"), line_of("atomicAdd(&hist[b]")
    assert "read-after-write" in msg and "bins_smem" in msg
    assert f"updated it atomically at idioms.cu:{atomic}" in msg
    assert f"read it at idioms.cu:{read}" in msg


@runs
def test_histogram_with_its_barrier_is_clean(schedule):
    code = (CORPUS / "classics.cu").read_text()
    data = np.random.default_rng(5).integers(0, 256, 5000).astype(np.uint8)
    hist = np.zeros(32, np.uint32)
    RawKernel(code, "histogram_private", backend="cpu", filename="classics.cu")(
        (4,), (128,), (hist, data, np.int32(5000), np.int32(32)), shared_mem=32 * 4,
        schedule=schedule, check="all")
    np.testing.assert_array_equal(hist, np.bincount(data % 32, minlength=32))


@runs
@checks
def test_half2_shared_array_reduced_in_a_device_function(schedule, check):
    rng = np.random.default_rng(6)
    a = rng.random(2 * 64 * 2 * 3).astype(np.float16)
    b = rng.random(a.size).astype(np.float16)
    results = np.full(2, np.nan, np.float32)
    idioms().get_function("half2_dot")((2,), (64,), (results, a, b, np.int32(a.size // 2)),
                                       schedule=schedule, check=check)
    want = (a.astype(np.float64) * b).sum()
    np.testing.assert_allclose(results.sum(), want, rtol=2e-2)  # half-precision accumulation


# ---- refused by name ---------------------------------------------------------------------------------
REFUSED = {
    "dynamic_parallelism.cu": ("scale_rows", r"dynamic_parallelism\.cu:9: a kernel launch inside a kernel "
                               r"\(dynamic parallelism\).*from the host"),
    "texture_reference.cu": ("copy_from_texture", r"texture_reference\.cu:2: a legacy texture reference"),
    "texture_object.cu": ("resample", r"texture_object\.cu:2: texture/surface objects \(cudaTextureObject_t"),
    "cuda_barrier.cu": ("copy_tiles", r"cuda_barrier\.cu:2: libcu\+\+'s asynchronous barriers.*"
                                      r"cuda::barrier.*Instead, copy with ordinary loads and stores and use __syncthreads\(\)"),
}


@runs
@pytest.mark.parametrize("file", sorted(REFUSED))
def test_unsupported_features_are_refused_by_name(file, schedule):
    name, message = REFUSED[file]
    k = RawKernel((CORPUS / "refused" / file).read_text(), name, backend="cpu", filename=file)
    with pytest.raises(CompileError, match=message) as err:
        k((1,), (32,), tuple(), schedule=schedule)
    assert "error:" not in str(err.value)  # named before the C++ compiler runs


# ---- the watchdog names the line a stuck thread is on ---------------------------------------------
@pytest.mark.parametrize("schedule", SCHEDULES[:2])
@checks
def test_watchdog_names_the_spinning_loop(schedule, check):
    with pytest.raises(KernelTimeout) as err:
        idioms().get_function("spin_after_barrier")(
            (1,), (32,), (np.zeros(1, np.int32), np.zeros(32, np.float32)), timeout=1.0,
            schedule=schedule, check=check)
    msg = str(err.value)
    loop = line_of("while (flag[0] == 0)")
    stuck = re.search(r"it was at idioms\.cu:(\d+) when stopped", msg)
    assert stuck and int(stuck.group(1)) in (loop, loop + 1), msg  # the condition or the body
    barrier = line_of("out[threadIdx.x] = tile[31 - threadIdx.x]") - 1
    assert f"the last barrier/warp operation it passed was at idioms.cu:{barrier}" in msg
    assert "31 waiting for their turn to run" in msg


# ---- no false positive: the whole corpus with check="all" ----------------------------------------
def _corpus_cases():
    import test_cuda_corpus
    return test_cuda_corpus.CASES


@pytest.mark.filterwarnings("ignore::FutureWarning")  # legacy.cu's mask-less shuffles
@runs
@pytest.mark.parametrize("name", sorted(_corpus_cases()))
def test_corpus_runs_clean_with_every_check(name, schedule):
    with checking("all"):
        _corpus_cases()[name](schedule)
