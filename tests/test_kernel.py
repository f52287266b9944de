"""Part C: the CUDA paged-attention kernel, its host API and its graded checks.

The kernel text in solutions/ runs on pagedlab's CPU executor and is compared with dense
attention in float64 (max relative error <= 2e-5, float32 kernel). Outputs start as NaN and
unused cache slots are NaN, so unwritten outputs and stray reads cannot pass.
"""

import numpy as np
import pytest
import torch

from pagedlab import cuda, kernels
from pagedlab import graded as checks
from pagedlab.drivers.paged_attention_cu import check_schedules
from pagedlab.grader import registry
from pagedlab.grader.trusted.expectations import expected_stream
from pagedlab.kernels import decode_on_executor, paged_attention_decode
from pagedlab.loader import ROOT, kernel_source
from pagedlab.reference import make_paged_batch, max_relative_error

TOL = 2e-5


def run(batch, scale=None, schedule="round_robin", impl="solutions"):
    return decode_on_executor(*batch.numpy(), scale=scale, impl=impl, schedule=schedule, timeout=120)


# --- correctness sweep ------------------------------------------------------------------------


@pytest.mark.parametrize("head_size", [32, 64, 80, 96, 112, 128, 256])
@pytest.mark.parametrize("block_size", [8, 16, 32])
def test_kernel_matches_dense_attention(head_size, block_size):
    lengths = [1, block_size - 1, block_size, block_size + 1, 3 * block_size + 5]
    batch = make_paged_batch(lengths, num_heads=4, num_kv_heads=2, head_size=head_size,
                             block_size=block_size, seed=head_size * 100 + block_size)
    assert max_relative_error(run(batch), batch.expected()) <= TOL


@pytest.mark.parametrize("schedule", cuda.SCHEDULES)
@pytest.mark.parametrize("num_heads, num_kv_heads", [(8, 2), (12, 4), (16, 1), (4, 4)])
def test_kernel_gqa_under_every_schedule(schedule, num_heads, num_kv_heads):
    batch = make_paged_batch([40, 5, 129], num_heads=num_heads, num_kv_heads=num_kv_heads,
                             head_size=64, block_size=16, shared_blocks=1, seed=num_heads)
    assert max_relative_error(run(batch, schedule=schedule), batch.expected()) <= TOL


def test_kernel_long_sequence_custom_scale_and_shared_blocks():
    batch = make_paged_batch([2048, 511, 700], num_heads=4, num_kv_heads=1, head_size=128,
                             block_size=16, shared_blocks=20, seed=7)
    assert max_relative_error(run(batch, scale=0.02), batch.expected(0.02)) <= TOL
    # The scale really reaches the kernel: the default one gives another answer.
    assert max_relative_error(run(batch), batch.expected(0.02)) > 1e-2


def test_unused_table_entries_are_never_read():
    batch = make_paged_batch([20, 9], num_heads=2, head_size=32, block_size=8, extra_table_columns=3, seed=8)
    args = list(batch.numpy())
    args[3] = args[3].copy()
    args[3][args[3] < 0] = 10**6  # garbage past each sequence's blocks must not matter
    out = decode_on_executor(*args, impl="solutions")
    assert max_relative_error(out, batch.expected()) <= TOL


def test_array_types_round_trip():
    batch = make_paged_batch([3, 30], num_heads=2, head_size=32, block_size=16, seed=9)
    out_np = paged_attention_decode(*batch.numpy(), impl="solutions", backend="cpu")
    assert isinstance(out_np, np.ndarray) and out_np.dtype == np.float32
    torch_args = [torch.from_numpy(a) for a in batch.numpy()]
    out_t = paged_attention_decode(*torch_args, impl="solutions", backend="cpu")
    assert isinstance(out_t, torch.Tensor) and out_t.dtype == torch.float32
    assert np.array_equal(out_t.numpy(), out_np)
    assert max_relative_error(out_np, batch.expected()) <= TOL


@pytest.mark.skipif(cuda.cupy_available(), reason="this machine has a GPU: auto picks cupy")
def test_auto_backend_uses_the_cpu_executor_without_a_gpu():
    batch = make_paged_batch([12], num_heads=2, head_size=32, block_size=16, seed=10)
    out = paged_attention_decode(*batch.numpy(), impl="solutions")
    assert max_relative_error(out, batch.expected()) <= TOL
    with pytest.raises(RuntimeError, match="CuPy"):
        paged_attention_decode(*batch.numpy(), impl="solutions", backend="cupy")


def test_exercise_stub_compiles_and_leaves_out_unwritten():
    batch = make_paged_batch([12, 40], num_heads=2, head_size=32, block_size=16, seed=11)
    out = paged_attention_decode(*batch.numpy(), impl="exercises", backend="cpu")
    assert out.shape == batch.q.shape and kernels.unwritten(out).all()
    solved = paged_attention_decode(*batch.numpy(), impl="solutions", backend="cpu")
    assert not kernels.unwritten(solved).any()


def test_scalars_reach_the_kernel_with_explicit_c_types(monkeypatch):
    seen = {}

    def fake_kernel(backend, code):
        def launch(grid, block, args, shared_mem=0, **kw):
            seen.update(grid=grid, block=block, args=args, shared_mem=shared_mem)
        return launch

    monkeypatch.setattr(kernels, "_kernel", fake_kernel)
    batch = make_paged_batch([5, 37], num_heads=6, num_kv_heads=3, head_size=16, block_size=8, seed=12)
    decode_on_executor(*batch.numpy(), scale=0.5, impl="solutions")
    scale, num_kv_heads, head_size, block_size, max_blocks = seen["args"][6:]
    assert type(scale) is np.float32 and scale == np.float32(0.5)
    assert all(type(x) is np.int32 for x in (num_kv_heads, head_size, block_size, max_blocks))
    assert (int(num_kv_heads), int(head_size), int(block_size), int(max_blocks)) == (3, 16, 8, batch.block_tables.shape[1])
    assert seen["grid"] == (6, 2) and seen["block"] == (128,)
    assert seen["shared_mem"] == 37 * 4


# --- validation: every rule, before any launch -----------------------------------------------


def good_args():
    return list(make_paged_batch([10, 33], num_heads=4, num_kv_heads=2, head_size=32, block_size=16,
                                 seed=13).numpy())


def with_arg(i, value):
    args = good_args()
    args[i] = value(args[i]) if callable(value) else value
    return args


BAD_INPUTS = {
    "q float64": (TypeError, "q must be float32", lambda: with_arg(0, lambda a: a.astype(np.float64))),
    "k_cache float16": (TypeError, "k_cache must be float32", lambda: with_arg(1, lambda a: a.astype(np.float16))),
    "v_cache float64": (TypeError, "v_cache must be float32", lambda: with_arg(2, lambda a: a.astype(np.float64))),
    "block_tables int64": (TypeError, "block_tables must be int32", lambda: with_arg(3, lambda a: a.astype(np.int64))),
    "seq_lens int64": (TypeError, "seq_lens must be int32", lambda: with_arg(4, lambda a: a.astype(np.int64))),
    "a list": (TypeError, "numpy array or a torch CPU tensor", lambda: with_arg(4, lambda a: a.tolist())),
    "q 2-D": (ValueError, "q must be 3-D", lambda: with_arg(0, lambda a: a[0].copy())),
    "k_cache 3-D": (ValueError, "k_cache must be 4-D", lambda: with_arg(1, lambda a: a[0].copy())),
    "v_cache shape": (ValueError, "shape of k_cache", lambda: with_arg(2, lambda a: a[:-1].copy())),
    "head_size mismatch": (ValueError, "head_size differs", lambda: with_arg(0, lambda a: a[:, :, :16].copy())),
    "block_tables rows": (ValueError, "must agree", lambda: with_arg(3, lambda a: a[:1].copy())),
    "seq_lens entries": (ValueError, "must agree", lambda: with_arg(4, lambda a: a[:1].copy())),
    "q not contiguous": (ValueError, "q must be C-contiguous", lambda: with_arg(0, lambda a: np.repeat(a, 2, axis=2)[:, :, ::2])),
    "k_cache not contiguous": (ValueError, "k_cache must be C-contiguous", lambda: with_arg(1, lambda a: np.asfortranarray(a))),
    "block_tables not contiguous": (ValueError, "block_tables must be C-contiguous", lambda: with_arg(3, lambda a: np.repeat(a, 2, axis=1)[:, ::2])),
    "heads not divisible": (ValueError, "multiple of num_kv_heads", lambda: with_arg(0, lambda a: np.concatenate([a, a[:, :1]], axis=1))),
    "head_size over 256": (ValueError, "at most 256", lambda: _head_size_args(288)),
    "seq_len 0": (ValueError, r"seq_lens\[1\] = 0", lambda: with_arg(4, lambda a: np.array([10, 0], np.int32))),
    "seq_len past the table": (ValueError, r"seq_lens\[0\] = 65.*= 64", lambda: with_arg(4, lambda a: np.array([65, 33], np.int32))),
    "block id -1 in use": (ValueError, r"block_tables\[1, 2\] = -1", lambda: with_arg(3, lambda a: _set(a, (1, 2), -1))),
    "block id past the cache": (ValueError, "num_blocks", lambda: with_arg(3, lambda a: _set(a, (0, 0), 999))),
    "scale a string": (TypeError, "scale must be a real number", None),
    "scale NaN": (ValueError, "scale must be finite", None),
    "too much shared memory": (ValueError, "dynamic shared memory", lambda: _long_sequence_args()),
}


def _set(a, index, value):
    a = a.copy()
    a[index] = value
    return a


def _head_size_args(head_size):
    b = make_paged_batch([5], num_heads=1, head_size=head_size, block_size=4, seed=1)
    return list(b.numpy())


def _long_sequence_args():
    """One token more than the executor's dynamic shared memory holds, all in block 0."""
    tokens = cuda.MAX_DYNAMIC_SHARED_MEMORY // 4 + 1
    block_size = 1024
    blocks = -(-tokens // block_size)
    q = np.ones((1, 1, 1), np.float32)
    cache = np.ones((1, block_size, 1, 1), np.float32)
    return [q, cache, cache.copy(), np.zeros((1, blocks), np.int32), np.array([tokens], np.int32)]


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_refused_with_a_clear_message(case, monkeypatch):
    error, words, make = BAD_INPUTS[case]
    launched = []
    monkeypatch.setattr(kernels, "_kernel", lambda *a: launched.append(a))
    kwargs = {}
    if case == "scale a string":
        kwargs["scale"] = "0.1"
    elif case == "scale NaN":
        kwargs["scale"] = float("nan")
    args = make() if make else good_args()
    with pytest.raises(error, match=words):
        paged_attention_decode(*args, impl="solutions", backend="cpu", **kwargs)
    assert not launched, "validation must happen before the kernel is compiled or launched"


def test_bad_backend_is_refused():
    with pytest.raises(ValueError, match="backend must be one of"):
        paged_attention_decode(*good_args(), impl="solutions", backend="gpu")


def test_unused_table_padding_and_shared_memory_at_the_limit_are_accepted(monkeypatch):
    monkeypatch.setattr(kernels, "_kernel", lambda *a: (lambda *args, **kw: None))
    args = _long_sequence_args()
    args[4] = args[4] - 1  # exactly at the limit
    paged_attention_decode(*args, impl="solutions", backend="cpu")


# --- the GPU path is at least valid CUDA ------------------------------------------------------


@pytest.mark.parametrize("impl", ["solutions", "exercises"])
def test_kernel_compiles_to_ptx_with_nvrtc(impl):
    ptx = cuda.compile_ptx(kernel_source("paged_attention.cu", impl), name="paged_attention.cu")
    ptx = ptx.decode() if isinstance(ptx, bytes) else ptx
    assert ".entry paged_attention_v1" in ptx


# --- planted bugs: each one is caught by the graded checks ------------------------------------

KERNEL_MUTANTS = {
    "barrier before the softmax sum missing": (
        "  __syncthreads();\n  float row_sum = warp_sum(thread_sum);",
        "  float row_sum = warp_sum(thread_sum);"),
    "block-table row offset dropped": (
        "const int* block_table = block_tables + (long long)seq * max_blocks_per_seq;",
        "const int* block_table = block_tables;"),
    "loop bound t <= seq_len": ("t < seq_len; t += NUM_THREADS", "t <= seq_len; t += NUM_THREADS"),
    "wrong kv head for GQA": ("const int kv_head = head / (num_heads / num_kv_heads);",
                              "const int kv_head = head % num_kv_heads;"),
    "scale not applied": ("logits[t] = dot * scale;", "logits[t] = dot;"),
    "each warp uses its own max": ("row_max = warp_max(lane < NUM_WARPS ? partial[lane] : LOWEST_FLOAT);",
                                   "row_max = row_max;"),
    "barrier after loading q missing": ("    q_shared[d] = q_vec[d];\n  }\n  __syncthreads();",
                                        "    q_shared[d] = q_vec[d];\n  }"),
    "only half of out written": ("for (int d = tid; d < head_size; d += NUM_THREADS) {\n    float acc",
                                 "for (int d = tid; d < head_size / 2; d += NUM_THREADS) {\n    float acc"),
    "last partial block skipped": ("first < seq_len; first += block_size", "first + block_size <= seq_len; first += block_size"),
}


def first_failing_check(impl):
    from pagedlab.drivers import record
    from pagedlab.grader import judge

    for c in registry.checks_of("task10"):
        verdict = judge.judge(expected_stream(c), record.drive(c, str(impl)))
        if not verdict.passed:
            return c.name, verdict.message
    return None


@pytest.mark.parametrize("name", sorted(KERNEL_MUTANTS))
def test_kernel_checks_catch_planted_bug(name, tmp_path):
    old, new = KERNEL_MUTANTS[name]
    text = (ROOT / "solutions" / "paged_attention.cu").read_text()
    assert old in text, f"mutation {name!r} no longer applies to solutions/paged_attention.cu"
    (tmp_path / "paged_attention.cu").write_text(text.replace(old, new))
    caught = first_failing_check(tmp_path)
    assert caught is not None, f"no task10 check catches: {name}"
    assert "rule:" in caught[1]


@pytest.mark.parametrize("name, words", [
    ("only half of out written", "were never written"),
    ("barrier after loading q missing", "RaceError"),
    ("loop bound t <= seq_len", "OutOfBoundsError"),
    ("barrier before the softmax sum missing", "schedule warp0_first"),
])
def test_kernel_check_messages_point_at_the_bug(name, words, tmp_path):
    old, new = KERNEL_MUTANTS[name]
    text = (ROOT / "solutions" / "paged_attention.cu").read_text()
    (tmp_path / "paged_attention.cu").write_text(text.replace(old, new))
    assert words in first_failing_check(tmp_path)[1]


def test_kernel_checks_use_more_than_one_schedule():
    schedules = check_schedules()
    assert len(schedules) >= 2 and set(schedules) <= set(cuda.SCHEDULES)


def test_a_hanging_kernel_fails_fast_with_a_timeout(tmp_path, monkeypatch):
    import time

    from pagedlab.drivers import paged_attention_cu as kernel_checks

    monkeypatch.setenv(kernel_checks.TIMEOUT_ENV, "2.0")  # the checks run in a child process
    text = (ROOT / "solutions" / "paged_attention.cu").read_text()
    old = "for (int t = tid; t < seq_len; t += NUM_THREADS) {\n    const int block"
    assert old in text
    (tmp_path / "paged_attention.cu").write_text(
        text.replace(old, "for (int t = tid; t < seq_len; t += 0) {\n    const int block"))
    start = time.monotonic()
    res = checks.results("task10", tmp_path)
    assert not any(r.passed for r in res)
    assert "KernelTimeout" in res[0].message
    assert all("hung" in r.message for r in res[1:])
    assert time.monotonic() - start < 30  # one timeout, not one per check


def test_a_kernel_that_does_not_compile_shows_the_compiler_error(tmp_path):
    text = (ROOT / "solutions" / "paged_attention.cu").read_text()
    old = "logits[t] = dot * scale;"
    (tmp_path / "paged_attention.cu").write_text(text.replace(old, "logits[t] = dot * scale"))
    message = first_failing_check(tmp_path)[1]
    assert "CompileError" in message and "paged_attention.cu" in message


def test_a_kernel_that_failed_to_compile_is_not_compiled_again_by_the_next_check(monkeypatch):
    from pagedlab.cuda import compiler

    code = "extern \"C\" __global__ void k(float* out) { out[0] = 1.0f }\n"  # the missing ';'
    with pytest.raises(cuda.CompileError) as first:
        compiler.build(code, "broken.cu")
    calls = []

    def compiler_run(*args, **kwargs):  # counts compiles; fails so that nothing is cached
        calls.append(args)
        raise cuda.CompileError("compiled again")

    monkeypatch.setattr(compiler, "_run", compiler_run)
    with pytest.raises(cuda.CompileError) as again:
        compiler.build(code, "broken.cu")
    assert str(again.value) == str(first.value) and "broken.cu" in str(again.value) and calls == []
    with pytest.raises(cuda.CompileError, match="compiled again"):  # changed text: compiled anew
        compiler.build(code.replace("1.0f", "2.0f"), "broken.cu")
    assert any("compiling broken.cu" in what for _, what, *_ in calls)


# --- on a GPU (skipped on machines without CuPy and a device) ----------------------------------

needs_gpu = pytest.mark.skipif(not cuda.cupy_available(), reason="needs CuPy and a CUDA GPU")


@pytest.mark.gpu
@needs_gpu
def test_cupy_backend_matches_dense_attention_for_each_array_type():
    import cupy

    batch = make_paged_batch([1, 17, 300], num_heads=8, num_kv_heads=2, head_size=128, block_size=16, seed=20)
    args = batch.numpy()
    out = paged_attention_decode(*[cupy.asarray(a) for a in args], impl="solutions", backend="cupy")
    assert isinstance(out, cupy.ndarray)
    assert max_relative_error(cupy.asnumpy(out), batch.expected()) <= TOL
    out_np = paged_attention_decode(*args, impl="solutions", backend="cupy")
    assert isinstance(out_np, np.ndarray) and max_relative_error(out_np, batch.expected()) <= TOL
    if torch.cuda.is_available():
        out_t = paged_attention_decode(*[torch.from_numpy(a).cuda() for a in args], impl="solutions")
        assert out_t.is_cuda and max_relative_error(out_t.cpu(), batch.expected()) <= TOL


@pytest.mark.gpu
@needs_gpu
def test_cupy_backend_raises_the_shared_memory_limit_for_long_sequences():
    # 60 000 bytes of logits: above the 48 KiB default, within every opt-in limit since Turing.
    import cupy

    batch = make_paged_batch([15000, 3], num_heads=2, num_kv_heads=1, head_size=64, block_size=16, seed=21)
    out = paged_attention_decode(*[cupy.asarray(a) for a in batch.numpy()], impl="solutions", backend="cupy")
    assert max_relative_error(cupy.asnumpy(out), batch.expected()) <= TOL
