"""Graded checks for Task 11: prefix caching with an intrusive LRU free queue.

The checks drive the student's `prefix_cache` module through its public classes and compare it
with a walkthrough traced by hand (notebook 09) and, call by call on seeded random streams, with
the reference solution's record of the same streams (`expected.json`; the judge compares).
"""

from __future__ import annotations

import random

from ..spec.catalog import CheckFailure, check
from .record import expect, expect_equal, see

RULE = "notebook 09, Prefix caching"


def _mod(run):
    return run.load("prefix_cache")


def _state(mgr) -> dict:
    pool = mgr.pool
    return {
        "free queue (head→tail)": pool.free_queue.block_ids(),
        "ref counts": [b.ref_cnt for b in pool.blocks],
        "cached blocks": sorted(b.block_id for b in pool.cached.values()),
    }


# ---------------------------------------------------------------- hashing


@check("task11", "full blocks get chained hashes; a partial block gets none", rule=f"{RULE}: hash(parent_hash, block tokens)")
def chained_hashes(run):
    m = _mod(run)
    tokens = list(range(40, 50))  # 10 tokens, block size 4: two full blocks and a partial one
    got = m.hash_full_blocks(tokens, 4)
    h0 = m.hash_block_tokens(m.ROOT_HASH, tuple(tokens[0:4]))
    h1 = m.hash_block_tokens(h0, tuple(tokens[4:8]))
    expect_equal(list(got), [h0, h1], "hash_full_blocks(range(40, 50), block_size=4)",
                 rule=f"{RULE}: one hash per full block, each chained to its parent's hash",
                 hint="start from ROOT_HASH; the partial last block (2 tokens) gets no hash")
    expect_equal(list(m.hash_full_blocks(tokens[:3], 4)), [], "hashes of a 3-token prompt with block size 4",
                 rule=f"{RULE}: only full blocks are hashed")
    same_block_elsewhere = m.hash_full_blocks([0, 0, 0, 0] + tokens[4:8], 4)[1]
    expect(same_block_elsewhere != h1,
           "the same 4 tokens after a different first block got the same hash",
           rule=f"{RULE}: a block's hash covers its whole prefix (the parent hash), not just its tokens",
           expected="different hashes", actual=f"both {h1:#x}")
    calls = []

    def spy(parent, toks):
        calls.append((parent, tuple(toks)))
        return len(calls)

    m.hash_full_blocks(tokens, 4, spy)
    expect_equal(calls, [(m.ROOT_HASH, tuple(tokens[0:4])), (1, tuple(tokens[4:8]))],
                 "calls made to a hash_fn passed to hash_full_blocks",
                 rule=f"{RULE}: use the hash_fn you are given, parent first")


# ---------------------------------------------------------------- the free queue


def _queue_links_ok(q, ids_expected, what):
    forward = q.block_ids()
    expect_equal(forward, ids_expected, f"{what}: free queue head→tail", rule=f"{RULE}: LRU free queue")
    backward, node, steps = [], q.tail.prev_free, 0
    while node is not q.head and node is not None and steps <= len(ids_expected) + 1:
        backward.append(node.block_id)
        node, steps = node.prev_free, steps + 1
    expect_equal(backward[::-1], ids_expected, f"{what}: walking the prev_free links from the tail",
                 rule=f"{RULE}: a doubly linked list: prev_free must mirror next_free",
                 hint="every link you set in one direction needs its partner in the other")
    expect_equal(len(q), len(ids_expected), f"{what}: len(queue)", rule=f"{RULE}: num_free_blocks")


@check("task11", "free queue: append at the tail, popleft at the head, remove from the middle", rule=f"{RULE}: intrusive list with sentinels")
def free_queue_ops(run):
    m = _mod(run)
    blocks = [m.KVCacheBlock(i) for i in range(6)]
    q = m.FreeBlockQueue(blocks)
    _queue_links_ok(q, [0, 1, 2, 3, 4, 5], "a new queue of blocks 0..5")
    first = q.popleft()
    expect_equal(first.block_id, 0, "popleft() on 0..5 returned block", rule=f"{RULE}: the head is the LRU block")
    q.remove(blocks[3])
    _queue_links_ok(q, [1, 2, 4, 5], "after popleft() and remove(block 3)")
    q.append(blocks[3])
    q.append(first)
    _queue_links_ok(q, [1, 2, 4, 5, 3, 0], "after append(3), append(0)")
    q.remove(blocks[1])
    q.remove(blocks[0])
    _queue_links_ok(q, [2, 4, 5, 3], "after removing the first and the last block")
    for want in (2, 4, 5, 3):
        expect_equal(q.popleft().block_id, want, "popleft() order", rule=f"{RULE}: LRU order")
    _queue_links_ok(q, [], "after emptying the queue")
    expect(q.head.next_free is q.tail and q.tail.prev_free is q.head,
           "an empty queue's sentinels must point at each other",
           rule=f"{RULE}: sentinels", expected="head.next_free is tail, tail.prev_free is head",
           actual=f"head.next_free={q.head.next_free!r}, tail.prev_free={q.tail.prev_free!r}")
    try:
        q.popleft()
    except MemoryError:
        pass
    else:
        raise CheckFailure("popleft() on an empty queue returned instead of raising", rule=f"{RULE}: no free block",
                           expected="MemoryError", actual="a return value")


def remove_reads(m, num_blocks: int, victims) -> tuple[int, int]:
    """(the most prev_free/next_free reads one remove() made, the queue's length after) for a
    queue of `num_blocks` blocks of module `m` and removals of the blocks `victims`, in order."""
    reads = [0]
    next_slot, prev_slot = m.KVCacheBlock.next_free, m.KVCacheBlock.prev_free

    class CountingBlock(m.KVCacheBlock):
        @property
        def next_free(self):
            reads[0] += 1
            return next_slot.__get__(self)

        @next_free.setter
        def next_free(self, value):
            next_slot.__set__(self, value)

        @property
        def prev_free(self):
            reads[0] += 1
            return prev_slot.__get__(self)

        @prev_free.setter
        def prev_free(self, value):
            prev_slot.__set__(self, value)

    blocks = [CountingBlock(i) for i in range(num_blocks)]
    q = m.FreeBlockQueue(blocks)
    worst = 0
    for victim in victims:
        reads[0] = 0
        q.remove(blocks[victim])
        worst = max(worst, reads[0])
    return worst, len(q)


MAX_REMOVE_READS = 8  # links an O(1) unlink reads, with room to spare


@check("task11", "remove() from the middle is O(1): it reads a few links, it does not walk the list", rule=f"{RULE}: O(1) removal")
def remove_is_constant_time(run):
    worst, left = remove_reads(_mod(run), 2000, (1000, 1500, 1999, 1))
    expect(worst <= MAX_REMOVE_READS, "remove(block) read too many prev_free/next_free links in a 2000-block queue",
           rule=f"{RULE}: unlink through the block's own prev_free/next_free, no search",
           expected="a handful of link reads (O(1))", actual=f"{worst} link reads",
           hint="a doubly linked node knows both neighbours: link them to each other, then detach it")
    expect_equal(left, 1996, "len(queue) after 4 removals", rule=f"{RULE}: num_free_blocks")


# ---------------------------------------------------------------- the hand-traced walkthrough

SYS = list(range(100, 112))  # a 12-token "system prompt": three full blocks of 4


def walkthrough_steps(m):
    """Notebook 09's walkthrough: 10 blocks of 4 tokens. Yields (label, result, manager)."""
    mgr = m.PrefixCacheManager(num_blocks=10, block_size=4)
    yield "A = SYS + [1, 2]", mgr.allocate("A", SYS + [1, 2]), mgr
    yield "B = SYS + [7, 8, 9]", mgr.allocate("B", SYS + [7, 8, 9]), mgr
    for tok in (3, 4, 5):
        ok = mgr.append_token("A", tok)
    yield "A generates 3, 4, 5", ok, mgr
    mgr.free("A")
    yield "free A", None, mgr
    mgr.free("B")
    yield "free B", None, mgr
    yield "C = SYS + [1, 2, 3, 4, 9]", mgr.allocate("C", SYS + [1, 2, 3, 4, 9]), mgr
    yield "D = 12 new tokens", mgr.allocate("D", list(range(200, 212))), mgr
    mgr.free("C")
    yield "free C", None, mgr
    yield "E = 16 new tokens", mgr.allocate("E", list(range(300, 316))), mgr
    yield "F = SYS + [5] (does not fit)", mgr.allocate("F", SYS + [5]), mgr
    mgr.free("D")
    yield "free D", None, mgr
    yield "F = SYS + [5] (again)", mgr.allocate("F", SYS + [5]), mgr


# (label, returned value, free queue head→tail, {request: block ids}, cached block ids)
WALKTHROUGH = [
    ("A = SYS + [1, 2]", 0, [4, 5, 6, 7, 8, 9], {"A": [0, 1, 2, 3]}, [0, 1, 2]),
    ("B = SYS + [7, 8, 9]", 12, [5, 6, 7, 8, 9], {"A": [0, 1, 2, 3], "B": [0, 1, 2, 4]}, [0, 1, 2]),
    ("A generates 3, 4, 5", True, [6, 7, 8, 9], {"A": [0, 1, 2, 3, 5], "B": [0, 1, 2, 4]}, [0, 1, 2, 3]),
    ("free A", None, [6, 7, 8, 9, 5, 3], {"B": [0, 1, 2, 4]}, [0, 1, 2, 3]),
    ("free B", None, [6, 7, 8, 9, 5, 3, 4, 2, 1, 0], {}, [0, 1, 2, 3]),
    ("C = SYS + [1, 2, 3, 4, 9]", 16, [7, 8, 9, 5, 4], {"C": [0, 1, 2, 3, 6]}, [0, 1, 2, 3]),
    ("D = 12 new tokens", 0, [5, 4], {"C": [0, 1, 2, 3, 6], "D": [7, 8, 9]}, [0, 1, 2, 3, 7, 8, 9]),
    ("free C", None, [5, 4, 6, 3, 2, 1, 0], {"D": [7, 8, 9]}, [0, 1, 2, 3, 7, 8, 9]),
    ("E = 16 new tokens", 0, [2, 1, 0], {"D": [7, 8, 9], "E": [5, 4, 6, 3]}, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]),
    ("F = SYS + [5] (does not fit)", None, [2, 1, 0], {"D": [7, 8, 9], "E": [5, 4, 6, 3]}, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]),
    ("free D", None, [2, 1, 0, 9, 8, 7], {"E": [5, 4, 6, 3]}, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]),
    ("F = SYS + [5] (again)", 12, [8, 7], {"E": [5, 4, 6, 3], "F": [0, 1, 2, 9]}, [0, 1, 2, 3, 4, 5, 6, 7, 8]),
]


@check("task11", "the hand-traced walkthrough of notebook 09 (10 blocks, shared system prompt)", rule=f"{RULE}: hits, LRU order, lazy eviction, tail-first free")
def walkthrough(run):
    m = _mod(run)
    for (label, result, mgr), (want_label, want_result, want_queue, want_tables, want_cached) in zip(
            walkthrough_steps(m), WALKTHROUGH, strict=True):
        assert label == want_label
        expect_equal(result, want_result, f"step '{label}': returned value",
                     rule=f"{RULE}: allocate returns the number of cached prompt tokens (None if it cannot fit)",
                     hint="hits stop at the first miss and cover at most len(prompt) - 1 tokens; "
                          "a request that does not fit changes nothing")
        expect_equal(mgr.pool.free_queue.block_ids(), want_queue, f"step '{label}': free queue head→tail",
                     rule=f"{RULE}: popleft reuses the LRU block; free appends tail first; a hit unlinks its block",
                     hint="free a request's blocks from its last block to its first")
        tables = {rid: mgr.block_ids(rid) for rid in mgr.block_tables}
        expect_equal(tables, want_tables, f"step '{label}': block tables", rule=f"{RULE}: block tables")
        cached = sorted(b.block_id for b in mgr.pool.cached.values())
        expect_equal(cached, want_cached, f"step '{label}': blocks in the prefix cache",
                     rule=f"{RULE}: full blocks are cached; a freed block stays cached until it is reused (lazy eviction)")


# ---------------------------------------------------------------- focused rules


@check("task11", "lookups verify the tokens: a hash collision never hands out someone else's block", rule=f"{RULE}: no silent collision")
def collisions_are_detected(run):
    m = _mod(run)
    mgr = m.PrefixCacheManager(num_blocks=8, block_size=4, hash_fn=lambda parent, tokens: 42)
    expect_equal(mgr.allocate("x", [1, 2, 3, 4, 5]), 0, "first request, every hash equal to 42", rule=RULE)
    got = mgr.allocate("y", [9, 9, 9, 9, 5])
    expect_equal(got, 0, "a different first block whose hash collides: cached tokens reported",
                 rule=f"{RULE}: compare the block's tokens (and parent hash) before trusting a hit")
    expect(mgr.block_ids("y")[0] != mgr.block_ids("x")[0],
           "request y was given request x's block for different tokens",
           rule=f"{RULE}: no silent collision", expected="a fresh block", actual=f"block {mgr.block_ids('y')[0]}")
    expect_equal(mgr.allocate("z", [1, 2, 3, 4, 6]), 4, "same first block as x (same tokens): cached tokens",
                 rule=f"{RULE}: a verified match is still a hit")
    pool = mgr.pool
    block = pool.blocks[mgr.block_ids("x")[0]]
    expect(pool.lookup(m.ROOT_HASH, (1, 2, 3, 4)) is block, "lookup(ROOT_HASH, (1, 2, 3, 4)) should find x's block",
           rule=RULE)
    other = pool.lookup(12345, (1, 2, 3, 4))
    expect(other is None, "lookup with the right tokens but a different parent hash returned a block",
           rule=f"{RULE}: the parent hash is part of what a block stands for",
           expected="None (a miss)", actual=repr(other))


@check("task11", "a request that does not fit changes nothing (hits on idle blocks count against the free space)", rule=f"{RULE}: check before allocate")
def no_partial_allocation(run):
    m = _mod(run)
    mgr = m.PrefixCacheManager(num_blocks=4, block_size=4)
    expect_equal(mgr.allocate("a", list(range(12))), 0, "allocate 12 tokens in a 4-block pool", rule=RULE)
    mgr.free("a")  # blocks 0..2 idle but cached, block 3 never used
    before = _state(mgr)
    got = mgr.allocate("b", list(range(12)) + [50, 51, 52, 53, 54])  # 3 hits + 2 new blocks: needs 5
    expect(got is None, "a request needing 5 blocks in a 4-block pool was admitted",
           rule=f"{RULE}: check before allocate", expected="None", actual=got)
    expect_equal(_state(mgr), before, "pool state after a request that does not fit",
                 rule=f"{RULE}: a failed allocate leaves the queue, ref counts and cache unchanged",
                 hint="count how many blocks you need, and how many free blocks the hits themselves use, before touching anything")
    expect("b" not in mgr.block_tables, "the failed request kept a block table", rule=RULE)
    expect_equal(mgr.allocate("c", list(range(12)) + [50]), 12, "3 cached blocks + 1 new block in the same pool",
                 rule=RULE)


@check("task11", "blocks are freed tail first and cached blocks survive until reused", rule=f"{RULE}: tail-first free, lazy eviction")
def tail_first_and_lazy(run):
    m = _mod(run)
    mgr = m.PrefixCacheManager(num_blocks=8, block_size=2)
    mgr.allocate("r", [1, 2, 3, 4, 5, 6])  # blocks 0, 1, 2: a chain of three full blocks
    mgr.free("r")
    expect_equal(mgr.pool.free_queue.block_ids(), [3, 4, 5, 6, 7, 2, 1, 0], "free queue after freeing blocks 0,1,2",
                 rule=f"{RULE}: a request's blocks are freed last block first, so the chain tail is evicted first")
    expect_equal(sorted(b.block_id for b in mgr.pool.cached.values()), [0, 1, 2],
                 "cached blocks right after the request finished",
                 rule=f"{RULE}: freeing a block does not evict it (lazy eviction)")
    mgr.allocate("s", [9] * 11)  # 6 new blocks: 3..7, then block 2 (evicted; its new block is partial)
    expect_equal(sorted(b.block_id for b in mgr.pool.cached.values()), [0, 1, 3, 4, 5, 6, 7],
                 "cached blocks after request s reused block 2 for a partial block",
                 rule=f"{RULE}: the reused block leaves the cache when it is reallocated, its ancestors stay")
    expect(mgr.pool.blocks[2].block_hash is None,
           "block 2 kept its old hash after being reused for other tokens",
           rule=f"{RULE}: eviction clears the block's hash", expected="None",
           actual=mgr.pool.blocks[2].block_hash)
    mgr.free("s")
    expect_equal(mgr.allocate("t", [1, 2, 3, 4, 5, 6, 7]), 4, "prefix [1, 2, 3, 4] after its third block was evicted",
                 rule=f"{RULE}: the surviving ancestors still hit")
    expect_equal(mgr.block_ids("t"), [0, 1, 2, 7], "block table of t",
                 rule=f"{RULE}: hits first, then new blocks from the head of the free queue")


@check("task11", "a fully cached prompt still recomputes its last token (at most len - 1 tokens hit)", rule=f"{RULE}: the last prompt token is always computed")
def last_token_recomputed(run):
    m = _mod(run)
    mgr = m.PrefixCacheManager(num_blocks=8, block_size=4)
    mgr.allocate("a", list(range(8)))  # two full blocks, both cached
    got = mgr.allocate("b", list(range(8)))
    expect_equal(got, 4, "the same 8-token prompt again: cached tokens",
                 rule=f"{RULE}: the model must run the last prompt token to sample the first output "
                      "token, so a hit covers at most len(prompt) - 1 tokens",
                 hint="look up at most (len(prompt) - 1) // block_size blocks")
    expect_equal(mgr.block_ids("b"), [0, 2], "block table of the repeated prompt",
                 rule=f"{RULE}: one hit, then a new block for the recomputed last block")
    expect_equal(sorted(b.block_id for b in mgr.pool.cached.values()), [0, 1],
                 "cached blocks (the recomputed copy of block 1 has the same hash)",
                 rule=f"{RULE}: one cache entry per hash; the duplicate stays uncached")


# ---------------------------------------------------------------- seeded random streams


def random_ops(seed, steps=250):
    """A reproducible stream of (op, request, tokens) with many shared prefixes."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(1000) for _ in range(rng.randrange(3, 13))] for _ in range(4)]
    live, next_id, ops = [], 0, []
    for _ in range(steps):
        r = rng.random()
        if r < 0.35 or not live:
            stem = rng.choice(prefixes) if rng.random() < 0.8 else []
            prompt = stem + [rng.randrange(4) for _ in range(rng.randrange(1, 8))]
            ops.append(("allocate", next_id, prompt))
            live.append(next_id)
            next_id += 1
        elif r < 0.75:
            ops.append(("append", rng.choice(live), rng.randrange(4)))
        else:
            rid = live.pop(rng.randrange(len(live)))
            ops.append(("free", rid, None))
    return ops


def stream_calls(ops, manager, free="free"):
    """Run an op stream on `manager` (methods looked up at each call, as a student's code would
    see them); yields (n, op, rid, arg, returned value) per call. `free` names the free method.

    One admission rule for the public checks, the hidden ones and the model: a request refused
    at `allocate` (pool full) gets no later call, and a freed one is forgotten.
    """
    admitted = set()
    for n, (op, rid, arg) in enumerate(ops):
        if op == "allocate":
            got = manager.allocate(rid, arg)
            if got is not None:
                admitted.add(rid)
        elif rid not in admitted:
            continue
        elif op == "append":
            got = manager.append_token(rid, arg)
        else:
            got = getattr(manager, free)(rid)
            admitted.discard(rid)
        yield n, op, rid, arg, got


def replay(m, seed, num_blocks=12, block_size=3):
    """Run `random_ops(seed)` on the manager of module `m`; yields (call, what, value) for every
    observation. The judge compares them with the reference solution's run of the same stream."""
    mgr = m.PrefixCacheManager(num_blocks, block_size)
    for n, op, rid, arg, got in stream_calls(random_ops(seed), mgr):
        call = f"op {n}: {op}(request {rid}{', ' + repr(arg) if arg is not None else ''})"
        yield call, "returned value", got
        yield call, "pool state", _state(mgr)
        if op != "free":
            yield call, "block table", mgr.block_ids(rid) if rid in mgr.block_tables else None


@check("task11", "random streams: 3 seeded streams of allocate/append/free, call by call like the reference solution",
       rule=f"{RULE}: the same behaviour as the reference solution")
def model_based(run):
    m = _mod(run)
    for seed in (1, 2, 3):
        for call, what, got in replay(m, seed):
            see(f"seed {seed}, {call}: {what}", got, rule=f"{RULE}: the same behaviour as the reference solution",
                hint="the first difference is shown; replay it with "
                     "list(pagedlab.drivers.prefix_cache.random_ops(seed)), the calls in order")
