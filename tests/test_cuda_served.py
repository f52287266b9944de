"""Served runners (runner.Served): an unchecked launch reuses the runner of the last clean launch
of the same kernel instead of spawning one. Reuse must never show: each launch gets its own
inputs, the globals a fresh runner would see, its own printf lines, and a launch after a crash
or a timeout starts in a new process."""

from __future__ import annotations

import os

import numpy as np
import pytest

from pagedlab.cuda import KernelCrash, KernelTimeout, RawKernel, RawModule, runner

pytestmark = pytest.mark.skipif(not runner.serve_enabled(), reason="needs pidfd_open (Linux)")

SCALE = r'''
extern "C" __global__ void scale(float* out, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i];
}
'''


@pytest.fixture(autouse=True)
def _fresh_pool(monkeypatch):
    monkeypatch.delenv("PAGEDLAB_CUDA_ISOLATE", raising=False)
    monkeypatch.delenv("PAGEDLAB_CUDA_SERVE", raising=False)
    runner.close_served()
    yield
    runner.close_served()


def served_pids():
    return sorted(s.pid for s in runner._SERVED)


def scale(kern, x, a):
    out = np.full_like(x, np.nan)  # poisoned: an element the launch never wrote shows
    kern(((x.size + 63) // 64,), (64,), (out, x, np.float32(a), np.int32(x.size)))
    return out


def test_the_second_launch_runs_in_the_first_launchs_runner_with_its_own_inputs():
    kern = RawKernel(SCALE, "scale", backend="cpu")
    rng = np.random.default_rng(0)
    x1, x2 = rng.standard_normal(1000).astype(np.float32), rng.standard_normal(1000).astype(np.float32)
    np.testing.assert_array_equal(scale(kern, x1, 2.0), 2 * x1)
    first = served_pids()
    assert len(first) == 1
    np.testing.assert_array_equal(scale(kern, x2, -3.0), np.float32(-3) * x2)
    assert served_pids() == first  # no new process
    x3 = rng.standard_normal(300_000).astype(np.float32)  # a larger region: a new runner
    np.testing.assert_array_equal(scale(kern, x3, 1.5), np.float32(1.5) * x3)
    second = served_pids()
    assert len(second) == 1 and second != first
    # Smaller buffers in that runner's region: it maps them anew, where a stale mapping of the
    # last launch's buffers would give the kernel the old x (and the old out).
    np.testing.assert_array_equal(scale(kern, x1, 0.5), np.float32(0.5) * x1)
    np.testing.assert_array_equal(scale(kern, x2, 4.0), np.float32(4) * x2)
    assert served_pids() == second


def test_switching_it_off_spawns_a_runner_per_launch(monkeypatch):
    monkeypatch.setenv("PAGEDLAB_CUDA_SERVE", "0")
    kern = RawKernel(SCALE, "scale", backend="cpu")
    x = np.random.default_rng(1).standard_normal(100).astype(np.float32)
    np.testing.assert_array_equal(scale(kern, x, 2.0), 2 * x)
    assert served_pids() == []


COUNTER = r'''
__device__ int calls = 5;
__constant__ float bias[2];
extern "C" __global__ void count(int* seen, float* b) {
    seen[0] = atomicAdd(&calls, 1);
    b[0] = bias[0] + bias[1];
}
'''


@pytest.mark.parametrize("serve", ["1", "0"])
def test_each_launch_sees_the_globals_a_fresh_runner_would(serve, monkeypatch):
    monkeypatch.setenv("PAGEDLAB_CUDA_SERVE", serve)
    mod = RawModule(code=COUNTER, backend="cpu")
    kern = mod.get_function("count")
    seen, b = np.full(1, -1, np.int32), np.full(1, np.nan, np.float32)
    for k in range(3):  # the kernel's own increment never carries over: always the initial 5
        kern((1,), (1,), (seen, b))
        assert seen[0] == 5, f"launch {k} saw calls={seen[0]}"
    mod.get_global("bias")[:] = [1.5, 2.0]
    kern((1,), (1,), (seen, b))
    assert (seen[0], b[0]) == (5, 3.5)
    assert len(served_pids()) == (serve == "1")


PRINTS = r'''
extern "C" __global__ void say(int k) { if (threadIdx.x == 0) printf("launch %d%s\n", k, k ? "" : ", the longest line"); }
'''


def test_printf_of_each_launch_is_shown_once(capfd):
    kern = RawKernel(PRINTS, "say", backend="cpu")
    for k in range(3):
        kern((1,), (32,), (np.int32(k),))
    out = capfd.readouterr().out
    assert out.splitlines() == ["launch 0, the longest line", "launch 1", "launch 2"]


FAULT = r'''
extern "C" __global__ void maybe_fault(float* out, int bad) {
    if (bad && threadIdx.x == 0) *(volatile float*)0x10 = 1.0f;
    out[threadIdx.x] = 7.0f;
}
extern "C" __global__ void maybe_spin(float* out, int spin) {
    volatile int s = spin;
    while (s) { }
    out[threadIdx.x] = 7.0f;
}
'''


def test_a_crash_retires_the_runner_and_the_next_launch_starts_fresh():
    kern = RawKernel(FAULT, "maybe_fault", backend="cpu")
    out = np.full(32, np.nan, np.float32)
    kern((1,), (32,), (out, np.int32(0)))
    before = served_pids()
    with pytest.raises(KernelCrash):
        kern((1,), (32,), (out, np.int32(1)))
    assert served_pids() == []
    out[:] = np.nan
    kern((1,), (32,), (out, np.int32(0)))
    assert (out == 7).all()
    assert served_pids() and served_pids() != before
    assert all(_gone(pid) for pid in before)


def test_a_timeout_kills_the_served_runner():
    kern = RawKernel(FAULT, "maybe_spin", backend="cpu")
    out = np.full(32, np.nan, np.float32)
    kern((1,), (32,), (out, np.int32(0)))
    before = served_pids()
    with pytest.raises(KernelTimeout):
        kern((1,), (32,), (out, np.int32(1)), timeout=1.0)
    assert all(_gone(pid) for pid in before)
    out[:] = np.nan
    kern((1,), (32,), (out, np.int32(0)))
    assert (out == 7).all()


def test_a_forked_child_never_drives_its_parents_runner():
    kern = RawKernel(SCALE, "scale", backend="cpu")
    x = np.random.default_rng(2).standard_normal(500).astype(np.float32)
    scale(kern, x, 2.0)
    parent = served_pids()
    pid = os.fork()
    if pid == 0:  # the child: its own launch must work, in a runner of its own
        try:
            ok = runner._SERVED == [] and np.array_equal(scale(kern, x, 3.0), np.float32(3) * x)
            ok = ok and served_pids() and served_pids() != parent
        except BaseException:
            ok = False
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert served_pids() == parent  # still ours, still working
    np.testing.assert_array_equal(scale(kern, x, -1.0), -x)
    assert served_pids() == parent


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


ADD = r'''
extern "C" __global__ void add(float* out, const float* a, const float* b, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = a[i] + b[i];
}
'''


@pytest.mark.parametrize("serve", ["1", "0"])
def test_arguments_copied_by_two_threads_arrive_whole(serve, monkeypatch):
    """Above executor.PARALLEL_COPY bytes a helper thread copies the last half of the arguments,
    splitting an array between the two threads: every element must still arrive."""
    from pagedlab.cuda import executor

    monkeypatch.setenv("PAGEDLAB_CUDA_SERVE", serve)
    n = 1_500_001  # three arrays of ~6 MB: the half falls inside `a`
    assert 3 * 4 * n > 2 * executor.PARALLEL_COPY
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = np.full(n, np.nan, np.float32)
    kern = RawKernel(ADD, "add", backend="cpu")
    for _ in range(2):
        kern((64,), (256,), (out, a, b, np.int32(n)))
        np.testing.assert_array_equal(out, a + b)
        a, b = b, rng.standard_normal(n).astype(np.float32)
        out[:] = np.nan


BUSY = r'''
extern "C" __global__ void busy(float* out, int n) {
    float x = threadIdx.x;
    for (int i = 0; i < n; ++i) x = x * 0.999f + 1.0f;  // a chain of dependent operations
    out[threadIdx.x] = x;
}
'''


def test_a_served_runners_cpu_time_is_counted_once():
    """A served runner is not reaped after a launch, so its CPU time is not in RUSAGE_CHILDREN:
    served_cpu_seconds() reports it (benchmarks add the two), until the runner is reaped."""
    import resource

    def children():
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    kern = RawKernel(BUSY, "busy", backend="cpu")
    out = np.full(32, np.nan, np.float32)
    kern((1,), (32,), (out, np.int32(10)))
    c0, s0 = children(), runner.served_cpu_seconds()
    kern((1,), (32,), (out, np.int32(3_000_000)))
    used = runner.served_cpu_seconds() - s0
    assert children() == c0 and used > 0.03
    runner.close_served()
    assert runner.served_cpu_seconds() == 0
    assert children() - c0 >= used - 0.01  # reaped: its whole time is the children's now


SHADOW = r'''
extern "C" __global__ void swap_pairs(float* out, const float* x, int flip) {
    __shared__ float s[64];
    int t = threadIdx.x, me = flip ? 63 - t : t;  // which thread writes which word changes
    s[me] = x[me];
    __syncthreads();
    out[me] = s[me ^ 1];
}
extern "C" __global__ void racy(float* out, const float* x, int flip) {
    __shared__ float s[64];
    s[threadIdx.x] = x[threadIdx.x];
    out[threadIdx.x] = s[threadIdx.x ^ 1];  // no barrier: a read-after-write race
}
'''


def test_checked_launches_in_a_served_runner_start_from_clean_shadow_memory():
    """The sanitizer's shadow of shared and global memory must not carry over: a word written by
    thread 3 in one launch and by thread 60 in the next is no race, and a real race is still
    found after clean launches of the same build."""
    from pagedlab.cuda import RaceError

    mod = RawModule(code=SHADOW, backend="cpu")
    x = np.random.default_rng(4).standard_normal(64).astype(np.float32)
    out = np.full(64, np.nan, np.float32)
    for flip, schedule in [(0, "round_robin"), (1, "reversed"), (0, "random:3"), (1, "round_robin")]:
        out[:] = np.nan
        mod.get_function("swap_pairs")((1,), (64,), (out, x, np.int32(flip)), check="all",
                                       schedule=schedule)
        np.testing.assert_array_equal(out, x[np.arange(64) ^ 1])
    assert len(served_pids()) == 1  # all four in one runner
    with pytest.raises(RaceError):
        mod.get_function("racy")((1,), (64,), (out, x, np.int32(0)), check="race")
    # After the report the runner of that launch is gone; the clean kernel's stays clean.
    mod.get_function("swap_pairs")((1,), (64,), (out, x, np.int32(1)), check="all")


def _runner_children() -> set[int]:
    """pids of this process's kernel runners (served or fresh), from /proc."""
    pids = set()
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                pids.update(int(p) for p in f.read().split())
        except OSError:
            pass
    out = set()
    for pid in pids:
        try:
            if "pagedlab-runner" in os.readlink(f"/proc/{pid}/exe"):
                out.add(pid)
        except OSError:
            pass
    return out


@pytest.mark.parametrize("serve", ["1", "0"])
def test_interrupting_a_spinning_launch_stops_its_runner_and_the_next_launch_works(serve, monkeypatch):
    """The notebook's stop button at 2 a.m.: Ctrl-C during a launch that never ends raises
    KeyboardInterrupt, leaves no runner spinning on a core, and the kernel launches again."""
    import signal
    import threading

    if not os.path.exists("/proc/self/task"):
        pytest.skip("reads /proc")
    monkeypatch.setenv("PAGEDLAB_CUDA_SERVE", serve)
    kern = RawKernel(FAULT, "maybe_spin", backend="cpu")
    out = np.full(32, np.nan, np.float32)
    kern((1,), (32,), (out, np.int32(0)))  # built, and (served) its runner kept for the next
    assert len(_runner_children()) == (serve == "1")
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            kern((1,), (32,), (out, np.int32(1)), timeout=60)
    finally:
        timer.cancel()
    assert _runner_children() == set(), "the runner of the interrupted launch is still there"
    out[:] = np.nan
    kern((1,), (32,), (out, np.int32(0)))
    assert (out == 7).all()


def test_a_grading_process_never_keeps_a_runner(monkeypatch):
    """Each launch of a grading child gets a fresh runner: nothing one check's launch leaves in a
    runner (a static, a stray thread) reaches the next check."""
    from pagedlab.cuda import executor

    monkeypatch.setenv("PAGEDLAB_GRADING", "1")
    monkeypatch.setattr(executor, "_not_dumpable", lambda: None)  # keep pytest debuggable
    kern = RawKernel(SCALE, "scale", backend="cpu")
    x = np.random.default_rng(5).standard_normal(100).astype(np.float32)
    for a in (2.0, 3.0):
        np.testing.assert_array_equal(scale(kern, x, a), np.float32(a) * x)
        assert served_pids() == [] and _runner_children() == set()


SPIN_IN_A_CHILD = r"""
import os, sys
import numpy as np
from pagedlab.cuda import RawKernel
kern = RawKernel(sys.argv[1], "maybe_spin", backend="cpu")
out = np.zeros(32, np.float32)
kern((1,), (32,), (out, np.int32(0)))  # built: the next launch spins at once
print("spinning", flush=True)
kern((1,), (32,), (out, np.int32(1)), timeout=600)
"""


@pytest.mark.parametrize("serve", ["1", "0"])
def test_a_runner_dies_with_the_notebook_kernel_that_launched_it(serve, tmp_path):
    """A kernel restarted (SIGKILL) during a launch that never ends: its watchdog is gone with
    it, so the runner must end too instead of spinning on a core for good."""
    import subprocess
    import sys
    import time

    env = dict(os.environ, PAGEDLAB_CUDA_SERVE=serve)
    proc = subprocess.Popen([sys.executable, "-c", SPIN_IN_A_CHILD, FAULT], stdout=subprocess.PIPE,
                            env=env, text=True)
    try:
        assert proc.stdout.readline().strip() == "spinning"
        deadline = time.monotonic() + 30
        runners = set()
        while not runners and time.monotonic() < deadline:
            runners = {pid for pid in _children_of(proc.pid) if _is_runner(pid)}
            time.sleep(0.05)
        assert runners, "no runner started"
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not all(_gone_or_zombie(pid) for pid in runners):
        time.sleep(0.05)
    assert all(_gone_or_zombie(pid) for pid in runners), "the runner outlived its launcher"


def test_a_served_runner_whose_spawning_thread_ended_is_replaced():
    """The runner dies with the thread that spawned it; a launch from another thread afterwards
    must notice and start a new one, not write to a dead runner."""
    import threading

    kern = RawKernel(SCALE, "scale", backend="cpu")
    x = np.random.default_rng(6).standard_normal(100).astype(np.float32)
    worker = threading.Thread(target=scale, args=(kern, x, 2.0))
    worker.start()
    worker.join()
    first = served_pids()
    assert len(first) == 1
    deadline = __import__("time").monotonic() + 5
    while not _gone_or_zombie(first[0]) and __import__("time").monotonic() < deadline:
        pass
    np.testing.assert_array_equal(scale(kern, x, 3.0), np.float32(3) * x)
    assert served_pids() and served_pids() != first


def _children_of(pid: int) -> set[int]:
    out = set()
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out.update(int(p) for p in f.read().split())
    except OSError:
        pass
    return out


def _is_runner(pid: int) -> bool:
    try:
        return "pagedlab-runner" in os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False


def _gone_or_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
