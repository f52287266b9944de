"""Graded checks for Part A (HW3 Tasks 1-5), in the spirit of the white-box HW3 autograder.

Each check builds its own pool (pre-filled with the magic pattern) and, from Task 2 on, a
harness-built engine, so a task is graded on its own functions. Around every call the bench
records the pool bytes, the engine's observable state (ref counts, free count, registry, block
tables) and the tracked heap, so "a rejected call changes nothing" and "only append_kv writes
the pool" are checked byte for byte, and every teardown ends with a leak report.
"""

from __future__ import annotations

import ctypes
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass

from .. import cmem
from ..engine.pool import Pool
from ..harness import hw3
from ..spec.catalog import CheckFailure, check
from . import scenes
from .hints import When
from .record import expect, expect_equal, see

# Rules, quoted in every failure message.
R_NULL = "notebook 05, Check before allocate: engine None → None / −1 before anything else"
R_UNCHANGED = ("notebook 05, Check before allocate: a failing call leaves pool bytes, ref "
               "counts, free count, registry and heap exactly unchanged")
R_FIRST_FIT = "notebook 05, First-fit after holes: first-fit takes the lowest block index with ref_count == 0"
R_POOL = ("notebook 02, Task 2: only append_kv writes the pool (the 4-byte record, plus the "
          "64-byte CoW copy); create_sequence must not memset or write blocks")
R_FREE_COUNT = "notebook 02, Task 2: free_local_blocks always equals the number of blocks with ref_count 0"
R_REFS = "notebook 04, Fork: a block's ref_count is the number of block-table entries (over all sequences) that map it"
R_LEAK = "notebook 05, Teardown and leaks: after llm_destroy the tracked heap holds no live allocation (0 bytes lost)"
R_INIT = "notebook 02, Task 1 · llm_init"
R_CREATE = "notebook 02, Task 2 · create_sequence"
R_FREE = "notebook 02, Task 2 · free_sequence"
R_FORK = "notebook 04, Task 3 · fork_sequence"
R_APPEND = "notebook 04, Task 4 · append_kv"
R_DESTROY = "notebook 05, Task 5 · llm_destroy"
R_MAPS = ("notebook 02, Two-level block tables: logical block i of a sequence maps one block; blocks are "
          "taken only where a call needs one")
R_SETUP = ("notebook 02, Task 2 · create_sequence: the check's earlier calls (create_sequence maps "
           "ceil(len / 16) blocks, first-fit; fork_sequence and append_kv as their rules say) leave the "
           "reference's state")
R_LIST = "notebook 03, The intrusive registry: active_seqs is a circular doubly linked list; new sequences go at the tail (head->prev)"


def _mm(run):
    return run.load("memory_manager")


# The pools' block counts this module's scenes use: the grader sends the bytes of each one's empty
# engine with every check of Tasks 2-5 (registry.engine_totals), and none with Task 1's, whose
# answer an empty engine is.
BENCH_BLOCKS = (2, 4, 8, 10, 16, 20, 32, 40, 48, 64, 260, 300)


def engine_totals(task: str, scenario=None) -> tuple:
    return () if task == "task1" else BENCH_BLOCKS


@dataclass
class Observation:
    pool: object
    state: hw3.EngineState
    heap: cmem.HeapSnapshot


class Bench:
    """A pool, an engine and the student's module, with before/after comparisons."""

    def __init__(self, run, num_blocks: int = 32, *, engine: bool = True, pool_bytes: int | None = None):
        self.mm = _mm(run)
        self.pool = Pool(pool_bytes if pool_bytes is not None else num_blocks * hw3.BLOCK_SIZE)
        self.heap_at_start = cmem.snapshot()
        self.engine = scenes.engine(self.pool) if engine else None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        hw3.sweep(self.heap_at_start)  # frees without walking: a broken engine cannot mask the failure
        return False

    def add(self, seq_id: int, kv_count: int, blocks):
        """The engine with one more sequence at the tail (`blocks`: a list or {logical: block}),
        rebuilt from data by the harness; returns that sequence."""
        self.engine = scenes.with_sequence(self.engine, seq_id, kv_count, blocks)
        return hw3.find(self.engine, seq_id)

    # -- observation -------------------------------------------------------------------------
    def state(self) -> hw3.EngineState:
        try:
            return hw3.state(self.engine)
        except (hw3.CorruptEngine, cmem.HeapError) as exc:
            raise CheckFailure("the engine's list or block tables cannot be walked any more",
                               rule=R_LIST, actual=str(exc)) from None

    def observe(self) -> Observation:
        return Observation(self.pool.snapshot(), self.state(), cmem.snapshot())

    def expect_unchanged(self, before: Observation, call: str, rule: str = R_UNCHANGED) -> None:
        """Raise unless nothing observable changed since `before` (for a rejected call)."""
        st = before.state
        see(f"{call}: the state before the call (free_local_blocks, ref counts, blocks mapped per sequence)",
            {"blocks mapped per sequence": {str(q.seq_id): len(q.mapping) for q in st.seqs},
             "free_local_blocks": st.free, "ref counts": list(st.refs)},
            rule=R_SETUP, setup=True)
        diff = self.pool.diff(before.pool)
        expect(not diff, f"{call} was rejected but wrote the pool", rule=rule,
               expected="pool bytes unchanged", actual=str(diff))
        heap = cmem.changes_since(before.heap)
        expect(not heap, f"{call} was rejected but used the heap", rule=rule,
               expected="no malloc/calloc/free at all", actual=str(heap),
               hint="validate everything (ids, free blocks) before the first cmem.new/malloc")
        now = self.state()
        _expect_same_state(now, before.state, call, rule)

    def expect_pool_untouched(self, before: Observation, call: str) -> None:
        diff = self.pool.diff(before.pool)
        expect(not diff, f"{call} wrote the pool", rule=R_POOL, expected="pool bytes unchanged",
               actual=str(diff))

    def expect_invariants(self, after: str) -> None:
        """Free count, ref counts and list links agree with the block tables."""
        st = self.state()
        free = sum(1 for r in st.refs if r == 0)
        expect_equal(st.free, free, f"after {after}: free_local_blocks vs blocks with ref_count 0",
                     rule=R_FREE_COUNT)
        # Which block each logical block maps to is a value: a label holds no observed value, so
        # a wrong block reads as "expected 0, yours 10", never as a different path.
        see(f"after {after}: the block each logical block maps to",
            {f"sequence {s.seq_id}, logical block {logical}": block for s in st.seqs for logical, block in s.mapping},
            rule=R_MAPS, when=[When("same_keys", "{key} is block {yours} in yours, block {expected} in the "
                                                  "reference: " + R_FIRST_FIT.split(": ", 1)[1])])
        users = [0] * st.total
        outside = [(s.seq_id, logical, block) for s in st.seqs for logical, block in s.mapping
                   if not 0 <= block < st.total]
        expect(not outside, f"after {after}: every mapped block id lies in the pool",
               rule="notebook 02, Why two levels?: L2 entries hold a block id or −1",
               expected=f"0..{st.total - 1} or −1",
               actual=", ".join(f"sequence {q} maps logical block {lg} to {b}" for q, lg, b in outside[:4]))
        for s in st.seqs:
            for _, block in s.mapping:
                users[block] += 1
        for b, (r, u) in enumerate(zip(st.refs, users, strict=True)):
            expect(r == u, f"after {after}: ref_count[{b}] equals the block-table entries mapping block {b}",
                   rule=R_REFS, expected=f"{u} (entries mapping block {b})", actual=r)
        _expect_links(self.engine, after)

    def heap_changes(self, since: Observation):
        return cmem.changes_since(since.heap)


def _expect_same_state(now: hw3.EngineState, before: hw3.EngineState, call: str, rule: str) -> None:
    expect_equal(now.free, before.free, f"{call}: free_local_blocks changed", rule=rule)
    changed = [(b, x, y) for b, (x, y) in enumerate(zip(before.refs, now.refs, strict=False)) if x != y]
    expect(not changed, f"{call}: ref counts changed", rule=rule, expected="no ref_count change",
           actual=", ".join(f"ref_count[{b}] {x}→{y}" for b, x, y in changed[:8]))
    expect_equal([s.seq_id for s in now.seqs], [s.seq_id for s in before.seqs],
                 f"{call}: the registry (seq ids in list order) changed", rule=rule)
    for a, b in zip(now.seqs, before.seqs, strict=True):
        expect_equal(a.kv_count, b.kv_count, f"{call}: kv_count of sequence {a.seq_id} changed", rule=rule)
        expect_equal(dict(a.mapping), dict(b.mapping), f"{call}: block table of sequence {a.seq_id} changed", rule=rule)
        expect_equal(a.l2_slots, b.l2_slots, f"{call}: L1 slots holding an L2 table of sequence {a.seq_id} changed", rule=rule)


def _expect_links(engine, after: str) -> None:
    """Walking next and walking prev visit the same nodes in opposite orders."""
    forward = [ctypes.addressof(s) for s in hw3.sequences(engine)]
    head = ctypes.addressof(engine.active_seqs)
    backward, node = [], cmem.address(engine.active_seqs.prev)
    while node != head and len(backward) <= len(forward):
        try:
            view = cmem.view(hw3.ListNode, node)
        except cmem.HeapError as exc:
            raise CheckFailure(f"after {after}: a prev link points outside live memory", rule=R_LIST,
                               actual=str(exc)) from None
        backward.append(node - hw3.Sequence.node.offset)
        node = cmem.address(view.prev)
    expect(backward[::-1] == forward, f"after {after}: prev links do not mirror next links", rule=R_LIST,
           expected="head->prev is the last node, and each node's prev is the node before it",
           actual=f"{len(forward)} nodes forward, {len(backward)} walking back (or a different order)")


def _is_seq(view) -> bool:
    return view is not None and isinstance(view, hw3.Sequence)


def _expect_returned_seq(result, engine, seq_id, call: str, rule: str):
    expect(_is_seq(result), f"{call} should return the new Sequence", rule=rule,
           expected="a Sequence view", actual=repr(result))
    expect(cmem.is_live(result), f"{call} returned a Sequence that is not a tracked heap allocation",
           rule="notebook 02: structs live in cmem memory (cmem.new(Sequence))", actual=hex(ctypes.addressof(result)))
    reg = hw3.find(engine, seq_id)
    expect(reg is not None and ctypes.addressof(reg) == ctypes.addressof(result),
           f"{call}: the returned Sequence is not the one on active_seqs with id {seq_id}", rule=rule)
    return result


def _describe_address(address: int, engine=None) -> str:
    """An address in words a student can use: NULL, the head, a live block, or garbage."""
    if not address:
        return "NULL"
    if engine is not None and address == ctypes.addressof(engine.active_seqs):
        return "&engine->active_seqs"
    block = cmem.allocation_at(address)
    if block is not None:
        return f"the start of a live heap block of {block.size} bytes ({block.where})"
    if address & 0xFFFFFFFF in (0xCDCDCDCD, 0xDDDDDDDD):
        return f"{address:#x}: garbage from uninitialised (0xCD) or freed (0xDD) memory"
    return f"{address:#x}, not the start of any live allocation"


def _hex(words) -> str:
    return "[" + ", ".join(f"{w & 0xFFFFFFFF:#010x}" for w in words) + "]"


def _raw_l2(seq, l1: int) -> list[int]:
    return list(seq.block_table[l1][0:hw3.L2_PT_SIZE])


# ============================================================================================
# Task 1: llm_init
# ============================================================================================
@check("task1", "llm_init rejects a NULL pool and a pool smaller than one block", rule=R_INIT)
def _init_rejects(run):
    mm = _mm(run)
    pool = Pool(4096)
    for args, why in [((None, 4096), "pool_addr None"), ((0, 4096), "pool_addr 0"),
                      ((pool.addr, 63), "pool_size 63 < BLOCK_SIZE"), ((pool.addr, 0), "pool_size 0")]:
        heap = cmem.snapshot()
        got = mm.llm_init(*args)
        expect(got is None, f"llm_init with {why} should return None", rule=R_INIT + ": None if pool_addr is NULL or pool_size < BLOCK_SIZE",
               expected="None", actual=repr(got))
        changes = cmem.changes_since(heap)
        expect(not changes, f"llm_init with {why} allocated memory before rejecting", rule=R_UNCHANGED,
               expected="no heap activity", actual=str(changes))


@contextmanager
def _student_engine(run, blocks: int):
    """(pool, pool bytes before, heap before, the engine from the student's own llm_init), torn
    down afterwards."""
    pool = Pool(blocks * hw3.BLOCK_SIZE)
    before, heap = pool.snapshot(), cmem.snapshot()
    engine = _mm(run).llm_init(pool.addr, pool.size)
    try:
        expect(isinstance(engine, hw3.LLMEngine), f"llm_init({pool.size} bytes) should return an LLMEngine",
               rule=R_INIT, expected="an LLMEngine view", actual=repr(engine))
        yield pool, before, heap, engine
    finally:
        hw3.sweep(heap)


@check("task1", "llm_init counts whole blocks and stores the pool address", rule=R_INIT)
def _init_counts(run):
    for size, blocks in [(64, 1), (1000, 15), (4096, 64), (64 * 100 + 63, 100)]:
        pool = Pool(size)
        heap = cmem.snapshot()
        engine = _mm(run).llm_init(pool.addr, size)
        try:
            expect(isinstance(engine, hw3.LLMEngine), f"llm_init({size} bytes) should return an LLMEngine",
                   rule=R_INIT, expected="an LLMEngine view", actual=repr(engine))
            expect_equal(engine.total_local_blocks, blocks, f"total_local_blocks for a {size}-byte pool",
                         rule=R_INIT + ": total = pool_size // BLOCK_SIZE")
            expect_equal(engine.free_local_blocks, blocks, f"free_local_blocks for a {size}-byte pool",
                         rule=R_INIT + ": free = total at start")
            expect(engine.pool_base_ptr == pool.addr, "pool_base_ptr", rule=R_INIT + ": store pool_addr",
                   expected="the pool's address", actual=_describe_address(engine.pool_base_ptr or 0, engine))
        finally:
            hw3.sweep(heap)


@check("task1", "ref_count is a zeroed heap array of total_local_blocks ints (calloc)", rule=R_INIT)
def _init_refs(run):
    with _student_engine(run, 40) as (_, _, _, engine):
        block = cmem.allocation_at(engine.ref_count)
        expect(block is not None, "engine.ref_count is not a block from cmem.calloc/malloc",
               rule=R_INIT + ": allocate the ref_count array with calloc", actual=repr(engine.ref_count))
        expect(block.size >= 40 * ctypes.sizeof(ctypes.c_int), "the ref_count array is too small",
               rule=R_INIT, expected=f">= {40 * 4} bytes (40 ints)", actual=f"{block.size} bytes")
        refs = list(engine.ref_count[0:40])
        expect(refs == [0] * 40, "ref_count must start all zero", rule=R_INIT + ": calloc (zeroed)",
               expected="40 zeros", actual=refs[:16], hint="cmem.malloc leaves 0xCD garbage; use calloc")


@check("task1", "active_seqs starts as an empty circular list (prev == next == &head)", rule=R_INIT)
def _init_list(run):
    with _student_engine(run, 8) as (_, _, _, engine):
        head = ctypes.addressof(engine.active_seqs)
        for field in ("next", "prev"):
            target = cmem.address(getattr(engine.active_seqs, field))
            expect(target == head, f"active_seqs.{field} of an empty list",
                   rule=R_INIT + f": the dummy head's {field} points to itself",
                   expected="&engine->active_seqs (the head itself)", actual=_describe_address(target, engine))


@check("task1", "llm_init allocates exactly the engine and the ref array, and leaves the pool alone", rule=R_INIT)
def _init_heap(run):
    with _student_engine(run, 16) as (pool, before, heap, engine):
        diff = pool.diff(before)
        expect(not diff, "llm_init wrote the pool", rule=R_POOL, actual=str(diff))
        expect(cmem.is_live(engine), "the engine is not a tracked heap allocation",
               rule="notebook 02: the engine lives on the C heap (cmem.new(LLMEngine))", actual=hex(ctypes.addressof(engine)))
        blocks = cmem.changes_since(heap).allocated
        expected = {ctypes.addressof(engine), cmem.address(engine.ref_count)}
        expect({b.address for b in blocks} == expected and len(blocks) == 2,
               "llm_init should leave exactly two live allocations: the engine and ref_count", rule=R_INIT,
               expected="2 blocks: LLMEngine (40 bytes) and the ref array", actual="; ".join(map(str, blocks)))


# ============================================================================================
# Task 2: create_sequence, free_sequence
# ============================================================================================
@check("task2", "create_sequence maps ceil(len/16) blocks, first-fit, ref 1, L2 tables on demand", rule=R_CREATE)
def _create_maps(run):
    for length in (1, 16, 17, 40, 256, 257, 613):
        with Bench(run, 48) as b:
            needed = -(-length // 16)
            seq = b.mm.create_sequence(b.engine, 7, length)
            _expect_returned_seq(seq, b.engine, 7, f"create_sequence(engine, 7, {length})", R_CREATE)
            st = b.state()
            s = st.seq(7)
            expect_equal(len(s.mapping), needed, f"number of blocks mapped for len={length}",
                         rule=R_CREATE + ": ceil(initial_kv_len / 16) blocks, one per 16 records")
            expect_equal(dict(s.mapping), {i: i for i in range(needed)},
                         f"block table after create_sequence(len={length}) on an empty 48-block engine",
                         rule=R_FIRST_FIT)
            expect_equal(s.l2_slots, tuple(range(-(-needed // 16))),
                         f"L1 slots holding an L2 table for len={length}",
                         rule=R_CREATE + ": allocate an L2 table only when a block needs it")
            expect_equal(s.kv_count, length, "kv_count", rule=R_CREATE + ": kv_count = initial_kv_len")
            expect_equal(st.free, 48 - needed, "free_local_blocks", rule=R_FREE_COUNT)
            expect_equal(list(st.refs[:needed + 1]), [1] * needed + [0], "ref counts of the first blocks",
                         rule=R_CREATE + ": each mapped block gets ref 1")
            b.expect_invariants(f"create_sequence(len={length})")


@check("task2", "create_sequence never writes the pool (no memset)", rule=R_POOL)
def _create_no_pool(run):
    with Bench(run, 40) as b:
        before = b.observe()
        for sid, length in [(1, 40), (2, 1), (3, 300)]:
            expect(b.mm.create_sequence(b.engine, sid, length) is not None,
                   f"create_sequence(engine, {sid}, {length}) failed on an engine with room", rule=R_CREATE)
        b.expect_pool_untouched(before, "create_sequence")


@check("task2", "create_sequence rejects initial_kv_len <= 0 and changes nothing", rule=R_UNCHANGED)
def _create_bad_len(run):
    with Bench(run, 16) as b:
        expect(b.mm.create_sequence(b.engine, 1, 20) is not None, "create_sequence(engine, 1, 20) failed", rule=R_CREATE)
        for length in (0, -1, -100):
            before = b.observe()
            got = b.mm.create_sequence(b.engine, 2, length)
            expect(got is None, f"create_sequence(engine, 2, {length}) should return None", rule=R_CREATE,
                   expected="None", actual=repr(got))
            b.expect_unchanged(before, f"create_sequence(engine, 2, {length})")
        expect(b.mm.create_sequence(None, 3, 5) is None, "create_sequence(None, ...) should return None", rule=R_NULL)


# Values a C `int` parameter could never receive: what `is_c_int` (given) is for.
NOT_C_INTS = [("'7'", "7"), ("2.5", 2.5), ("2**40", 2**40), ("True", True), ("None", None)]
R_BAD_INPUT = ("notebook 02, Task 2: bad input (a value a C int cannot hold, see is_c_int) returns "
               "None / −1 and changes nothing")


@check("task2", "create_sequence rejects ids and lengths a C int cannot hold, and changes nothing", rule=R_BAD_INPUT)
def _create_not_c_ints(run):
    with Bench(run, 16) as b:
        expect(b.mm.create_sequence(b.engine, 1, 20) is not None, "create_sequence(engine, 1, 20) failed", rule=R_CREATE)
        for shown, value in NOT_C_INTS:
            for call, args in ((f"create_sequence(engine, {shown}, 5)", (value, 5)),
                               (f"create_sequence(engine, 2, {shown})", (2, value))):
                before = b.observe()
                got = b.mm.create_sequence(b.engine, *args)
                expect(got is None, f"{call} should return None", rule=R_BAD_INPUT, expected="None",
                       actual=repr(got), hint="validate with is_c_int(...) before anything else")
                b.expect_unchanged(before, call, rule=R_BAD_INPUT)


@check("task2", "create_sequence rejects an id that is already active and changes nothing", rule=R_UNCHANGED)
def _create_dup(run):
    with Bench(run, 16) as b:
        for sid in (4, 9):
            expect(b.mm.create_sequence(b.engine, sid, 20) is not None, f"create_sequence(engine, {sid}, 20) failed", rule=R_CREATE)
        for sid in (4, 9):
            before = b.observe()
            got = b.mm.create_sequence(b.engine, sid, 5)
            expect(got is None, f"create_sequence with the active id {sid} should return None",
                   rule=R_CREATE + ": None if seq_id already active", expected="None", actual=repr(got))
            b.expect_unchanged(before, f"create_sequence(engine, {sid}, 5) with a duplicate id")


@check("task2", "create_sequence refuses more than 256 blocks (4096 records) per sequence", rule=R_CREATE)
def _create_256(run):
    with Bench(run, 300) as b:
        before = b.observe()
        got = b.mm.create_sequence(b.engine, 1, 4097)
        expect(got is None, "create_sequence(len=4097) needs 257 blocks and must return None",
               rule=R_CREATE + ": None if ceil(len/16) > 256", expected="None", actual=repr(got))
        b.expect_unchanged(before, "create_sequence(len=4097)")
        seq = b.mm.create_sequence(b.engine, 2, 4096)
        _expect_returned_seq(seq, b.engine, 2, "create_sequence(len=4096)", R_CREATE)
        s = b.state().seq(2)
        expect_equal(len(s.mapping), 256, "blocks mapped for 4096 records", rule=R_CREATE)
        expect_equal(s.l2_slots, tuple(range(16)), "L1 slots in use for 256 blocks", rule=R_CREATE)
        b.expect_invariants("create_sequence(len=4096)")


@check("task2", "create_sequence checks free blocks before allocating anything (OOM)", rule=R_UNCHANGED)
def _create_oom(run):
    with Bench(run, 10) as b:
        expect(b.mm.create_sequence(b.engine, 1, 80) is not None, "create_sequence(engine, 1, 80) failed", rule=R_CREATE)
        for length in (81, 96, 160):
            before = b.observe()
            got = b.mm.create_sequence(b.engine, 2, length)
            expect(got is None, f"create_sequence(len={length}) needs {-(-length // 16)} blocks but 5 are free",
                   rule=R_CREATE + ": None if ceil(len/16) > free_local_blocks", expected="None", actual=repr(got))
            b.expect_unchanged(before, f"create_sequence(len={length}) with 5 free blocks")
        seq = b.mm.create_sequence(b.engine, 2, 80)
        _expect_returned_seq(seq, b.engine, 2, "create_sequence(len=80) with exactly 5 free blocks", R_CREATE)
        expect_equal(b.engine.free_local_blocks, 0, "free_local_blocks after using the last block", rule=R_FREE_COUNT)
        b.expect_invariants("filling the pool")


@check("task2", "create_sequence appends at the tail of active_seqs", rule=R_LIST)
def _create_tail(run):
    with Bench(run, 16) as b:
        for sid in (30, 10, 20):
            expect(b.mm.create_sequence(b.engine, sid, 3) is not None, f"create_sequence(engine, {sid}, 3) failed", rule=R_CREATE)
            expect_equal([s.seq_id for s in b.state().seqs][-1], sid,
                         f"last sequence on the list after creating {sid}", rule=R_LIST)
        expect_equal([s.seq_id for s in b.state().seqs], [30, 10, 20], "list order (head->next first)", rule=R_LIST)
        b.expect_invariants("three creates")


@check("task2", "first-fit reuses the lowest freed blocks after holes", rule=R_FIRST_FIT)
def _create_first_fit(run):
    with Bench(run, 16) as b:
        for sid, length in [(1, 32), (2, 16), (3, 32), (4, 16)]:   # blocks 0-1, 2, 3-4, 5
            expect(b.mm.create_sequence(b.engine, sid, length) is not None, f"create_sequence({sid}, {length}) failed", rule=R_CREATE)
        for sid in (1, 3):
            expect_equal(b.mm.free_sequence(b.engine, sid), 0, f"free_sequence(engine, {sid})", rule=R_FREE)
        expect(b.mm.create_sequence(b.engine, 5, 80) is not None, "create_sequence(engine, 5, 80) failed", rule=R_CREATE)
        expect_equal(len(b.state().seq(5).mapping), 5, "number of blocks mapped for len=80",
                     rule=R_CREATE + ": ceil(initial_kv_len / 16) blocks, one per 16 records")
        expect_equal(dict(b.state().seq(5).mapping), {0: 0, 1: 1, 2: 3, 3: 4, 4: 6},
                     "blocks of a 5-block sequence created when blocks 0, 1, 3, 4 and 6.. are free",
                     rule=R_FIRST_FIT)
        b.expect_invariants("create after holes")


@check("task2", "free_sequence releases the blocks, unlinks and frees the tables", rule=R_FREE)
def _free_basic(run):
    with Bench(run, 32) as b:
        expect(b.mm.create_sequence(b.engine, 1, 20) is not None, "create_sequence(engine, 1, 20) failed", rule=R_CREATE)
        before = b.observe()
        for sid, length in [(2, 300), (3, 5)]:
            expect(b.mm.create_sequence(b.engine, sid, length) is not None, f"create_sequence({sid}, {length}) failed", rule=R_CREATE)
        expect_equal(b.mm.free_sequence(b.engine, 2), 0, "free_sequence(engine, 2)", rule=R_FREE)
        expect_equal(b.mm.free_sequence(b.engine, 3), 0, "free_sequence(engine, 3)", rule=R_FREE)
        b.expect_pool_untouched(before, "create_sequence + free_sequence")
        heap = cmem.changes_since(before.heap)
        expect(not heap.allocated, "free_sequence left memory allocated (L2 tables, the L1 table or the Sequence)",
               rule=R_FREE + ": free every L2, the L1 and the Sequence", expected="0 bytes lost",
               actual=cmem.leak_report(before.heap))
        _expect_same_state(b.state(), before.state, "create then free_sequence", R_FREE)
        b.expect_invariants("free_sequence")


@check("task2", "free_sequence of an unknown id returns -1 and changes nothing", rule=R_UNCHANGED)
def _free_unknown(run):
    with Bench(run, 16) as b:
        expect(b.mm.create_sequence(b.engine, 1, 20) is not None, "create_sequence(engine, 1, 20) failed", rule=R_CREATE)
        before = b.observe()
        for sid in (2, -1):
            expect_equal(b.mm.free_sequence(b.engine, sid), -1, f"free_sequence(engine, {sid}) for an id not in use",
                         rule=R_FREE + ": −1 if not found")
            b.expect_unchanged(before, f"free_sequence(engine, {sid})")
        expect_equal(b.mm.free_sequence(None, 1), -1, "free_sequence(None, 1)", rule=R_NULL)


@check("task2", "free_sequence visits all 16 L1 slots (a NULL slot before a mapped one)", rule=R_FREE)
def _free_all_slots(run):
    with Bench(run, 48) as b:
        expect(b.mm.create_sequence(b.engine, 1, 40) is not None, "create_sequence(engine, 1, 40) failed", rule=R_CREATE)
        expect(b.mm.create_sequence(b.engine, 2, 300) is not None, "create_sequence(engine, 2, 300) failed", rule=R_CREATE)
        # Scatter the tables the way a long-lived sequence can end up: holes before mapped slots.
        s1, s2 = hw3.find(b.engine, 1), hw3.find(b.engine, 2)
        s1.block_table[5] = s1.block_table[0]
        s1.block_table[0] = None
        s2.block_table[3] = s2.block_table[1]
        s2.block_table[1] = None
        for sid, layout in [(1, "L1 = [NULL ×5, L2, NULL ×10]"), (2, "L1 = [L2, NULL, NULL, L2, NULL ×12]")]:
            expect_equal(b.mm.free_sequence(b.engine, sid), 0, f"free_sequence({sid}) with {layout}", rule=R_FREE)
        st = b.state()
        expect_equal(st.free, 48, "free_local_blocks after freeing sequences whose L1 has NULL holes",
                     rule=R_FREE + ": loop over ALL 16 L1 slots; never break at a NULL",
                     hint="`continue` past a NULL slot instead of `break`")
        heap = cmem.changes_since(b.heap_at_start)
        left = [a for a in heap.allocated if a.address != ctypes.addressof(b.engine)
                and a.address != cmem.address(b.engine.ref_count)]
        expect(not left, "free_sequence leaked L2 tables that sit after a NULL L1 slot",
               rule=R_FREE + ": free every L2 (all 16 L1 slots)", expected="0 bytes lost",
               actual="; ".join(map(str, left)))


@check("task2", "free_sequence keeps a shared block (ref > 1) allocated", rule=R_FREE)
def _free_shared(run):
    with Bench(run, 8) as b:
        expect(b.mm.create_sequence(b.engine, 1, 40) is not None, "create_sequence(engine, 1, 40) failed", rule=R_CREATE)
        # Another owner of blocks 0 and 2 (as after a fork): the harness adds the references.
        b.add(2, 40, {0: 0, 2: 2})
        expect_equal(b.mm.free_sequence(b.engine, 1), 0, "free_sequence(engine, 1)", rule=R_FREE)
        st = b.state()
        expect_equal(list(st.refs[:3]), [1, 0, 1], "ref counts of blocks 0-2 after freeing one of two owners",
                     rule=R_FREE + ": ref −1 for each mapped block")
        expect_equal(st.free, 6, "free_local_blocks: only block 1 became free", rule=R_FREE_COUNT,
                     hint="free_local_blocks += 1 only when a ref count reaches 0")
        b.expect_invariants("freeing one owner of shared blocks")


# ============================================================================================
# Task 3: fork_sequence
# ============================================================================================
@check("task3", "fork_sequence shares every block and counts the new owner", rule=R_FORK)
def _fork_shares(run):
    with Bench(run, 64) as b:
        b.add(1, 300, [5, 9, 2] + list(range(20, 36)))   # 19 blocks
        before = b.observe()
        child = b.mm.fork_sequence(b.engine, 1, 2)
        _expect_returned_seq(child, b.engine, 2, "fork_sequence(engine, 1, 2)", R_FORK)
        st = b.state()
        expect_equal(dict(st.seq(2).mapping), dict(st.seq(1).mapping), "the child's block table",
                     rule=R_FORK + ": copy the parent's mapped entries")
        expect_equal(st.seq(2).kv_count, 300, "the child's kv_count", rule=R_FORK + ": same kv_count")
        expect_equal(st.free, before.state.free, "free_local_blocks after a fork", rule=R_FORK + ": fork takes no new block")
        for block in (5, 9, 2, 20, 35):
            expect_equal(st.refs[block], 2, f"ref_count[{block}] after forking its only owner",
                         rule=R_FORK + ": ref +1 for each inherited block")
        b.expect_pool_untouched(before, "fork_sequence")
        b.expect_invariants("fork_sequence")


@check("task3", "the child gets its own L1 and L2 tables (-1 where unmapped, NULL where the parent has NULL)", rule=R_FORK)
def _fork_tables(run):
    with Bench(run, 64) as b:
        parent = b.add(1, 600, {0: 3, 1: 4, 2: 8, 80: 11, 81: 12})  # L1[0], L1[5]
        child = b.mm.fork_sequence(b.engine, 1, 2)
        _expect_returned_seq(child, b.engine, 2, "fork_sequence(engine, 1, 2)", R_FORK)
        child = hw3.find(b.engine, 2)
        expect(cmem.is_live(child.block_table) and cmem.address(child.block_table) != cmem.address(parent.block_table),
               "the child must get a new L1 table", rule=R_FORK + ": new Sequence + L1")
        slots = hw3.l2_tables(child)
        expect_equal(sorted(slots), [0, 5], "L1 slots of the child holding an L2 table",
                     rule=R_FORK + ": a new L2 for each non-NULL parent L2, NULL elsewhere")
        for l1, addr in slots.items():
            expect(addr != cmem.address(parent.block_table[l1]) and cmem.is_live(addr),
                   f"the child's L1[{l1}] points at the parent's L2 table", rule=R_FORK + ": allocate a new L2 per parent L2",
                   hint="sharing an L2 table means the child's CoW remap would change the parent too")
        expect_equal(_raw_l2(child, 0), [3, 4, 8] + [-1] * 13, "the child's L2 table at L1[0]",
                     rule=R_FORK + ": new L2 filled with −1, then the mapped entries copied")
        expect_equal(_raw_l2(child, 5), [11, 12] + [-1] * 14, "the child's L2 table at L1[5]",
                     rule=R_FORK + ": new L2 filled with −1, then the mapped entries copied")
        b.expect_invariants("fork of a parent with an L1 hole")


@check("task3", "fork_sequence appends the child at the tail; forks of forks count every owner", rule=R_FORK)
def _fork_tail(run):
    with Bench(run, 16) as b:
        b.add(1, 20, [0, 1])
        b.add(2, 5, [2])
        for parent, new in [(1, 3), (3, 4), (2, 5)]:
            child = b.mm.fork_sequence(b.engine, parent, new)
            _expect_returned_seq(child, b.engine, new, f"fork_sequence(engine, {parent}, {new})", R_FORK)
        expect_equal([s.seq_id for s in b.state().seqs], [1, 2, 3, 4, 5], "list order after three forks", rule=R_LIST)
        expect_equal(list(b.state().refs[:4]), [3, 3, 2, 0], "ref counts after 1→3→4 and 2→5",
                     rule=R_FORK + ": ref +1 for each inherited block")
        b.expect_invariants("forks of forks")


@check("task3", "fork of a full 256-block sequence copies all 16 L2 tables", rule=R_FORK)
def _fork_full(run):
    with Bench(run, 260) as b:
        layout = [(i * 37) % 256 for i in range(256)]
        b.add(1, 4096, layout)
        before = b.observe()
        child = b.mm.fork_sequence(b.engine, 1, 2)
        _expect_returned_seq(child, b.engine, 2, "fork_sequence(engine, 1, 2) of a 4096-record parent", R_FORK)
        st = b.state()
        expect_equal(dict(st.seq(2).mapping), dict(enumerate(layout)), "the child's 256 mappings",
                     rule=R_FORK + ": visit all 16 L1 slots of the parent")
        expect_equal(st.seq(2).l2_slots, tuple(range(16)), "L1 slots of the child holding an L2 table", rule=R_FORK)
        expect(all(r == 2 for r in st.refs[:256]) and st.free == before.state.free,
               "every inherited block should have ref 2 and no block should be taken", rule=R_FORK,
               actual=f"refs {sorted(set(st.refs[:256]))}, free {before.state.free}→{st.free}")
        heap = b.heap_changes(before)
        expect(len(heap.allocated) == 18,
               "fork of a 16-L2 parent should allocate the Sequence, one L1 and 16 L2 tables", rule=R_FORK,
               expected="18 allocations", actual=str(heap))


@check("task3", "fork_sequence rejects a missing parent or a used id, and changes nothing", rule=R_UNCHANGED)
def _fork_rejects(run):
    with Bench(run, 16) as b:
        b.add(1, 20, [0, 1])
        b.add(2, 5, [2])
        for parent, new, why in [(9, 3, "parent 9 does not exist"), (1, 2, "id 2 is in use"),
                                 (1, 1, "new id equals the parent's"), (2, 1, "id 1 is in use")]:
            before = b.observe()
            got = b.mm.fork_sequence(b.engine, parent, new)
            expect(got is None, f"fork_sequence(engine, {parent}, {new}): {why}, so it should return None",
                   rule=R_FORK + ": None unless the parent exists and new_id is unused", expected="None", actual=repr(got))
            b.expect_unchanged(before, f"fork_sequence(engine, {parent}, {new})")
        expect(b.mm.fork_sequence(None, 1, 3) is None, "fork_sequence(None, ...) should return None", rule=R_NULL)


# ============================================================================================
# Task 4: append_kv
# ============================================================================================
# Task 4's checks whose rules the later ones rely on (`follows`: a failure of one of them is the
# cause of theirs, and the report says so instead of blaming their own rule).
T4_TRANSLATE = "append_kv translates record 613 to block_table[2][6], slot 5 (the handout's example)"
T4_IN_PLACE = "append_kv writes in place while the block is exclusively owned (ref 1)"
T4_NEW_PAGE = "a full block makes append_kv map a new page, first-fit"
T4_NEW_L2 = "append_kv allocates a missing L2 table (record 256 → L1[1])"
T4_COW = "copy-on-write: exactly 64 bytes copied to the first free block, then the record"
COW_IN_PLACE_HINT = ("your append wrote into block 1 in place, but sequence 1 maps block 1 too (ref_count 2): a "
                     "block with ref_count > 1 is never written. Take a free block first-fit, memcpy the 64 bytes "
                     "into it, point the writer's L2 entry at it (old ref −1, new ref 1), then write the record")


def _expect_append_ok(b: Bench, seq_id: int, value: int, call_note: str = "") -> int:
    got = b.mm.append_kv(b.engine, seq_id, value)
    expect_equal(got, 0, f"append_kv(engine, {seq_id}, {value:#x}){call_note}", rule=R_APPEND)
    return got


@check("task4", T4_TRANSLATE, rule=R_APPEND)
def _append_613(run):
    with Bench(run, 40) as b:
        layout = [(i + 4) % 39 for i in range(39)]        # logical 38 -> physical block 3
        b.add(1, 613, layout)
        before = b.observe()
        _expect_append_ok(b, 1, 0x0613_0613)
        diff = b.pool.diff(before.pool)
        expect_equal([(blk, w, after) for blk, w, _, after in diff.words], [(3, 5, 0x0613_0613)],
                     "pool words written by appending record 613 (logical 38 = L1 2, L2 6 → block 3, offset 5)",
                     rule=R_APPEND + ": write at pool + block*64 + offset*4")
        expect(not diff.guard_damaged, "append_kv wrote outside the pool", rule=R_POOL)
        st = b.state()
        expect_equal(st.seq(1).kv_count, 614, "kv_count after one append", rule=R_APPEND + ": kv_count += 1")
        expect_equal(st.refs, before.state.refs, "ref counts after an append into an owned block", rule=R_APPEND)
        heap = b.heap_changes(before)
        expect(not heap, "append_kv into an existing owned block used the heap", rule=R_APPEND,
               expected="no heap activity", actual=str(heap))


@check("task4", T4_IN_PLACE, rule=R_APPEND)
def _append_in_place(run):
    with Bench(run, 8) as b:
        b.add(1, 20, [6, 2])
        before = b.observe()
        for k in range(12):
            _expect_append_ok(b, 1, 1000 + k)
        diff = b.pool.diff(before.pool)
        expect_equal([(blk, w, after) for blk, w, _, after in diff.words], [(2, 4 + k, 1000 + k) for k in range(12)],
                     "pool words written by 12 appends at records 20..31", rule=R_APPEND)
        st = b.state()
        expect_equal((st.free, st.refs), (before.state.free, before.state.refs), "(free count, refs) after in-place appends",
                     rule=R_APPEND + ": no new block when the slot maps a block with ref 1")
        expect_equal(st.seq(1).kv_count, 32, "kv_count", rule=R_APPEND)


@check("task4", T4_NEW_PAGE, rule=R_FIRST_FIT)
def _append_new_page(run):
    with Bench(run, 8) as b:
        b.add(1, 48, [0, 1, 3])
        b.add(2, 32, [5, 2])
        before = b.observe()
        _expect_append_ok(b, 2, 77, " at a block boundary")
        st = b.state()
        expect_equal(st.seq(2).mapping[-1], (2, 4), "mapping of the new logical block 2",
                     rule=R_FIRST_FIT + " (blocks 0-3 and 5 are taken)")
        expect_equal(st.refs[4], 1, "ref_count of the new page", rule=R_APPEND + ": new page ref 1")
        expect_equal(st.free, before.state.free - 1, "free_local_blocks", rule=R_FREE_COUNT)
        diff = b.pool.diff(before.pool)
        expect_equal([(blk, w, after) for blk, w, _, after in diff.words], [(4, 0, 77)],
                     "pool words written", rule=R_POOL + " (a new page is not cleared or copied)")
        b.expect_invariants("append into a new page")


@check("task4", T4_NEW_L2, rule=R_APPEND)
def _append_new_l2(run):
    with Bench(run, 20) as b:
        b.add(1, 256, list(range(16)))
        before = b.observe()
        _expect_append_ok(b, 1, 5, " when L1[1] is NULL")
        seq = hw3.find(b.engine, 1)
        expect(bool(seq.block_table[1]), "L1[1] is still NULL after appending record 256",
               rule=R_APPEND + ": allocate the L2 if NULL")
        expect_equal(_raw_l2(seq, 1), [16] + [-1] * 15, "the new L2 table at L1[1]",
                     rule=R_APPEND + ": new L2 filled with −1, entry 0 mapped first-fit")
        heap = b.heap_changes(before)
        expect(len(heap.allocated) == 1 and heap.allocated[0].size >= 64 and not heap.freed,
               "append_kv should allocate exactly one L2 table (16 ints)", rule=R_APPEND,
               actual=str(heap))
        b.expect_invariants("append with a new L2 table")


@check("task4", T4_COW, rule=R_APPEND)
def _append_cow(run):
    with Bench(run, 8) as b:
        b.add(1, 20, [4, 1])
        b.add(2, 20, [4, 1])              # a fork: blocks 4 and 1 shared
        b.add(3, 8, [2])
        before = b.observe()
        old = b.pool.words(1)
        _expect_append_ok(b, 2, 0xC0FFEE, " into a shared block")
        st = b.state()
        expect_equal(dict(st.seq(2).mapping), {0: 4, 1: 0}, "the writer's mapping after CoW",
                     rule=R_APPEND + ": copy-on-write: an append into a block with ref_count > 1 copies it to a "
                                     "block taken first-fit (block 0) and remaps the writer's entry to the copy",
                     when=[When("equals", COW_IN_PLACE_HINT, {0: 4, 1: 1})])
        expect_equal(dict(st.seq(1).mapping), {0: 4, 1: 1}, "the other owner's mapping",
                     rule=R_APPEND + ": the other owner keeps the old block")
        expect_equal(list(st.refs[:5]), [1, 1, 1, 0, 2], "ref counts of blocks 0-4 after CoW",
                     rule=R_APPEND + ": old ref −1, new ref 1")
        expect_equal(st.free, before.state.free - 1, "free_local_blocks after CoW", rule=R_FREE_COUNT)
        want = old[:4] + [0xC0FFEE] + old[5:]
        expect_equal(_hex(b.pool.words(0)), _hex(want), "words of the new block 0: the 64-byte copy of block 1 with record 4 written",
                     rule=R_APPEND + ": memcpy exactly 64 bytes from the old block, then write",
                     hint="copy BLOCK_SIZE bytes (not 16, not 60) from block_address(old) to block_address(new)")
        diff = b.pool.diff(before.pool)
        expect_equal(diff.blocks, [0], "blocks written by the CoW append", rule=R_POOL,
                     hint="the shared block must stay exactly as it was")
        expect(not diff.guard_damaged, "append_kv wrote outside the pool", rule=R_POOL)
        heap = b.heap_changes(before)
        expect(not heap, "CoW into an existing L2 table should not use the heap", rule=R_APPEND, actual=str(heap))
        # The parent now owns block 1 alone: it writes in place, no second copy.
        before = b.observe()
        _expect_append_ok(b, 1, 0xBEEF, " after the other owner copied away")
        diff = b.pool.diff(before.pool)
        expect_equal([(blk, w, after) for blk, w, _, after in diff.words], [(1, 4, 0xBEEF)],
                     "pool words written by the remaining owner (ref now 1)", rule=R_APPEND + ": no CoW when ref == 1")
        b.expect_invariants("copy-on-write")


@check("task4", "OOM for a new page: -1 and nothing changes", rule=R_UNCHANGED)
def _append_oom_page(run):
    with Bench(run, 4) as b:
        b.add(1, 48, [3, 1, 0])
        b.add(2, 7, [2])
        before = b.observe()
        expect_equal(b.mm.append_kv(b.engine, 1, 99), -1, "append_kv needing a new page with 0 free blocks",
                     rule=R_APPEND + ": −1 if a new block is needed and free_local_blocks == 0")
        b.expect_unchanged(before, "append_kv (new page, pool full)")
        _expect_append_ok(b, 2, 5, " into its own partly filled block (no new block needed)")


@check("task4", "OOM for copy-on-write: -1 and nothing changes", rule=R_UNCHANGED, follows=(T4_COW,))
def _append_oom_cow(run):
    with Bench(run, 2) as b:
        b.add(1, 20, [0, 1])
        b.add(2, 20, [0, 1])
        for sid in (2, 1):
            before = b.observe()
            expect_equal(b.mm.append_kv(b.engine, sid, 42), -1, f"append_kv(engine, {sid}) into a shared block with 0 free blocks",
                         rule=R_APPEND + ": CoW needs a block; −1 when none is free")
            b.expect_unchanged(before, f"append_kv(engine, {sid}) (CoW, pool full)")


@check("task4", "OOM when the L2 table itself is missing: -1, no L2 allocated", rule=R_UNCHANGED)
def _append_oom_l2(run):
    with Bench(run, 16) as b:
        b.add(1, 256, list(range(16)))
        before = b.observe()
        expect_equal(b.mm.append_kv(b.engine, 1, 1), -1, "append_kv of record 256 (L1[1] NULL) with 0 free blocks",
                     rule=R_APPEND + ": probe for a free block before allocating the L2 table")
        b.expect_unchanged(before, "append_kv (needs an L2 table and a block, pool full)")


@check("task4", "append_kv refuses a 257th logical block; fills the last slot of the 256th", rule=R_APPEND)
def _append_256(run):
    with Bench(run, 300) as b:
        b.add(1, 4096, list(range(256)))
        b.add(2, 700, [256 + i for i in range(44)])
        before = b.observe()
        expect_equal(b.mm.append_kv(b.engine, 1, 3), -1, "append_kv at kv_count 4096 (logical block 256)",
                     rule=R_APPEND + ": −1 if logical >= 256")
        b.expect_unchanged(before, "append_kv at kv_count 4096")
        b.expect_invariants("append past 256 blocks")


@check("task4", "append_kv at kv_count 4095 writes the last record of logical block 255", rule=R_APPEND)
def _append_last(run):
    with Bench(run, 260) as b:
        b.add(1, 4095, [(i * 7) % 256 for i in range(256)])
        before = b.observe()
        _expect_append_ok(b, 1, 0x4095, " at kv_count 4095")
        last = (255 * 7) % 256
        diff = b.pool.diff(before.pool)
        expect_equal([(blk, w, after) for blk, w, _, after in diff.words], [(last, 15, 0x4095)],
                     "pool words written (logical 255 = L1 15, L2 15)", rule=R_APPEND)
        expect_equal(b.mm.append_kv(b.engine, 1, 1), -1, "append_kv at kv_count 4096", rule=R_APPEND + ": −1 if logical >= 256")


@check("task4", "append_kv rejects a record a C int cannot hold, and changes nothing", rule=R_BAD_INPUT)
def _append_not_c_ints(run):
    with Bench(run, 8) as b:
        b.add(1, 16, [0])
        for shown, value in NOT_C_INTS + [("2**31", 2**31), ("-2**31 - 1", -2**31 - 1)]:
            before = b.observe()
            expect_equal(b.mm.append_kv(b.engine, 1, value), -1, f"append_kv(engine, 1, {shown})",
                         rule=R_BAD_INPUT, hint="validate kv_data with is_c_int(...) before anything else")
            b.expect_unchanged(before, f"append_kv(engine, 1, {shown})", rule=R_BAD_INPUT)
        _expect_append_ok(b, 1, 2**31 - 1, " (the largest int32)")
        _expect_append_ok(b, 1, -2**31, " (the smallest int32)")


@check("task4", "append_kv of an unknown sequence returns -1 and changes nothing", rule=R_UNCHANGED)
def _append_unknown(run):
    with Bench(run, 8) as b:
        b.add(1, 16, [0])
        before = b.observe()
        expect_equal(b.mm.append_kv(b.engine, 2, 1), -1, "append_kv(engine, 2, 1) with no sequence 2",
                     rule=R_APPEND + ": −1 if not found")
        b.expect_unchanged(before, "append_kv of an unknown id")
        expect_equal(b.mm.append_kv(None, 1, 1), -1, "append_kv(None, 1, 1)", rule=R_NULL)
        _expect_append_ok(b, 1, 1)


@check("task4", "appended records read back exactly through the block table (forks and CoW included)", rule=R_APPEND,
       follows=(T4_TRANSLATE, T4_IN_PLACE, T4_NEW_PAGE, T4_NEW_L2, T4_COW))
def _append_readback(run):
    import random

    rng = random.Random(110)
    with Bench(run, 64) as b:
        b.add(1, 5, [9])
        written = {1: {}}
        for step in range(400):
            sid = rng.choice(sorted(written))
            if step in (90, 200, 310):
                new = max(written) + 1
                parent = hw3.find(b.engine, sid)
                b.add(new, parent.kv_count, hw3.mapping(parent))
                written[new] = dict(written[sid])
                continue
            value = rng.randrange(-2**31, 2**31)
            pos = hw3.find(b.engine, sid).kv_count
            _expect_append_ok(b, sid, value)
            written[sid][pos] = value
        for sid, records in written.items():
            seq = hw3.find(b.engine, sid)
            table = hw3.mapping(seq)
            for pos, value in records.items():
                block = table.get(pos // 16)
                got = None if block is None else b.pool.words(block)[pos % 16]
                expect_equal(got, value, f"record {pos} of sequence {sid} read back through its block table",
                             rule=R_APPEND + ": translation logical = kv_count // 16, offset = kv_count % 16")
        b.expect_invariants("400 appends with forks")


# ============================================================================================
# Task 5: llm_destroy
# ============================================================================================
def _populated(b: Bench) -> None:
    b.add(1, 300, list(range(19)))
    b.add(2, 300, list(range(19)))                  # a fork of 1
    b.add(3, 600, {0: 20, 1: 21, 70: 22, 71: 23})    # L1 holes
    b.add(4, 1, [24])


@dataclass
class Destroyed:
    """What llm_destroy did to one of two twin engines (`destroy_one_of_twins`)."""

    returned: object
    left: list           # [blocks, bytes] of the destroyed engine's memory still allocated after it
    others_freed: int    # blocks the check held before the twins that it freed
    twin_intact: bool    # the other twin still allocated, readable and as it was
    pool_written: bool
    left_sizes: str      # what is left, by size (for a message)


def destroy_one_of_twins(mm, engine, pool) -> Destroyed:
    """llm_destroy on one of two new engines holding `engine`'s state, their blocks allocated
    together in a shuffled order (`scenes.twins`): nothing in the heap's ledger tells them apart,
    so only a destroy that walks its engine's list and tables frees exactly its own. The other
    twin, `engine` itself (and the engines it was derived from) are the check's memory, to be left
    alone. The destroyed engine's memory is what the twins' blocks were beyond the other twin's,
    so the check needs no list of its blocks: after a correct destroy, of the blocks allocated
    since just before the twins, exactly the other twin's are live."""
    mark = cmem.snapshot()
    target, twin = scenes.twins(engine)
    burst = cmem.changes_since(mark).allocated
    twin_state, pool_before = hw3.snapshot(twin), pool.snapshot()
    returned = mm.llm_destroy(target)
    changes = cmem.changes_since(mark)
    try:
        intact = cmem.is_live(twin) and hw3.snapshot(twin) == twin_state
    except (hw3.CorruptEngine, cmem.HeapError):
        intact = False
    twin_sizes = Counter({size: n // 2 for size, n in Counter(b.size for b in burst).items()})
    left = Counter(b.size for b in changes.allocated)
    left.subtract(twin_sizes)
    sizes = ", ".join(f"{n} of {size} bytes" for size, n in sorted(left.items()) if n > 0)
    return Destroyed(returned, [len(changes.allocated) - sum(twin_sizes.values()),
                                sum(b.size for b in changes.allocated) - sum(s * n for s, n in twin_sizes.items())],
                     len(changes.freed), intact, bool(pool.diff(pool_before)), sizes or "none")


SIZES = "an LLMEngine and a Sequence are 40 bytes, an L1 table 128, an L2 table 64, the ref array 4 per block"


def _expect_destroyed(b: Bench, call: str, hint: str) -> None:
    d = destroy_one_of_twins(b.mm, b.engine, b.pool)
    expect_equal(d.returned, 0, call, rule=R_DESTROY)
    expect(d.others_freed == 0 and d.twin_intact, f"{call} freed or changed memory that is not its engine's",
           rule=R_DESTROY + ": free what the engine you were given holds, nothing else",
           expected="the check's other engines (one holds the very same sequences) untouched",
           actual=(f"{d.others_freed} blocks of the check's earlier engines freed" if d.others_freed else
                   "the other engine of the same sequences was freed or changed"),
           hint="walk the engine's own list and tables: every block you free must be reached from it")
    expect(d.left == [0, 0], f"memory of the engine is still allocated after {call}", rule=R_LEAK,
           expected="All heap blocks were freed (0 bytes lost)",
           actual=f"{d.left[0]} blocks ({d.left[1]} bytes) still allocated: {d.left_sizes} ({SIZES})", hint=hint)
    expect(not d.pool_written, f"{call} wrote the pool", rule=R_POOL)


@check("task5", "llm_destroy frees every sequence, the ref array and the engine: 0 bytes lost", rule=R_LEAK)
def _destroy_no_leak(run):
    with Bench(run, 32) as b:
        _populated(b)
        _expect_destroyed(b, "llm_destroy(engine)",
                          "free every L2 (all 16 L1 slots), each L1, each Sequence, the ref array and the engine")


@check("task5", "llm_destroy on an engine with no sequences, and on None", rule=R_DESTROY)
def _destroy_empty(run):
    with Bench(run, 4) as b:
        expect_equal(b.mm.llm_destroy(None), -1, "llm_destroy(None)", rule=R_NULL)
        _expect_destroyed(b, "llm_destroy of an empty engine",
                          "free the ref_count array and the engine, never the dummy head")


@check("task5", "a whole session with your own functions ends with 0 bytes lost", rule=R_LEAK)
def _destroy_session(run):
    mm = _mm(run)
    pool = Pool(64 * 24)
    heap = cmem.snapshot()
    engine = mm.llm_init(pool.addr, pool.size)
    expect(engine is not None, "llm_init failed", rule=R_INIT)
    steps = [("create", 1, 40), ("create", 2, 250), ("fork", 1, 3), ("append", 3, 17),
             ("append", 2, 9), ("append", 2, 10), ("fork", 2, 4), ("append", 4, 11),
             ("free", 1, None), ("create", 5, 16), ("append", 5, 1)]
    for op, a, x in steps:
        if op == "create":
            ok = mm.create_sequence(engine, a, x) is not None
        elif op == "fork":
            ok = mm.fork_sequence(engine, a, x) is not None
        elif op == "append":
            ok = mm.append_kv(engine, a, x) == 0
        else:
            ok = mm.free_sequence(engine, a) == 0
        expect(ok, f"{op} step ({a}, {x}) failed during the session", rule="notebook 05, Teardown and leaks")
    expect_equal(mm.llm_destroy(engine), 0, "llm_destroy(engine) after the session", rule=R_DESTROY)
    changes = cmem.changes_since(heap)
    expect(not changes.allocated, "memory is still allocated after the session and llm_destroy", rule=R_LEAK,
           expected="All heap blocks were freed (0 bytes lost)", actual=cmem.leak_report(heap))
