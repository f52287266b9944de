"""The CPU executor runs CUDA C unchanged, gets known answers right and catches planted bugs.

Every kernel file is compiled once per session (module-scoped fixtures); launches fork a child
each, a few milliseconds apiece.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from pagedlab import cuda
from pagedlab.cuda import (
    SCHEDULES,
    BarrierError,
    KernelCrash,
    KernelTimeout,
    RawKernel,
    SharedMemoryError,
    WarpSyncError,
)

KERNELS = Path(__file__).parent / "cuda_kernels"


def _kernels(filename):
    code = (KERNELS / filename).read_text()

    def get(name):
        return RawKernel(code, name, backend="cpu", filename=filename)

    get(cuda.signature.kernel_names(code)[0]).compile()  # one build serves every kernel in it
    return get


@pytest.fixture(scope="module")
def known():
    return _kernels("known_answers.cu")


@pytest.fixture(scope="module")
def bugs():
    return _kernels("planted_bugs.cu")


@pytest.fixture
def rng():
    return np.random.default_rng(20240611)


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# ---- known answers ------------------------------------------------------------------------


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_matrix_add_over_a_2d_grid(known, rng, schedule):
    rows, cols = 50, 70  # not multiples of the 16x16 block: edge blocks are partly idle
    a, b = f32(rng, rows, cols), f32(rng, rows, cols)
    c = np.full_like(a, np.nan)
    known("matrix_add")((5, 4), (16, 16), (a, b, c, np.int32(rows), np.int32(cols)),
                        schedule=schedule)
    np.testing.assert_array_equal(c, a + b)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_tiled_transpose_through_shared_memory(known, rng, schedule):
    rows, cols = 45, 70
    a = f32(rng, rows, cols)
    out = np.full((cols, rows), np.nan, np.float32)
    known("transpose")((3, 2), (32, 8), (a, out, np.int32(rows), np.int32(cols)), schedule=schedule)
    np.testing.assert_array_equal(out, a.T)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_block_sum_with_shuffles_and_atomic_add(known, rng, schedule):
    n = 10_000
    x = f32(rng, n)
    total = np.zeros(1, np.float32)
    known("block_sum")((4,), (256,), (x, total, np.int32(n)), schedule=schedule)
    ref = x.astype(np.float64).sum()
    assert abs(total[0] - ref) <= 1e-5 * np.abs(x).sum()  # float32 summation, any order


def test_histogram_with_shared_and_global_atomics(known, rng):
    n, bins = 5000, 37
    values = rng.integers(0, bins, n).astype(np.int32)
    counts = np.zeros(bins, np.uint32)
    # Several blocks on several workers add into the same global counters at once.
    known("histogram")((6,), (128,), (values, np.int32(n), counts, np.int32(bins)),
                       shared_mem=bins * 4, workers=2)
    np.testing.assert_array_equal(counts, np.bincount(values, minlength=bins))


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_scan_in_dynamic_shared_memory(known, rng, schedule):
    n, threads = 1000, 256
    x = f32(rng, n)
    out = np.full(n, np.nan, np.float32)
    positive = np.zeros(1, np.int32)
    known("block_scan")((4,), (threads,), (x, out, np.int32(n), positive),
                        shared_mem=2 * threads * 4, schedule=schedule)
    ref = np.concatenate([np.cumsum(x[i:i + threads].astype(np.float64))
                          for i in range(0, n, threads)])
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-4)
    assert positive[0] == (x > 0).sum()


def test_warp_shuffles_follow_cuda_semantics(known, rng):
    threads = 64
    x = rng.integers(0, 100, threads).astype(np.int32)
    out = np.full(threads * 4, -7, np.int32)
    known("warp_ops")((1,), (threads,), (x, out))
    got = out.reshape(threads, 4)
    for t in range(threads):
        lane, base = t % 32, t - t % 32
        assert got[t, 0] == x[base + 3]                                   # __shfl_sync
        assert got[t, 1] == (x[t - 2] if lane >= 2 else x[t])               # __shfl_up_sync
        seg = t - t % 16                                                    # width 16
        assert got[t, 2] == (x[t + 5] if t - seg + 5 < 16 else x[t])        # __shfl_down_sync
        warp = x[base:base + 32]
        assert got[t, 3] == 2 * int((warp > 90).any()) + int((warp >= 0).all())


@pytest.mark.skipif(sys.platform != "linux",
                    reason="static __shared__ poisoning needs dl_iterate_phdr's TLS data (Linux); "
                           "documented limit on macOS")
def test_unwritten_shared_memory_reads_as_nan(known):
    out = np.zeros(64, np.float32)
    known("read_unwritten")((1,), (64,), (out,))
    assert np.isnan(out).all()


def test_in_place_kernel_sees_one_memory_when_an_array_is_passed_twice(known, rng):
    # transpose of a square matrix into itself is wrong on purpose; what matters is that
    # the input the kernel reads is the same memory it writes: matrix_add(a, a, a) doubles a.
    a = f32(rng, 20, 30)
    expected = a * 2
    known("matrix_add")((2, 2), (16, 16), (a, a, a, np.int32(20), np.int32(30)))
    np.testing.assert_array_equal(a, expected)


def test_in_process_mode_gives_the_same_answers_and_reports(known, bugs, rng, monkeypatch):
    monkeypatch.setenv("PAGEDLAB_CUDA_ISOLATE", "0")
    x = f32(rng, 3000)
    total = np.zeros(1, np.float32)
    known("block_sum")((3,), (128,), (x, total, np.int32(3000)))
    assert abs(total[0] - x.astype(np.float64).sum()) <= 1e-5 * np.abs(x).sum()
    with pytest.raises(BarrierError, match="threads 100-127 returned"):
        bugs("early_return")((2,), (128,), (x[:128], np.zeros(128, np.float32), np.int32(100)))
    out = np.full(128, np.nan, np.float32)  # the runtime is usable again after an error
    bugs("early_return")((1,), (128,), (x[:128], out, np.int32(128)))
    np.testing.assert_array_equal(out, x[:128][::-1])


# ---- planted bugs ---------------------------------------------------------------------------


def test_missing_barrier_before_reading_a_reduction_buffer_is_caught(bugs, rng):
    x = f32(rng, 128)
    ref = x.astype(np.float64).sum()
    wrong = []
    for schedule in SCHEDULES:
        total = np.full(1, np.nan, np.float32)
        bugs("sum_missing_barrier")((1,), (128,), (x, total, np.int32(128)), schedule=schedule)
        if not abs(total[0] - ref) < 1e-4:  # NaN (poisoned slot) counts as wrong
            wrong.append(schedule)
    assert wrong, "every schedule hid the missing __syncthreads()"


def test_a_missing_barrier_hides_under_some_schedules_and_shows_under_others(bugs, rng):
    # Thread 0 publishes, the others read without a barrier: ascending order hides it.
    x = f32(rng, 1)
    results = {}
    for schedule in SCHEDULES:
        out = np.full(128, np.nan, np.float32)
        bugs("broadcast_missing_barrier")((1,), (128,), (x, out), schedule=schedule)
        results[schedule] = bool(np.isnan(out).any())
    assert results["round_robin"] is False and results["reversed"] is True


def test_barrier_in_a_divergent_branch_names_both_lines(bugs):
    with pytest.raises(BarrierError) as err:
        bugs("divergent_barrier")((1,), (128,), (np.zeros(128, np.float32),))
    msg = str(err.value)
    assert "threads 0-63" in msg and "planted_bugs.cu:30" in msg
    assert "threads 64-127" in msg and "planted_bugs.cu:33" in msg


def test_early_return_before_a_barrier_is_a_deadlock_report(bugs, rng):
    x = f32(rng, 128)
    with pytest.raises(BarrierError) as err:
        bugs("early_return")((1,), (128,), (x, np.zeros(128, np.float32), np.int32(100)))
    msg = str(err.value)
    assert "threads 0-99 wait at __syncthreads() at planted_bugs.cu:43" in msg
    assert "threads 100-127 returned" in msg


def test_early_return_is_fine_when_every_thread_reaches_the_barrier(bugs, rng):
    x = f32(rng, 128)
    out = np.full(128, np.nan, np.float32)
    bugs("early_return")((1,), (128,), (x, out, np.int32(128)))
    np.testing.assert_array_equal(out, x[::-1])


def test_write_past_dynamic_shared_memory(bugs):
    with pytest.raises(SharedMemoryError) as err:
        bugs("dynamic_shared_overrun")((1,), (128,), (np.zeros(128, np.float32),), shared_mem=512)
    msg = str(err.value)
    assert "shared_mem=512" in msg and "offset 512" in msg and "element 128" in msg
    assert "thread 0 of block (0, 0, 0)" in msg and "planted_bugs.cu:52" in msg


def test_enough_dynamic_shared_memory_makes_the_same_kernel_pass(bugs):
    out = np.full(128, np.nan, np.float32)
    bugs("dynamic_shared_overrun")((1,), (128,), (out,), shared_mem=1024)
    np.testing.assert_array_equal(out, np.ones(128, np.float32))


def test_null_pointer_write_is_a_crash_report_and_python_lives_on(bugs, known, rng):
    with pytest.raises(KernelCrash) as err:
        bugs("null_write")((1,), (32,), (np.zeros(32, np.float32), np.int64(0)))
    msg = str(err.value)
    assert "null pointer" in msg and "SIGSEGV" in msg and "planted_bugs.cu:59" in msg
    a = f32(rng, 4, 4)  # the interpreter (a notebook kernel) still works
    c = np.full_like(a, np.nan)
    known("matrix_add")((1,), (16, 16), (a, a, c, np.int32(4), np.int32(4)))
    np.testing.assert_array_equal(c, 2 * a)


def test_write_just_past_an_output_array_faults(bugs):
    # 16 floats = 64 bytes: the array ends at the guard page that follows it.
    with pytest.raises(KernelCrash, match="SIGSEGV"):
        bugs("write_past_end")((1,), (32,), (np.zeros(16, np.float32), np.int32(16)))


def test_stack_overflow_is_reported(bugs):
    with pytest.raises(KernelCrash, match="stack overflow"):
        bugs("huge_local_array")((1,), (4,), (np.zeros(4, np.float32),))


def test_infinite_loop_hits_the_watchdog(bugs):
    flag = np.zeros(1, np.int32)
    with pytest.raises(KernelTimeout) as err:
        bugs("spin_forever")((2,), (32,), (flag, np.zeros(32, np.float32)), timeout=1.0)
    assert "1 s" in str(err.value) and "block (" in str(err.value)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_shuffle_with_lanes_missing_from_the_mask(bugs, schedule):
    with pytest.raises(WarpSyncError) as err:
        bugs("half_warp_shuffle")((1,), (32,), (np.zeros(32, np.float32),), schedule=schedule)
    msg = str(err.value)
    assert "__shfl_xor_sync" in msg and "0xffffffff" in msg and "planted_bugs.cu:73" in msg
    assert "returned from the kernel" in msg  # the upper half left without shuffling


def test_mismatched_warp_operations(bugs):
    with pytest.raises(WarpSyncError, match="mismatched") as err:
        bugs("mismatched_warp_ops")((1,), (32,), (np.zeros(32, np.float32),))
    assert "__ballot_sync" in str(err.value) and "__shfl_xor_sync" in str(err.value)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_block_votes_and_a_partial_last_warp(known, rng, schedule):
    threads, blocks = 48, 3
    x = f32(rng, blocks * threads)
    out = np.full(blocks * 4, -7, np.int32)
    known("votes")((blocks,), (threads,), (x, out), schedule=schedule)
    for b in range(blocks):
        v = x[b * threads:(b + 1) * threads]
        assert out[b * 4 + 0] == (v > 0).sum()
        assert out[b * 4 + 1] == int((np.abs(v) < 10).all())
        assert out[b * 4 + 2] == int((v > 1).any())
        lanes = v[32:] > 0  # warp 1 has 16 lanes
        assert np.uint32(out[b * 4 + 3]) == sum(1 << i for i, p in enumerate(lanes) if p)


def test_kernel_printf_reaches_python_stdout(known, capsys):
    known("say_hello")((2,), (32,), (np.int32(7),))
    printed = capsys.readouterr().out  # sys.stdout: what a notebook cell shows
    assert "hello 7 from block 0" in printed and "hello 7 from block 1" in printed


def test_portable_ucontext_fibers_give_the_same_answers(rng, monkeypatch):
    # The fallback for CPUs without the hand-written switch: barriers, shuffles, dynamic shared.
    monkeypatch.setenv("PAGEDLAB_CUDA_FIBERS", "ucontext")
    code = (KERNELS / "known_answers.cu").read_text()
    n, threads = 700, 128
    x = f32(rng, n)
    out = np.full(n, np.nan, np.float32)
    positive = np.zeros(1, np.int32)
    kern = RawKernel(code, "block_scan", backend="cpu", filename="known_answers.cu")
    assert "PL_FIBER_UCONTEXT" in " ".join(cuda.compiler.fiber_flags())
    kern((6,), (threads,), (x, out, np.int32(n), positive), shared_mem=2 * threads * 4,
         schedule="random:3")
    ref = np.concatenate([np.cumsum(x[i:i + threads].astype(np.float64))
                          for i in range(0, n, threads)])
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-4)
    ucontext_runtime = kern._build.runtime
    monkeypatch.delenv("PAGEDLAB_CUDA_FIBERS")
    assert cuda.compiler.runtime_library() != ucontext_runtime  # really the other switch


def test_device_side_assert_names_condition_line_and_thread(bugs):
    x = np.arange(32, dtype=np.int32)
    count = np.zeros(1, np.uint32)
    with pytest.raises(KernelCrash) as err:
        bugs("failing_assert")((1,), (32,), (x, count))
    msg = str(err.value)
    assert "x[threadIdx.x] != 5" in msg and "planted_bugs.cu:100" in msg and "thread 5" in msg
    assert count[0] == 5  # what ran before the assert stays written, as on a GPU
    x[5], count[0] = 6, 0
    bugs("failing_assert")((1,), (32,), (x, count))
    assert count[0] == 32


def test_builtin_atomics_fallback_for_libraries_without_atomic_ref(rng):
    # Older libc++ (macOS) has no std::atomic_ref; -DPL_NO_ATOMIC_REF builds that path here.
    code = (KERNELS / "known_answers.cu").read_text()
    kern = RawKernel(code, "histogram", options=("-DPL_NO_ATOMIC_REF",), backend="cpu",
                     filename="known_answers.cu")
    n, bins = 4000, 19
    values = rng.integers(0, bins, n).astype(np.int32)
    counts = np.zeros(bins, np.uint32)
    kern((5,), (128,), (values, np.int32(n), counts, np.int32(bins)), shared_mem=bins * 4,
         workers=2)
    np.testing.assert_array_equal(counts, np.bincount(values, minlength=bins))


@pytest.mark.parametrize("schedule", ["round_robin", "reversed"])
def test_mismatched_masks(bugs, schedule):
    # The lower half completes its own 16-lane shuffle and returns; the upper half's full mask
    # still names it. Reported when the first named lane returns (or when lanes disagree).
    with pytest.raises(WarpSyncError) as err:
        bugs("mismatched_masks")((1,), (32,), (np.zeros(32, np.float32),), schedule=schedule)
    msg = str(err.value)
    assert "__shfl_down_sync(mask 0xffffffff) at planted_bugs.cu:108" in msg
    assert "lanes 16-31" in msg


@pytest.mark.parametrize("filename", ["known_answers.cu", "planted_bugs.cu"])
def test_test_kernels_also_compile_for_the_gpu(filename):
    # The executor's promise is "unchanged source": every test kernel is valid CUDA for NVRTC.
    ptx = cuda.compile_ptx((KERNELS / filename).read_text(), name=filename)
    assert ".visible .entry" in ptx


@pytest.mark.parametrize("index, where", [
    (128, "thread 0 of block (0, 0, 0) wrote byte offset 512"),    # right past the end
    (1000, "detected at the barrier at planted_bugs.cu:117"),      # inside the guard window
    (9000, "detected when the block finished"),                    # far beyond it
])
def test_writes_past_dynamic_shared_memory_near_and_far(bugs, index, where):
    with pytest.raises(SharedMemoryError) as err:
        bugs("dynamic_shared_far_write")((1,), (128,), (np.zeros(128, np.float32), np.int32(index)),
                                         shared_mem=512)
    assert where in str(err.value) and f"element {index} " in str(err.value)
