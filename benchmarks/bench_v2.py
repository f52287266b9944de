"""Benchmark the v2 split-K kernel against v1 on the CPU executor (notebook 10, Task 14).

For a few (batch, context) shapes with 4 query heads over 1 kv head and head_size 128, measures
in one run the v1 launch (the baseline of the ratios) and the v2 launch + reduce of
solutions/, and prints blocks per launch and v2/v1 time. On a CPU with a few cores both kernels
have enough blocks to keep every worker busy, so v2 gains nothing here and pays a second launch
(a fork, a few ms) and its temporaries: near parity for long contexts, up to ~2x for short ones.
It is a GPU with ~100 SMs that v1 leaves idle. Measured on a busy 2-core machine: 1.9x at 2048
tokens, 0.9x at 8192. Also times the scheduler simulation of notebook 10 (200 requests, both
policies). Targets: v2/v1 <= 2 for every shape, each simulation under 1 s.

Run: .venv/bin/python benchmarks/bench_v2.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

from pagedlab import kernels
from pagedlab import scheduler as sch
from pagedlab.reference import make_paged_batch, max_relative_error


def timed(fn, repeat):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'batch':>5} {'context':>8} | {'v1 blocks':>9} {'v1 s':>7} | {'v2 blocks':>9} {'v2 s':>7} | "
          f"{'v2/v1':>6} | max rel err v2")
    for batch, context in ((1, 2048), (1, 8192), (4, 4096)):
        b = make_paged_batch([context] * batch, num_heads=4, num_kv_heads=1, head_size=128, block_size=16, seed=1)
        a = b.numpy()
        for version in ("v1", "v2"):  # build both before timing
            kernels.decode_on_executor(*a, impl="solutions", version=version)
        t1 = timed(lambda a=a: kernels.decode_on_executor(*a, impl="solutions", version="v1"), args.repeat)
        t2 = timed(lambda a=a: kernels.decode_on_executor(*a, impl="solutions", version="v2"), args.repeat)
        err = max_relative_error(kernels.decode_on_executor(*a, impl="solutions", version="v2"), b.expected())
        blocks = 4 * batch
        print(f"{batch:>5} {context:>8} | {blocks:>9} {t1:>7.3f} | "
              f"{blocks * math.ceil(context / kernels.PARTITION_SIZE):>9} {t2:>7.3f} | {t2 / t1:>6.2f} | {err:.1e}")
    reqs = sch.synthetic_requests(200, prompt_len=600, output_len=300, rate=40, seed=10)
    for policy in sch.POLICIES:
        took = timed(lambda p=policy: sch.simulate(reqs, num_gpu_blocks=2000, num_cpu_blocks=8000, policy=p), args.repeat)
        print(f"scheduler simulation, 200 requests, policy={policy}: {took:.3f} s")


if __name__ == "__main__":
    main()
