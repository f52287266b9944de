"""Benchmark the kernel runner: isolated launches in a Python-free process.

Measures, in one run:
  * launch overhead of a one-block kernel and of the paged-attention decode kernel
    (solutions/paged_attention.cu, 8 seqs x 8 heads x 256 tokens x head 128) through the
    runner, against the in-process launch (PAGEDLAB_CUDA_ISOLATE=0) in the same process;
  * with --compare-with PATH (another checkout, e.g. main before the runner, whose isolated
    launch forks Python): the same launches there, in fresh processes alternating with this
    checkout's, best median of 3 each. Target: paged attention <= 1.2x the fork.
  * with --grade: `pagedlab grade --tasks 10,14 --impl solutions` wall time here and (with
    --compare-with) there, alternating. Target: <= 1.2x.

Run: .venv/bin/python benchmarks/bench_kernel_runner.py [--repeat 10] [--compare-with /work/main] [--grade]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Run in a fresh interpreter with the checkout's pagedlab first on the path; prints two medians.
_LAUNCHES = r'''
import os, statistics, sys, time
sys.path.insert(0, sys.argv[1])
sys.path.insert(1, sys.argv[2])
os.environ["PAGEDLAB_CUDA_ISOLATE"] = sys.argv[4]
import numpy as np
from pagedlab import cuda
import bench_cuda_cpu as b
assert cuda.__file__.startswith(sys.argv[1]), cuda.__file__
tiny = cuda.RawKernel(b.TINY, "touch", backend="cpu").compile()
out = np.zeros(32, np.float32)
code = (b.Path(sys.argv[1]) / "solutions" / "paged_attention.cu").read_text()
kern = cuda.RawKernel(code, "paged_attention_v1", backend="cpu", filename="paged_attention.cu").compile()
grid, args, smem = b.attention_args()
def median(fn, n):
    fn()
    ts = []
    for _ in range(n):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return statistics.median(ts)
n = int(sys.argv[3])
print(median(lambda: tiny((1,), (32,), (out,)), 4 * n),
      median(lambda: kern(grid, (128,), args, shared_mem=smem), n))
'''


def launches(checkout: Path, repeat: int, isolate: str) -> tuple[float, float]:
    proc = subprocess.run([sys.executable, "-c", _LAUNCHES, str(checkout.resolve()),
                           str(Path(__file__).resolve().parent), str(repeat), isolate],
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    tiny, attention = proc.stdout.split()[-2:]
    return float(tiny), float(attention)


def grade_time(checkout: Path) -> float:
    t = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=str(checkout.resolve()))  # the grader's children too
    proc = subprocess.run([sys.executable, "-m", "pagedlab", "grade", "--tasks", "10,14",
                           "--impl", "solutions"],
                          capture_output=True, text=True, timeout=1800, cwd=checkout, env=env)
    total = re.search(r"^total\s+(\d+)/(\d+)", proc.stdout, re.M)
    if proc.returncode != 0 or not total or total[1] != total[2]:  # the reference: full marks
        raise RuntimeError(proc.stdout[-2000:] + proc.stderr[-2000:])
    return time.perf_counter() - t


def best(fn, *args, rounds=3):
    return min(fn(*args) for _ in range(rounds))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--compare-with", type=Path, default=None, metavar="PATH")
    ap.add_argument("--grade", action="store_true", help="also time grading Tasks 10 and 14")
    a = ap.parse_args()
    here, inproc, there = [], [], []
    for _ in range(3):  # alternate: on a shared machine the load changes between runs
        here.append(launches(ROOT, a.repeat, "1"))
        inproc.append(launches(ROOT, a.repeat, "0"))
        if a.compare_with:
            there.append(launches(a.compare_with, a.repeat, "1"))
    rows = [("runner", here), ("in-process", inproc)] + ([("other (fork)", there)] if there else [])
    print("median launch time, best of 3 alternating fresh processes:")
    print(f"  {'':14s} {'1 block x 32 threads':>22s} {'paged attention v1':>20s}")
    for name, res in rows:
        print(f"  {name:14s} {min(r[0] for r in res) * 1e3:19.2f} ms {min(r[1] for r in res) * 1e3:17.1f} ms")
    if there:
        ratio = min(r[1] for r in here) / min(r[1] for r in there)
        print(f"  paged attention: runner / fork = {ratio:.2f}x  "
              f"[{'ok' if ratio <= 1.2 else 'ABOVE 1.2x TARGET'}]")
    if a.grade:
        g_here, g_there = [], []
        for _ in range(2):
            g_here.append(grade_time(ROOT))
            if a.compare_with:
                g_there.append(grade_time(a.compare_with))
        line = f"grade --tasks 10,14 --impl solutions: this checkout {min(g_here):.1f} s"
        if g_there:
            r = min(g_here) / min(g_there)
            line += (f", {a.compare_with} {min(g_there):.1f} s ({r:.2f}x) "
                     f"[{'ok' if r <= 1.2 else 'ABOVE 1.2x TARGET'}]")
        print(line)


if __name__ == "__main__":
    main()
