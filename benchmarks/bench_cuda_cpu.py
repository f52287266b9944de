"""Benchmark pagedlab's CPU executor for CUDA C (spec §6.3).

Measures, in one run:
  * launch overhead of an empty-ish kernel (forked/isolated launch and in-process launch),
  * build time: cold (new source, runtime already built) and cached (hash hit),
  * the paged-attention decode kernel (solutions/paged_attention.cu, 128 threads) on
    8 seqs x 8 heads x 256 tokens x head 128, per schedule, against a numpy float64 reference
    computed in the same run (the baseline the ratios refer to). Target: < 0.3 s per launch.
    Also against the memory's speed, measured in the same run (numpy reading K and V, 16.8 MB):
    the stretch target is 10x that read. Also the same launch in-process (no runner).
    With fibers (perf, in-process, one worker, ~17.5 ms): the kernel's own loops ~48%, two
    thirds of it the V loop (it walks a column with a 4 KiB stride: all 256 rows of a sequence
    fall in one L1 set, so every load misses L1), the rest the q.k dot product (a chain of
    dependent float adds); warp operations, switches, barriers and canary checks ~28%; an
    isolated launch added ~2 ms (the runner's start), ~2 ms copying K and V into the launch's
    region and ~1 ms mapping them in the runner.
    Now the unchecked round_robin launch runs collapsed (pagedlab/cuda/collapse.py, COX's
    hierarchical collapsing: the block's threads as loops between barriers and warp operations,
    no fibers; the V loop with all threads' iteration k together, so consecutive threads read
    consecutive floats of a row, the q.k loop with 8 threads' add chains side by side), and the
    runner starts while K and V are copied in. The other schedules still run on fibers (they
    exist to reorder threads), hence their rows. Each row says which ran.
    Measured 4 Dec (2 cores, load average ~2-3), this run: round_robin collapsed best 9.9 ms
    (14.9x the 0.66 ms read), in-process 3.7 ms (5.6x), fibers ~23 ms. An empty kernel's launch
    cost ~2 ms (spawn, exec, libraries), copying K and V ~1.9 ms, mapping them in the runner
    and tearing it down the rest.
    So an unchecked launch now runs in a served runner (runner.Served): the runner of the last
    clean launch of the same kernel, kept with its region and its mapping of the argument
    buffers, and K and V are copied by two threads. Measured 4 Dec, repeat 15, load ~0.5: served
    best 6.0 ms, median 6.4 ms (7.4x the 0.80 ms read: within 10x); a fresh runner per launch
    (PAGEDLAB_CUDA_SERVE=0, the "fresh runner" row) best 9.8 ms (12.3x); in-process 3.6 ms;
    an empty kernel 0.24 ms served, 2.1 ms fresh. Checked launches are served too (their
    instrumented build has runners of its own); every launch of a grading child gets a fresh
    runner.

  * the same launch with the sanitizer on (check="race,memcheck,init") against checks
    off, in the same run. Target: checks on <= 10x checks off (checked launches run on fibers,
    checks off collapsed, so the ratio is also printed against checks off on fibers). With --compare-with PATH (another
    checkout, e.g. main) its checks-off launch is timed in a subprocess in the same run: the
    sanitizer must not slow checks-off launches down.

Run: .venv/bin/python benchmarks/bench_cuda_cpu.py [--repeat 5] [--workers N] [--compare-with PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from pagedlab import cuda

ROOT = Path(__file__).resolve().parent.parent

TINY = r'''
extern "C" __global__ void touch(float* out) { out[threadIdx.x] = threadIdx.x; }
'''


LAST_CPU = {}  # "mean": CPU time per call (this process and its runners) of the last timed()


def _cpu():
    """CPU seconds of this process, its reaped children (fresh runners) and its served runners
    (alive, so not in RUSAGE_CHILDREN: they report their own)."""
    import resource
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return (me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
            + cuda.runner.served_cpu_seconds())


def timed(fn, repeat):
    times = []
    c = _cpu()
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    LAST_CPU["mean"] = (_cpu() - c) / repeat
    return statistics.median(times), min(times)


class env:
    """os.environ[name] = value inside a with block."""

    def __init__(self, name, value):
        self.name, self.value = name, value

    def __enter__(self):
        self.old = os.environ.get(self.name)
        os.environ[self.name] = self.value

    def __exit__(self, *exc):
        if self.old is None:
            del os.environ[self.name]
        else:
            os.environ[self.name] = self.old


def launch_overhead(repeat):
    """Median launch of a 32-thread kernel: in a served runner (the default), in a fresh runner
    per launch (PAGEDLAB_CUDA_SERVE=0, as checked launches run) and in this process."""
    k = cuda.RawKernel(TINY, "touch", backend="cpu").compile()
    out = np.zeros(32, np.float32)
    served, _ = timed(lambda: k((1,), (32,), (out,)), repeat * 4)
    with env("PAGEDLAB_CUDA_SERVE", "0"):
        fresh, _ = timed(lambda: k((1,), (32,), (out,)), repeat * 4)
    with env("PAGEDLAB_CUDA_ISOLATE", "0"):
        inproc, _ = timed(lambda: k((1,), (32,), (out,)), repeat * 4)
    return served, fresh, inproc


def build_times():
    code = (ROOT / "solutions" / "paged_attention.cu").read_text()
    cuda.compiler.runtime_library()  # built once per machine; not part of a kernel's build
    fresh = code + f"\n// benchmark {time.time_ns()}\n"
    t = time.perf_counter()
    cuda.compiler.build(fresh, "paged_attention.cu")
    cold = time.perf_counter() - t
    t = time.perf_counter()
    b = cuda.compiler.build(fresh, "paged_attention.cu")
    cached = time.perf_counter() - t
    assert b.cached
    with tempfile.TemporaryDirectory() as d:  # empty cache: runtime + kernel
        old = os.environ.get("PAGEDLAB_CACHE")
        os.environ["PAGEDLAB_CACHE"] = d
        try:
            t = time.perf_counter()
            cuda.compiler.build(fresh, "paged_attention.cu")
            first_ever = time.perf_counter() - t
        finally:
            if old is None:
                del os.environ["PAGEDLAB_CACHE"]
            else:
                os.environ["PAGEDLAB_CACHE"] = old
    return cold, cached, first_ever


def attention_inputs(seqs=8, heads=8, kv_heads=8, tokens=256, head=128, block=16, seed=0):
    rng = np.random.default_rng(seed)
    nblocks = seqs * tokens // block
    q = rng.standard_normal((seqs, heads, head)).astype(np.float32)
    k = rng.standard_normal((nblocks, block, kv_heads, head)).astype(np.float32)
    v = rng.standard_normal((nblocks, block, kv_heads, head)).astype(np.float32)
    tables = rng.permutation(nblocks).reshape(seqs, tokens // block).astype(np.int32)
    lens = np.full(seqs, tokens, np.int32)
    return q, k, v, tables, lens


def reference(q, k, v, tables, lens):
    seqs, heads, head = q.shape
    block, kv_heads = k.shape[1], k.shape[2]
    slots = (tables[:, :, None] * block + np.arange(block)).reshape(seqs, -1)
    K = k.reshape(-1, kv_heads, head)[slots].astype(np.float64)
    V = v.reshape(-1, kv_heads, head)[slots].astype(np.float64)
    group = heads // kv_heads
    K, V = np.repeat(K, group, axis=2), np.repeat(V, group, axis=2)
    s = np.einsum("shd,sthd->sht", q.astype(np.float64), K) / np.sqrt(head)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("sht,sthd->shd", p, V)


def attention(repeat, workers):
    code = (ROOT / "solutions" / "paged_attention.cu").read_text()
    kern = cuda.RawKernel(code, "paged_attention_v1", backend="cpu",
                          filename="paged_attention.cu").compile()
    q, k, v, tables, lens = attention_inputs()
    seqs, heads, head = q.shape
    block = k.shape[1]
    out = np.full_like(q, np.nan)
    args = (out, q, k, v, tables, lens, np.float32(1 / np.sqrt(head)), np.int32(k.shape[2]),
            np.int32(head), np.int32(block), np.int32(tables.shape[1]))
    base, _ = timed(lambda: reference(q, k, v, tables, lens), repeat)
    ref = reference(q, k, v, tables, lens)
    rows = []
    for schedule in cuda.SCHEDULES:
        out[:] = np.nan
        def run(schedule=schedule):
            kern((heads, seqs), (128,), args, shared_mem=int(lens.max()) * 4,
                 schedule=schedule, workers=workers)
        med, best = timed(run, repeat)
        err = float(np.abs(out - ref).max() / np.abs(ref).max())
        rows.append((schedule, med, best, err, LAST_CPU["mean"], kern.last_mode))
    # A fresh runner per launch (what every launch paid before runners were served)
    with env("PAGEDLAB_CUDA_SERVE", "0"):
        out[:] = np.nan
        med, best = timed(lambda: kern((heads, seqs), (128,), args, shared_mem=int(lens.max()) * 4,
                                       workers=workers), repeat)
        err = float(np.abs(out - ref).max() / np.abs(ref).max())
        rows.append(("fresh runner", med, best, err, LAST_CPU["mean"], kern.last_mode))
    # The same launch in this process (no runner to spawn, no copy of K and V into its region):
    # what the fibers and the kernel's own loops cost, apart from isolation.
    with env("PAGEDLAB_CUDA_ISOLATE", "0"):
        out[:] = np.nan
        med, best = timed(lambda: kern((heads, seqs), (128,), args, shared_mem=int(lens.max()) * 4,
                                       workers=workers), repeat)
        err = float(np.abs(out - ref).max() / np.abs(ref).max())
        rows.append(("in-process", med, best, err, LAST_CPU["mean"], kern.last_mode))
    return base, rows


def memory_read_time(repeat):
    """Seconds to read the decode's K and V (16.8 MB) once, at this machine's memory bandwidth
    as numpy sees it (a vectorised sum), measured in the same run: the floor of the decode."""
    _, k, v, _, _ = attention_inputs()
    k.sum(), v.sum()  # first touch
    return timed(lambda: (k.sum(), v.sum()), repeat * 2)[1]


def attention_args():
    q, k, v, tables, lens = attention_inputs()
    seqs, heads, head = q.shape
    out = np.full_like(q, np.nan)
    args = (out, q, k, v, tables, lens, np.float32(1 / np.sqrt(head)), np.int32(k.shape[2]),
            np.int32(head), np.int32(k.shape[1]), np.int32(tables.shape[1]))
    return (heads, seqs), args, int(lens.max()) * 4


def sanitizer_overhead(repeat, workers):
    """Median launch time with checks off, with each check alone and with all three."""
    code = (ROOT / "solutions" / "paged_attention.cu").read_text()
    kern = cuda.RawKernel(code, "paged_attention_v1", backend="cpu",
                          filename="paged_attention.cu").compile()
    grid, args, smem = attention_args()
    kern(grid, (128,), args, shared_mem=smem, check="all", workers=workers)  # build it first
    rows = []
    for check in (None, "race", "memcheck", "init", "race,memcheck,init"):
        med, _ = timed(lambda check=check: kern(grid, (128,), args, shared_mem=smem, check=check,
                                                workers=workers), repeat)
        rows.append((check or "off", med))
    # checks off on fibers (a checked launch always runs on them): what the ratios were against
    with env("PAGEDLAB_CUDA_COLLAPSE", "0"):
        med, _ = timed(lambda: kern(grid, (128,), args, shared_mem=smem, workers=workers), repeat)
        rows.append(("off, fibers", med))
    t = time.perf_counter()
    prof = kern.profile(grid, (128,), args, shared_mem=smem, workers=workers)
    return rows, time.perf_counter() - t, prof


_OTHER = r'''
import statistics, sys, time
sys.path.insert(0, sys.argv[1])
sys.path.insert(1, sys.argv[2])
from pagedlab import cuda
import bench_cuda_cpu as b
assert cuda.__file__.startswith(sys.argv[1]), cuda.__file__
code = (b.Path(sys.argv[1]) / "solutions" / "paged_attention.cu").read_text()
kern = cuda.RawKernel(code, "paged_attention_v1", backend="cpu", filename="paged_attention.cu").compile()
grid, args, smem = b.attention_args()
kern(grid, (128,), args, shared_mem=smem, workers=int(sys.argv[4]))
ts = []
for _ in range(int(sys.argv[3])):
    t = time.perf_counter()
    kern(grid, (128,), args, shared_mem=smem, workers=int(sys.argv[4]))
    ts.append(time.perf_counter() - t)
print(statistics.median(ts))
'''


def other_checkout_off(path, repeat, workers):
    """Checks-off launch time of the pagedlab in another checkout (same inputs, same run)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _OTHER, str(Path(path).resolve()),
                           str(Path(__file__).resolve().parent), str(repeat), str(workers)],
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    return float(proc.stdout.split()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--workers", type=int, default=None, help="OS workers (default: all cores)")
    ap.add_argument("--corpus", action="store_true",
                    help="also the corpus's larger kernels vs numpy (bench_cuda_corpus.py)")
    ap.add_argument("--compare-with", default=None, metavar="PATH",
                    help="another checkout (e.g. main) whose checks-off launch is timed too")
    a = ap.parse_args()
    workers = a.workers or cuda.executor.default_workers()
    print(f"pagedlab CPU executor benchmark ({workers} worker(s), {os.cpu_count()} cores)")
    iso, fresh, inproc = launch_overhead(a.repeat)
    print(f"launch overhead, 1 block x 32 threads: served runner {iso * 1e3:.2f} ms, fresh runner "
          f"{fresh * 1e3:.2f} ms, in-process {inproc * 1e3:.2f} ms  (isolation costs {iso / inproc:.1f}x "
          f"served, {fresh / inproc:.1f}x fresh)")
    cold, cached, first = build_times()
    print(f"build paged_attention.cu: cold {cold:.2f} s, cached {cached * 1e3:.2f} ms "
          f"({cold / cached:.0f}x faster), empty cache incl. runtime {first:.2f} s")
    base, rows = attention(a.repeat, workers)
    bw = memory_read_time(a.repeat)
    print(f"paged attention 8 seqs x 8 heads x 256 tokens x head 128, 128 threads/block "
          f"(numpy float64 reference: {base * 1e3:.1f} ms; reading K and V once at memory "
          f"bandwidth, numpy sum: {bw * 1e3:.2f} ms, so the 10x target is {10 * bw * 1e3:.1f} ms):")
    for schedule, med, best, err, cpu, mode in rows:
        verdict = "ok" if med < 0.3 else "ABOVE 0.3 s TARGET"
        within = "within" if best <= 10 * bw else "ABOVE"
        # wall time on a shared box is the load's; CPU time (the runner's) is the steadier figure
        overhead = ("no runner" if schedule == "in-process" else
                    f"launch overhead {(fresh if schedule == 'fresh runner' else iso) * 1e3:.1f} ms of it")
        print(f"  {schedule:12s} {mode:9s} median {med * 1e3:7.1f} ms  best {best * 1e3:7.1f} ms  cpu/launch {cpu * 1e3:6.1f} ms  "
              f"{med / base:5.2f}x reference  best {best / bw:5.1f}x the K/V read ({within} 10x; "
              f"{overhead})  max rel err {err:.1e}  [{verdict}]")
    if a.corpus:
        import bench_cuda_corpus
        bench_cuda_corpus.main(["--repeat", str(a.repeat)])

    rows, prof_time, prof = sanitizer_overhead(a.repeat, workers)
    off = rows[0][1]
    print("sanitizer on the same launch (pagedlab.cuda.sanitizer, on fibers; target: all checks <= 10x "
          "off; off runs collapsed; every corpus kernel's ratio: --corpus):")
    fibers = rows[-1][1]
    for check, med in rows:
        verdict = "" if check.startswith("off") else (
            "  [ok]" if med <= 10 * off else "  [ABOVE 10x TARGET]")
        print(f"  check={check:20s} median {med * 1e3:7.1f} ms  {med / off:5.2f}x checks off "
              f"(collapsed), {med / fibers:5.2f}x checks off on fibers{verdict}")
    print(f"  memory-access profile: {prof_time * 1e3:.0f} ms; the key load "
          f"(dot += q_shared[d] * k[d]) takes "
          f"{[r for r in prof.rows if r.space == 'global' and r.requests > 10000][0].sectors_per_request:.0f}"
          " sectors per warp request (4 would be coalesced)")
    if a.compare_with:
        # Alternate the two checkouts in fresh processes and keep each one's best median: on a
        # shared machine the load changes faster than one measurement takes.
        here, there = [], []
        for _ in range(3):
            here.append(other_checkout_off(ROOT, a.repeat, workers))
            there.append(other_checkout_off(a.compare_with, a.repeat, workers))
        print(f"  checks off, this checkout {min(here) * 1e3:.1f} ms vs {a.compare_with} "
              f"{min(there) * 1e3:.1f} ms ({min(here) / min(there):.2f}x; best of 3 alternating runs)")


if __name__ == "__main__":
    main()
