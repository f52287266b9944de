"""Hidden checks for Task 11 (instructor only): random request streams drawn from `run.seed`."""

from __future__ import annotations

from pagedlab.checks.framework import check, see
from pagedlab.checks.prefix_cache import _state, random_ops

RULE = "the same rules as the public checks, on request streams drawn at grading time"


@check("task11", "a request stream drawn at grading time, on a pool of a drawn size", rule=RULE, hidden=True)
def stream_random(run):
    m = run.load("prefix_cache")
    num_blocks, block_size = run.rng.randrange(6, 20), run.rng.choice([2, 3, 4])
    mgr = m.PrefixCacheManager(num_blocks, block_size)
    admitted = set()
    for n, (op, rid, arg) in enumerate(random_ops(run.seed, steps=160)):
        if op == "allocate":
            got = mgr.allocate(rid, arg)
            if got is not None:
                admitted.add(rid)
        elif rid not in admitted:
            continue
        elif op == "append":
            got = mgr.append_token(rid, arg)
        else:
            got = mgr.free(rid)
            admitted.discard(rid)
        see(f"op {n}: {op}(request {rid}) returned", got)
        see(f"op {n}: pool state", _state(mgr))
