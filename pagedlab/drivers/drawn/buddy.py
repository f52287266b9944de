"""Driver of the hidden check of Task 12 on a drawn scenario: a memory size and a trace of
allocs and frees."""

from __future__ import annotations

from ...spec.catalog import scenario_driver
from ..buddy import _state as buddy_state
from ..record import see


@scenario_driver
def trace(run):
    """A one-slot memory, then for each trace ({"total", "steps"}, or the scenario itself): the
    whole memory and one more, then steps [op, pick, n]: "alloc" n slots, or "free" the live
    block a fraction `pick` points at (alloc n when none is live; a free whenever more than 30
    are), then every block freed."""
    buddy = run.load("buddy")
    tiny = buddy.BuddyAllocator(1)
    see("one-slot memory: alloc(1), alloc(1), free, alloc(1)",
        [tiny.alloc(1), tiny.alloc(1), tiny.free(0), tiny.alloc(1), buddy_state(tiny)])
    for n_trace, sc in enumerate(run.scenario.get("traces", [run.scenario])):
        where = f"memory {n_trace}, " if n_trace else ""
        total = sc["total"]
        a = buddy.BuddyAllocator(total)
        whole = a.alloc(total)
        see(f"{where}alloc({total}) (the whole memory), then alloc(1)", [whole, a.alloc(1), buddy_state(a)])
        a.free(whole)
        see(f"{where}free({whole})", buddy_state(a))
        live = []
        for step, (op, pick, n) in enumerate(sc["steps"]):
            if live and (op == "free" or len(live) > 30):
                offset = live.pop(min(int(pick * len(live)), len(live) - 1))
                a.free(offset)
                see(f"{where}step {step}: free({offset})", buddy_state(a))
            else:
                got = a.alloc(n)
                if got is not None:
                    live.append(got)
                see(f"{where}step {step}: alloc({n})", [got, buddy_state(a)])
        for offset in live:  # everything freed: the buddies merge back into one block
            a.free(offset)
        see(f"{where}after freeing every block", buddy_state(a))
