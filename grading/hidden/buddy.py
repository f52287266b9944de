"""Hidden checks for Task 12 (instructor only): traces on memories of every size class; the child
runs `pagedlab.drivers.drawn.buddy.trace` on the traces as data."""

from __future__ import annotations

import random

from pagedlab.drivers.drawn import buddy as drawn
from pagedlab.spec.catalog import hidden_scenario
from pagedlab.spec.domains import domain

RULE = ("notebook 09, the buddy allocator: alloc splits the smallest free block that fits (lowest address "
        "first, keeping the lower half); free merges with the buddy at o ^ s while that buddy is free")


def _trace(rng, total: int, steps: int) -> dict:
    """The first requests of every request class (1, a power of two, sizes that round up), then a
    drawn trace; the driver adds the whole memory and a request that cannot fit, and frees all."""
    sizes = [1, 2 ** rng.randrange(1, 4), rng.choice([3, 5, 6, 7, 9, 12]), 2 ** rng.randrange(2, 5) + 1]
    trace = [["alloc", 0.0, min(n, total)] for n in sizes]
    trace += [["free" if rng.random() < 0.45 else "alloc", rng.random(), rng.randint(1, max(1, total // 4))]
              for _ in range(steps - len(sizes))]
    return {"total": total, "steps": trace}


@hidden_scenario("task12", "a trace of allocs and frees drawn at grading time", rule=RULE, driver=drawn.trace)
def trace_random(seed):
    rng = random.Random(seed)
    d = domain("task12")
    # A trace on every memory class: 64 slots and each power of two past it up to 2048 (the
    # driver runs the one-slot memory on its own). Each: the whole memory and one slot more,
    # every request class, a drawn trace, everything freed.
    totals = [k.draw(rng) for k in d.axis("memory") if k.name != "1 slot"]
    return {"traces": [_trace(rng, total, 120) for total in totals]}
