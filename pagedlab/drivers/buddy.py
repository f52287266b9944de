"""Graded checks for Task 12: the buddy allocator behind the contiguous baselines (notebook 09).

The checks drive the student's `buddy` module through `BuddyAllocator` and compare it with
sequences traced by hand (the notebook draws the first one) and, call by call on seeded random
traces, with the reference solution's record of the same traces (`expected.json`; the judge
compares).
"""

from __future__ import annotations

import random

from ..spec.catalog import CheckFailure, check
from .hints import When
from .record import expect, expect_equal, see

RULE = "notebook 09, the buddy allocator"


def _new(run, total):
    return run.load("buddy").BuddyAllocator(total)


def _state(a) -> dict:
    return {"free": a.free_blocks(), "allocated": a.allocated_blocks()}


def _expect_tiling(a, what):
    """Free and allocated blocks are aligned to their size and cover [0, total) exactly once.
    One observation however many blocks there are: a count that differs is a value, not a path."""
    blocks = sorted(a.free_blocks() + a.allocated_blocks())
    at, bad = 0, None
    for offset, size in blocks:
        if bad is None and not (offset == at and offset % size == 0):
            bad = at
        at += size
    expect(bad is None, f"{what}: the free and allocated blocks tile the memory",
           rule=f"{RULE}: every block of 2**k slots starts at a multiple of 2**k; blocks never overlap",
           expected=f"a block starting at {bad}, aligned to its size", actual=f"{blocks}")
    expect_equal(at, a.total_slots, f"{what}: slots covered by free + allocated blocks",
                 rule=f"{RULE}: no slot is lost or counted twice")


def _free_blocks_with(bug: str, total: int, calls) -> list:
    """The free blocks after each of `calls` ((name, argument) pairs) for an allocator with one
    known bug in free: what the judge compares a student's free list with to pick the hint."""
    top = total.bit_length() - 1
    free = [set() for _ in range(top + 1)]
    free[top].add(0)
    allocated: dict[int, int] = {}
    found = []
    for name, n in calls:
        if name == "alloc":
            order = (n - 1).bit_length()
            k = next(k for k in range(order, top + 1) if free[k])
            offset = min(free[k])
            free[k].remove(offset)
            while k > order:
                k -= 1
                free[k].add(offset + (1 << k))
            allocated[offset] = order
        else:
            offset, order = n, allocated.pop(n)
            while order < top:
                size = 1 << order
                buddy = offset + size if bug.startswith("plus") else offset ^ size
                if bug == "not_allocated":  # "not the start of an allocated block" taken as free
                    if buddy in allocated:
                        break
                    free[order].discard(buddy)
                elif buddy in free[order]:
                    free[order].remove(buddy)
                else:
                    break
                offset = offset if bug == "plus" else offset & ~size
                order += 1
            free[order].add(offset)
        found.append(sorted([o, 1 << k] for k, offsets in enumerate(free) for o in offsets))
    return found


# Read off the student's free list by the judge (hints.py): true whatever the code that made it.
UNMERGED = [When("unmerged_buddies", "{a} and {b} are buddies and both free, yet not merged into {merged}: after "
                                     "each merge, look for the merged block's buddy one order up, and go on as long "
                                     "as it is free (up to the whole memory)")]
_PLUS_HINT = "o + s finds the buddy of a lower half only; o ^ s works for both halves"
_NOT_ALLOCATED_HINT = ("a buddy may merge only when it is on the free list of its size: a buddy that is not the "
                       "start of an allocated block can still be split, with part of it in use")


def _bug_hints(total: int, calls) -> list[list[When]]:
    """For each call: hints shown when the student's free blocks are what a known bug leaves."""
    variants = [(bug, _free_blocks_with(bug, total, calls)) for bug in ("plus", "plus_masked", "not_allocated")]
    return [[When("equals", _NOT_ALLOCATED_HINT if bug == "not_allocated" else _PLUS_HINT, found[i])
             for bug, found in variants] for i in range(len(calls))]


# Check names: the later checks rely on these rules (`follows`), so a failure of theirs is not
# explained again under a later one.
HAND = "a hand-traced sequence of splits and merges"
XOR = "the buddy is found by XOR, merging never crosses a block boundary"
LOWEST = "lowest address first among free blocks of one size"
SMALLEST = "takes the smallest free block that fits"
ROUNDING = "sizes are rounded up to a power of two"
FULL_MERGE = "freeing everything, in any order, merges back to one block"
BAD_INPUT = "rejects bad input and changes nothing"


# Hand-traced on 16 slots (notebook 09 draws the same sequence). (call, argument, result, free blocks)
TRACE_16 = [
    ("alloc", 3, 0, [(4, 4), (8, 8)]),
    ("alloc", 1, 4, [(5, 1), (6, 2), (8, 8)]),
    ("alloc", 4, 8, [(5, 1), (6, 2), (12, 4)]),
    ("alloc", 2, 6, [(5, 1), (12, 4)]),
    ("free", 4, None, [(4, 2), (12, 4)]),
    ("free", 6, None, [(4, 4), (12, 4)]),
    ("free", 0, None, [(0, 8), (12, 4)]),
    ("free", 8, None, [(0, 16)]),
]


@check("task12", HAND, rule=f"{RULE}: split on alloc, merge on free")
def hand_trace(run):
    a = _new(run, 16)
    done = []
    hints = _bug_hints(16, [(call, arg) for call, arg, _, _ in TRACE_16])
    for step, (call, arg, result, free) in enumerate(TRACE_16):
        got = getattr(a, call)(arg)
        done.append(f"{call}({arg})")
        if call == "alloc":
            expect_equal(got, result, f"offset returned by {' ; '.join(done)} on 16 slots",
                         rule=f"{RULE}: take the smallest free block that fits, split it, keep the lower half")
            # The offset can be right with the wrong size (alloc(3) taking 2 slots at 0): cite rounding.
            expect_equal(dict(a.allocated_blocks()).get(got), 1 << (arg - 1).bit_length(),
                         f"size of the block {call}({arg}) took",
                         rule=f"{RULE}: n is rounded up to the next power of two (3 -> 4, 5 -> 8)")
        expect_equal(a.free_blocks(), free, f"free blocks (offset, size) after {' ; '.join(done)}",
                     rule=f"{RULE}: split halves go to the free lists; a freed block merges with its "
                          f"buddy while the buddy is free",
                     hint="draw the 16 slots on paper and replay the calls", when=hints[step] + UNMERGED)


@check("task12", XOR,
       rule=f"{RULE}: buddy = offset ^ size")
def xor_buddy(run):
    a = _new(run, 8)
    offsets = [a.alloc(2) for _ in range(4)]
    expect_equal(offsets, [0, 2, 4, 6], "offsets of four alloc(2) on 8 slots",
                 rule=f"{RULE}: a split keeps the lower half and frees the upper one, and a 2-slot request takes "
                      f"exactly 2 slots: the four blocks fill 8 slots from 0 up")
    steps = [(4, [(4, 2)]), (2, [(2, 2), (4, 2)]), (0, [(0, 4), (4, 2)]), (6, [(0, 8)])]
    hints = _bug_hints(8, [("alloc", 2)] * 4 + [("free", offset) for offset, _ in steps])[4:]
    done = []
    for step, (offset, free) in enumerate(steps):
        a.free(offset)
        done.append(f"free({offset})")
        expect_equal(a.free_blocks(), free, f"free blocks after four alloc(2) and {' ; '.join(done)}",
                     rule=f"{RULE}: the buddy of the block of size s at offset o is at o ^ s; "
                          f"(2, 2) and (4, 2) are neighbours but not buddies",
                     when=hints[step] + UNMERGED)
        _expect_tiling(a, f"after {' ; '.join(done)}")


@check("task12", LOWEST, rule=f"{RULE}: deterministic placement")
def lowest_address(run):
    a = _new(run, 16)
    got = [a.alloc(4) for _ in range(4)]
    expect_equal(got, [0, 4, 8, 12], "offsets of four alloc(4) on 16 slots",
                 rule=f"{RULE}: a split keeps the lower half and frees the upper one, and a 4-slot request takes "
                      f"exactly 4 slots: the four blocks fill 16 slots from 0 up")
    a.free(12)
    a.free(4)
    expect_equal(a.free_blocks(), [(4, 4), (12, 4)], "free blocks after freeing 12 and 4",
                 rule=f"{RULE}: 4 and 12 are not buddies of free blocks, so nothing merges")
    expect_equal(a.alloc(4), 4, "alloc(4) with free 4-slot blocks at 4 and 12",
                 rule=f"{RULE}: the lowest free offset of the right size is used",
                 hint="take min() of the free list, not an arbitrary or the last element")
    expect_equal(a.alloc(1), 12, "alloc(1) when the only free block is (12, 4)",
                 rule=f"{RULE}: a split keeps the lower half")


@check("task12", SMALLEST, rule=f"{RULE}: split as little as possible")
def smallest_fit(run):
    a = _new(run, 16)
    expect_equal([a.alloc(8), a.alloc(2)], [0, 8], "offsets of alloc(8), alloc(2) on 16 slots",
                 rule=f"{RULE}: a split keeps the lower half: alloc(8) takes 0 and frees (8, 8), and alloc(2) "
                      f"splits that block from its start")
    expect_equal(a.free_blocks(), [(10, 2), (12, 4)], "free blocks after alloc(8), alloc(2)",
                 rule=f"{RULE}: splitting (8, 8) leaves (10, 2) and (12, 4) free")
    expect_equal(a.alloc(2), 10, "alloc(2) with free blocks (10, 2) and (12, 4)",
                 rule=f"{RULE}: a free block of exactly the right size is used before a bigger one is split")
    expect_equal(a.alloc(1), 12, "then alloc(1)", rule=f"{RULE}: split the smallest block that fits")
    expect_equal(a.free_blocks(), [(13, 1), (14, 2)], "free blocks after alloc(8), alloc(2), alloc(2), alloc(1)",
                 rule=f"{RULE}: split the smallest block that fits")


@check("task12", ROUNDING, rule=f"{RULE}: a block holds 2**k slots")
def rounding(run):
    a = _new(run, 64)
    calls = [(3, 0), (5, 8), (1, 4), (16, 16), (33, None), (32, 32)]
    done = []
    for n, offset in calls:
        done.append(f"alloc({n})")
        expect_equal(a.alloc(n), offset, f"offset returned by {' ; '.join(done)} on 64 slots",
                     rule=f"{RULE}: n is rounded up to the next power of two (3 -> 4, 5 -> 8, 33 -> 64), the "
                          f"smallest free block that fits is split, and each split keeps the lower half",
                     hint="the order is the smallest k with 2**k >= n: (n - 1).bit_length()")
    expect_equal(a.allocated_blocks(), [(0, 4), (4, 1), (8, 8), (16, 16), (32, 32)],
                 "allocated blocks (offset, size) after those calls", rule=f"{RULE}: rounded sizes are recorded")
    expect_equal((a.free_slots, a.free_blocks()), (3, [(5, 1), (6, 2)]), "free slots and free blocks",
                 rule=f"{RULE}: a 3-slot request holds 4 slots, a 5-slot request 8")


@check("task12", FULL_MERGE,
       rule=f"{RULE}: no free buddies stay unmerged")
def full_merge(run):
    for seed in range(30):
        rng = random.Random(seed)
        a = _new(run, 256)
        live = []
        while True:
            offset = a.alloc(rng.randint(1, 40))
            if offset is None:
                break
            live.append(offset)
        _expect_tiling(a, f"seed {seed}: after filling the memory")
        rng.shuffle(live)
        for i, offset in enumerate(live):
            a.free(offset)
            if i % 7 == 0:
                _expect_tiling(a, f"seed {seed}: after {i + 1} frees")
        expect_equal(a.free_blocks(), [(0, 256)],
                     f"free blocks after filling 256 slots with random sizes (seed {seed}) and freeing "
                     f"all {len(live)} blocks in the order {live[:8]}...",
                     rule=f"{RULE}: a freed block merges with its buddy, then the merged block with its buddy, "
                          f"as long as the buddy is free",
                     when=UNMERGED)


@check("task12", "random traces of alloc and free, call by call like the reference solution",
       rule=f"{RULE}: the contiguous baseline of the utilization study",
       follows=(HAND, XOR, LOWEST, SMALLEST, ROUNDING, FULL_MERGE, BAD_INPUT))
def matches_reference(run):
    for seed in range(10):
        rng = random.Random(100 + seed)
        a = _new(run, 512)
        live: list[int] = []  # offsets alloc returned and nobody freed yet
        history = []
        for _ in range(300):
            if live and (rng.random() < 0.45 or len(live) > 40):
                offset = rng.choice(sorted(live))
                live.remove(offset)
                history.append(f"free({offset})")
                a.free(offset)
            else:
                n = rng.randint(1, 70)
                history.append(f"alloc({n})")
                got = a.alloc(n)
                see(f"seed {seed}: offset returned by call {len(history)}, alloc({n})", got,
                    rule=f"{RULE}: smallest free block that fits, lowest address first, split keeping the lower half",
                    hint=f"the last calls were {history[-6:]}")
                if got is not None:
                    live.append(got)
            see(f"seed {seed}: free slots after {history[-6:]}", a.free_slots,
                rule=f"{RULE}: rounded sizes are taken and given back exactly")


@check("task12", BAD_INPUT, rule=f"{RULE}: ValueError on bad input, state unchanged")
def bad_input(run):
    mod = run.load("buddy")
    for total in (0, 12, -8):
        try:
            mod.BuddyAllocator(total)
        except ValueError:
            continue
        raise CheckFailure(f"BuddyAllocator({total}) was accepted", rule=f"{RULE}: total_slots is a power of two",
                           expected="ValueError", actual="no error")
    a = mod.BuddyAllocator(16)
    x, y = a.alloc(4), a.alloc(2)
    expect_equal((x, y), (0, 4), "offsets of alloc(4), alloc(2) on 16 slots",
                 rule=f"{RULE}: take the smallest free block that fits and keep the lower half of each split: "
                      f"alloc(4) takes 0, then alloc(2) splits the free (4, 4), not (8, 8)")
    expect_equal(a.alloc(16), None, "alloc(16) when 6 of 16 slots are in use",
                 rule=f"{RULE}: return None when no free block is big enough")
    before = _state(a)
    expect_equal(before, {"free": [(6, 2), (8, 8)], "allocated": [(0, 4), (4, 2)]},
                 "blocks after alloc(4), alloc(2) and a failed alloc(16)",
                 rule=f"{RULE}: a failed alloc changes nothing")
    a.free(y)
    after_free = _state(a)
    bad = [("alloc", 0), ("alloc", -3), ("alloc", 17), ("free", 1), ("free", 8), ("free", y)]
    for call, arg in bad:
        try:
            getattr(a, call)(arg)
        except ValueError:
            pass
        else:
            raise CheckFailure(f"{call}({arg}) was accepted (after alloc(4) -> 0, alloc(2) -> 4, free(4))",
                               rule=f"{RULE}: n must be 1..total_slots; free takes an offset alloc returned, once",
                               expected="ValueError", actual="no error")
        expect_equal(_state(a), after_free, f"blocks after the rejected {call}({arg})",
                     rule=f"{RULE}: a rejected call changes nothing")
    a.free(x)
    expect_equal(a.free_blocks(), [(0, 16)], "free blocks after freeing everything",
                 rule=f"{RULE}: a freed block merges with its buddy while the buddy is free, and the rejected "
                      f"calls before changed nothing", when=UNMERGED)
