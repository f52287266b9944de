"""Time the utilization simulator: 10,000 requests per policy (target: < 10 s each on 2 cores).

The baseline, measured in the same run, is `simulate_stepwise` (one decode step at a time) on a
smaller stream; its per-request cost is scaled to 10,000 requests for the ratio.

    .venv/bin/python benchmarks/bench_simulator.py [--requests 10000]
"""

from __future__ import annotations

import argparse
import time

from pagedlab import simulator as S


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--baseline-requests", type=int, default=300)
    args = ap.parse_args()

    print(f"{'workload':14s} {'policy':20s} {'seconds':>8s} {'stepwise est.':>14s} {'speed-up':>9s}")
    worst = 0.0
    for workload in (S.SHAREGPT, S.ALPACA):
        (p, o), t_sample = timed(S.sample_requests, workload, args.requests, seed=0)
        small = S.sample_requests(workload, args.baseline_requests, seed=0)
        for policy, kw in [("max", {}), ("pow2", {}), ("oracle", {}),
                           ("paged", {"block_size": 8}), ("paged", {"block_size": 16}),
                           ("paged", {"block_size": 128})]:
            result, t = timed(S.simulate, p, o, policy, **kw)
            _, t_small = timed(S.simulate_stepwise, *small, policy, **kw)
            est = t_small * args.requests / args.baseline_requests
            worst = max(worst, t)
            print(f"{workload.name:14s} {result.label:20s} {t:8.3f} {est:13.1f}s {est / t:8.0f}x")
        print(f"{workload.name:14s} {'(sampling lengths)':20s} {t_sample:8.3f}")
    print(f"slowest run: {worst:.2f} s for {args.requests} requests "
          f"({'within' if worst < 10 else 'OVER'} the 10 s budget)")
    return 0 if worst < 10 else 1


if __name__ == "__main__":
    raise SystemExit(main())
