"""Hidden checks for Task 12 (instructor only): random traces on a memory of a drawn size."""

from __future__ import annotations

from pagedlab.checks.buddy import _state
from pagedlab.checks.framework import check, see

RULE = ("notebook 09, the buddy allocator: alloc splits the smallest free block that fits (lowest address "
        "first, keeping the lower half); free merges with the buddy at o ^ s while that buddy is free")


@check("task12", "a trace of allocs and frees drawn at grading time", rule=RULE, hidden=True)
def trace_random(run):
    rng = run.rng
    buddy = run.load("buddy")
    # A one-slot memory: the whole of it, then nothing left.
    tiny = buddy.BuddyAllocator(1)
    see("one-slot memory: alloc(1), alloc(1), free, alloc(1)",
        [tiny.alloc(1), tiny.alloc(1), tiny.free(0), tiny.alloc(1), _state(tiny)])
    total = 2 ** rng.randrange(5, 12)
    a = buddy.BuddyAllocator(total)
    # The whole memory, then a request that cannot fit, then everything free again.
    whole = a.alloc(total)
    see(f"alloc({total}) (the whole memory), then alloc(1)", [whole, a.alloc(1), _state(a)])
    a.free(whole)
    see(f"free({whole})", _state(a))
    live = []
    # The first requests: one slot, a power of two, sizes that round up.
    sizes = [1, 2 ** rng.randrange(1, 4), rng.choice([3, 5, 6, 7, 9, 12]), 2 ** rng.randrange(2, 5) + 1]
    for step in range(200):
        if live and (rng.random() < 0.45 or len(live) > 30) and step >= len(sizes):
            offset = live.pop(rng.randrange(len(live)))
            a.free(offset)
            see(f"step {step}: free({offset})", _state(a))
        else:
            n = sizes[step] if step < len(sizes) else rng.randint(1, total // 4)
            got = a.alloc(n)
            if got is not None:
                live.append(got)
            see(f"step {step}: alloc({n})", [got, _state(a)])
    for offset in live:  # everything freed: the buddies merge back into one block
        a.free(offset)
    see("after freeing every block", _state(a))
