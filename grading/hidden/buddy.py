"""Hidden checks for Task 12 (instructor only): random traces on a memory of a drawn size."""

from __future__ import annotations

from pagedlab.checks.buddy import _state
from pagedlab.checks.framework import check, see

RULE = "the same rules as the public checks, on traces drawn at grading time"


@check("task12", "a trace of allocs and frees drawn at grading time", rule=RULE, hidden=True)
def trace_random(run):
    rng = run.rng
    total = 2 ** rng.randrange(5, 12)
    a = run.load("buddy").BuddyAllocator(total)
    live = []
    for step in range(200):
        if live and (rng.random() < 0.45 or len(live) > 30):
            offset = live.pop(rng.randrange(len(live)))
            a.free(offset)
            see(f"step {step}: free({offset})", _state(a))
        else:
            n = rng.randint(1, total // 4)
            got = a.alloc(n)
            if got is not None:
                live.append(got)
            see(f"step {step}: alloc({n})", [got, _state(a)])
