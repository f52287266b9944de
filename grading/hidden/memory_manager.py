"""Hidden checks for Tasks 1-5 (instructor only: never in the student edition).

Every scenario is drawn from `run.seed`, which the grader picks at grading time, so neither the
ids, the lengths, the layouts nor the values can be known in advance. The judge compares the
student's record with the reference solution's record of the same seed.
"""

from __future__ import annotations

from pagedlab import cmem
from pagedlab.checks import scenes
from pagedlab.checks.framework import check, see
from pagedlab.harness import hw3
from pagedlab.pool import Pool

RULE = "the same rules as the public checks, on scenarios drawn at grading time"


def _snap(engine) -> dict:
    st = hw3.state(engine)
    return {"free": st.free, "refs": list(st.refs),
            "seqs": [[s.seq_id, s.kv_count, [list(p) for p in s.mapping], list(s.l2_slots)] for s in st.seqs]}


def _heap(since) -> list:
    changes = cmem.changes_since(since)
    return [len(changes.allocated), sum(a.size for a in changes.allocated), changes.mallocs, changes.frees]


def _engine(run, blocks):
    pool = Pool(blocks * hw3.BLOCK_SIZE)
    return pool, scenes.engine(pool)


def _layout(rng, total, count, used, holes=True) -> dict:
    """{logical: block} for `count` distinct free blocks in random order; sometimes (always when
    holes == "always") the logical blocks start at a later L1 slot, leaving NULL L1 entries
    before them."""
    free = [b for b in range(total) if b not in used]
    rng.shuffle(free)
    picked = free[:count]
    used.update(picked)
    slots_needed = -(-count // 16)
    start = 16 * rng.randrange(1, 16 - slots_needed + 1) if holes == "always" or (holes and rng.random() < 0.4) else 0
    return {start + i: b for i, b in enumerate(picked)}


def _kv_for(rng, layout: dict) -> int:
    return (max(layout) + 1) * 16 - rng.randrange(16)


@check("task1", "llm_init on pool sizes drawn at grading time", rule=RULE, hidden=True)
def init_random(run):
    mm = run.load("memory_manager")
    rng = run.rng
    # Every class each grading: empty, under one block, exactly one block, a multiple of 64, a
    # multiple plus a remainder, and more blocks than one sequence can map (256).
    sizes = [0, rng.randrange(1, 64), 64, 64 * rng.randrange(2, 200), 64 * rng.randrange(1, 200) + rng.randrange(1, 64),
             64 * rng.randrange(257, 400) + rng.randrange(64)]
    rng.shuffle(sizes)
    for size in sizes:
        pool = Pool(max(size, 64))
        heap = cmem.snapshot()
        engine = mm.llm_init(pool.addr, size)
        if engine is None:
            see(f"llm_init({size} bytes)", None)
            see(f"heap after llm_init({size} bytes)", _heap(heap))
            continue
        see(f"llm_init({size} bytes)", [engine.total_local_blocks, engine.free_local_blocks,
                                        engine.pool_base_ptr == pool.addr])
        see(f"ref counts after llm_init({size} bytes)", list(engine.ref_count[0:engine.total_local_blocks]))
        head = hw3.addr(engine.active_seqs)
        see("empty list", [cmem.address(engine.active_seqs.next) == head, cmem.address(engine.active_seqs.prev) == head])
        see(f"heap after llm_init({size} bytes)", _heap(heap))
        hw3.sweep(heap)


@check("task2", "create_sequence / free_sequence on a random stream", rule=RULE, hidden=True)
def create_free_random(run):
    mm = run.load("memory_manager")
    rng = run.rng
    pool, engine = _engine(run, rng.randrange(20, 90))
    heap = cmem.snapshot()
    untouched = pool.snapshot()
    live = []
    # Each class of the domain once, then drawn steps, in a drawn order: lengths 0, negative,
    # within a block, one block exactly, one past, one L2 table exactly (256) and one past, the
    # 4096 maximum and one past; a live id created again; unknown ids freed.
    lengths = [0, -rng.randrange(1, 9), rng.randrange(1, 16), 16, 17, 256, 257, 4096, 4097]
    plan = [("create", n) for n in lengths] + [("create again", None), ("free unknown", None)] * 2
    plan += [rng.choice([("create", rng.randrange(1, 700)), ("free", None)]) for _ in range(40 - len(plan))]
    rng.shuffle(plan)
    for step, (op, length) in enumerate(plan):
        if op.startswith("free"):
            sid = rng.choice(live) if live and op == "free" else rng.randrange(10**6, 2 * 10**6)
            got = mm.free_sequence(engine, sid)
            if got == 0 and sid in live:
                live.remove(sid)
            see(f"step {step}: free_sequence({sid})", got)
        else:
            sid = rng.choice(live) if live and op == "create again" else rng.randrange(1, 10**6)
            length = rng.randrange(1, 40) if length is None else length
            got = mm.create_sequence(engine, sid, length)
            if got is not None:
                live.append(sid)
            see(f"step {step}: create_sequence({sid}, {length}) returned a Sequence", got is not None)
        see(f"step {step}: engine state", _snap(engine))
        see(f"step {step}: pool written", bool(pool.diff(untouched)))
        see(f"step {step}: live heap blocks", _heap(heap)[:2])
    hw3.release(engine)


@check("task3", "fork_sequence of random parents, valid and invalid ids", rule=RULE, hidden=True)
def fork_random(run):
    mm = run.load("memory_manager")
    rng = run.rng
    total = rng.randrange(100, 300)
    pool, engine = _engine(run, total)
    used: set = set()
    ids = rng.sample(range(1, 10**5), 4)
    # Parents of every class: one block, one full L2 table (16), more than one L2 table, and one
    # whose first L1 entries are NULL.
    for sid, (count, holes) in zip(ids, ((1, False), (16, False), (rng.randrange(17, 60), False),
                                         (rng.randrange(2, 15), "always")), strict=True):
        engine = scenes.with_sequence(engine, sid, _kv_for(rng, layout := _layout(rng, total, count, used, holes)), layout)
    heap = cmem.snapshot()
    # Each parent forked, then a fork of a fork, an unknown parent, a new id already in use.
    plan = [(p, None) for p in ids] + [("fork", None), ("unknown", None), (None, "used")]
    plan += [(None, None)] * 3
    for step, (parent, new) in enumerate(plan):
        parent = {"fork": ids[-1], "unknown": rng.randrange(10**5, 2 * 10**5), None: rng.choice(ids)}.get(parent, parent)
        new = rng.choice(ids) if new == "used" else rng.randrange(2 * 10**5, 3 * 10**5)
        got = mm.fork_sequence(engine, parent, new)
        if got is not None:
            ids.append(new)
        see(f"step {step}: fork_sequence({parent}, {new}) returned a Sequence", got is not None)
        see(f"step {step}: engine state", _snap(engine))
        see(f"step {step}: heap", _heap(heap))
    hw3.release(engine)


@check("task4", "append_kv with random values over forks, CoW and full pools", rule=RULE, hidden=True)
def append_random(run):
    mm = run.load("memory_manager")
    rng = run.rng
    total = rng.randrange(24, 48)
    pool, engine = _engine(run, total)
    used: set = set()
    seqs = {}
    # Every class each grading: a last block partly full (shared with a twin, so the next append
    # copies on write), a last block exactly full (the next append maps a new block), a sequence
    # 1-3 appends short of 256 tokens (the next L2 table), then appends until the pool is full.
    partly, full, long = rng.sample(range(1, 10**5), 3)
    for sid, count, kv_short in ((partly, rng.randrange(1, 4), rng.randrange(1, 16)), (full, rng.randrange(1, 4), 0),
                                 (long, 16, rng.randrange(1, 4))):
        layout = _layout(rng, total, count, used, holes=False)
        kv = (max(layout) + 1) * 16 - kv_short
        engine = scenes.with_sequence(engine, sid, kv, layout)
        seqs[sid] = (kv, layout)
    twin = rng.randrange(10**5, 2 * 10**5)
    engine = scenes.with_sequence(engine, twin, *seqs[partly])  # a fork: shares every block
    ids = [s.seq_id for s in hw3.sequences(engine)]
    plan = [partly, full, long, long, long, long] + [None] * 54
    for step, sid in enumerate(plan):
        sid = rng.choice(ids + [rng.randrange(3 * 10**5, 4 * 10**5)]) if sid is None else sid
        value = (-2**31, 2**31 - 1)[step] if step < 2 else rng.randrange(-2**31, 2**31)  # int32 extremes first
        before = pool.snapshot()
        got = mm.append_kv(engine, sid, value)
        see(f"step {step}: append_kv({sid}, {value})", got)
        see(f"step {step}: pool words written", [[b, w, a] for b, w, _, a in pool.diff(before).words])
        see(f"step {step}: engine state", _snap(engine))
    returns = []  # until the pool is full: the append that finds no free block
    for _ in range(total * 16):
        returns.append(mm.append_kv(engine, rng.choice(ids), rng.randrange(-2**31, 2**31)))
        if returns[-1] == -1 and engine.free_local_blocks == 0:
            break
    see("appends until the pool is full returned", returns)
    see("engine state when the pool is full", _snap(engine))
    # Every grading: the pool full and a last block shared with a fork, so the append needs a
    # copy-on-write block there is none of: -1, nothing changed (drawn appends reach it by chance).
    donor = rng.choice([s for s in hw3.state(engine).seqs if s.mapping])
    layout = dict(donor.mapping)
    twin = rng.randrange(4 * 10**5, 5 * 10**5)
    engine = scenes.with_sequence(engine, twin, max(layout) * 16 + rng.randrange(1, 16), layout)
    value = rng.randrange(-2**31, 2**31)
    see(f"append_kv({twin}, {value}) to a fork whose partly full last block is shared, the pool full",
        mm.append_kv(engine, twin, value))
    see("engine state after that append", _snap(engine))
    hw3.release(engine)


@check("task5", "llm_destroy of a random engine leaves nothing behind", rule=RULE, hidden=True)
def destroy_random(run):
    mm = run.load("memory_manager")
    rng = run.rng
    total = rng.randrange(40, 200)
    # An engine with no sequence is always destroyed too.
    empty_pool = Pool(rng.randrange(1, 40) * hw3.BLOCK_SIZE)
    heap = cmem.snapshot()
    see("llm_destroy(an engine with no sequences)", mm.llm_destroy(scenes.engine(empty_pool)))
    see("heap blocks left after llm_destroy of the empty engine", _heap(heap)[:2])
    pool = Pool(total * hw3.BLOCK_SIZE)
    heap = cmem.snapshot()
    engine = scenes.engine(pool)
    used: set = set()
    sids = rng.sample(range(1, 10**5), rng.randrange(2, 6))
    first = sids[0]
    for sid in sids:
        # The first sequence always starts past NULL L1 entries: a teardown that stops at the
        # first NULL entry leaks in every grading, not only when the seed draws a hole.
        layout = _layout(rng, total, rng.randrange(1, max(2, min(40, total - len(used)))), used,
                         holes="always" if sid == first else True)
        if not layout:  # the pool is full
            break
        engine = scenes.with_sequence(engine, sid, _kv_for(rng, layout), layout)
        if sid == first or rng.random() < 0.5:  # shared blocks: always at least one fork
            engine = scenes.with_sequence(engine, sid + 10**5, _kv_for(rng, layout), layout)
    before = pool.snapshot()
    see("llm_destroy(engine)", mm.llm_destroy(engine))
    see("heap blocks left after llm_destroy", _heap(heap)[:2])
    see("pool written by llm_destroy", bool(pool.diff(before)))
