"""Hidden checks for Task 11 (instructor only): request streams the grader draws; the child runs
`pagedlab.checks.drawn.prefix_cache.stream` on them as data."""

from __future__ import annotations

import random

from pagedlab.checks.drawn import prefix_cache as drawn
from pagedlab.checks.framework import hidden_scenario
from pagedlab.checks.prefix_cache import RULE as PUBLIC_RULE
from pagedlab.checks.prefix_cache import random_ops

RULE = (f"{PUBLIC_RULE}: allocate returns the number of cached prompt tokens (None if it cannot fit); "
        "popleft reuses the LRU block; free appends tail first; a hit unlinks its block")


def _planned(rng, block_size):
    """Every grading: a prompt of whole blocks allocated twice (a full hit), freed (cached in the
    LRU queue), then extended by one token (a hit plus a new block)."""
    prompt = [rng.randrange(1000) for _ in range(2 * block_size)]
    first, second, third = 10**6, 10**6 + 1, 10**6 + 2
    return [["allocate", first, prompt], ["allocate", second, list(prompt)], ["free", first, None],
            ["free", second, None], ["allocate", third, prompt + [rng.randrange(4)]], ["free", third, None]]


@hidden_scenario("task11", "a request stream drawn at grading time, on a pool of a drawn size", rule=RULE,
                 driver=drawn.stream)
def stream_random(seed):
    rng = random.Random(seed)
    # A small pool (evictions and refused requests) with small blocks, and a larger one.
    pools = []
    for num_blocks, block_size in ((rng.randrange(5, 9), rng.choice([1, 2])), (rng.randrange(12, 24), rng.choice([3, 4, 5]))):
        ops = _planned(rng, block_size) + [list(op) for op in random_ops(rng.randrange(2**31), steps=120)]
        pools.append({"blocks": num_blocks, "block_size": block_size, "ops": ops})
    return {"pools": pools}
