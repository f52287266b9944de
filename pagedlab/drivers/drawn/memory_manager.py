"""Drivers of the hidden checks of Tasks 1-5 on drawn scenarios (data: pool sizes, layouts
{logical: block} as pairs, op lists with their ids and values)."""

from __future__ import annotations

from ... import cmem
from ...engine.pool import Pool
from ...harness import hw3
from ...spec import catalog
from ...spec.catalog import scenario_driver
from .. import memory_manager as public
from .. import record, scenes

# The rule each observation cites, by what its label names (first match): a hidden failure says
# which rule broke, as a public one does, before its scenario's values are published.
RULES = [
    ("ref counts after llm_init", public.R_INIT + ": ref_count is a zeroed array of total_local_blocks ints"),
    ("heap after llm_init", public.R_INIT + ": llm_init allocates exactly the engine and the ref-count array "
                            "(nothing when it returns None)"),
    ("llm_init(", public.R_INIT + ": None if pool_addr is NULL or pool_size < BLOCK_SIZE; otherwise "
                  "total = free = pool_size // BLOCK_SIZE"),
    ("empty list", public.R_LIST),
    ("pool", public.R_POOL),
    ("free_sequence(", public.R_FREE),
    ("create_sequence(", public.R_CREATE),
    ("fork_sequence(", public.R_FORK),
    ("append", public.R_APPEND),
    ("llm_destroy", public.R_DESTROY),
    ("heap blocks left", public.R_LEAK),
    ("heap", public.R_LEAK),
    ("engine state", public.R_REFS + "; " + public.R_FREE_COUNT.split(": ", 1)[1] + "; blocks are taken first-fit"),
]


def see(what: str, value, **details) -> None:
    for key, rule in RULES:
        if key in what:
            details.setdefault("rule", rule)
            break
    record.see(what, value, **details)


def _snap(engine) -> dict:
    st = hw3.state(engine)
    return {"free": st.free, "refs": list(st.refs),
            "seqs": [[s.seq_id, s.kv_count, [list(p) for p in s.mapping], list(s.l2_slots)] for s in st.seqs]}


def _heap(since) -> list:
    changes = cmem.changes_since(since)
    return [len(changes.allocated), sum(a.size for a in changes.allocated), changes.mallocs, changes.frees]


def _engine(blocks, built=()):
    """A pool and a harness-built engine holding `built`: [{"id", "kv", "layout": [[logical,
    block], ...]}], laid out from the data (`scenes`), never by code that does a task."""
    pool = Pool(blocks * hw3.BLOCK_SIZE)
    seqs = [(b["id"], b["kv"], {logical: block for logical, block in b["layout"]}) for b in built]
    return pool, scenes.engine(pool, seqs)


def engine_totals(task: str, scenario=None) -> list:
    """The pools' block counts of a drawn scenario ("blocks", "empty_blocks", ...): the grader
    sends each one's empty engine (registry.engine_totals); Task 1's scenarios have none."""
    return catalog.block_counts(scenario or {})


def _pick(items: list, u: float):
    """The item a drawn fraction `u` in [0, 1) points at (the list depends on the run so far)."""
    return items[min(int(u * len(items)), len(items) - 1)]


def pool_class(size: int) -> str:
    """The domain class of a pool size, in words without digits: a hidden failure names it before
    the scenario's values are published (the judge hides every number until then)."""
    blocks, rest = divmod(size, hw3.BLOCK_SIZE)
    if size == 0:
        return "an empty pool"
    if blocks == 0:
        return "less than one block"
    if blocks > hw3.MAX_LOGICAL_BLOCKS:
        return "more blocks than MAX_LOGICAL_BLOCKS, the most one sequence can map"
    if blocks == 1 and not rest:
        return "exactly one block"
    return "whole blocks" + (" and part of another" if rest else "")


@scenario_driver
def init(run):
    """Sizes on a pool, then sizes with a NULL pool_addr (None and 0)."""
    mm = run.load("memory_manager")
    for size in run.scenario.get("null", []):
        for null in (None, 0):
            heap = cmem.snapshot()
            see(f"llm_init({null}, {size} bytes)", mm.llm_init(null, size) is None)
            see(f"heap after llm_init({null}, {size} bytes)", _heap(heap))
    for size in run.scenario["sizes"]:
        pool = Pool(max(size, 64))
        heap = cmem.snapshot()
        engine = mm.llm_init(pool.addr, size)
        call = f"llm_init({size} bytes: {pool_class(size)})"
        if engine is None:
            see(call, None)
            see(f"heap after {call}", _heap(heap))
            continue
        see(call, {"total_local_blocks": engine.total_local_blocks, "free_local_blocks": engine.free_local_blocks,
                   "pool_base_ptr is pool_addr": engine.pool_base_ptr == pool.addr})
        see(f"ref counts after {call}", list(engine.ref_count[0:engine.total_local_blocks]))
        head = hw3.addr(engine.active_seqs)
        see("empty list", [cmem.address(engine.active_seqs.next) == head, cmem.address(engine.active_seqs.prev) == head])
        see(f"heap after {call}", _heap(heap))
        hw3.sweep(heap)


@scenario_driver
def create_free(run):
    """Scenes [{"blocks", "built", "steps"}], each on an engine of its own. Steps: {"op":
    "create", "id", "length"} | {"op": "free", "id", "live": pick}; a pick (a fraction) chooses
    a live id instead of "id" when some sequence is live; "engine": None calls with NULL."""
    mm = run.load("memory_manager")
    for n, sc in enumerate(run.scenario["scenes"]):
        where = f"engine {n}, " if n else ""
        start = cmem.snapshot()
        pool, engine = _engine(sc["blocks"], sc["built"])
        heap = cmem.snapshot()
        untouched = pool.snapshot()
        live = [s["id"] for s in sc["built"]]
        for step, st in enumerate(sc["steps"]):
            target = None if "engine" in st else engine
            sid = _pick(live, st["live"]) if st.get("live") is not None and live else st["id"]
            if st["op"] == "free":
                got = mm.free_sequence(target, sid)
                if got == 0 and sid in live and target is not None:
                    live.remove(sid)
                see(f"{where}step {step}: free_sequence({'NULL, ' * (target is None)}{sid!r})", got)
            else:
                got = mm.create_sequence(target, sid, st["length"])
                if got is not None and target is not None:
                    live.append(sid)
                see(f"{where}step {step}: create_sequence({'NULL, ' * (target is None)}{sid!r}, {st['length']!r}) "
                    "returned a Sequence", got is not None)
            see(f"{where}step {step}: engine state", _snap(engine))
            see(f"{where}step {step}: pool written", bool(pool.diff(untouched)))
            see(f"{where}step {step}: live heap blocks", _heap(heap)[:2])
        hw3.sweep(start)


@scenario_driver
def fork(run):
    """Forks: {"parent": id | "last" (the newest fork) | None with "pick" (any sequence), "new"
    (or "pick_new": a live id)}; "engine": None calls with NULL."""
    mm = run.load("memory_manager")
    sc = run.scenario
    start = cmem.snapshot()
    pool, engine = _engine(sc["blocks"], sc["built"])
    ids = [s["id"] for s in sc["built"]]
    heap = cmem.snapshot()
    for step, st in enumerate(sc["forks"]):
        parent = ids[-1] if st["parent"] == "last" else st["parent"]
        if parent is None:
            parent = _pick(ids, st["pick"])
        new = _pick(ids, st["pick_new"]) if st.get("pick_new") is not None else st["new"]
        target = None if "engine" in st else engine
        got = mm.fork_sequence(target, parent, new)
        if got is not None and target is not None:
            ids.append(new)
        see(f"step {step}: fork_sequence({'NULL, ' * (target is None)}{parent}, {new}) returned a Sequence",
            got is not None)
        see(f"step {step}: engine state", _snap(engine))
        see(f"step {step}: heap", _heap(heap))
    hw3.sweep(start)


def _append(run, mm, engine, pool, label, sid, value) -> None:
    before = pool.snapshot()
    got = mm.append_kv(engine, sid, value)
    see(f"{label}: append_kv({sid}, {value!r})", got)
    see(f"{label}: pool words written", [[b, w, a] for b, w, _, a in pool.diff(before).words])
    see(f"{label}: engine state", _snap(engine))


@scenario_driver
def append(run):
    """Planned and drawn appends ([id, value]), appends until the pool is full, a copy-on-write
    append with no free block, then a second engine with exactly one free block."""
    mm = run.load("memory_manager")
    sc = run.scenario
    start = cmem.snapshot()
    pool, engine = _engine(sc["blocks"], sc["built"])
    for step, (sid, value) in enumerate(sc["appends"]):
        _append(run, mm, engine, pool, f"step {step}", sid, value)
    returns = []  # until the pool is full: the append that finds no free block
    for sid, value in sc["until_full"]:
        returns.append(mm.append_kv(engine, sid, value))
        if returns[-1] == -1 and engine.free_local_blocks == 0:
            break
    see("appends until the pool is full returned", returns)
    see("engine state when the pool is full", _snap(engine))
    # The pool full and a last block shared with a fork: copy-on-write needs a block there is none of.
    last = sc["cow_when_full"]
    donor = _pick([s for s in hw3.state(engine).seqs if s.mapping], last["pick"])
    layout = dict(donor.mapping)
    engine = scenes.with_sequence(engine, last["id"], max(layout) * 16 + last["offset"], layout)
    see(f"append_kv({last['id']}, {last['value']}) to a fork whose partly full last block is shared, the pool full",
        mm.append_kv(engine, last["id"], last["value"]))
    see("engine state after that append", _snap(engine))
    hw3.sweep(start)
    # One free block and an append past a whole L2 table: the new L2 table comes from the heap.
    one = sc["one_free"]
    start = cmem.snapshot()
    pool, engine = _engine(one["blocks"], one["built"])
    see("one free block: engine state before", _snap(engine))
    for step, (sid, value) in enumerate(one["appends"]):
        _append(run, mm, engine, pool, f"one free block, step {step}", sid, value)
        see(f"one free block, step {step}: heap blocks", _heap(start)[:2])
    hw3.sweep(start)
    # A pool past every hard-coded size: first-fit reaches the blocks at and past 64, 256, 512, 1024.
    big = sc.get("big")
    if big:
        start = cmem.snapshot()
        pool, engine = _engine(big["blocks"], big["built"])
        for step, (sid, value) in enumerate(big["appends"]):
            _append(run, mm, engine, pool, f"large pool, step {step}", sid, value)
        hw3.sweep(start)
    if "null" in sc:
        see(f"append_kv(NULL, {sc['null']})", mm.append_kv(None, 1, sc["null"]))


@scenario_driver
def destroy(run):
    """llm_destroy of one of two twin engines (`public.destroy_one_of_twins`), empty and with the
    drawn sequences, beside memory of the check's own allocated before them."""
    mm = run.load("memory_manager")
    sc = run.scenario
    start = cmem.snapshot()
    empty_pool = Pool(sc["empty_blocks"] * hw3.BLOCK_SIZE)
    done = public.destroy_one_of_twins(mm, scenes.engine(empty_pool), empty_pool)
    see("llm_destroy(an engine with no sequences)", done.returned)
    see("heap: memory the engine does not own is still allocated after llm_destroy of the empty engine",
        done.others_freed == 0 and done.twin_intact)
    see("heap blocks left after llm_destroy of the empty engine", done.left)
    # Memory the engine does not own, allocated before it: llm_destroy frees the engine's memory
    # only (freeing every live allocation would pass a count of what is left).
    cmem.malloc(24)
    pool, engine = _engine(sc["blocks"], sc["built"])
    see("engine state before llm_destroy", _snap(engine))
    done = public.destroy_one_of_twins(mm, engine, pool)
    see("llm_destroy(engine)", done.returned)
    see("heap: memory the engine does not own is still allocated after llm_destroy",
        done.others_freed == 0 and done.twin_intact)
    see("heap blocks left after llm_destroy", done.left)
    see("pool written by llm_destroy", done.pool_written)
    hw3.sweep(start)
    if "counts" in sc:
        see("llm_destroy(NULL)", mm.llm_destroy(None))
    # Engines of 1, 2 and at and past 64, 256, 512, 1024 sequences (forks sharing a few blocks).
    for many in sc.get("counts", []):
        bases, n = many["bases"], len(many["ids"])
        built = [{"id": sid, "kv": bases[i % len(bases)][0], "layout": bases[i % len(bases)][1]}
                 for i, sid in enumerate(many["ids"])]
        heap = cmem.snapshot()
        pool, engine = _engine(many["blocks"], built)
        done = public.destroy_one_of_twins(mm, engine, pool)
        see(f"llm_destroy(an engine of {n} sequences)", done.returned)
        see(f"heap: memory the engine does not own is still allocated after llm_destroy of the engine of {n} sequences",
            done.others_freed == 0 and done.twin_intact)
        see(f"heap blocks left after llm_destroy of the engine of {n} sequences", done.left)
        see(f"pool written by llm_destroy of the engine of {n} sequences", done.pool_written)
        hw3.sweep(heap)
