"""The CPU executor as a sanitizer: races, out-of-bounds and uninitialised reads are
caught with both threads and lines, the same report under every schedule; correct kernels pass;
the memory-access profile gives the textbook figures.

Kernels: tests/cuda_kernels/sanitizer_hazards.cu (planted bugs; `// <- name` marks the lines a
report must name), sanitizer_clean.cu and known_answers.cu (must pass), and the course kernel
solutions/paged_attention.cu (must pass; with a barrier deleted, must fail).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

from pagedlab import cuda
from pagedlab.cuda import (
    SCHEDULES,
    OutOfBoundsError,
    RaceError,
    RawKernel,
    SanitizerError,
    UninitializedReadError,
)
from pagedlab.cuda import sanitizer as san

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sanitizer needs Linux")

KERNELS = Path(__file__).parent / "cuda_kernels"
ROOT = Path(__file__).resolve().parent.parent


def _source(filename):
    return (KERNELS / filename).read_text()


def marked(code: str, name: str) -> list[int]:
    return [i + 1 for i, ln in enumerate(code.splitlines()) if ln.rstrip().endswith(f"// <- {name}")]


def line_of(code: str, text: str) -> int:
    hits = [i + 1 for i, ln in enumerate(code.splitlines()) if text in ln]
    assert len(hits) == 1, (text, hits)
    return hits[0]


def _factory(code, filename):
    def get(name, **kw):
        return RawKernel(code, name, backend="cpu", filename=filename, **kw)

    san.instrumented_build(get(cuda.signature.kernel_names(code)[0]))  # one build serves all
    return get


@pytest.fixture(scope="module")
def hazards():
    return _factory(_source("sanitizer_hazards.cu"), "sanitizer_hazards.cu")


@pytest.fixture(scope="module")
def clean():
    return _factory(_source("sanitizer_clean.cu"), "sanitizer_clean.cu")


@pytest.fixture(scope="module")
def known():
    return _factory(_source("known_answers.cu"), "known_answers.cu")


@pytest.fixture
def rng():
    return np.random.default_rng(20261123)


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def reports(launch) -> list[SanitizerError]:
    """The error `launch(schedule)` raises under each schedule (fails if one does not raise)."""
    out = []
    for schedule in SCHEDULES:
        with pytest.raises(SanitizerError) as info:
            launch(schedule)
        out.append(info.value)
    return out


def assert_one_report(errors, cls, lines):
    texts = {str(e) for e in errors}
    assert len(texts) == 1, "the report depends on the schedule:\n" + "\n---\n".join(texts)
    err = errors[0]
    assert type(err) is cls, str(err)
    assert sorted(x for x in err.lines) == sorted(lines), str(err)
    for line in set(lines):
        assert f":{line}" in str(err)
    return err


# ---- races ------------------------------------------------------------------------------------


def test_tile_reloaded_without_a_barrier(hazards, rng):
    n = 32
    a, b, c = f32(rng, n, n), f32(rng, n, n), np.zeros((n, n), np.float32)
    errors = reports(lambda s: hazards("matmul_tile_reload")((2, 2), (16, 16), (a, b, c, np.int32(n)),
                                                                check="race", schedule=s))
    err = assert_one_report(errors, RaceError, marked(_source("sanitizer_hazards.cu"), "matmul_tile_reload"))
    assert "__shared__ `as`" in str(err) and "__syncthreads()" in str(err)


def test_warp_synchronous_volatile_reduction_without_syncwarp(hazards, rng):
    x, out = f32(rng, 64), np.zeros(1, np.float32)
    errors = reports(lambda s: hazards("volatile_warp_reduce")((1,), (64,), (x, out), check="race",
                                                               schedule=s))
    err = assert_one_report(errors, RaceError, marked(_source("sanitizer_hazards.cu"), "volatile_warp_reduce"))
    assert "lanes of one warp" in str(err) and "__syncwarp()" in str(err)
    assert err.threads[0] // 32 == err.threads[1] // 32


def test_every_thread_writing_one_slot_is_write_after_write(hazards):
    out = np.zeros(2, np.int32)
    errors = reports(lambda s: hazards("all_write_one_slot")((2,), (64,), (out,), check="race", schedule=s))
    line = marked(_source("sanitizer_hazards.cu"), "all_write_one_slot")[0]
    err = assert_one_report(errors, RaceError, [line, line])
    assert err.report["kind"] == "WAW" and "(WAW" in str(err)
    assert err.block == (0, 0, 0) and err.threads[0] != err.threads[1]


def test_value_published_without_a_barrier(hazards, rng):
    x, out = f32(rng, 128), np.zeros(128, np.float32)
    errors = reports(lambda s: hazards("publish_without_barrier")((1,), (128,), (x, out), check="race",
                                                                  schedule=s))
    err = assert_one_report(errors, RaceError, marked(_source("sanitizer_hazards.cu"), "publish_without_barrier"))
    assert err.report["kind"] == "RAW"
    assert "thread 0 (threadIdx.x 0, warp 0, lane 0) wrote it" in str(err)


def _course_kernel_without(barrier_after: str):
    """solutions/paged_attention.cu with the __syncthreads() that follows `barrier_after`
    (on one of the next three lines) blanked out; line numbers stay the same."""
    lines = (ROOT / "solutions" / "paged_attention.cu").read_text().splitlines()
    start = [i for i, ln in enumerate(lines) if barrier_after in ln]
    assert len(start) == 1
    for i in range(start[0] + 1, start[0] + 4):
        if lines[i].strip() == "__syncthreads();":
            lines[i] = ""
            return "\n".join(lines) + "\n"
    raise AssertionError(f"no __syncthreads() after {barrier_after!r}")


def _attention_launch(code, rng, check, schedule="round_robin", workers=None):
    from pagedlab.reference import make_paged_batch

    batch = make_paged_batch([37, 70], num_heads=4, num_kv_heads=2, head_size=64, block_size=16, seed=7)
    q, k, v, tables, lens = batch.numpy()
    out = np.full_like(q, np.nan)
    kern = RawKernel(code, "paged_attention_v1", backend="cpu", filename="paged_attention.cu")
    args = (out, q, k, v, tables, lens, np.float32(1 / np.sqrt(q.shape[-1])), np.int32(k.shape[2]),
            np.int32(q.shape[-1]), np.int32(k.shape[1]), np.int32(tables.shape[1]))
    kern((q.shape[1], q.shape[0]), (128,), args, shared_mem=int(lens.max()) * 4, check=check,
         schedule=schedule, workers=workers)
    return out, batch


@pytest.mark.parametrize("removed, write, read, kind", [
    # the barrier between publishing the warps' maxima and reading them (the softmax reduction):
    # the read was meant to see the write
    ("partial[warp] = row_max", "partial[warp] = row_max", "partial[lane] : LOWEST_FLOAT", "RAW"),
    # the barrier that protects partial[] before it is reused for the sums: the write of a sum
    # may land before another warp has read its maximum
    ("partial[] is reused for the sum", "partial[warp] = row_sum", "partial[lane] : LOWEST_FLOAT", "WAR"),
])
def test_course_kernel_with_a_barrier_removed(rng, removed, write, read, kind):
    code = _course_kernel_without(removed)
    errors = reports(lambda s: _attention_launch(code, rng, "all", schedule=s))
    err = assert_one_report(errors, RaceError, [line_of(code, write), line_of(code, read)])
    assert "__shared__ `partial`" in str(err) and err.report["kind"] == kind
    assert err.lines == tuple(sorted(err.lines))  # the two accesses in source order


# ---- no false positives -------------------------------------------------------------------------


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_course_kernel_passes_every_check_and_gives_the_same_answer(rng, schedule):
    code = (ROOT / "solutions" / "paged_attention.cu").read_text()
    checked, batch = _attention_launch(code, rng, "race,memcheck,init", schedule=schedule)
    plain, _ = _attention_launch(code, rng, None, schedule=schedule)
    np.testing.assert_array_equal(checked, plain)  # instrumentation changes no arithmetic
    want = batch.expected(None).numpy()
    assert np.abs(checked - want).max() <= 2e-5 * np.abs(want).max()


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_reductions_scans_and_products_pass(clean, rng, schedule):
    x = f32(rng, 1000)
    out = np.full(4, np.nan, np.float32)
    clean("reduce_tree")((4,), (256,), (x, out, np.int32(1000)), check="all", schedule=schedule)
    ref = np.pad(x, (0, 24)).reshape(4, 256).astype(np.float64).sum(1)
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-4)

    x = f32(rng, 3 * 64)
    out = np.full(3, np.nan, np.float32)
    clean("reduce_warp_synced")((3,), (64,), (x, out), check="all", schedule=schedule)
    np.testing.assert_allclose(out, x.reshape(3, 64).astype(np.float64).sum(1), rtol=0, atol=1e-4)

    x = f32(rng, 2 * 128)
    y = np.full_like(x, np.nan)
    clean("scan_blelloch")((2,), (64,), (x, y), shared_mem=128 * 4, check="all", schedule=schedule)
    parts = x.reshape(2, 128).astype(np.float64)
    ref = np.cumsum(parts, 1) - parts  # exclusive
    np.testing.assert_allclose(y.reshape(2, 128), ref, rtol=0, atol=1e-4)

    n = 32
    a, b, c = f32(rng, n, n), f32(rng, n, n), np.full((n, n), np.nan, np.float32)
    clean("matmul_tiled")((2, 2), (16, 16), (a, b, c, np.int32(n)), check="all", schedule=schedule)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=0, atol=1e-4)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_transposes_histograms_and_byte_flags_pass(clean, rng, schedule):
    n = 64
    a = f32(rng, n, n)
    for name in ("transpose_naive", "transpose_tiled", "transpose_padded"):
        out = np.full_like(a, np.nan)
        clean(name)((2, 2), (32, 8), (a, out, np.int32(n)), check="all", schedule=schedule)
        np.testing.assert_array_equal(out, a.T)
    values = rng.integers(0, 16, 3000).astype(np.int32)
    counts = np.zeros(16, np.uint32)
    clean("histogram_atomics")((3,), (128,), (values, np.int32(3000), counts), check="all",
                               schedule=schedule)
    np.testing.assert_array_equal(counts, np.bincount(values, minlength=16))
    x = rng.integers(-5, 5, 128).astype(np.int32)
    out = np.zeros(1, np.int32)
    clean("byte_flags")((1,), (128,), (x, out), check="all", schedule=schedule)
    assert out[0] == (x > 0).sum()


def test_known_answer_kernels_pass(known, rng):
    """Every kernel of tests/cuda_kernels/known_answers.cu except read_unwritten (which reads
    unwritten shared memory on purpose: see test_reading_never_written_shared_memory)."""
    rows, cols = 50, 70
    a, b = f32(rng, rows, cols), f32(rng, rows, cols)
    c = np.full_like(a, np.nan)
    known("matrix_add")((5, 4), (16, 16), (a, b, c, np.int32(rows), np.int32(cols)), check="all")
    np.testing.assert_array_equal(c, a + b)
    out = np.full((cols, rows), np.nan, np.float32)
    known("transpose")((3, 2), (32, 8), (a, out, np.int32(rows), np.int32(cols)), check="all")
    np.testing.assert_array_equal(out, a.T)
    x = f32(rng, 5000)
    total = np.zeros(1, np.float32)
    known("block_sum")((4,), (256,), (x, total, np.int32(5000)), check="all")
    assert abs(total[0] - x.astype(np.float64).sum()) <= 1e-5 * np.abs(x).sum()
    values = rng.integers(0, 37, 2000).astype(np.int32)
    counts = np.zeros(37, np.uint32)
    known("histogram")((6,), (128,), (values, np.int32(2000), counts, np.int32(37)), shared_mem=37 * 4,
                       check="all")
    np.testing.assert_array_equal(counts, np.bincount(values, minlength=37))
    x = f32(rng, 1000)
    out, positive = np.full(1000, np.nan, np.float32), np.zeros(1, np.int32)
    known("block_scan")((4,), (256,), (x, out, np.int32(1000), positive), shared_mem=2 * 256 * 4,
                        check="all")
    assert positive[0] == (x > 0).sum()
    xi = rng.integers(0, 100, 64).astype(np.int32)
    known("warp_ops")((1,), (64,), (xi, np.zeros(256, np.int32)), check="all")
    known("votes")((2,), (48,), (f32(rng, 96), np.zeros(8, np.int32)), check="all")
    known("say_hello")((1,), (4,), (np.int32(3),), check="all")


# ---- out of bounds -------------------------------------------------------------------------------


@pytest.mark.parametrize("kernel, offset, where", [
    ("read_shifted", 1, "0 bytes past the end of argument `x`"),
    ("read_shifted", 1 << 22, "past the end of argument"),
    ("write_shifted", 1, "0 bytes past the end of argument `y`"),
    ("write_shifted", -(1 << 22), "16777216 bytes before the start of argument `y`"),
])
def test_out_of_bounds_global_access(hazards, kernel, offset, where):
    n = 100
    x, y = np.arange(n, dtype=np.float32), np.zeros(n, np.float32)
    errors = reports(lambda s: hazards(kernel)((4,), (32,), (x, y, np.int32(n), np.int32(offset)),
                                               check="memcheck", schedule=s))
    err = assert_one_report(errors, OutOfBoundsError, marked(_source("sanitizer_hazards.cu"), kernel))
    msg = str(err)
    if abs(offset) > n:
        # 16 MB off: the report names the nearest argument, the one the kernel indexes unless the
        # other array happens to lie nearer that address (where numpy put them varies by run).
        found = re.search(r"(\d+) bytes (before the start|past the end) of argument `(\w+)`.*"
                          r"the address is element (-?\d+)\)", msg)
        assert found, msg
        dist, side, name, element = int(found.group(1)), found.group(2), found.group(3), int(found.group(4))
        assert dist <= 4 << 22 and element == (-dist // 4 if side == "before the start" else n + dist // 4), msg
        if name == ("x" if kernel == "read_shifted" else "y"):
            assert where in msg
    else:
        assert where in msg
    assert ("a read of 4 bytes" if kernel == "read_shifted" else "a write of 4 bytes") in msg
    if offset == 1:  # the last thread with i < n: i = 99 is block 3, thread 3
        assert err.block == (3, 0, 0) and err.threads == (3,)
        assert "element 100" in msg
    else:
        assert err.block == (0, 0, 0) and err.threads == (0,)


def test_in_bounds_shifts_pass(hazards):
    n = 100
    x, y = np.arange(n, dtype=np.float32), np.zeros(n, np.float32)
    hazards("read_shifted")((4,), (32,), (x, y, np.int32(n - 1), np.int32(1)), check="memcheck")
    np.testing.assert_array_equal(y[:n - 1], x[1:])


def test_memcheck_bounds_of_a_view_are_its_whole_buffer(hazards):
    """A view's kernel may read before the view's start, inside its buffer (legal on a GPU);
    one element before the buffer is out of bounds, and the report says so."""
    n = 100
    buf = np.arange(n + 10, dtype=np.float32)
    x, y = buf[5:n + 5], np.full(n, np.nan, np.float32)
    hazards("read_shifted")((4,), (32,), (x, y, np.int32(n), np.int32(-5)), check="memcheck")
    np.testing.assert_array_equal(y, buf[:n])
    with pytest.raises(OutOfBoundsError) as info:
        hazards("read_shifted")((4,), (32,), (x, y, np.int32(n), np.int32(-6)), check="memcheck")
    assert ("4 bytes before the start of the buffer under argument `x`" in str(info.value)
            and "a view 20 bytes into a 440-byte buffer" in str(info.value)), str(info.value)


def test_raw_module_template_kernel_is_checked():
    """RawModule(check=) reaches the kernels get_function returns, template instantiations
    included (the instrumented build exports the module's name_expressions)."""
    src = r"""
template <typename T> __global__ void add_into(const T* a, T* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n) b[i] = a[i] + b[i];  // <= : one element too far
}"""
    a, b = np.ones(64, np.float32), np.ones(64, np.float32)
    module = cuda.RawModule(code=src, name_expressions=["add_into<float>"], backend="cpu",
                            check="memcheck")
    with pytest.raises(OutOfBoundsError, match="0 bytes past the end of argument `a`"):
        module.get_function("add_into<float>")((1,), (128,), (a, b, np.int32(64)))
    plain = cuda.RawModule(code=src, name_expressions=["add_into<float>"], backend="cpu")
    b[:] = 1
    plain.get_function("add_into<float>")((1,), (128,), (a, b, np.int32(63)), check="all")
    np.testing.assert_array_equal(b, 2)


def test_read_past_dynamic_shared_memory(hazards):
    out = np.zeros(1, np.float32)
    errors = reports(lambda s: hazards("dynamic_shared_read")((1,), (32,), (out, np.int32(32)),
                                                              shared_mem=128, check="memcheck", schedule=s))
    err = assert_one_report(errors, OutOfBoundsError, marked(_source("sanitizer_hazards.cu"), "dynamic_shared_read"))
    assert "byte offset 128 of `extern __shared__ dyn[]`" in str(err) and "shared_mem=128" in str(err)
    hazards("dynamic_shared_read")((1,), (32,), (out, np.int32(31)), shared_mem=128, check="all")
    assert out[0] == 1.0


# ---- uninitialised reads -------------------------------------------------------------------------


def test_reading_never_written_shared_memory(known):
    out = np.zeros(64, np.float32)
    errors = reports(lambda s: known("read_unwritten")((1,), (64,), (out,), check="init", schedule=s))
    line = line_of(_source("known_answers.cu"), "out[threadIdx.x] = never_written[threadIdx.x];")
    err = assert_one_report(errors, UninitializedReadError, [line])
    assert "__shared__ `never_written`" in str(err) and "thread 0 " in str(err)


def test_half_filled_buffer_names_the_first_unwritten_element(hazards):
    errors = reports(lambda s: hazards("read_half_filled")((1,), (64,), (np.zeros(64, np.float32),),
                                                           check="init", schedule=s))
    err = assert_one_report(errors, UninitializedReadError, marked(_source("sanitizer_hazards.cu"), "read_half_filled"))
    assert err.threads == (32,) and "element 32 of __shared__ `buf`" in str(err) and (err.array, err.index) == ("buf", 32)


def test_atomics_on_uncleared_counters(hazards, rng):
    values = rng.integers(0, 16, 500).astype(np.int32)
    errors = reports(lambda s: hazards("histogram_without_clearing")(
        (1,), (64,), (values, np.int32(500), np.zeros(16, np.uint32)), check="init", schedule=s))
    err = assert_one_report(errors, UninitializedReadError,
                            marked(_source("sanitizer_hazards.cu"), "histogram_without_clearing"))
    assert "atomic operation" in str(err)


# ---- switching it on -------------------------------------------------------------------------------


def test_check_switch_kernel_default_launch_override_and_scope(hazards, monkeypatch):
    x, out = np.ones(128, np.float32), np.zeros(128, np.float32)
    monkeypatch.delenv("PAGEDLAB_CUDA_CHECK", raising=False)
    hazards("publish_without_barrier")((1,), (128,), (x, out))  # off by default: no report
    on = hazards("publish_without_barrier", check="race,memcheck,init")
    with pytest.raises(RaceError):
        on((1,), (128,), (x, out))
    on((1,), (128,), (x, out), check=False)  # a launch's own check= wins
    with cuda.checking("race"):
        with pytest.raises(RaceError):
            hazards("publish_without_barrier")((1,), (128,), (x, out))
        hazards("publish_without_barrier")((1,), (128,), (x, out), check="memcheck")
    hazards("publish_without_barrier")((1,), (128,), (x, out))
    monkeypatch.setenv("PAGEDLAB_CUDA_CHECK", "all")
    with pytest.raises(RaceError):
        hazards("publish_without_barrier")((1,), (128,), (x, out))


@pytest.mark.parametrize("bad, error", [("races", ValueError), ("race,bounds", ValueError), (3, TypeError),
                                        (["race", 1], TypeError)])
def test_bad_check_values_are_refused_with_the_allowed_names(hazards, bad, error):
    with pytest.raises(error, match="race"):
        hazards("publish_without_barrier", check=bad)


def test_check_names_and_aliases():
    assert san.parse_checks(True) == san.parse_checks("all") == {"race", "memcheck", "init"}
    assert san.parse_checks("racecheck, initcheck") == {"race", "init"}
    assert san.parse_checks(None) == san.parse_checks("") == san.parse_checks(False) == frozenset()


# ---- memory-access profile -------------------------------------------------------------------------


def _profile_line(code, marker):
    return line_of(code, f"// {marker}")


def test_profile_coalesced_copy_is_4_sectors_per_request_strided_is_32(clean, rng):
    code = _source("sanitizer_clean.cu")
    n = 4096
    x, y = f32(rng, n), np.zeros(n, np.float32)
    prof = clean("copy_coalesced").profile((n // 256,), (256,), (x, y, np.int32(n)))
    row = prof.line(_profile_line(code, "coalesced"), "global", "load")
    assert row.requests == n // 32 and row.sectors_per_request == 4.0 and row.efficiency == 1.0
    assert prof.line(_profile_line(code, "coalesced"), "global", "store").sectors_per_request == 4.0
    np.testing.assert_array_equal(x, y)
    prof = clean("copy_strided").profile((4,), (32,), (x, y, np.int32(n), np.int32(32)))
    row = prof.line(_profile_line(code, "strided"), "global", "load")
    assert row.requests == 4 and row.sectors_per_request == 32.0 and row.efficiency == 0.125
    assert "sectors/req" in str(prof) and "out[i * stride] = in[i * stride]" in str(prof)


def test_profile_transposes_naive_tiled_and_padded(clean, rng):
    code = _source("sanitizer_clean.cu")
    n = 64
    a = f32(rng, n, n)
    out = np.zeros_like(a)
    prof = clean("transpose_naive").profile((2, 2), (32, 8), (a, out, np.int32(n)))
    line = _profile_line(code, "naive store")
    assert prof.line(line, "global", "load").sectors_per_request == 4.0
    assert prof.line(line, "global", "store").sectors_per_request == 32.0
    for name, ways in (("tiled", 32), ("padded", 1)):
        prof = clean(f"transpose_{name}").profile((2, 2), (32, 8), (a, out, np.int32(n)))
        np.testing.assert_array_equal(out, a.T)
        load, store = _profile_line(code, f"{name} load"), _profile_line(code, f"{name} store")
        assert prof.line(load, "global", "load").sectors_per_request == 4.0
        assert prof.line(load, "shared", "store").ways_per_request == 1.0  # a row of the tile
        assert prof.line(store, "shared", "load").ways_per_request == ways  # a column of the tile
        assert prof.line(store, "shared", "load").max_ways == ways
        assert prof.line(store, "global", "store").sectors_per_request == 4.0


def test_profile_of_the_course_kernel_shows_uncoalesced_key_reads():
    """One thread per token reads its key across head_size: 32 lanes, 32 different rows."""
    code = (ROOT / "solutions" / "paged_attention.cu").read_text()
    from pagedlab.reference import make_paged_batch

    batch = make_paged_batch([64, 64], num_heads=2, num_kv_heads=2, head_size=64, block_size=16, seed=3)
    q, k, v, tables, lens = batch.numpy()
    out = np.full_like(q, np.nan)
    kern = RawKernel(code, "paged_attention_v1", backend="cpu", filename="paged_attention.cu")
    args = (out, q, k, v, tables, lens, np.float32(0.125), np.int32(2), np.int32(64), np.int32(16),
            np.int32(tables.shape[1]))
    prof = kern.profile((2, 2), (128,), args, shared_mem=64 * 4)
    key = prof.line(line_of(code, "dot += q_shared[d] * k[d];"), "global", "load")
    value = prof.line(line_of(code, "acc += logits[first + i] * v[i * token_stride];"), "global", "load")
    assert key.sectors_per_request == 32.0 and value.sectors_per_request < 4.5


def test_notebook_08_sanitizer_cells_run_and_show_their_figures(capsys):
    """The sanitizer and profile cells of notebook 08 (its py:percent source) run as a script;
    the cell that profiles the student's own kernel is left to the notebook's tests."""
    source = (ROOT / "notebooks" / "08_cuda_kernel.py").read_text(encoding="utf-8")
    # The sanitizer section comes before Task 10's graded cell, the profile section after it.
    section = (source[source.index("## Debugging with the sanitizer"):source.index("## ✏️ Task 10")]
               + source[source.index("## The memory-access profile"):source.index("## The GPU path")])
    cells = [c for c in section.split("\n# %%")[1:]
             if not c.startswith(" [markdown]") and "make_paged_batch" not in c and "require(" not in c]
    assert len(cells) == 3  # softmax race, double_it memcheck, the two score kernels
    exec(compile("\n".join(cells), "08_cuda_kernel.py", "exec"), {"__name__": "__main__"})
    shown = capsys.readouterr().out
    assert shown.count("RaceError at lines (11, 14)") == len(SCHEDULES)
    assert "0 bytes past the end of argument `x`" in shown
    assert "thread_per_token  key loads: 32.0 sectors per request" in shown
    assert "warp_per_token    key loads:  4.0 sectors per request" in shown


def test_profile_of_a_long_grid_stride_loop_keeps_lanes_together(known):
    """8192 iterations per thread without a warp operation: still one request per iteration
    and warp, each 4 sectors (the profile runs lanes in lockstep and folds old requests)."""
    n = 1 << 19
    x, total = np.ones(n, np.float32), np.zeros(1, np.float32)
    prof = known("block_sum").profile((1,), (64,), (x, total, np.int32(n)), workers=1)
    line = line_of(_source("known_answers.cu"), "i += gridDim.x * blockDim.x) v += x[i];")
    row = prof.line(line, "global", "load")
    assert row.requests == n // 32 and row.sectors_per_request == 4.0
    assert total[0] == n


@pytest.mark.parametrize("kernel, args, lines", [
    ("sum_missing_barrier", lambda: (np.ones(1000, np.float32), np.zeros(1, np.float32), np.int32(1000)),
     ("if (lane == 0) warp_sums[warp] = v;", "v = lane < blockDim.x / 32 ? warp_sums[lane] : 0.f;")),
    ("broadcast_missing_barrier", lambda: (np.ones(128, np.float32), np.zeros(128, np.float32)),
     ("if (threadIdx.x == 0) value = x[0] * 2.f;", "out[threadIdx.x] = value;")),
])
def test_the_executors_planted_missing_barriers_are_races(kernel, args, lines):
    """The missing barriers of planted_bugs.cu, which plain launches catch only as wrong answers
    under some schedules, are RaceErrors under every schedule."""
    code = _source("planted_bugs.cu")
    k = RawKernel(code, kernel, backend="cpu", filename="planted_bugs.cu")
    errors = reports(lambda s: k((1,), (128,), args(), check="race", schedule=s))
    assert_one_report(errors, RaceError, [line_of(code, text) for text in lines])
