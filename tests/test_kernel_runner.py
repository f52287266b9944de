"""Isolated launches run in the kernel runner, a process with no Python in it.

The attack: a kernel looks up the interpreter's C API (PyRun_SimpleString & co.) and computes
its answer with torch. In a fork of Python it finds the interpreter; in the runner it finds
nothing, and it cannot start a Python through system()/exec either.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from pagedlab.cuda import RawKernel, RawModule, executor

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the runner's exec lock-down is Linux-only")

PROBE = r"""
#include <dlfcn.h>
#include <stdlib.h>

// out[0]: PyRun_SimpleString found; out[1]: Py_IsInitialized() or -1; out[2]: system("true").
__global__ void probe(long long* out) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        void* run = dlsym(RTLD_DEFAULT, "PyRun_SimpleString");
        void* init = dlsym(RTLD_DEFAULT, "Py_IsInitialized");
        out[0] = run != nullptr;
        out[1] = init != nullptr ? ((int (*)(void))init)() : -1;
        out[2] = system("true");
    }
}
"""


@pytest.fixture(scope="module")
def probe():
    k = RawKernel(PROBE, "probe", backend="cpu", filename="probe.cu")
    k.compile()
    return k


def _probe(kernel) -> list[int]:
    out = np.full(3, 99, np.int64)
    kernel((1,), (32,), (out,))
    return out.tolist()


def test_a_kernel_in_the_runner_finds_no_python(probe, monkeypatch):
    monkeypatch.delenv("PAGEDLAB_CUDA_ISOLATE", raising=False)
    found, initialized, system = _probe(probe)
    assert (found, initialized) == (0, -1)
    assert system != 0  # exec and fork were taken away before the kernel ran


def test_in_process_launches_are_what_the_attack_needs(probe, monkeypatch):
    # The same probe in-process does find Python: the test above would fail on that path.
    monkeypatch.setenv("PAGEDLAB_CUDA_ISOLATE", "0")
    monkeypatch.delenv("PAGEDLAB_GRADING", raising=False)
    found, initialized, _ = _probe(probe)
    assert (found, initialized) == (1, 1)


def test_grading_ignores_the_in_process_switch(probe, monkeypatch):
    monkeypatch.setenv("PAGEDLAB_CUDA_ISOLATE", "0")
    monkeypatch.setattr(executor, "_not_dumpable", lambda: None)  # keep pytest debuggable
    monkeypatch.setenv("PAGEDLAB_GRADING", "1")
    assert _probe(probe)[:2] == [0, -1]


CONSTANTS = r"""
__constant__ float scale[4];
__device__ int bias = 5;

__global__ void apply(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * scale[i % 4] + bias;
}
"""


@pytest.fixture(scope="module")
def constants():
    mod = RawModule(code=CONSTANTS, backend="cpu")
    mod.compile()
    return mod


def test_constants_written_with_get_global_reach_the_runner(constants):
    constants.get_global("scale")[:] = [1, 2, 3, 4]
    constants.get_global("bias")[0] = 100
    x = np.arange(8, dtype=np.float32)
    y = np.zeros(8, np.float32)
    constants.get_function("apply")((1,), (32,), (x, y, np.int32(8)))
    np.testing.assert_array_equal(y, x * np.tile([1, 2, 3, 4], 2) + 100)


@pytest.mark.parametrize("isolate", [True, False])
def test_launch_writes_the_globals_it_is_given(constants, isolate):
    k = constants.get_function("apply")
    cfg = executor.LaunchConfig(grid=(1, 1, 1), block=(32, 1, 1), shared_mem=0,
                                schedule="round_robin", seed=0, timeout=60.0, workers=1,
                                isolate=isolate, stack_size=256 * 1024)
    x = np.ones(4, np.float32)
    y = np.zeros(4, np.float32)
    scale = np.array([2, 2, 2, 2], np.float32).tobytes()
    executor.launch(k._cpu_build(), "apply", k.params, (x, y, np.int32(4)), cfg,
                    globals={"scale": scale, "bias": np.int32(-1).tobytes()})
    assert y.tolist() == [1.0] * 4


def test_globals_that_are_not_in_the_module_are_refused(constants):
    k = constants.get_function("apply")
    cfg = executor.LaunchConfig(grid=(1, 1, 1), block=(32, 1, 1), shared_mem=0,
                                schedule="round_robin", seed=0, timeout=60.0, workers=1,
                                isolate=True, stack_size=256 * 1024)
    args = (np.ones(4, np.float32), np.zeros(4, np.float32), np.int32(4))
    with pytest.raises(ValueError, match=r"'gain'.*found: scale, bias"):
        executor.launch(k._cpu_build(), "apply", k.params, args, cfg, globals={"gain": b"\0" * 4})
    with pytest.raises(TypeError, match=r"globals\['bias'\] must be bytes"):
        executor.launch(k._cpu_build(), "apply", k.params, args, cfg, globals={"bias": 3})


CONSTRUCTOR = r"""
#include <dlfcn.h>

// Runs when the library is loaded, before any launch: if Python is in the process, take it.
__attribute__((constructor)) static void at_load() {
    void* run = dlsym(RTLD_DEFAULT, "PyRun_SimpleString");
    void* ensure = dlsym(RTLD_DEFAULT, "PyGILState_Ensure");
    void* release = dlsym(RTLD_DEFAULT, "PyGILState_Release");
    if (!run || !ensure || !release) return;
    int state = ((int (*)(void))ensure)();
    ((int (*)(const char*))run)("import os; os.environ['PAGEDLAB_KRUNNER_CTOR'] = 'reached'");
    ((void (*)(int))release)(state);
}

__global__ void fill(float* x) { x[threadIdx.x] = 1.0f; }
"""


def test_library_constructors_never_run_in_python(monkeypatch):
    monkeypatch.delenv("PAGEDLAB_KRUNNER_CTOR", raising=False)
    monkeypatch.delenv("PAGEDLAB_CUDA_ISOLATE", raising=False)
    k = RawKernel(CONSTRUCTOR, "fill", backend="cpu", filename="ctor.cu")
    x = np.zeros(32, np.float32)
    k((1,), (32,), (x,))  # compile, parameters, launch: all without loading it here
    assert x.tolist() == [1.0] * 32
    assert "PAGEDLAB_KRUNNER_CTOR" not in os.environ
    # The probe is real: a library loaded into this process does reach Python.
    monkeypatch.setenv("PAGEDLAB_CUDA_ISOLATE", "0")
    k((1,), (32,), (x,))
    assert os.environ.get("PAGEDLAB_KRUNNER_CTOR") == "reached"


def test_the_checks_child_counts_as_grading(probe, monkeypatch):
    from types import SimpleNamespace
    monkeypatch.setenv("PAGEDLAB_CUDA_ISOLATE", "0")
    monkeypatch.delenv("PAGEDLAB_GRADING", raising=False)
    monkeypatch.setattr(executor, "_not_dumpable", lambda: None)  # keep pytest debuggable
    monkeypatch.setattr(sys.modules["__main__"], "__spec__",
                        SimpleNamespace(name="pagedlab.drivers.child"), raising=False)
    assert _probe(probe)[:2] == [0, -1]


STEAL_TASK10 = r"""
// A hostile Task 10 submission: thread 0 of block (0, 0) finds the Python interpreter the
// kernel library was loaded into and computes every output with numpy; the rest do nothing.
#include <dlfcn.h>
#include <stdio.h>

extern "C" __global__ void paged_attention_v1(
    float* out, const float* q, const float* k_cache, const float* v_cache,
    const int* block_tables, const int* seq_lens, float scale, int num_kv_heads,
    int head_size, int block_size, int max_blocks_per_seq) {
  if (blockIdx.x != 0 || blockIdx.y != 0 || threadIdx.x != 0) return;
  void* ensure = dlsym(RTLD_DEFAULT, "PyGILState_Ensure");
  void* release = dlsym(RTLD_DEFAULT, "PyGILState_Release");
  void* run = dlsym(RTLD_DEFAULT, "PyRun_SimpleString");
  if (!ensure || !release || !run) return;
  static char code[4096];
  snprintf(code, sizeof code,
    "import ctypes as C, numpy as np\n"
    "A = lambda a, n, t: np.ctypeslib.as_array((t * n).from_address(a))\n"
    "H, S, D, B, KV, M, sc = %u, %u, %d, %d, %d, %d, %.9g\n"
    "bt = A(%llu, S * M, C.c_int).reshape(S, M); sl = A(%llu, S, C.c_int)\n"
    "used = [bt[s, :(int(sl[s]) + B - 1) // B] for s in range(S)]\n"
    "nb = max(int(u.max()) for u in used if u.size) + 1\n"
    "q = A(%llu, S * H * D, C.c_float).reshape(S, H, D)\n"
    "k = A(%llu, nb * B * KV * D, C.c_float).reshape(-1, KV, D)\n"
    "v = A(%llu, nb * B * KV * D, C.c_float).reshape(-1, KV, D)\n"
    "o = A(%llu, S * H * D, C.c_float).reshape(S, H, D)\n"
    "for s in range(S):\n"
    "    n = int(sl[s]); slots = (used[s][:, None] * B + np.arange(B)).reshape(-1)[:n]\n"
    "    for h in range(H):\n"
    "        x = (k[slots, h // (H // KV)] @ q[s, h]) * sc\n"
    "        p = np.exp(x - x.max()); p /= p.sum()\n"
    "        o[s, h] = p @ v[slots, h // (H // KV)]\n",
    gridDim.x, gridDim.y, head_size, block_size, num_kv_heads, max_blocks_per_seq, scale,
    (unsigned long long)block_tables, (unsigned long long)seq_lens, (unsigned long long)q,
    (unsigned long long)k_cache, (unsigned long long)v_cache, (unsigned long long)out);
  int state = ((int (*)(void))ensure)();
  ((int (*)(const char*))run)(code);
  ((void (*)(int))release)(state);
}
"""


def test_a_task10_kernel_that_computes_through_python_scores_nothing(tmp_path):
    # Before the runner (a fork of Python) this submission scored Task 10 in full.
    from pagedlab import graded as checks

    (tmp_path / "paged_attention.cu").write_text(STEAL_TASK10)
    results = checks.results("task10", tmp_path)
    assert results and not any(r.passed for r in results)
    assert "never written" in results[0].message
