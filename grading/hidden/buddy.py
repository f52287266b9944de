"""Hidden checks for Task 12 (instructor only): traces on a memory of a drawn size; the child
runs `pagedlab.checks.drawn.buddy.trace` on the trace as data."""

from __future__ import annotations

import random

from pagedlab.checks.drawn import buddy as drawn
from pagedlab.checks.framework import hidden_scenario

RULE = ("notebook 09, the buddy allocator: alloc splits the smallest free block that fits (lowest address "
        "first, keeping the lower half); free merges with the buddy at o ^ s while that buddy is free")


@hidden_scenario("task12", "a trace of allocs and frees drawn at grading time", rule=RULE, driver=drawn.trace)
def trace_random(seed):
    rng = random.Random(seed)
    # Always: a one-slot memory, then the whole memory and a request that cannot fit, everything
    # freed (full merge); the first requests are one slot, a power of two, sizes that round up.
    total = 2 ** rng.randrange(5, 12)
    sizes = [1, 2 ** rng.randrange(1, 4), rng.choice([3, 5, 6, 7, 9, 12]), 2 ** rng.randrange(2, 5) + 1]
    steps = [["alloc", 0.0, n] for n in sizes]
    steps += [["free" if rng.random() < 0.45 else "alloc", rng.random(), rng.randint(1, total // 4)]
              for _ in range(200 - len(sizes))]
    return {"total": total, "steps": steps}
