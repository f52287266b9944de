"""Hidden checks for Task 11 (instructor only): random request streams drawn from `run.seed`."""

from __future__ import annotations

from pagedlab.checks.framework import check, see
from pagedlab.checks.prefix_cache import RULE as PUBLIC_RULE
from pagedlab.checks.prefix_cache import _state, random_ops, stream_calls

RULE = (f"{PUBLIC_RULE}: allocate returns the number of cached prompt tokens (None if it cannot fit); "
        "popleft reuses the LRU block; free appends tail first; a hit unlinks its block")


def _planned(rng, block_size):
    """Every grading: a prompt of whole blocks allocated twice (a full hit), freed (cached in the
    LRU queue), then extended by one token (a hit plus a new block)."""
    prompt = [rng.randrange(1000) for _ in range(2 * block_size)]
    first, second, third = 10**6, 10**6 + 1, 10**6 + 2
    return [("allocate", first, prompt), ("allocate", second, list(prompt)), ("free", first, None),
            ("free", second, None), ("allocate", third, prompt + [rng.randrange(4)]), ("free", third, None)]


@check("task11", "a request stream drawn at grading time, on a pool of a drawn size", rule=RULE, hidden=True)
def stream_random(run):
    m = run.load("prefix_cache")
    # A small pool (evictions and refused requests) with small blocks, and a larger one.
    for pool, (num_blocks, block_size) in enumerate(((run.rng.randrange(5, 9), run.rng.choice([1, 2])),
                                                     (run.rng.randrange(12, 24), run.rng.choice([3, 4, 5])))):
        mgr = m.PrefixCacheManager(num_blocks, block_size)
        ops = _planned(run.rng, block_size) + random_ops(run.seed + pool, steps=120)
        for n, op, rid, _arg, got in stream_calls(ops, mgr):
            where = f"pool {pool} ({num_blocks} blocks of {block_size}), op {n}"
            see(f"{where}: {op}(request {rid}) returned", got)
            see(f"{where}: pool state", _state(mgr))
