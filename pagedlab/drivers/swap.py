"""Graded checks for Task 13: swapping a sequence group between a "GPU" and a "CPU" engine, and
the batched block copy (notebook 10).

Every scenario is built by the harness from data (`scenes`, `hw3.derive`), so Task 13 is
graded on its own, whatever the state of the student's memory manager. Both pools are filled
with random words first, so a block that was not copied, or copied from the wrong block, shows.
What a move returned and left behind is recorded and judged against the reference solution's
record of the same scenario (`expected.json`, or the reference run at grading time for the
hidden checks); the driver itself only holds the rules that do not depend on the answer: a
refused swap changes nothing, and a move copies exactly the blocks it reports.
"""

from __future__ import annotations

import random

import numpy as np

from .. import cmem
from ..engine.pool import Pool
from ..harness import hw3
from ..spec.catalog import CheckFailure, check
from ..student.hw3 import BLOCK_SIZE
from . import scenes
from .record import expect, expect_equal, see

R_MOVE = "notebook 10, Task 13 · swap: a sequence group moves as a unit, each distinct block once, first-fit on the target"
R_REFS = "notebook 10, Task 13 · swap: shared blocks stay shared; each block keeps its ref count"
R_BYTES = "notebook 10, Task 13 · swap: every KV record is copied intact; only the target blocks are written"
R_FAIL = "notebook 10, Task 13 · swap: capacity is checked before anything moves; a failed swap changes nothing"
R_COPY = "notebook 10, Task 13 · copy_blocks: 64 bytes per (src, dst) pair, every pair checked before any byte moves"


# --- the rig: two engines over two pools, built by the harness --------------------------------
# The pools' block counts of the rigs here and in the drawn scenarios' copy driver: the grader
# sends the bytes of each one's empty engine (registry.engine_totals).
RIG_BLOCKS = (1, 8, 12, 16, 24, 32, 40, 48)


def engine_totals(task: str, scenario=None) -> tuple:
    return RIG_BLOCKS


class Rig:
    """A GPU engine and a CPU engine, each over its own pool of random words."""

    def __init__(self, gpu_blocks: int, cpu_blocks: int, seed: int):
        self.gpu_pool, self.cpu_pool = Pool(gpu_blocks * BLOCK_SIZE), Pool(cpu_blocks * BLOCK_SIZE)
        rng = np.random.default_rng(seed)
        for pool in (self.gpu_pool, self.cpu_pool):
            pool.bytes[:] = rng.integers(0, 256, pool.size, dtype=np.uint8)
        self.heap_at_start = cmem.snapshot()
        self.gpu, self.cpu = scenes.engine(self.gpu_pool), scenes.engine(self.cpu_pool)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        hw3.sweep(self.heap_at_start)
        return False

    def add(self, side: str, seq_id: int, kv_count: int, blocks):
        """That side's engine with one more sequence at the tail, rebuilt from data by the harness
        (the old one stays allocated until the sweep: a swap may have moved its sequences)."""
        setattr(self, side, scenes.with_sequence(self.engine(side), seq_id, kv_count, blocks))
        return hw3.find(self.engine(side), seq_id)

    def engine(self, side: str):
        return self.gpu if side == "gpu" else self.cpu

    def pool(self, side: str) -> Pool:
        return self.gpu_pool if side == "gpu" else self.cpu_pool

    def observe(self) -> dict:
        return {"gpu": hw3.state(self.gpu), "cpu": hw3.state(self.cpu),
                "gpu_pool": self.gpu_pool.snapshot(), "cpu_pool": self.cpu_pool.snapshot(),
                "heap": cmem.snapshot()}


def summary(state: hw3.EngineState) -> dict:
    """What a check compares: free count, ref counts, and (id, kv_count, mapping) in list order."""
    return {"free": state.free, "refs": list(state.refs),
            "sequences": [(s.seq_id, s.kv_count, dict(s.mapping)) for s in state.seqs]}


# --- running a move and recording it ----------------------------------------------------------


def _pairs(result, call):
    if result is None:
        return None
    try:
        return [(int(a), int(b)) for a, b in result]
    except (TypeError, ValueError):
        raise CheckFailure(f"{call} returned {result!r}", rule=R_MOVE,
                           expected="a list of (src block, dst block) pairs, or None on failure") from None


def run_move(rig: Rig, swap, fn: str, seq_id: int, context: str) -> list | None:
    """Call swap.<fn> (swap_out: gpu->cpu, swap_in: cpu->gpu) and record everything it did.

    Whether the move had to fail, and where each block had to go, is the judge's to say (from
    the reference solution's record of the same scenario); here only what the call did is
    recorded, plus the rules that hold whatever the mapping: a refused swap changes nothing, a
    move copies exactly the blocks it reports."""
    src_side, dst_side = ("gpu", "cpu") if fn == "swap_out" else ("cpu", "gpu")
    before = rig.observe()
    call = f"{fn}({src_side}, {dst_side}, {seq_id}) {context}"
    got = _pairs(getattr(swap, fn)(rig.engine(src_side), rig.engine(dst_side), seq_id), call)
    label = f"block mapping returned by {call}"
    if got is None:
        see(label, None, rule=R_FAIL,
            hint="a swap that fits returns one (src, dst) pair per distinct block; None is for a group "
                 "that does not fit or whose id is missing or taken on the target")
        _expect_nothing_changed(rig, before, call)
        return None
    see(label, got, rule=R_MOVE,
        hint=f"one pair per distinct block ({len(got)} for this group; the target had "
             f"{before[dst_side].free} free), in the order met (group members in list order, "
             "logical blocks ascending), each target block first-fit when taken")
    for side in (src_side, dst_side):
        now = summary(hw3.state(rig.engine(side)))
        for key, rule, hint in (
            ("sequences", R_MOVE, "members leave the source list and join the target's tail in "
                                  "list order, same kv_count, tables rewritten to target blocks"),
            ("refs", R_REFS, "each target block's ref count is the number of members that map it; "
                             "source blocks of the group drop to 0"),
            ("free", R_REFS, "free_local_blocks must equal the number of blocks with ref count 0"),
        ):
            see(f"{side} engine {key} after {call}", now[key], rule=rule, hint=hint)
    _expect_bytes_moved(rig, before, src_side, dst_side, got, call)
    return got


def _expect_bytes_moved(rig, before, src_side, dst_side, pairs, call):
    src_pool, dst_pool = rig.pool(src_side), rig.pool(dst_side)
    changed = src_pool.diff(before[f"{src_side}_pool"])
    expect(not changed, f"{call} wrote the source pool", rule=R_BYTES, expected="source pool unchanged",
           actual=str(changed), hint="a swap reads the source blocks; it never clears or writes them")
    written = dst_pool.diff(before[f"{dst_side}_pool"])
    expect(not written.guard_damaged, f"{call} wrote outside the target pool", rule=R_BYTES,
           actual=str(written))
    targets = {d for _, d in pairs}
    stray = sorted(set(written.blocks) - targets)
    expect(not stray, f"{call} wrote target blocks it did not take", rule=R_BYTES,
           expected=f"writes only to blocks {sorted(targets)}", actual=f"also wrote blocks {stray}: {written}")
    old_src = before[f"{src_side}_pool"]
    for src_block, dst_block in pairs:
        want = _words(old_src, src_block)
        have = dst_pool.words(dst_block)
        expect_equal(have, want, f"the 16 records of {src_side} block {src_block}, copied to {dst_side} block {dst_block} "
                                 f"by {call}", rule=R_BYTES,
                     hint="copy all 64 bytes (ctypes.memmove) from the source pool into the block you took")


def _words(snapshot: np.ndarray, block: int) -> list[int]:
    from ..engine.pool import GUARD_BYTES

    raw = snapshot[GUARD_BYTES + block * BLOCK_SIZE:GUARD_BYTES + (block + 1) * BLOCK_SIZE]
    return [int(x) for x in raw.view("<i4")]


def _expect_nothing_changed(rig, before, call):
    for side in ("gpu", "cpu"):
        now = hw3.state(rig.engine(side))
        expect_equal(summary(now), summary(before[side]), f"{side} engine after {call}", rule=R_FAIL,
                     hint="check the target's capacity and ids before unlinking or remapping anything")
        expect([s.address for s in now.seqs] == [s.address for s in before[side].seqs],
               f"{side} engine keeps the same Sequence structs after {call}", rule=R_FAIL,
               hint="a refused swap must not replace (or free) any Sequence")
        diff = rig.pool(side).diff(before[f"{side}_pool"])
        expect(not diff, f"{call} wrote the {side} pool", rule=R_FAIL, expected="pool unchanged",
               actual=str(diff))
    heap = cmem.changes_since(before["heap"])
    expect(not heap.allocated and not heap.freed, f"{call} changed the heap", rule=R_FAIL,
           expected="no heap activity left behind", actual=str(heap))


def _swap(run):
    return run.load("swap")


# --- checks ------------------------------------------------------------------------------------


@check("task13", "swap_out moves one sequence: records intact, source freed, first-fit on the CPU", rule=R_MOVE)
def swap_out_single(run):
    sw = _swap(run)
    with Rig(48, 40, seed=1301) as rig:
        rig.add("gpu", 7, 40, [5, 2, 9])
        # 20 logical blocks over two L2 tables, with an L1 hole before the second table.
        scattered = {i: 12 + i for i in range(14)}
        scattered.update({32 + i: 30 + i for i in range(6)})
        rig.add("gpu", 8, 32 * 16 + 90, scattered)
        rig.add("gpu", 9, 3, [0])
        rig.add("cpu", 100, 33, [1, 3, 4])  # swapped earlier: CPU holes at 0 and 2
        heap = cmem.live_bytes()
        run_move(rig, sw, "swap_out", 8, "(20 blocks, L1 hole)")
        run_move(rig, sw, "swap_out", 7, "(3 blocks)")
        leaked = cmem.live_bytes() - heap
        expect(leaked == 0, "no heap bytes gained or lost over two swaps", rule=R_MOVE,
               expected="0 bytes", actual=f"{leaked:+d} bytes",
               hint="a swap needs no new memory: relink the Sequence and rewrite its tables, or "
                    "free whatever you replaced")


@check("task13", "a forked group moves as a unit: shared blocks move once and stay shared", rule=R_REFS)
def swap_out_group(run):
    sw = _swap(run)
    with Rig(32, 32, seed=1302) as rig:
        rig.add("gpu", 1, 50, [3, 6, 1, 8])         # the parent
        rig.add("gpu", 2, 20, [0])                  # unrelated
        rig.add("gpu", 3, 51, [3, 6, 1, 10])        # child: last block copied on write
        rig.add("gpu", 4, 60, [3, 6, 11, 12])       # child: two blocks of its own
        rig.add("gpu", 5, 70, [13, 14, 15, 16, 17])  # unrelated
        rig.add("gpu", 6, 33, [12, 20, 21])         # shares only with child 4
        # Swapping the second child takes the parent, the first child and 6 along (refs 3, 3, 2, 2).
        run_move(rig, sw, "swap_out", 4, "(group of 4 sharing blocks 3, 6, 1, 12)")


@check("task13", "swap_in brings a group back: new GPU blocks first-fit, records and sharing intact", rule=R_MOVE)
def swap_round_trip(run):
    sw = _swap(run)
    with Rig(24, 24, seed=1303) as rig:
        rig.add("gpu", 10, 64, [4, 5, 6, 7])
        rig.add("gpu", 11, 64, [4, 5, 6, 9])
        rig.add("gpu", 12, 16, [2])
        records = {b: rig.gpu_pool.words(b) for b in (4, 5, 6, 7, 9)}
        run_move(rig, sw, "swap_out", 11, "(two forked sequences)")
        rig.add("gpu", 13, 30, [0, 5])  # the freed blocks get reused meanwhile
        run_move(rig, sw, "swap_in", 10, "(back to a GPU whose blocks were reused)")
        after = {s.seq_id: dict(s.mapping) for s in hw3.state(rig.gpu).seqs}
        for seq_id, old in ((10, [4, 5, 6, 7]), (11, [4, 5, 6, 9])):
            for logical, block in enumerate(old):
                expect_equal(rig.gpu_pool.words(after[seq_id][logical]), records[block],
                             f"records of sequence {seq_id}, logical block {logical}, after swap out and in",
                             rule=R_BYTES)


@check("task13", "a swap that does not fit, or names a missing or taken id, changes nothing (byte-exact)", rule=R_FAIL)
def swap_refused(run):
    sw = _swap(run)
    with Rig(32, 8, seed=1304) as rig:
        rig.add("gpu", 1, 80, [0, 1, 2, 3, 4])
        rig.add("gpu", 2, 80, [0, 1, 2, 3, 5])  # group of 6 distinct blocks
        rig.add("gpu", 3, 16, [9])
        rig.add("cpu", 50, 20, [0, 2])           # CPU: 6 free, then 5 free
        rig.add("cpu", 3, 20, [4])               # id 3 is already swapped out?!
        run_move(rig, sw, "swap_out", 1, "(6 blocks needed, 5 free on the CPU)")
        run_move(rig, sw, "swap_out", 3, "(id 3 already on the CPU)")
        run_move(rig, sw, "swap_out", 77, "(no sequence 77)")
        run_move(rig, sw, "swap_in", 1, "(sequence 1 is not on the CPU)")
        before = rig.observe()
        for args, what in (((None, rig.cpu, 1), "swap_out(None, cpu, 1)"),
                           ((rig.gpu, None, 1), "swap_out(gpu, None, 1)"),
                           ((rig.gpu, rig.gpu, 1), "swap_out(gpu, gpu, 1)")):
            got = sw.swap_out(*args)
            expect(got is None, f"{what} returned a mapping", rule=R_FAIL, expected="None", actual=got)
            _expect_nothing_changed(rig, before, what)


@check("task13", "move with exactly enough room, and a chain of siblings (A-B-C sharing)", rule=R_MOVE)
def swap_exact_fit(run):
    sw = _swap(run)
    rnd = random.Random(1305)
    with Rig(40, 12, seed=1305) as rig:
        rig.add("gpu", 21, 40, [7, 8, 9])
        rig.add("gpu", 22, 40, [9, 10, 11])      # shares 9 with 21
        rig.add("gpu", 23, 40, [11, 12, 13])     # shares 11 with 22 only
        taken = rnd.sample(range(12), 5)
        rig.add("cpu", 60, 80, taken)            # 7 free: the group needs exactly 7
        run_move(rig, sw, "swap_out", 23, "(chain 21-22-23, exactly 7 free CPU blocks)")


@check("task13", "copy_blocks copies 64 bytes per pair (one source to several destinations) and nothing else", rule=R_COPY)
def copy_blocks_copies(run):
    sw = _swap(run)
    with Rig(16, 1, seed=1306) as rig:
        rig.add("gpu", 1, 40, [2, 3, 4])
        rig.add("gpu", 2, 40, [2, 3, 7])
        rig.add("gpu", 3, 40, [2, 3, 8])
        before = rig.observe()
        pairs = [(4, 7), (4, 8), (3, 12)]
        got = sw.copy_blocks(rig.gpu, pairs)
        expect_equal(got, 3, f"copy_blocks(gpu, {pairs})", rule=R_COPY,
                     hint="return the number of blocks copied")
        for src_block, dst_block in pairs:
            expect_equal(rig.gpu_pool.words(dst_block), _words(before["gpu_pool"], src_block),
                         f"block {dst_block} after copying block {src_block} into it", rule=R_COPY)
        written = rig.gpu_pool.diff(before["gpu_pool"])
        stray = sorted(set(written.blocks) - {7, 8, 12})
        expect(not stray and not written.guard_damaged, "copy_blocks wrote blocks outside the destinations",
               rule=R_COPY, actual=str(written))
        expect_equal(summary(hw3.state(rig.gpu)), summary(before["gpu"]), "engine after copy_blocks",
                     rule=R_COPY, hint="copy_blocks moves bytes only: the block manager already did the "
                                       "ref counts and the remapping")
        expect_equal(sw.copy_blocks(rig.gpu, []), 0, "copy_blocks(gpu, [])", rule=R_COPY)


@check("task13", "copy_blocks checks every pair before copying any", rule=R_COPY)
def copy_blocks_refuses(run):
    sw = _swap(run)
    with Rig(16, 1, seed=1307) as rig:
        before = rig.observe()
        for pairs, why in (([(1, 2), (3, 16)], "block 16 is outside the 16-block pool"),
                           ([(1, 2), (-1, 5)], "block -1"),
                           ([(1, 2), (3, 2)], "destination 2 twice"),
                           ([(1, 2), (2, 5)], "destination 2 is also a source"),
                           ([(1, 2), (3,)], "a pair with one block"),
                           ([(1, 2), ("3", 4)], "a block id that is a string")):
            got = sw.copy_blocks(rig.gpu, pairs)
            expect_equal(got, -1, f"copy_blocks(gpu, {pairs}) ({why})", rule=R_COPY)
            diff = rig.gpu_pool.diff(before["gpu_pool"])
            expect(not diff, f"copy_blocks(gpu, {pairs}) ({why}) wrote the pool before refusing",
                   rule=R_COPY, expected="pool unchanged", actual=str(diff),
                   hint="validate the whole list first, then copy")
        expect_equal(sw.copy_blocks(None, [(1, 2)]), -1, "copy_blocks(None, [(1, 2)])", rule=R_COPY)
