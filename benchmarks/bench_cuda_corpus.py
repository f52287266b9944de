"""The corpus's larger kernels on pagedlab's CPU executor, next to numpy doing the same work.

Rows: tiled matmul (1024^3 with 32x32 tiles = 1024-thread blocks, the course's worst case, and
the same product with 16x16 tiles), softmax, layernorm, stencil, Black-Scholes, histogram and a
shared-tree reduction, each with its numpy time measured in the same run (the baseline the
ratio refers to). For the matmul, a breakdown says where the time goes: the same kernel with
the tile loop's barriers and shared memory taken out (pure arithmetic on 1024 fibers), and a
barrier-only kernel that does nothing but __syncthreads() as often as the matmul does (the
cost of the fiber switches).

Where the 1024^3 matmul's time went (perf): 67 M barrier waits. A wait was two
context switches (fiber -> scheduler -> next fiber), and with 1024 fibers each switch missed
the cache: fiber stacks are a multiple of 4 KiB apart, so every saved register frame sat in
the same L1 set. Plus __tls_get_addr calls for __shared__ (thread_local in a dlopen()ed
library). Fixes: stack tops staggered by a cache line, direct hand-over to the next thread at
a barrier (round-robin/reversed), TLS descriptors. CPU time per barrier wait went from ~45 ns
(32-256 threads) and ~95 ns (1024 threads) to ~22-30 ns; the matmul from ~11 to ~3.8 CPU-s.
What is left is mostly the kernel's own scalar arithmetic, one CUDA thread at a time; going
further would mean running a warp's 32 threads as SIMD lanes. Wall times on a shared box are
noisy: the cpu column (the launch child's CPU time) is the steadier figure.

Checks on: every row is also run with check="all" (the sanitizer's instrumented
build); the "checks" column is its CPU time over the same kernel's checks-off CPU time, measured
in the same run. Target: <= 10x on every row, and the 1024^3 matmul with checks on finishing
within the default 30 s watchdog. Where the checked time went (perf): the shadow state of
shared memory, and two sanitizer calls per `threadIdx` read, which also kept the compiler from
hoisting the indices out of the k loop. Fixes: one shadow cell per 4-byte word (split into byte
cells only for words accessed in parts), and threadIdx & co. read through uninstrumented
`const` functions in checked builds. The 32x32-tile matmul went from 9.2x to 4.9x at 256^3; one
--quick run (512^3, 2 cores, load average ~13): 32x32 tiles 5.6x, 16x16 tiles 4.1x, softmax
0.9x, layernorm 2.6x, stencil 2.1x, Black-Scholes 2.1x, histogram 4.4x, tree reduction 1.1x.
1024^3 with 32x32 tiles: 9.7 CPU-s off, 58.5 CPU-s on (6.0x), i.e. about 29 s of wall time on
two idle cores, just inside the 30 s default. The watchdog is wall-clock time: on a loaded box a checked launch can exceed it while using
well under its CPU budget; the row then says so.

Global-memory races (checks on since the sanitizer watches argument arrays too): one shadow
cell per 4-byte word of each writable argument (const arguments are bounds-checked only), and
the naive matmul row (every access global) is timed checked as well. Its cost is mostly the
instrumentation call itself (about 8x with memcheck alone); the argument range hit last is
tried first. One run at 256^3 --repeat 3 on a loaded box (load average ~22): 32x32 tiles 6.2x,
naive 9.1x, 16x16 tiles 4.6x, softmax 2.1x, layernorm 3.4x, stencil 2.2x, Black-Scholes 2.8x,
histogram 5.0x, tree reduction 1.5x. A checked launch's default watchdog is 4x the unchecked
one (120 s), so the checked 1024^3 matmul (~29 s of wall time on two idle cores) finishes on a
busy machine too.

Kernels in the style of public code whose checked cost was worst (benchmarks/cuda_kernels/,
written here): llm.c's naive attention (every access global; its value kernel's `out[i] += v`
in a loop took 18.9-22x) and SGEMM_CUDA's warptiling (register tiles in local arrays, each
access to which the instrumented build checked: 11-18x). Fixes: the hooks' common cases
(a local; an instruction that hit a read-only argument before; a word this thread wrote last)
run with no call and no stack frame, a per-instruction copy of the argument's bounds, and
checked builds at -O3 with larger complete-peeling limits so register tiles become registers.
One --quick --repeat 3 run on a loaded box: 32x32 tiles 7.0x, naive matmul 3.6x, 16x16 tiles
4.3x, softmax 1.6x, layernorm 3.1x, stencil 2.2x, Black-Scholes 1.8x, histogram 3.8x, tree
reduction 1.1x, naive attention q.k 3.0x / softmax 3.1x / value 8.0x (8-12x from run to run),
SGEMM warptiling 6.4x.
Since 4 Dec unchecked launches of kernels in collapse.py's class run collapsed (no fibers; a
checked launch still runs on them), which makes the checks-off side faster and these ratios
larger: the naive attention value kernel, CPU time, 4.2 ms collapsed vs 8.0 ms on fibers
unchecked, 77-82 ms checked: 18x against collapsed, 10x against fibers.
Then launches became served (a kernel's runner kept between launches, runner.Served), which
took the ~2 CPU-ms of a runner's spawn out of both sides; what is left of a small kernel's
checked launch is the instrumentation itself. The "fibers" figure in each row is checks on over
checks off on fibers: the sanitizer's own cost. One run (4 Dec, --repeat 3), against collapsed
(fibers): naive attention value 55x (17.5x), softmax 53x (12.6x), q.k 24x (4.4x); 32x32-tile
matmul 31.6x (6.7x), 16x16 12.1x (5.3x); layernorm 11.0x (10.5x); the other seven 1.2-9.1x
(1.1-6.9x); median 9.1x (4.4x). Per access a checked build calls __tsan_read4/__tsan_write4
(67% of the value kernel's samples, most of it loading the 32-byte shadow cell), while the
collapsed loop vectorises: a <= 10x ratio against collapsed code would need checks hoisted out
of the loops (per access range), not a faster hook. GCC places its instrumentation pass before
the loop optimisers (`g++ -O3 -fsanitize=thread -fdump-passes`: tree-tsan1, then tree-vect), so
a checked build's loops never vectorise, whatever the hook costs.
Then (4 Dec, later) the global-race shadow was mapped with its pages present (up to 64 MB):
mapped lazily, a cell's first read mapped the shared zero page and its first write copied it,
a second page fault plus a TLB shootdown of the other worker's CPU (perf: 22% of samples in
flush IPIs). The naive softmax went from 41.6 to 8.5 CPU-ms checked, q.k from 85 to 50. One
--quick --repeat 3 run after it, against collapsed (fibers): naive attention value 39x (13x),
softmax 16x (4.6x), q.k 10.5x (2.4x); 32x32-tile matmul 25x (6.9x), 16x16 16x (2.9x); the
other eight 1.8-7.5x (1.2-5.8x); median 5.9x (2.9x).

Run: .venv/bin/python benchmarks/bench_cuda_corpus.py [--repeat 3] [--quick] [--no-checks]
(also run from benchmarks/bench_cuda_cpu.py --corpus)
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from pathlib import Path

import numpy as np

from pagedlab import cuda

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "cuda_kernels" / "corpus"

MATMUL32 = r'''
#define T 32
__global__ void matmul32(const float* A, const float* B, float* C, int n) {
    __shared__ float As[T][T];
    __shared__ float Bs[T][T];
    int row = blockIdx.y * T + threadIdx.y, col = blockIdx.x * T + threadIdx.x;
    float acc = 0.0f;
    for (int k0 = 0; k0 < n; k0 += T) {
        As[threadIdx.y][threadIdx.x] = A[row * n + k0 + threadIdx.x];
        Bs[threadIdx.y][threadIdx.x] = B[(k0 + threadIdx.y) * n + col];
        __syncthreads();
        for (int k = 0; k < T; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    C[row * n + col] = acc;
}
// The same arithmetic without shared tiles or barriers: what the fibers cost without switching.
__global__ void matmul_naive(const float* A, const float* B, float* C, int n) {
    int row = blockIdx.y * 32 + threadIdx.y, col = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    for (int k = 0; k < n; ++k) acc += A[row * n + k] * B[k * n + col];
    C[row * n + col] = acc;
}
// Only the barriers of the 1024^3 tiled matmul: 2 per k-tile, 1024 threads per block.
__global__ void barriers_only(float* out, int rounds) {
    for (int r = 0; r < rounds; ++r) { __syncthreads(); __syncthreads(); }
    if (threadIdx.x == 0 && threadIdx.y == 0) out[blockIdx.y * gridDim.x + blockIdx.x] = rounds;
}
'''


CPU = {}  # name -> CPU seconds of the last timed launch (forked children: robust to a busy box)
CHECKED = {}  # name -> CPU seconds of the same launch with check="all"
RATIOS = {}  # name -> checks-on / checks-off CPU time
FIBER_RATIOS = {}  # name -> checks-on / checks-off-on-fibers CPU time
WITH_CHECKS = True


def _runners_cpu():
    """CPU seconds of the launches' runners: reaped (fresh) ones, and served ones still alive."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime + cuda.runner.served_cpu_seconds()


def timed(fn, repeat, key=None):
    times, cpus = [], []
    for _ in range(repeat):
        c0 = _runners_cpu()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
        cpus.append(_runners_cpu() - c0)
    if key:
        CPU[key] = statistics.median(cpus)
    return statistics.median(times)


def checked(name, launch, repeat):
    """CPU time of `launch(check="all")`, next to the checks-off time already in CPU[name]."""
    if not WITH_CHECKS:
        return
    launch("all")  # the instrumented build, compiled once outside the timing
    timed(lambda: launch("all"), repeat, key="__checked")
    CHECKED[name] = CPU.pop("__checked")
    RATIOS[name] = CHECKED[name] / max(CPU[name], 1e-9)
    # Checked launches run on fibers; checks off runs collapsed where collapse.py can: the
    # sanitizer's own cost is the ratio to checks off on fibers.
    os.environ["PAGEDLAB_CUDA_COLLAPSE"] = "0"
    try:
        timed(lambda: launch(None), repeat, key="__fibers")
    finally:
        del os.environ["PAGEDLAB_CUDA_COLLAPSE"]
    FIBER_RATIOS[name] = CHECKED[name] / max(CPU.pop("__fibers"), 1e-9)


def row(name, t, base, extra=""):
    cpu = f"cpu {CPU.pop(name, 0) * 1e3:8.1f} ms" if name in CPU else " " * 15
    chk = (f"checks {CHECKED[name] * 1e3:9.1f} ms cpu = {RATIOS[name]:5.1f}x ({FIBER_RATIOS[name]:4.1f}x "
           "fibers)" if name in CHECKED else " " * 45)
    print(f"  {name:34s} {t * 1e3:9.1f} ms  {cpu}  {chk}  numpy {base * 1e3:8.2f} ms  "
          f"{t / base:7.1f}x  {extra}")


def matmul_rows(n, repeat, timeout):
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
    C = np.full((n, n), np.nan, np.float32)
    mod = cuda.RawModule(code=MATMUL32, backend="cpu", filename="bench_matmul.cu").compile()
    base = timed(lambda: A @ B, repeat)
    ref = A.astype(np.float64) @ B
    g = (n // 32, n // 32)
    m32 = f"matmul {n}^3, 32x32 tiles (1024 thr)"
    def launch32(check=None, timeout=timeout):
        mod.get_function("matmul32")(g, (32, 32), (A, B, C, np.int32(n)), timeout=timeout, check=check)
    t = timed(launch32, repeat, key=m32)
    checked(m32, launch32, repeat)
    if WITH_CHECKS:  # the checked launch must fit the default watchdog, not just a raised one
        start = time.perf_counter()
        limit = cuda.kernel.DEFAULT_TIMEOUT * cuda.kernel.CHECKED_TIMEOUT_FACTOR
        try:
            launch32("all", timeout=None)  # the default watchdog of a checked launch
            print(f"  checked {n}^3 matmul within the default checked {limit:g} s "
                  f"watchdog: yes ({time.perf_counter() - start:.1f} s wall)")
        except cuda.KernelTimeout:
            print(f"  checked {n}^3 matmul within the default checked {limit:g} s watchdog: NO")
    err = float(np.abs(C - ref).max() / np.abs(ref).max())
    row(f"matmul {n}^3, 32x32 tiles (1024 thr)", t, base, f"max rel err {err:.1e}")
    naive = "  naive (no tiles, B read by column)"
    def launch_naive(check=None):  # every access global: the global-race shadow's worst case
        mod.get_function("matmul_naive")(g, (32, 32), (A, B, C, np.int32(n)), timeout=timeout,
                                         check=check)
    tn = timed(launch_naive, repeat, key=naive)
    checked(naive, launch_naive, repeat)
    row(naive, tn, base)
    out = np.zeros(g[0] * g[1], np.float32)
    tb = timed(lambda: mod.get_function("barriers_only")(g, (32, 32), (out, np.int32(n // 32)),
                                                         timeout=timeout), repeat,
               key="  barriers only (2 per k-tile)")
    switches = g[0] * g[1] * 1024 * 2 * (n // 32)
    cpu = CPU["  barriers only (2 per k-tile)"]
    row("  barriers only (2 per k-tile)", tb, base,
        f"{switches / 1e6:.0f} M thread-barrier waits, {cpu / switches * 1e9:.0f} ns CPU each")
    k16 = cuda.RawKernel((CORPUS / "classics.cu").read_text(), "matmul_tiled", backend="cpu")
    m16 = f"matmul {n}^3, 16x16 tiles (256 thr)"
    def launch16(check=None):
        k16((n // 16, n // 16), (16, 16), (A, B, C, np.int32(n), np.int32(n), np.int32(n)),
            timeout=timeout, check=check)
    t16 = timed(launch16, repeat, key=m16)
    checked(m16, launch16, repeat)
    row(m16, t16, base)


def kernel_row(name, launch, base, repeat):
    """Time `launch(check=None)` (wall and CPU), then with checks on; print the row."""
    t = timed(lambda: launch(None), repeat, key=name)
    checked(name, launch, repeat)
    row(name, t, base)


def corpus_rows(repeat):
    classics = (CORPUS / "classics.cu").read_text()
    mod = cuda.RawModule(code=classics, backend="cpu", filename="classics.cu").compile()
    red = cuda.RawModule(code=(CORPUS / "reductions.cu").read_text(), backend="cpu",
                         filename="reductions.cu").compile()
    rng = np.random.default_rng(1)

    x = rng.standard_normal((512, 1024)).astype(np.float32)
    out = np.empty_like(x)
    def np_softmax():
        e = np.exp(x - x.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)
    kernel_row("softmax 512 x 1024", lambda c: mod.get_function("softmax_rows")(
        (512,), (128,), (out, x, np.int32(1024)), check=c), timed(np_softmax, repeat), repeat)

    g, b = rng.random(1024).astype(np.float32), rng.random(1024).astype(np.float32)
    def np_layernorm():
        m = x.mean(1, keepdims=True)
        return (x - m) / np.sqrt(x.var(1, keepdims=True) + 1e-5) * g + b
    kernel_row("layernorm 512 x 1024", lambda c: mod.get_function("layernorm_rows")(
        (128,), (128,), (out, x, g, b, np.int32(512), np.int32(1024), np.float32(1e-5)), check=c),
        timed(np_layernorm, repeat), repeat)

    v = rng.random(1 << 20).astype(np.float32)
    o = np.empty_like(v)
    def np_stencil():
        p = np.pad(v, 3)
        return sum(p[k:k + v.size] for k in range(7))
    kernel_row("stencil radius 3, 1M points", lambda c: mod.get_function("stencil_halo")(
        (v.size // 256,), (256,), (o, v, np.int32(v.size)), shared_mem=(256 + 6) * 4, check=c),
        timed(np_stencil, repeat), repeat)

    n = 1 << 20
    S, K = rng.uniform(5, 30, n).astype(np.float32), rng.uniform(1, 100, n).astype(np.float32)
    T = rng.uniform(0.25, 10, n).astype(np.float32)
    call, put = np.empty_like(S), np.empty_like(S)
    try:
        from scipy.special import ndtr
    except ImportError:
        ndtr = None
    def np_black_scholes():
        sq = np.sqrt(T)
        d1 = (np.log(S / K) + (0.02 + 0.045) * T) / (0.3 * sq)
        d2 = d1 - 0.3 * sq
        disc = np.exp(-0.02 * T)
        cnd = ndtr if ndtr is not None else (lambda d: 0.5 * (1 + np.tanh(0.79788456 * d)))
        return S * cnd(d1) - K * disc * cnd(d2), K * disc * cnd(-d2) - S * cnd(-d1)
    kernel_row("Black-Scholes 1M options", lambda c: mod.get_function("black_scholes")(
        (n // 256,), (256,), (call, put, S, K, T, np.float32(0.02), np.float32(0.3), np.int32(n)),
        check=c), timed(np_black_scholes, repeat), repeat)

    data = rng.integers(0, 256, 1 << 22).astype(np.uint8)
    hist = np.zeros(256, np.uint32)
    kernel_row("histogram 4M bytes, 256 bins", lambda c: mod.get_function("histogram_private")(
        (64,), (256,), (hist, data, np.int32(data.size), np.int32(256)), shared_mem=256 * 4,
        check=c), timed(lambda: np.bincount(data, minlength=256), repeat), repeat)

    r = rng.random(1 << 22).astype(np.float32)
    partial = np.empty(r.size // 256, np.float32)
    kernel_row("shared-tree reduction 4M floats", lambda c: red.get_function("reduce_shared_tree")(
        (r.size // 256,), (256,), (partial, r, np.int32(r.size)), shared_mem=256 * 4, check=c),
        timed(lambda: r.sum(), repeat), repeat)


KERNELS = Path(__file__).resolve().parent / "cuda_kernels"
WARPTILING = "sgemmWarptiling<128, 128, 16, 64, 64, 4, 8, 4, 128>"


def public_style_rows(repeat, n):
    """Kernels in the style of public code whose checked cost was worst: llm.c's naive
    attention (every access global, `out[i] +=` in a loop) and SGEMM warptiling (register tiles
    in local arrays, every access to which the instrumented build checks)."""
    rng = np.random.default_rng(2)
    att = cuda.RawModule(code=(KERNELS / "naive_attention.cu").read_text(), backend="cpu",
                         filename="naive_attention.cu").compile()
    B, T, C, NH = 2, 128, 256, 4
    inp = rng.standard_normal((B, T, 3 * C)).astype(np.float32)
    preatt, att_w = np.zeros((B, NH, T, T), np.float32), np.zeros((B, NH, T, T), np.float32)
    out = np.zeros((B, T, C), np.float32)
    i32 = np.int32
    def np_attention():
        qkv = inp.reshape(B, T, 3, NH, C // NH).astype(np.float64)
        s = np.einsum("bthd,bshd->bhts", qkv[:, :, 0], qkv[:, :, 1]) / np.sqrt(C // NH)
        s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        return np.einsum("bhts,bshd->bthd", p, qkv[:, :, 2]).reshape(B, T, C)
    base = timed(np_attention, repeat)
    kernel_row("naive attention: query.key (llm.c k1)", lambda c: att.get_function("attention_query_key_kernel1")(
        (B * NH * T * T // 256,), (256,), (preatt, inp, i32(B), i32(T), i32(C), i32(NH)), check=c), base, repeat)
    kernel_row("naive attention: softmax", lambda c: att.get_function("attention_softmax_kernel1")(
        (B * T * NH // 128,), (128,), (att_w, preatt, i32(B), i32(T), i32(NH)), check=c), base, repeat)
    kernel_row("naive attention: value (out[i] +=)", lambda c: att.get_function("attention_value_kernel1")(
        (B * T * NH // 128,), (128,), (out, att_w, inp, i32(B), i32(T), i32(C), i32(NH)), check=c), base, repeat)
    err = float(np.abs(out - np_attention()).max())
    print(f"  naive attention max abs err vs float64: {err:.1e}")

    gemm = cuda.RawModule(code=(KERNELS / "sgemm_warptiling.cu").read_text(), backend="cpu",
                          filename="sgemm_warptiling.cu", name_expressions=[WARPTILING]).compile()
    A, Bm = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)
    Cm = np.zeros((n, n), np.float32)
    kernel_row(f"SGEMM warptiling {n}^3 (128 thr)", lambda c: gemm.get_function(WARPTILING)(
        (n // 128, n // 128), (128,), (i32(n), i32(n), i32(n), np.float32(1), A, Bm, np.float32(0), Cm),
        check=c, timeout=600), timed(lambda: A @ Bm, repeat), repeat)
    print(f"  SGEMM warptiling max rel err: {float(np.abs(Cm - A.astype(np.float64) @ Bm).max() / n):.1e}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--n", type=int, default=1024, help="matmul size (a multiple of 32)")
    ap.add_argument("--quick", action="store_true", help="matmul 512^3 instead of 1024^3")
    ap.add_argument("--no-checks", action="store_true", help="skip the checks-on column")
    a = ap.parse_args(argv)
    global WITH_CHECKS
    WITH_CHECKS = not a.no_checks
    n = 512 if a.quick else a.n
    print(f"corpus kernels on the CPU executor ({cuda.executor.default_workers()} worker(s)), "
          "median of", a.repeat)
    matmul_rows(n, a.repeat, timeout=600)
    corpus_rows(a.repeat)
    public_style_rows(a.repeat, 256 if a.quick else 512)
    if RATIOS:
        worst = max(RATIOS, key=RATIOS.get)
        print(f"checks on / off (CPU time): median {statistics.median(RATIOS.values()):.1f}x, "
              f"worst {RATIOS[worst]:.1f}x ({worst.strip()}); target <= 10x")
        worst = max(FIBER_RATIOS, key=FIBER_RATIOS.get)
        print(f"checks on / off on fibers (the sanitizer's own cost): median "
              f"{statistics.median(FIBER_RATIOS.values()):.1f}x, worst {FIBER_RATIOS[worst]:.1f}x "
              f"({worst.strip()})")
    return RATIOS


if __name__ == "__main__":
    main()
