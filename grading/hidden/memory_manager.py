"""Hidden checks for Tasks 1-5 (instructor only: never in the student edition).

Every scenario is drawn from `run.seed`, which the grader picks at grading time, so neither the
ids, the lengths, the layouts nor the values can be known in advance. The judge compares the
student's record with the reference solution's record of the same seed.
"""

from __future__ import annotations

from pagedlab import cmem
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
    return pool, hw3.new_engine(pool.addr, pool.size)


def _layout(rng, total, count, used, holes=True) -> dict:
    """{logical: block} for `count` distinct free blocks in random order; sometimes the logical
    blocks start at a later L1 slot, leaving NULL L1 entries before them."""
    free = [b for b in range(total) if b not in used]
    rng.shuffle(free)
    picked = free[:count]
    used.update(picked)
    slots_needed = -(-count // 16)
    start = 16 * rng.randrange(0, 16 - slots_needed + 1) if holes and rng.random() < 0.4 else 0
    return {start + i: b for i, b in enumerate(picked)}


def _kv_for(rng, layout: dict) -> int:
    return (max(layout) + 1) * 16 - rng.randrange(16)


@check("task1", "llm_init on pool sizes drawn at grading time", rule=RULE, hidden=True)
def init_random(run):
    mm = run.load("memory_manager")
    sizes = [run.rng.choice([0, 1, 63, 64, 65, 127, 128]), run.rng.randrange(64, 64 * 300),
             run.rng.randrange(1, 64), 64 * run.rng.randrange(1, 200) + run.rng.randrange(64)]
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
        hw3.teardown(engine)


@check("task2", "create_sequence / free_sequence on a random stream", rule=RULE, hidden=True)
def create_free_random(run):
    mm = run.load("memory_manager")
    rng = run.rng
    pool, engine = _engine(run, rng.randrange(20, 90))
    heap = cmem.snapshot()
    untouched = pool.snapshot()
    live = []
    for step in range(40):
        if live and rng.random() < 0.35:
            sid = rng.choice(live + [rng.randrange(1000, 2000)])
            got = mm.free_sequence(engine, sid)
            if got == 0 and sid in live:
                live.remove(sid)
            see(f"step {step}: free_sequence({sid})", got)
        else:
            sid = rng.choice(live) if live and rng.random() < 0.15 else rng.randrange(1, 10**6)
            length = rng.choice([0, -rng.randrange(1, 9), rng.randrange(1, 17), rng.randrange(1, 700),
                                 4096, 4097, rng.randrange(1, 2000)])
            got = mm.create_sequence(engine, sid, length)
            if got is not None:
                live.append(sid)
            see(f"step {step}: create_sequence({sid}, {length}) returned a Sequence", got is not None)
        see(f"step {step}: engine state", _snap(engine))
        see(f"step {step}: pool written", bool(pool.diff(untouched)))
        see(f"step {step}: live heap blocks", _heap(heap)[:2])
    hw3.teardown(engine)


@check("task3", "fork_sequence of random parents, valid and invalid ids", rule=RULE, hidden=True)
def fork_random(run):
    mm = run.load("memory_manager")
    rng = run.rng
    total = rng.randrange(80, 300)
    pool, engine = _engine(run, total)
    used: set = set()
    ids = rng.sample(range(1, 10**5), 4)
    for sid in ids:
        layout = _layout(rng, total, rng.randrange(1, max(2, min(60, total - len(used) - 1))), used)
        if not layout:  # the pool is full
            break
        hw3.build_sequence(engine, sid, _kv_for(rng, layout), layout)
    heap = cmem.snapshot()
    for step in range(10):
        parent = rng.choice(ids + [rng.randrange(10**5, 2 * 10**5)])
        new = rng.choice(ids) if rng.random() < 0.25 else rng.randrange(2 * 10**5, 3 * 10**5)
        got = mm.fork_sequence(engine, parent, new)
        if got is not None:
            ids.append(new)
        see(f"step {step}: fork_sequence({parent}, {new}) returned a Sequence", got is not None)
        see(f"step {step}: engine state", _snap(engine))
        see(f"step {step}: heap", _heap(heap))
    hw3.teardown(engine)


@check("task4", "append_kv with random values over forks, CoW and full pools", rule=RULE, hidden=True)
def append_random(run):
    mm = run.load("memory_manager")
    rng = run.rng
    total = rng.randrange(6, 40)
    pool, engine = _engine(run, total)
    used: set = set()
    seqs = {}
    for sid in rng.sample(range(1, 10**5), 2):
        layout = _layout(rng, total, rng.randrange(1, max(2, total // 4)), used, holes=False)
        kv = _kv_for(rng, layout)
        hw3.build_sequence(engine, sid, kv, layout)
        seqs[sid] = (kv, layout)
    for kv, layout in list(seqs.values()):  # forks share every block
        twin = rng.randrange(10**5, 2 * 10**5)
        hw3.build_sequence(engine, twin, kv, layout)
    ids = [s.seq_id for s in hw3.sequences(engine)]
    for step in range(120):
        sid = rng.choice(ids + [rng.randrange(3 * 10**5, 4 * 10**5)])
        value = rng.randrange(-2**31, 2**31)
        before = pool.snapshot()
        got = mm.append_kv(engine, sid, value)
        see(f"step {step}: append_kv({sid}, {value})", got)
        see(f"step {step}: pool words written", [[b, w, a] for b, w, _, a in pool.diff(before).words])
        see(f"step {step}: engine state", _snap(engine))
    hw3.teardown(engine)


@check("task5", "llm_destroy of a random engine leaves nothing behind", rule=RULE, hidden=True)
def destroy_random(run):
    mm = run.load("memory_manager")
    rng = run.rng
    total = rng.randrange(40, 200)
    pool = Pool(total * hw3.BLOCK_SIZE)
    heap = cmem.snapshot()
    engine = hw3.new_engine(pool.addr, pool.size)
    used: set = set()
    for sid in rng.sample(range(1, 10**5), rng.randrange(0, 6)):
        layout = _layout(rng, total, rng.randrange(1, max(2, min(40, total - len(used)))), used)
        if not layout:  # the pool is full
            break
        hw3.build_sequence(engine, sid, _kv_for(rng, layout), layout)
        if rng.random() < 0.5:
            hw3.build_sequence(engine, sid + 10**5, _kv_for(rng, layout), layout)
    before = pool.snapshot()
    see("llm_destroy(engine)", mm.llm_destroy(engine))
    see("heap blocks left after llm_destroy", _heap(heap)[:2])
    see("pool written by llm_destroy", bool(pool.diff(before)))
