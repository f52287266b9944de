"""Hidden checks for Tasks 1-5 (instructor only: never in the student edition).

Each planner below runs in the grader: it draws a scenario from the grading's seed and returns it
as data (pool sizes, ids, layouts {logical: block} as pairs, op lists). The sandboxed child runs
the public driver of the same name in `pagedlab.drivers.drawn.memory_manager` on that data only,
and the judge compares the student's record with the reference solution's on the same data.

What a grading covers is each task's domain (`pagedlab.spec.domains`): every planner walks the
classes of its task's table and draws each one in every grading; the seed draws only the values
inside a class (which negative id, which length under a block, which blocks a layout maps).
"""

from __future__ import annotations

import random

from pagedlab.drivers.drawn import memory_manager as drawn
from pagedlab.spec.catalog import hidden_scenario
from pagedlab.spec.domains import HARD_CODED, INT_MAX, INT_MIN, domain

RULE = "the same rules as the public checks, on scenarios drawn at grading time"
# First-fit past every size an implementation could hard-code: the pool has this many blocks.
BIG_POOL = max(HARD_CODED) + 1


class Ids:
    """Sequence ids of one engine, drawn from the domain's id classes, never one twice."""

    def __init__(self, rng):
        self.rng, self.taken = rng, set()

    def draw(self, klass=None) -> int:
        for _ in range(1000):
            value = klass.draw(self.rng) if klass is not None else self.rng.randrange(1, 10**6)
            if value not in self.taken:
                self.taken.add(value)
                return value
        raise ValueError(f"no unused id left in class {klass}")


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


def _fillers(rng, ids, blocks, kv=None, sizes=(200, 256)) -> list[dict]:
    """Harness-built sequences that map every block of `blocks` (`sizes` blocks each, at most
    256, drawn order); `kv(layout)` their kv counts (default: the last block partly or exactly full)."""
    blocks = list(blocks)
    rng.shuffle(blocks)
    built = []
    while blocks:
        n = min(len(blocks), rng.randint(*sizes))
        layout = [[i, b] for i, b in enumerate(blocks[:n])]
        blocks = blocks[n:]
        built.append(_seq(ids.draw(), (kv or (lambda lay: _kv_for(rng, lay)))(layout), layout))
    return built


def _hard_coded_holes(rng, extra: int = 0) -> set:
    """The blocks at and just past each hard-coded size (63, 64, 255, 256, ...), plus `extra`
    drawn ones below the largest: left free in a pool whose other low blocks are all taken, so
    first-fit has to reach every one of them."""
    holes = {k.draw(rng) for k in domain("task2").axis("first-fit block")}
    while len(holes) < 8 + extra:
        holes.add(rng.randrange(max(HARD_CODED)))
    return holes


@hidden_scenario("task1", "llm_init on pool sizes drawn at grading time", rule=RULE, driver=drawn.init)
def init_random(seed):
    rng = random.Random(seed)
    d = domain("task1")
    # Every class of pool_size (0 bytes, under a block, one block, multiples with and without a
    # remainder, and 64/65, 256/257, 512/513, 1024/1025 blocks) on a pool, and a NULL pool_addr.
    sizes = []
    for klass in d.axis("pool_size"):
        v = klass.draws(rng)
        sizes.append(v["blocks"] * 64 + v["rest"])
    rng.shuffle(sizes)
    calls = {"the pool": sizes, "NULL": [64 * rng.randrange(1, 300) + rng.randrange(64)]}
    return {{"the pool": "sizes", "NULL": "null"}[k.name]: calls[k.name] for k in d.axis("pool_addr")}


def _stream_scene(rng, d) -> dict:
    """Task 2's stream: the sequences the table frees (holey, NULL L1 first, 256 blocks, and
    groups of one, two and many owners), the refusals while the pool has room for 257 blocks,
    creates of every fitting length under every id class, then those ids freed and a drawn stream."""
    ids = Ids(rng)
    total = 820 + rng.randrange(60)
    used: set = set()
    built, frees = [], []
    layouts = {"holey L2 tables": lambda: holey_layout(rng, total, used),
               "NULL L1 entries first": lambda: _layout(rng, total, rng.randrange(2, 40), used, holes="always"),
               "256 blocks (16 full L2 tables)": lambda: _layout(rng, total, 256, used, holes=False)}
    for klass in d.axis("the sequence freed"):
        layout = layouts[klass.name]()
        built.append(_seq(ids.draw(), _kv_for(rng, layout), layout))
        frees.append({"op": "free", "id": built[-1]["id"]})
    for klass in d.axis("owners of the blocks freed"):
        layout = _layout(rng, total, rng.randrange(1, 20), used, holes=False)
        group = [_seq(ids.draw(), _kv_for(rng, layout), layout) for _ in range(klass.draw(rng))]
        built += group
        frees.append({"op": "free", "id": rng.choice(group)["id"]})  # the others keep the blocks
    lengths = d.axis("initial_kv_len")
    fit = {"1-15", "16", "17", "256", "257", "4096 (256 blocks: the bound)"}
    # Refusals first, while more than 256 blocks are free: 4097 is refused for the bound, not OOM.
    refused = [{"op": "create", "id": ids.draw(), "length": k.draw(rng)} for k in lengths if k.name not in fit]
    for klass in d.axis("not a C int (as seq_id and as initial_kv_len)"):  # bad input, as either argument
        refused += [{"op": "create", "id": klass.draw(rng), "length": rng.randrange(1, 64)},
                    {"op": "create", "id": ids.draw(), "length": klass.draw(rng)}]
    refused += [{"op": "create", "engine": None, "id": ids.draw(), "length": rng.randrange(1, 64)},
                {"op": "free", "engine": None, "id": rng.choice(built)["id"]},
                {"op": "create", "id": rng.choice(built)["id"], "length": rng.randrange(1, 40)},  # a live id again
                {"op": "free", "id": ids.draw()}]  # an unknown id
    rng.shuffle(refused)
    # Every fitting length, under every id class (0, negative, INT_MIN, INT_MAX, positive).
    classes = list(d.axis("seq_id"))
    creates = [{"op": "create", "id": ids.draw(classes[i] if i < len(classes) else None), "length": k.draw(rng)}
               for i, k in enumerate(rng.sample([k for k in lengths if k.name in fit], len(fit)))]
    fitting = creates + frees
    rng.shuffle(fitting)
    # Then each of those freed (created, then freed, under every id class), then a drawn stream.
    freed = [{"op": "free", "id": c["id"]} for c in creates]
    rng.shuffle(freed)
    drawn_steps = []
    for _ in range(24):
        if rng.random() < 0.5:
            drawn_steps.append({"op": "create", "id": ids.draw(), "length": rng.randrange(1, 300)})
        else:
            drawn_steps.append({"op": "free", "id": ids.draw(), "live": rng.random()})
    return {"blocks": total, "built": built, "steps": refused + fitting + freed + drawn_steps}


def _first_fit_scene(rng, d) -> dict:
    """Task 2's first-fit: a pool past the largest hard-coded size whose low blocks are all taken
    but the holes at and past 64, 256, 512 and 1024; creates (under every id class) take them in
    order; then a create one block short of fitting (OOM) and one that takes exactly every free block."""
    ids = Ids(rng)
    extra = rng.randrange(3, 40)
    total = BIG_POOL + extra
    holes = _hard_coded_holes(rng, extra=rng.randrange(0, 3))
    built = _fillers(rng, ids, [b for b in range(BIG_POOL) if b not in holes])
    # Creates of drawn sizes that together take exactly the holes.
    steps, left = [], len(holes)
    classes = list(d.axis("seq_id"))
    rng.shuffle(classes)
    while left:
        n = min(left, rng.randint(1, 4))
        steps.append({"op": "create", "id": ids.draw(classes.pop() if classes else None), "length": 16 * n - rng.randrange(16)})
        left -= n
    free = total - BIG_POOL  # what is left: the blocks past the holes
    steps.append({"op": "create", "id": ids.draw(), "length": 16 * (free + 1) - rng.randrange(16)})  # one short: OOM
    steps.append({"op": "create", "id": ids.draw(), "length": 16 * free - rng.randrange(16)})  # exactly the free blocks
    steps.append({"op": "free", "id": rng.choice(built)["id"]})
    steps.append({"op": "create", "id": ids.draw(), "length": rng.randrange(1, 400)})
    return {"blocks": total, "built": built, "steps": steps}


@hidden_scenario("task2", "create_sequence / free_sequence on a random stream", rule=RULE, driver=drawn.create_free)
def create_free_random(seed):
    rng = random.Random(seed)
    d = domain("task2")
    return {"scenes": [_stream_scene(rng, d), _first_fit_scene(rng, d)]}


@hidden_scenario("task3", "fork_sequence of random parents, valid and invalid ids", rule=RULE, driver=drawn.fork)
def fork_random(seed):
    rng = random.Random(seed)
    d = domain("task3")
    total = BIG_POOL + rng.randrange(60)
    ids = Ids(rng)
    at_and_past = {k.draw(rng) for k in d.axis("block ids")}  # the 256-block parent maps these
    used = set(at_and_past)
    shapes = {
        "one block": lambda: _layout(rng, total, 1, used, holes=False),
        "one full L2 table (16 blocks)": lambda: _layout(rng, total, 16, used, holes=False),
        "several L2 tables": lambda: _layout(rng, total, d.axis("parent")["several L2 tables"].draw(rng), used,
                                             holes=False),
        "256 blocks (the bound)": lambda: _big_parent(rng, total, used, at_and_past),
        "NULL L1 entries first": lambda: _layout(rng, total, rng.randrange(2, 15), used, holes="always"),
        "holey L2 tables": lambda: holey_layout(rng, total, used),
        "a fork (a fork of a fork)": None,  # forked below: "last"
    }
    # An id is one value per engine: a boundary id (0, INT_MIN, INT_MAX) is first a fork's new id,
    # then the parent of a later fork; drawn ids (negative, positive) are parents' ids from the start.
    parent_classes = [k for k in d.axis("parent_id") if not k.boundary]
    rng.shuffle(parent_classes)
    parents = []
    for klass in d.axis("parent"):
        if shapes[klass.name] is not None:
            layout = shapes[klass.name]()
            parents.append(_seq(ids.draw(parent_classes.pop() if parent_classes else None), _kv_for(rng, layout), layout))
    built = list(parents)
    # Blocks already shared before the fork: one owner, two (a twin), many (2-4 twins).
    for parent, klass in zip(rng.sample(parents, 3), d.axis("owners of the parent's blocks"), strict=True):
        built += [_seq(ids.draw(), parent["kv"], parent["layout"]) for _ in range(klass.draw(rng) - 1)]
    new_classes = list(d.axis("new_id"))
    rng.shuffle(new_classes)
    forks = [{"parent": p["id"], "new": ids.draw(new_classes.pop() if new_classes else None)} for p in parents]
    rng.shuffle(forks)
    boundary = [f["new"] for f in forks if any(k.boundary and f["new"] == k.draw(rng) for k in d.axis("parent_id"))]
    rng.shuffle(boundary)
    forks += [{"parent": sid, "new": ids.draw()} for sid in boundary]  # the boundary ids as parents
    forks += [{"parent": "last", "new": ids.draw()},  # a fork of a fork
              {"parent": ids.draw(), "new": ids.draw()},  # an unknown parent
              {"parent": parents[0]["id"], "new": parents[1]["id"]},  # a new id in use
              {"parent": (p := rng.choice(parents)["id"]), "new": p},  # the new id is the parent's
              {"parent": rng.choice(parents)["id"], "new": ids.draw(), "engine": None}]
    forks += [{"parent": None, "pick": rng.random(), "new": ids.draw()} for _ in range(3)]
    return {"blocks": total, "built": built, "forks": forks}


def _big_parent(rng, total, used, fixed) -> list:
    """256 logical blocks: the `fixed` ones (every block at and past a hard-coded size) and the
    rest drawn, in a drawn order."""
    used.update(fixed)
    blocks = list(fixed) + _blocks(rng, total, used, 256 - len(fixed))
    rng.shuffle(blocks)
    return [[i, b] for i, b in enumerate(blocks)]


def _one_free_block(rng) -> dict:
    """An engine with exactly one free block and two sequences of whole L2 tables (256*k tokens):
    the first's next append needs a new L2 table (heap) and one block (the free one); then a
    sequence whose last block is full asks for a block there is none of, and the second whole
    one for an L2 table and a block (none: -1, no L2 table allocated)."""
    k, k2 = rng.randrange(1, 4), rng.randrange(1, 3)
    extra = rng.randrange(1, 12)
    total = 16 * (k + k2) + extra + 1
    order = list(range(total))
    rng.shuffle(order)
    whole, filler, whole2 = rng.sample(range(1, 10**5), 3)
    built = [_seq(whole, 256 * k, [[i, b] for i, b in enumerate(order[:16 * k])]),
             _seq(filler, 16 * extra, [[i, b] for i, b in enumerate(order[16 * k:16 * k + extra])]),
             _seq(whole2, 256 * k2, [[i, b] for i, b in enumerate(order[16 * k + extra:16 * (k + k2) + extra])])]
    value = lambda: rng.randrange(INT_MIN, INT_MAX + 1)  # noqa: E731
    return {"blocks": total, "built": built,
            "appends": [[whole, value()], [whole, value()], [filler, value()], [whole2, value()], [whole, value()]]}


def _big_append_scene(rng, d) -> dict:
    """Task 4 on a pool past every hard-coded size: the low blocks all taken but the holes at and
    past 64, 256, 512, 1024, which the appends needing a block take in order. The sequences hold
    every kv_count class and every id class; their last blocks have one, two and many owners."""
    ids = Ids(rng)
    holes = _hard_coded_holes(rng)
    taken = [b for b in range(BIG_POOL) if b not in holes]
    rng.shuffle(taken)
    id_classes = [k for k in d.axis("seq_id") if k.name != "unknown"]
    rng.shuffle(id_classes)

    def seq(blocks, kv, shortfall=0):
        layout = [[i, taken.pop()] for i in range(blocks)]
        return _seq(ids.draw(id_classes.pop() if id_classes else None), kv or 16 * blocks - shortfall, layout)

    kv = d.axis("kv_count")
    # 4095 records: the next append writes the last one, the one after is refused (4096).
    last = seq(256, kv["4095 (the last record)"].draw(rng))
    # 253-255: appends fill the L2 table's last block, then the next one needs a new L2 table.
    cross = seq(16, kv["253-255 (the next record ends an L2 table's blocks)"].draw(rng))
    page = seq(rng.randrange(1, 9), 0)  # a multiple of 16: a new page
    alone = seq(rng.randrange(1, 9), 0, shortfall=rng.randrange(1, 16))  # 1-15 past: written in place
    built = [last, cross, page, alone]
    appends = [last["id"], last["id"], page["id"], alone["id"]] + [cross["id"]] * (256 - cross["kv"] + 1)
    new_pages = 2  # page, and the next L2 table of `cross`
    for klass in d.axis("owners of the last block"):  # `alone` is the one-owner class
        if klass.name == "one":
            continue
        full = klass.name == "two, the block full (a new page: no copy)"
        n = 2 if klass.name.startswith("two") else klass.draw(rng)
        first = seq(rng.randrange(1, 5), 0, shortfall=0 if full else rng.randrange(1, 16))
        built += [first] + [_seq(ids.draw(), first["kv"], first["layout"]) for _ in range(n - 1)]
        appends.append(first["id"])  # the id of its class; its last block is shared all the same
        new_pages += 1  # a new page, or the copy of a shared block
    # The rest of the low blocks: sequences whose last block is full, each appended once (a new
    # page each): more blocks are asked for than there are holes, so first-fit reaches them all.
    size = min(256, max(1, len(taken) // max(1, len(holes) + 2 - new_pages)))
    fill = _fillers(rng, ids, taken, kv=lambda layout: 16 * len(layout), sizes=(max(1, size // 2), size))
    built += fill
    appends += [s["id"] for s in fill] + [ids.draw()]  # and an unknown id
    rng.shuffle(appends)
    total = BIG_POOL + len(appends) + rng.randrange(3, 10)  # room past the holes for every append
    # The appended values: drawn, and every kv_data class on appends that write (not to the
    # unknown id, nor to `last`, whose second append is refused).
    values = [rng.randrange(INT_MIN, INT_MAX + 1) for _ in appends]
    writes = [i for i, sid in enumerate(appends) if sid in {s["id"] for s in built} and sid != last["id"]]
    for i, klass in zip(writes, d.axis("kv_data")):
        values[i] = klass.draw(rng)
    return {"blocks": total, "built": built, "appends": [list(p) for p in zip(appends, values, strict=True)]}


@hidden_scenario("task4", "append_kv with random values over forks, CoW and full pools", rule=RULE, driver=drawn.append)
def append_random(seed):
    rng = random.Random(seed)
    d = domain("task4")
    total = rng.randrange(36, 60)
    used: set = set()
    # A last block partly full (shared with a twin, so the next append copies on write), a last
    # block exactly full (the next append maps a new block), a sequence 1-3 appends short of 256
    # tokens (the next L2 table), a sequence whose L2 tables have holes, then an unknown id, then
    # appends until the pool is full.
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
    # Bad input: values a C int cannot hold, to live sequences (-1, nothing written).
    appends += [[rng.choice(ids), k.draw(rng)] for k in d.axis("not a C int (as kv_data)")]
    until_full = [[rng.choice(ids), rng.randrange(INT_MIN, INT_MAX + 1)] for _ in range(total * 16)]
    cow = {"pick": rng.random(), "id": rng.randrange(4 * 10**5, 5 * 10**5), "offset": rng.randrange(1, 16),
           "value": rng.randrange(INT_MIN, INT_MAX + 1)}
    return {"blocks": total, "built": built, "appends": appends, "until_full": until_full, "cow_when_full": cow,
            "one_free": _one_free_block(rng), "big": _big_append_scene(rng, d),
            "null": rng.randrange(INT_MIN, INT_MAX + 1)}


def _destroy_engine(rng, ids, count) -> dict:
    """An engine of `count` sequences: a few layouts ("bases", [kv, layout]), sequence i mapping
    base i % len(bases): with one or two sequences each owns its blocks, with more most blocks
    have many owners (forks), so a large count needs a small pool (and a small scenario)."""
    total = rng.randrange(20, 60)
    used: set = set()
    bases = []
    for _ in range(min(count, 3)):
        layout = _layout(rng, total, rng.randrange(1, 4), used, holes=rng.random() < 0.5)
        bases.append([_kv_for(rng, layout), layout])
    return {"blocks": total, "bases": bases, "ids": [ids.draw() for _ in range(count)]}


@hidden_scenario("task5", "llm_destroy of a random engine leaves nothing behind", rule=RULE, driver=drawn.destroy)
def destroy_random(seed):
    rng = random.Random(seed)
    d = domain("task5")
    total = rng.randrange(300, 400)
    used: set = set()
    ids = Ids(rng)
    built = []
    # The layouts of the table, each a sequence of one engine: NULL L1 entries first (forked:
    # two owners), holey L2 tables, 256 blocks; then drawn ones, forked or not (many owners).
    for klass in d.axis("layout"):
        layout = {"NULL L1 entries first": lambda: _layout(rng, total, rng.randrange(1, 40), used, holes="always"),
                  "holey L2 tables": lambda: holey_layout(rng, total, used),
                  "256 blocks (16 full L2 tables)": lambda: _layout(rng, total, 256, used, holes=False)}[klass.name]()
        built.append(_seq(ids.draw(), _kv_for(rng, layout), layout))
    built.append(_seq(ids.draw(), built[0]["kv"], built[0]["layout"]))  # two owners
    layout = _layout(rng, total, rng.randrange(1, 8), used)
    built += [_seq(ids.draw(), _kv_for(rng, layout), layout) for _ in range(d.axis("owners of a block")["many"].draw(rng))]
    rng.shuffle(built)
    # One engine per count of sequences: 1, 2, and at and past 64, 256, 512, 1024.
    counts = [k.draw(rng) for k in d.axis("sequences") if k.name != "none"]
    return {"empty_blocks": rng.randrange(1, 40), "blocks": total, "built": built,
            "counts": [_destroy_engine(rng, ids, n) for n in counts]}
