"""Benchmark pagedlab's CPU executor for CUDA C (spec §6.3).

Measures, in one run:
  * launch overhead of an empty-ish kernel (forked/isolated launch and in-process launch),
  * build time: cold (new source, runtime already built) and cached (hash hit),
  * the paged-attention decode kernel (solutions/paged_attention.cu, 128 threads) on
    8 seqs x 8 heads x 256 tokens x head 128, per schedule, against a numpy float64 reference
    computed in the same run (the baseline the ratios refer to). Target: < 0.3 s per launch.

Run: .venv/bin/python benchmarks/bench_cuda_cpu.py [--repeat 5] [--workers N]
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


def timed(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), min(times)


def launch_overhead(repeat):
    k = cuda.RawKernel(TINY, "touch", backend="cpu").compile()
    out = np.zeros(32, np.float32)
    iso, _ = timed(lambda: k((1,), (32,), (out,)), repeat * 4)
    os.environ["PAGEDLAB_CUDA_ISOLATE"] = "0"
    try:
        inproc, _ = timed(lambda: k((1,), (32,), (out,)), repeat * 4)
    finally:
        del os.environ["PAGEDLAB_CUDA_ISOLATE"]
    return iso, inproc


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
        rows.append((schedule, med, best, err))
    return base, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--workers", type=int, default=None, help="OS workers (default: all cores)")
    ap.add_argument("--corpus", action="store_true",
                    help="also the corpus's larger kernels vs numpy (bench_cuda_corpus.py)")
    a = ap.parse_args()
    workers = a.workers or cuda.executor.default_workers()
    print(f"pagedlab CPU executor benchmark ({workers} worker(s), {os.cpu_count()} cores)")
    iso, inproc = launch_overhead(a.repeat)
    print(f"launch overhead, 1 block x 32 threads: isolated (fork) {iso * 1e3:.2f} ms, "
          f"in-process {inproc * 1e3:.2f} ms  (isolation costs {iso / inproc:.1f}x)")
    cold, cached, first = build_times()
    print(f"build paged_attention.cu: cold {cold:.2f} s, cached {cached * 1e3:.2f} ms "
          f"({cold / cached:.0f}x faster), empty cache incl. runtime {first:.2f} s")
    base, rows = attention(a.repeat, workers)
    print(f"paged attention 8 seqs x 8 heads x 256 tokens x head 128, 128 threads/block "
          f"(numpy float64 reference: {base * 1e3:.1f} ms):")
    for schedule, med, best, err in rows:
        verdict = "ok" if med < 0.3 else "ABOVE 0.3 s TARGET"
        print(f"  {schedule:12s} median {med * 1e3:7.1f} ms  best {best * 1e3:7.1f} ms  "
              f"{med / base:5.2f}x reference  max rel err {err:.1e}  [{verdict}]")
    if a.corpus:  # issue 22
        import bench_cuda_corpus
        bench_cuda_corpus.main(["--repeat", str(a.repeat)])


if __name__ == "__main__":
    main()
