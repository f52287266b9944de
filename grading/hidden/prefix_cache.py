"""Hidden checks for Task 11 (instructor only): request streams the grader draws; the child runs
`pagedlab.drivers.drawn.prefix_cache.stream` on them as data."""

from __future__ import annotations

import random

from pagedlab.drivers.drawn import prefix_cache as drawn
from pagedlab.drivers.prefix_cache import RULE as PUBLIC_RULE
from pagedlab.drivers.prefix_cache import random_ops
from pagedlab.spec.catalog import hidden_scenario
from pagedlab.spec.domains import domain

RULE = (f"{PUBLIC_RULE}: allocate returns the number of cached prompt tokens (None if it cannot fit); "
        "popleft reuses the LRU block; free appends tail first; a hit unlinks its block")


def _planned(rng, block_size):
    """Every grading: a prompt of whole blocks allocated twice (a full hit), freed (cached in the
    LRU queue), then extended by one token (a hit plus a new block)."""
    prompt = [0, -rng.randrange(1, 10**6)] + [rng.randrange(1000) for _ in range(2 * block_size - 2)]  # ids 0 and < 0
    first, second, third = 10**6, 10**6 + 1, 10**6 + 2
    return [["allocate", first, prompt], ["allocate", second, list(prompt)], ["free", first, None],
            ["free", second, None], ["allocate", third, prompt + [rng.randrange(4)]], ["free", third, None]]


def _room(rng, num_blocks, block_size, short: bool):
    """A whole-block prompt P allocated and freed (its blocks cached and idle), a filler that
    leaves exactly the room P plus a few new blocks needs (or one block less), then P plus those
    tokens: its idle hits leave the free queue too, so they count against the room."""
    hits = rng.randrange(1, max(2, num_blocks // 3))
    new = rng.randrange(1, max(2, num_blocks - hits - 1))
    fill = num_blocks - hits - new + (1 if short else 0)
    prompt = [rng.randrange(1000) for _ in range(hits * block_size)]
    extra = [rng.randrange(1000) for _ in range((new - 1) * block_size + rng.randrange(1, block_size + 1))]
    filler = [2000 + rng.randrange(1000) for _ in range(fill * block_size)]
    a, f, b = 3 * 10**6, 3 * 10**6 + 1, 3 * 10**6 + 2
    return [["allocate", a, prompt], ["free", a, None], ["allocate", f, filler], ["allocate", b, prompt + extra],
            ["free", b, None], ["free", f, None]]


def _collisions(rng, block_size):
    """Under a hash that collides (every block 42): a block whose tokens match a cached one but
    whose parent does not (t after t), and a first block whose tokens do not (w): both misses."""
    t, u, w = ([rng.randrange(1000) for _ in range(block_size)] for _ in range(3))
    x, y, z = 4 * 10**6, 4 * 10**6 + 1, 4 * 10**6 + 2
    return [["allocate", x, t + u + [rng.randrange(4)]], ["allocate", y, t + t + [rng.randrange(4)]],
            ["allocate", z, w + [rng.randrange(4)]], ["free", x, None], ["free", y, None], ["free", z, None]]


@hidden_scenario("task11", "a request stream drawn at grading time, on a pool of a drawn size", rule=RULE,
                 driver=drawn.stream)
def stream_random(seed):
    rng = random.Random(seed)
    d = domain("task11")
    # Every pool class (a small pool: evictions and refused requests; a larger one; one past 256
    # blocks), each with the planned requests first, then a drawn stream. The first two hold the
    # room classes; the third hashes every block the same (the collisions first, on an empty cache).
    sizes = {"small (5-8 blocks of 1-2 tokens: evictions, refusals)": lambda: (rng.randrange(5, 9), rng.choice([1, 2])),
             "larger (12-23 blocks of 3-5 tokens)": lambda: (rng.randrange(12, 24), rng.choice([3, 4, 5])),
             "past 256 blocks": lambda: (d.axis("pool")["past 256 blocks"].draw(rng), rng.choice([1, 2]))}
    rooms = [k.name.startswith("one block short") for k in d.axis("room at an allocate")]
    rng.shuffle(rooms)
    hashes = {"the default": 0, "one that collides (every block the same hash)": 2}  # the pool each hash_fn serves
    colliding = next(hashes[k.name] for k in d.axis("hash_fn") if k.name.startswith("one that collides"))
    pools = []
    for i, klass in enumerate(d.axis("pool")):
        num_blocks, block_size = sizes[klass.name]()
        ops = (_collisions(rng, block_size) if i == colliding else []) + _planned(rng, block_size)
        if i < len(rooms):
            ops += _room(rng, num_blocks, block_size, rooms[i])
        ops += [list(op) for op in random_ops(rng.randrange(2**31), steps=120)]
        pools.append({"blocks": num_blocks, "block_size": block_size, "ops": ops,
                      **({"hash": "colliding"} if i == colliding else {})})
    # hash_full_blocks on every class of token list: none, under one block, whole blocks (two or
    # more: the chain shows), whole blocks and a partial one.
    bs = rng.randrange(2, 6)
    lengths = {"no tokens": 0, "under one block": rng.randrange(1, bs), "whole blocks (two or more)": bs * rng.randrange(2, 6),
               "whole blocks plus a partial one": bs * rng.randrange(1, 5) + rng.randrange(1, bs)}
    hashed = [[[rng.randrange(-5, 1000) for _ in range(lengths[k.name])], bs] for k in d.axis("hash_full_blocks")]
    queue = d.axis("free queue")["remove from the middle of a queue past 1024 blocks"].draw(rng)
    victims = rng.sample(range(1, queue - 1), 4)
    return {"pools": pools, "hash_full_blocks": hashed, "remove": {"blocks": queue, "victims": victims}}
