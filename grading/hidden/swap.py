"""Hidden checks for Task 13 (instructor only): engines, forked groups, swap spaces and copy lists
the grader draws; the child runs `pagedlab.checks.drawn.swap` on them as data, and the judge
compares with the reference solution run on the same data."""

from __future__ import annotations

import random

from pagedlab.checks.drawn import swap as drawn
from pagedlab.checks.framework import hidden_scenario
from pagedlab.checks.swap import R_COPY, R_FAIL, R_MOVE

RULE = f"{R_MOVE}; {R_FAIL.split(': ', 1)[1]}"


def _random_group_layouts(rng, gpu_blocks):
    """{seq_id: [blocks]}: sequences with scattered blocks; sequence 3 and, from the fourth on,
    about a third share a random subset of an earlier one's blocks (forks after copy-on-write),
    which also makes chains of siblings. Sequences 1 and 2 own their blocks and sequence 3 shares
    sequence 1's: there are always two groups, one of them forked."""
    free = list(range(gpu_blocks))
    rng.shuffle(free)
    layouts = {}
    for seq_id in range(1, rng.randint(4, 9)):
        if seq_id == 3 or (seq_id > 3 and rng.random() < 0.35):
            parent = layouts[1 if seq_id == 3 else rng.choice(sorted(layouts))]
            blocks = rng.sample(parent, rng.randint(1, min(3, len(parent)))) + [free.pop() for _ in range(rng.randint(0, 2)) if free]
        else:
            blocks = [free.pop() for _ in range(min(len(free), rng.randint(1, 20)))]
        if not blocks:
            break
        layouts[seq_id] = blocks
    return layouts


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


@hidden_scenario("task13", "swap out and back in on engines drawn at grading time", rule=RULE, driver=drawn.moves)
def swap_random(seed):
    rng = random.Random(seed)
    gpu_blocks = rng.randint(48, 96)
    layouts = _random_group_layouts(rng, gpu_blocks)
    # Always a member of the forked group that fits in the CPU's free blocks, swapped out first or
    # second; always a CPU sequence under the id of a GPU sequence of another group: its group
    # cannot swap out.
    found = groups(layouts)
    forked, need = next((ids, len(blocks)) for ids, blocks in found if 1 in ids)
    fits = rng.choice(sorted(forked))
    clash = rng.choice(sorted(s for s in layouts if s not in forked))
    cpu_blocks = max(rng.randint(8, 64), -(-3 * need // 2) + 1)
    taken = rng.sample(range(cpu_blocks), rng.randint(1, cpu_blocks // 3))  # partly taken swap space
    order = [s for s in sorted(layouts) if s not in (clash, fits)]
    rng.shuffle(order)
    order = [fits] + order
    order.insert(rng.randrange(2), clash)
    gpu = [[s, 16 * (len(blocks) - 1) + rng.randint(1, 16), blocks] for s, blocks in layouts.items()]
    return {"gpu_blocks": gpu_blocks, "cpu_blocks": cpu_blocks, "pool_fill": rng.randrange(2**31), "gpu": gpu,
            "cpu": [[clash, 16 * len(taken), taken]], "order": order[:3]}


@hidden_scenario("task13", "copy_blocks on pair lists drawn at grading time", rule=R_COPY, driver=drawn.copy)
def copy_random(seed):
    rng = random.Random(seed)
    lists = []
    for n in range(6):
        if n == 0:  # always a valid copy from and to blocks >= 16 (past a 4-bit id)
            high = rng.sample(range(16, 32), 2)
            rest = rng.sample([b for b in range(32) if b not in high], 6)
            blocks = [high[0], *rest[:3], high[1], *rest[3:]]
            pairs = [(blocks[i], blocks[4 + i]) for i in range(rng.randint(1, 4))]
        else:
            blocks = rng.sample(range(32), 8)
            pairs = [(blocks[i], blocks[4 + i]) for i in range(rng.randint(1 if n < 3 else 0, 4))]
            # Always a broken list of each kind: a destination repeated, a destination also a source.
            if n == 1 or (n > 2 and rng.random() < 0.4):
                pairs.append((blocks[7], pairs[0][1]) if pairs else (blocks[7], blocks[6]))
            elif n == 2:
                pairs.append((blocks[7], pairs[0][0]))
        lists.append([list(p) for p in pairs])
    rng.shuffle(lists)
    return {"pool_fill": rng.randrange(2**31), "lists": lists}
