"""Hidden checks for Tasks 1-5 (instructor only: never in the student edition).

Each planner below runs in the grader: it draws a scenario from the grading's seed and returns it
as data (pool sizes, ids, layouts {logical: block} as pairs, op lists). The sandboxed child runs
the public driver of the same name in `pagedlab.checks.drawn.memory_manager` on that data only,
and the judge compares the student's record with the reference solution's on the same data.
Every class of each task's domain (pagedlab/checks/README.md, "Domains") is planned in every
grading; the seed draws the values inside each class.
"""

from __future__ import annotations

import random

from pagedlab.checks.drawn import memory_manager as drawn
from pagedlab.checks.framework import hidden_scenario

RULE = "the same rules as the public checks, on scenarios drawn at grading time"
INT_MIN, INT_MAX = -2**31, 2**31 - 1


def _blocks(rng, total, used, count) -> list[int]:
    """`count` distinct blocks nobody uses yet (fewer when the pool runs out), in a drawn order."""
    free = [b for b in range(total) if b not in used]
    rng.shuffle(free)
    picked = free[:count]
    used.update(picked)
    return picked


def _layout(rng, total, count, used, holes=True) -> list:
    """[[logical, block]] for `count` logical blocks in a row; sometimes (always when holes ==
    "always") they start at a later L1 slot, leaving NULL L1 entries before them."""
    picked = _blocks(rng, total, used, count)
    slots_needed = -(-count // 16)
    start = 16 * rng.randrange(1, 16 - slots_needed + 1) if holes == "always" or (holes and rng.random() < 0.4) else 0
    return [[start + i, b] for i, b in enumerate(picked)]


def holey_layout(rng, total, used) -> list:
    """[[logical, block]] over one or two L2 tables (in drawn L1 slots) whose mapped entries start
    past offset 0 with a hole between the first two: a walk that stops at the first unmapped
    entry of an L2 table misses blocks."""
    logicals = []
    for l1 in sorted(rng.sample(range(16), rng.randrange(1, 3))):
        first = rng.randrange(1, 8)
        second = first + rng.randrange(2, 5)
        more = rng.sample(range(second + 1, 16), rng.randrange(0, min(4, 15 - second) + 1))
        logicals += [16 * l1 + o for o in sorted([first, second, *more])]
    return [list(p) for p in zip(logicals, _blocks(rng, total, used, len(logicals)), strict=True)]


def _kv_for(rng, layout) -> int:
    """A kv count whose last block (the highest logical one mapped) is partly or exactly full."""
    return (max(logical for logical, _ in layout) + 1) * 16 - rng.randrange(16)


def _seq(sid, kv, layout) -> dict:
    return {"id": sid, "kv": kv, "layout": layout}


@hidden_scenario("task1", "llm_init on pool sizes drawn at grading time", rule=RULE, driver=drawn.init)
def init_random(seed):
    rng = random.Random(seed)
    # Every class: empty, under one block, exactly one block, a multiple of 64, a multiple plus a
    # remainder, and more blocks than one sequence can map (256).
    sizes = [0, rng.randrange(1, 64), 64, 64 * rng.randrange(2, 200), 64 * rng.randrange(1, 200) + rng.randrange(1, 64),
             64 * rng.randrange(257, 400) + rng.randrange(64)]
    rng.shuffle(sizes)
    return {"sizes": sizes}


@hidden_scenario("task2", "create_sequence / free_sequence on a random stream", rule=RULE, driver=drawn.create_free)
def create_free_random(seed):
    rng = random.Random(seed)
    blocks = rng.randrange(100, 160)
    used: set = set()
    # Two sequences with L2 tables full of holes, freed by the stream.
    built = [_seq(sid, _kv_for(rng, layout), layout)
             for sid in rng.sample(range(1, 10**6), 2) for layout in [holey_layout(rng, blocks, used)]]
    # Each class once, then drawn steps, in a drawn order: lengths 0, negative, within a block, one
    # block exactly, one past, one L2 table exactly (256) and one past, the 4096 maximum and one
    # past; a live id created again; unknown ids freed; the sequences with holes freed.
    lengths = [0, -rng.randrange(1, 9), rng.randrange(1, 16), 16, 17, 256, 257, 4096, 4097]
    kinds = ([("create", n) for n in lengths] + [("create again", None), ("free unknown", None)] * 2
             + [("free built", s["id"]) for s in built])
    kinds += [rng.choice([("create drawn", rng.randrange(1, 300)), ("free", None)]) for _ in range(42 - len(kinds))]
    rng.shuffle(kinds)
    # The creates at the L2 table's edges (16, 17, 256, 257) come before the drawn creates, so the
    # pool always has room for them: each maps its blocks in every grading, none is refused.
    edges = [i for i, (op, n) in enumerate(kinds) if op == "create drawn" or (op == "create" and n in (16, 17, 256, 257))]
    for i, kind in zip(edges, sorted((kinds[i] for i in edges), key=lambda k: k[0] == "create drawn"), strict=True):
        kinds[i] = kind
    steps = []
    for op, arg in kinds:
        if op in ("create", "create drawn"):
            steps.append({"op": "create", "id": rng.randrange(1, 10**6), "length": arg})
        elif op == "create again":
            steps.append({"op": "create", "id": rng.randrange(1, 10**6), "length": rng.randrange(1, 40),
                          "again": rng.random()})
        elif op == "free":
            steps.append({"op": "free", "id": rng.randrange(10**6, 2 * 10**6), "live": rng.random()})
        elif op == "free unknown":
            steps.append({"op": "free", "id": rng.randrange(10**6, 2 * 10**6)})
        else:
            steps.append({"op": "free", "id": arg})
    return {"blocks": blocks, "built": built, "steps": steps}


@hidden_scenario("task3", "fork_sequence of random parents, valid and invalid ids", rule=RULE, driver=drawn.fork)
def fork_random(seed):
    rng = random.Random(seed)
    total = rng.randrange(100, 300)
    used: set = set()
    ids = rng.sample(range(1, 10**5), 5)
    # Parents of every class: one block, one full L2 table (16), more than one L2 table, one whose
    # first L1 entries are NULL, and one whose L2 tables have holes.
    built = []
    for sid, (count, holes) in zip(ids, ((1, False), (16, False), (rng.randrange(17, 60), False),
                                         (rng.randrange(2, 15), "always"), (None, None)), strict=True):
        layout = holey_layout(rng, total, used) if count is None else _layout(rng, total, count, used, holes)
        built.append(_seq(sid, _kv_for(rng, layout), layout))
    # Each parent forked, then a fork of a fork, an unknown parent, a new id already in use.
    forks = [{"parent": sid} for sid in ids] + [{"parent": "last"}, {"parent": rng.randrange(10**5, 2 * 10**5)},
                                                {"parent": None, "pick_new": rng.random()}]
    forks += [{"parent": None} for _ in range(3)]
    for f in forks:
        f.setdefault("pick", rng.random())
        f["new"] = rng.randrange(2 * 10**5, 3 * 10**5)
    return {"blocks": total, "built": built, "forks": forks}


def _one_free_block(rng) -> dict:
    """An engine with exactly one free block and a sequence of whole L2 tables (256*k tokens): its
    next append needs a new L2 table (heap) and one block (the free one), then a sequence whose
    last block is full asks for a block there is none of."""
    k = rng.randrange(1, 4)
    extra = rng.randrange(1, 12)
    total = 16 * k + extra + 1
    order = list(range(total))
    rng.shuffle(order)
    whole, filler = rng.sample(range(1, 10**5), 2)
    built = [_seq(whole, 256 * k, [[i, b] for i, b in enumerate(order[:16 * k])]),
             _seq(filler, 16 * extra, [[i, b] for i, b in enumerate(order[16 * k:16 * k + extra])])]
    value = lambda: rng.randrange(INT_MIN, INT_MAX + 1)  # noqa: E731
    return {"blocks": total, "built": built,
            "appends": [[whole, value()], [whole, value()], [filler, value()], [whole, value()]]}


@hidden_scenario("task4", "append_kv with random values over forks, CoW and full pools", rule=RULE, driver=drawn.append)
def append_random(seed):
    rng = random.Random(seed)
    total = rng.randrange(36, 60)
    used: set = set()
    # Every class: a last block partly full (shared with a twin, so the next append copies on
    # write), a last block exactly full (the next append maps a new block), a sequence 1-3
    # appends short of 256 tokens (the next L2 table), a sequence whose L2 tables have holes, then
    # an unknown id, then appends until the pool is full.
    partly, full, long, holey = rng.sample(range(1, 10**5), 4)
    built = []
    for sid, count, kv_short in ((partly, rng.randrange(1, 4), rng.randrange(1, 16)), (full, rng.randrange(1, 4), 0),
                                 (long, 16, rng.randrange(1, 4))):
        layout = _layout(rng, total, count, used, holes=False)
        built.append(_seq(sid, (max(lg for lg, _ in layout) + 1) * 16 - kv_short, layout))
    built.append(_seq(rng.randrange(10**5, 2 * 10**5), built[0]["kv"], built[0]["layout"]))  # a fork: shares every block
    layout = holey_layout(rng, total, used)
    built.append(_seq(holey, (max(lg for lg, _ in layout) + 1) * 16 - rng.randrange(1, 16), layout))
    ids = [s["id"] for s in built]
    unknown = rng.randrange(3 * 10**5, 4 * 10**5)
    plan = [partly, full, long, long, long, long, holey, holey, unknown] + [None] * 51
    appends = []
    for step, sid in enumerate(plan):
        sid = rng.choice(ids + [rng.randrange(3 * 10**5, 4 * 10**5)]) if sid is None else sid
        value = (INT_MIN, INT_MAX)[step] if step < 2 else rng.randrange(INT_MIN, INT_MAX + 1)  # int32 extremes first
        appends.append([sid, value])
    until_full = [[rng.choice(ids), rng.randrange(INT_MIN, INT_MAX + 1)] for _ in range(total * 16)]
    cow = {"pick": rng.random(), "id": rng.randrange(4 * 10**5, 5 * 10**5), "offset": rng.randrange(1, 16),
           "value": rng.randrange(INT_MIN, INT_MAX + 1)}
    return {"blocks": total, "built": built, "appends": appends, "until_full": until_full, "cow_when_full": cow,
            "one_free": _one_free_block(rng)}


@hidden_scenario("task5", "llm_destroy of a random engine leaves nothing behind", rule=RULE, driver=drawn.destroy)
def destroy_random(seed):
    rng = random.Random(seed)
    total = rng.randrange(60, 200)
    used: set = set()
    sids = rng.sample(range(1, 10**5), rng.randrange(3, 7))
    built = []
    for n, sid in enumerate(sids):
        # The first sequence always starts past NULL L1 entries, the second has L2 tables with
        # holes: a teardown that stops at the first NULL or unmapped entry leaks in every grading.
        if n == 1:
            layout = holey_layout(rng, total, used)
        else:
            layout = _layout(rng, total, rng.randrange(1, max(2, min(40, total - len(used)))), used,
                             holes="always" if n == 0 else True)
        if not layout:  # the pool is full
            break
        built.append(_seq(sid, _kv_for(rng, layout), layout))
        if n == 0 or rng.random() < 0.5:  # shared blocks: always at least one fork
            built.append(_seq(sid + 10**5, _kv_for(rng, layout), layout))
    # An engine with no sequence is always destroyed too.
    return {"empty_blocks": rng.randrange(1, 40), "blocks": total, "built": built}
