"""Hidden checks for Task 13 (instructor only): engines, forked groups, swap spaces and copy lists
the grader draws; the child runs `pagedlab.drivers.drawn.swap` on them as data, and the judge
compares with the reference solution run on the same data."""

from __future__ import annotations

import random

from pagedlab.drivers.drawn import swap as drawn
from pagedlab.drivers.swap import R_COPY, R_FAIL, R_MOVE
from pagedlab.spec.catalog import hidden_scenario
from pagedlab.spec.domains import domain

RULE = f"{R_MOVE}; {R_FAIL.split(': ', 1)[1]}"


def groups(layouts: dict) -> list[tuple[set, set]]:
    """The sequence groups (sequences joined by shared blocks): (ids, distinct blocks) each."""
    found: list[tuple[set, set]] = []
    for seq_id, blocks in layouts.items():
        ids, mine = {seq_id}, set(blocks)
        for group in [g for g in found if g[1] & mine]:
            found.remove(group)
            ids, mine = ids | group[0], mine | group[1]
        found.append((ids, mine))
    return found


def _group(rng, kind: str, free: list, ids) -> list[tuple[int, list]]:
    """[(id, blocks)] of one group: a lone sequence, two sharing blocks, or a chain of three
    (A shares with B, B with C, A and C share nothing). `ids` draws each member's id."""
    take = lambda n: [free.pop() for _ in range(n)]  # noqa: E731
    if kind == "one sequence":
        return [(ids(), take(rng.randint(1, 12)))]
    a = take(rng.randint(2, 8))
    if kind == "two sequences":
        return [(ids(), a), (ids(), rng.sample(a, rng.randint(1, len(a))) + take(rng.randint(0, 3)))]
    b_own = take(rng.randint(1, 4))
    b = rng.sample(a, rng.randint(1, len(a) - 1)) + b_own
    c = rng.sample(b_own, rng.randint(1, len(b_own))) + take(rng.randint(0, 3))
    return [(ids(), a), (ids(), b), (ids(), c)]


def _kv(rng, blocks) -> int:
    return 16 * (len(blocks) - 1) + rng.randint(1, 16)


def _groups_rig(rng, d) -> dict:
    """Every group class and a clash on one GPU engine; the swap space partly taken but big
    enough for every group that may move; every id class is the argument of a swap_out that
    succeeds (the first member of each group, then, after the swaps back in, two others)."""
    gpu_blocks = rng.randint(48, 96)
    free = list(range(gpu_blocks))
    rng.shuffle(free)
    used_ids: set = set()

    def positive():
        while (v := rng.randrange(1, 10**6)) in used_ids:
            pass
        used_ids.add(v)
        return v

    built = {k.name: _group(rng, k.name, free, positive) for k in d.axis("group")}
    clash = _group(rng, "one sequence", free, positive)
    # The id classes: the first members of the three groups, then two more members (the pair's
    # second, the chain's middle) after the groups came back.
    chain = next(name for name in built if name.startswith("a chain of three"))
    arguments = [built[name][0][0] for name in built] + [built["two sequences"][1][0], built[chain][1][0]]
    classes = list(d.axis("seq_id"))
    rng.shuffle(classes)
    rename = {}
    for old, klass in zip(arguments, classes, strict=True):
        while (new := klass.draw(rng)) in used_ids:
            pass
        used_ids.add(new)
        rename[old] = new
    layouts = [(rename.get(sid, sid), blocks) for name in built for sid, blocks in built[name]] + clash
    rng.shuffle(layouts)
    # The chain's far end C before its middle B: a group walk from A has to pass over the list twice.
    b, c = (next(i for i, (sid, _) in enumerate(layouts) if sid == rename.get(m[0], m[0])) for m in built[chain][1:])
    if c > b:
        layouts[b], layouts[c] = layouts[c], layouts[b]
    need = sum(len({b for _, blocks in built[name] for b in blocks}) for name in built)
    cpu_blocks = need + rng.randint(8, 24)
    taken = rng.sample(range(cpu_blocks), rng.randint(1, cpu_blocks - need))  # partly taken swap space
    firsts = [rename[a] for a in arguments[:3]]
    moves = ([["swap_out", sid] for sid in firsts] + [["swap_out", clash[0][0]]] + [["swap_in", sid] for sid in firsts]
             + [["swap_out", rename[a]] for a in arguments[3:]])
    return {"gpu_blocks": gpu_blocks, "cpu_blocks": cpu_blocks, "pool_fill": rng.randrange(2**31),
            "gpu": [[sid, _kv(rng, blocks), blocks] for sid, blocks in layouts],
            "cpu": [[clash[0][0], 16 * len(taken), taken]], "moves": moves}


def _capacity_rig(rng) -> dict:
    """The swap space's free blocks at the bound: a group of one block more than there is room
    for (refused), then one of exactly the room (moves)."""
    gpu_blocks = rng.randint(48, 96)
    free = list(range(gpu_blocks))
    rng.shuffle(free)
    room = rng.randint(2, 12)
    exact = [free.pop() for _ in range(room)]
    over = [free.pop() for _ in range(room + 1)]
    a, b, c = rng.sample(range(1, 10**6), 3)
    taken = rng.randint(1, 20)
    layouts = [(a, exact[:room // 2 + 1]), (b, exact[room // 2:]), (c, over)]  # a two-sequence group, fitting exactly
    return {"gpu_blocks": gpu_blocks, "cpu_blocks": room + taken, "pool_fill": rng.randrange(2**31),
            "gpu": [[sid, _kv(rng, blocks), blocks] for sid, blocks in layouts],
            "cpu": [[rng.randrange(10**6, 2 * 10**6), 16 * taken, list(range(taken))]],
            "moves": [["swap_out", c], ["swap_out", rng.choice([a, b])]]}


@hidden_scenario("task13", "swap out and back in on engines drawn at grading time", rule=RULE, driver=drawn.moves)
def swap_random(seed):
    rng = random.Random(seed)
    d = domain("task13/swap")
    return {"rigs": [_groups_rig(rng, d), _capacity_rig(rng)]}


@hidden_scenario("task13", "copy_blocks on pair lists drawn at grading time", rule=R_COPY, driver=drawn.copy)
def copy_random(seed):
    rng = random.Random(seed)
    d = domain("task13/copy")
    total = 1026 + rng.randrange(60)  # its last block past 1024
    ids = d.axis("block id")
    special = {"0": 0, "the last block": total - 1, "total (one past the last)": total}
    value = lambda k: special[k.name] if k.name in special else k.draw(rng)  # noqa: E731
    valid = [value(k) for k in ids if k.name not in ("-1", "other negatives", "INT_MIN", "total (one past the last)",
                                                     "INT_MAX")]
    lists = []
    # Every valid id class in copies: sources and destinations apart.
    rng.shuffle(valid)
    half = len(valid) // 2
    lists.append([[s, t] for s, t in zip(valid[:half], valid[half:2 * half], strict=True)])
    others = [b for b in range(total) if b not in valid]
    fresh = lambda n: rng.sample(others, n)  # noqa: E731
    # Every invalid id class alone in a list of valid pairs, as a source or a destination.
    for k in ids:
        if k.name in ("-1", "other negatives", "INT_MIN", "total (one past the last)", "INT_MAX"):
            s, t, u, v = fresh(4)
            bad = [value(k), t] if rng.random() < 0.5 else [s, value(k)]
            pairs = [[u, v], bad]
            rng.shuffle(pairs)
            lists.append(pairs)
    shapes = {"none": lambda: [],
              "one source to several destinations": lambda: (lambda s, *ds: [[s, t] for t in ds])(*fresh(rng.randint(3, 5))),
              "a destination repeated": lambda: (lambda s, t, u: [[s, t], [u, t]])(*fresh(3)),
              "a destination that is also a source": lambda: (lambda s, t, u: [[s, t], [t, u]])(*fresh(3))}
    for k in d.axis("pairs"):
        lists.append(shapes[k.name]())
    rng.shuffle(lists)
    return {"gpu_blocks": total, "pool_fill": rng.randrange(2**31), "lists": lists}
