"""Host side of pagedlab.cuda: argument checks, launch validation, builds, NVRTC compile check."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from pagedlab import cuda
from pagedlab.cuda import CompileError, RawKernel, compile_ptx

KERNELS = Path(__file__).parent / "cuda_kernels"
KNOWN = (KERNELS / "known_answers.cu").read_text()

AXPY = r'''
extern "C" __global__ void axpy(float* __restrict__ y, const float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}
'''


@pytest.fixture(scope="module")
def axpy():
    return RawKernel(AXPY, "axpy", backend="cpu").compile()


def test_axpy_runs(axpy):
    x = np.arange(100, dtype=np.float32)
    y = np.ones(100, np.float32)
    axpy((1,), (128,), (y, x, np.float32(0.5), np.int32(100)))
    np.testing.assert_array_equal(y, 1 + 0.5 * np.arange(100, dtype=np.float32))


@pytest.mark.parametrize("args, match", [
    (lambda y, x: (y, x.astype(np.float64), np.float32(2), np.int32(8)), r"float64.*astype\(numpy.float32\)"),
    (lambda y, x: (y[::2], x[:4], np.float32(2), np.int32(4)), r"not contiguous.*ascontiguousarray"),
    (lambda y, x: (y, x, 2.0, np.int32(8)), r"bare Python float.*64-bit double.*numpy.float32"),
    (lambda y, x: (y, x, np.float32(2), 8), r"bare Python int.*numpy.int32"),
    (lambda y, x: (y, x, np.float64(2), np.int32(8)), r"needs numpy.float32.*got numpy.float64"),
    (lambda y, x: (y, x, np.float32(2)), r"takes 4 arguments, got 3"),
    (lambda y, x: (y.tolist(), x, np.float32(2), np.int32(8)), r"needs a numpy array, got list"),
])
def test_wrong_arguments_are_type_errors_that_say_what_to_pass(axpy, args, match):
    y, x = np.zeros(8, np.float32), np.ones(8, np.float32)
    with pytest.raises(TypeError, match=match):
        axpy((1,), (32,), args(y, x))


def test_signature_parsing_reads_qualifiers(axpy):
    y, x, a, n = axpy.params
    assert (y.pointer, y.const, y.dtype) == (True, False, np.float32)
    assert (x.pointer, x.const) == (True, True)
    assert (a.pointer, a.dtype, n.dtype) == (False, np.float32, np.int32)


@pytest.mark.parametrize("grid, block, shared, error", [
    ((1,), (2048,), 0, ValueError),         # more than 1024 threads
    ((0,), (32,), 0, ValueError),
    ((1,), (32,), 64 * 1024, ValueError),   # above the dynamic shared memory limit
    ((1,), (32,), -1, TypeError),
    ("1", (32,), 0, TypeError),
])
def test_launch_configuration_is_validated(axpy, grid, block, shared, error):
    y, x = np.zeros(8, np.float32), np.ones(8, np.float32)
    with pytest.raises(error):
        axpy(grid, block, (y, x, np.float32(1), np.int32(8)), shared_mem=shared)


def test_unknown_schedule_is_refused(axpy):
    y, x = np.zeros(8, np.float32), np.ones(8, np.float32)
    with pytest.raises(ValueError, match="round_robin"):
        axpy((1,), (32,), (y, x, np.float32(1), np.int32(8)), schedule="fastest")


def test_schedules_and_limits_are_public():
    assert {"round_robin", "reversed", "warp0_first"} <= set(cuda.SCHEDULES)
    assert any(s.startswith("random:") for s in cuda.SCHEDULES)
    assert cuda.MAX_DYNAMIC_SHARED_MEMORY == 48 * 1024
    assert cuda.cupy_available() in (True, False)
    assert issubclass(cuda.KernelError, RuntimeError)
    for exc in (cuda.CompileError, cuda.BarrierError, cuda.WarpSyncError, cuda.SharedMemoryError,
                cuda.KernelCrash, cuda.KernelTimeout):
        assert issubclass(exc, cuda.KernelError)


def test_unknown_kernel_name_is_refused():
    with pytest.raises(ValueError, match="found: axpy"):
        RawKernel(AXPY, "saxpy", backend="cpu")


def test_cpu_compile_error_names_the_file_and_line():
    broken = AXPY.replace("y[i] += a * x[i];", "y[i] += a * x[i]\n  y[i] = 0;")
    with pytest.raises(CompileError) as err:
        RawKernel(broken, "axpy", backend="cpu", filename="axpy.cu").compile()
    msg = str(err.value)
    assert "axpy.cu:4:" in msg and "error" in msg and "^" in msg  # GCC quotes the line


def test_builds_are_cached_by_content(tmp_path, monkeypatch):
    monkeypatch.setenv("PAGEDLAB_CACHE", str(tmp_path))
    code = AXPY + f"\n// {time.time_ns()}\n"
    first = cuda.compiler.build(code, "axpy.cu")
    start = time.perf_counter()
    again = cuda.compiler.build(code, "axpy.cu")
    assert not first.cached and again.cached and again.library == first.library
    assert time.perf_counter() - start < 0.5
    assert first.library.parent == tmp_path / "cuda"
    changed = cuda.compiler.build(code.replace("a * x[i]", "x[i] * a"), "axpy.cu")
    assert changed.library != first.library


def test_compile_ptx_accepts_a_correct_kernel():
    ptx = compile_ptx(KNOWN, arch="compute_75", name="known_answers.cu")
    assert ".entry block_sum" in ptx and ".target sm_75" in ptx


def test_compile_ptx_reports_the_line_of_a_syntax_error():
    bad = AXPY.replace("int i = blockIdx.x * blockDim.x + threadIdx.x;",
                       "int i = blockIdx.x * blockDim.x + threadIdx.x")
    with pytest.raises(CompileError) as err:
        compile_ptx(bad, name="axpy.cu")
    msg = str(err.value)
    assert "axpy.cu(4): error" in msg and "^" in msg


def test_compile_ptx_rejects_host_only_code_the_cpu_would_accept():
    # The CPU prelude includes C++ headers; NVRTC does not: compile_ptx is the real GPU check.
    code = AXPY.replace("y[i] += a * x[i];", "y[i] += a * x[i]; printf(\"%d\", (int)std::size_t(1));")
    with pytest.raises(CompileError):
        compile_ptx(code)


def test_auto_backend_falls_back_to_the_cpu_without_a_gpu():
    kern = RawKernel(AXPY, "axpy")
    assert kern.backend == ("cupy" if cuda.cupy_available() else "cpu")


@pytest.mark.skipif(cuda.cupy_available(), reason="checks the message shown when CuPy is absent")
def test_cupy_backend_without_cupy_says_how_to_get_it():
    kern = RawKernel(AXPY, "axpy", backend="cupy")
    with pytest.raises(ImportError, match=r"pagedlab\[gpu\].*backend='cpu'"):
        kern((1,), (32,), (np.zeros(8, np.float32), np.ones(8, np.float32), np.float32(1),
                           np.int32(8)))


@pytest.mark.parametrize("decl, pointer, const, dtype, name", [
    ("float *__restrict__ out", True, False, np.float32, "out"),
    ("const float* const x", True, True, np.float32, "x"),
    ("const int2* pairs", True, True, np.int32, "pairs"),
    ("unsigned int n", False, False, np.uint32, "n"),
    ("size_t count", False, False, np.uint64, "count"),
    ("long long offset", False, False, np.int64, "offset"),
    ("bool flag", False, False, np.bool_, "flag"),
    ("double*", True, False, np.float64, "arg0"),
])
def test_parameter_declarations(decl, pointer, const, dtype, name):
    code = f'extern "C" __global__ void __launch_bounds__(64) k({decl}) {{}}'
    (p,) = cuda.signature.parse_params(code, "k")
    assert (p.pointer, p.const, p.dtype, p.name) == (pointer, const, np.dtype(dtype), name)


def test_template_kernels_are_not_entry_points():
    code = ('template <int N> __global__ void t(float* x) {}\n'
            '/* __global__ void commented(int) */\n'
            'extern "C" __global__ void k(float* x) {}')
    assert cuda.signature.kernel_names(code) == ["k"]
