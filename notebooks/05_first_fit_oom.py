# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 · First-fit, out of memory, and a clean teardown
#
# Three rules of the HW3 allocator that are easy to state and easy to break:
#
# 1. **First-fit.** A new block is always the *lowest-numbered* block with `ref_count == 0`.
# 2. **Check before allocate.** A call that is going to fail must fail *before* it changes
#    anything: no `malloc`, no ref count, no table entry, no pool byte.
# 3. **No leaks.** `llm_destroy` frees everything the engine allocated, and nothing it did not
#    (the pool belongs to the caller). Valgrind would say "0 bytes lost".
#
# You will see each rule on pictures first, then on your own engine, then write **Task 5 ·
# llm_destroy** and read a Valgrind-style leak report.

# %%
# %matplotlib inline
import matplotlib.pyplot as plt

import pagedlab
from pagedlab import cmem, viz
from pagedlab.engine.pool import Pool
from pagedlab.harness import hw3

# Your exercises/memory_manager.py (PAGEDLAB_IMPL, or impl=, picks another folder).
mm = pagedlab.load("memory_manager")
print("memory_manager loaded from", mm.__file__)
print(pagedlab.track.describe())  # Part A: memory_manager.py, or llm_memory.c on the C track
start = cmem.snapshot()  # the heap as this notebook found it


# %% [markdown]
# ## First-fit after holes
#
# Sequences come and go, so free blocks end up scattered: *holes*. First-fit does not care how
# big a hole is (every block is the same size, so any free block will do); it scans
# `ref_count[0], ref_count[1], …` and takes the first 0.
#
# Below: sequences 1, 2 and 3 took blocks 0–2, 3–6 and 7–9 in order. Sequence 2 finishes, which
# leaves a hole of 4 blocks. Sequence 4 now needs 5 blocks. Predict which ones before you run
# the cell.

# %%
def first_fit(ref_count, n):
    # The n blocks a run of first-fit takes, one after the other.
    taken, refs = [], list(ref_count)
    for _ in range(n):
        block = refs.index(0)  # lowest block with ref_count == 0
        refs[block] = 1
        taken.append(block)
    return taken


S = viz.SeqView.from_blocks
full = viz.EngineView(16, 6, [1] * 10 + [0] * 6, [S(1, [0, 1, 2]), S(2, [3, 4, 5, 6]), S(3, [7, 8, 9])])
holes = viz.EngineView(16, 10, [1, 1, 1, 0, 0, 0, 0, 1, 1, 1] + [0] * 6, [S(1, [0, 1, 2]), S(3, [7, 8, 9])])
blocks_of_4 = first_fit(holes.ref_count, 5)
refs = list(holes.ref_count)
for b in blocks_of_4:
    refs[b] = 1
refilled = viz.EngineView(16, 5, refs, [S(1, [0, 1, 2]), S(3, [7, 8, 9]), S(4, blocks_of_4)])

fig, axes = plt.subplots(3, 1, figsize=(9, 3.6))
viz.draw_pool(full, ax=axes[0], title="sequences 1, 2, 3 created in order")
viz.draw_pool(holes, ax=axes[1], title="sequence 2 freed: a hole at blocks 3-6")
viz.draw_pool(refilled, ax=axes[2], title=f"sequence 4 (5 blocks) gets {blocks_of_4}")
plt.tight_layout()
plt.show()

# %% [markdown]
# Sequence 4's logical blocks are **not contiguous** in the pool: logical 0–3 fill the hole and
# logical 4 lands on block 10. That is the whole point of paging: the block table hides it.
# First-fit is also what makes the graders' answers unique: with the same calls, every correct
# engine hands out the same block ids.
#
# ## Check before allocate
#
# The handout fixes the order in which a function validates, and the checks test it:
#
# | phase | what | examples |
# |---|---|---|
# | 0 | engine pointer | `engine is None` → `None` / `-1`, first line |
# | 1 | argument validity | `initial_kv_len <= 0` |
# | 2 | id constraints | `seq_id` already active (create, fork), sequence not found (free, append) |
# | 3 | resource probe | `ceil(len / 16) > 256` or `> free_local_blocks`; `append_kv`: a new page or a CoW with no free block |
# | 4 | **only now** mutate | `malloc`, take blocks, write tables, link the list, write the pool |
#
# Why insist on the order? Because undoing is where bugs live. A `create_sequence` that first
# allocates the Sequence and L1 table and *then* discovers there are not enough blocks has to free
# them again on the error path; forget one `free` and every rejected request leaks 168 bytes.
# A probe costs one comparison; the rollback path would be code that almost never runs and is
# therefore almost never tested.
#
# From here on, the notebook drives **your** engine. The next cell re-runs the checks of Tasks
# 1–4 (notebooks 02 and 04, or 02c on the C track) quietly: everything below needs them.

# %%
mm = pagedlab.load("memory_manager")
for task in ("task1", "task2", "task3", "task4"):
    pagedlab.graded.run(task, quiet=True)
print("Tasks 1-4 pass: your engine is ready for this notebook.")

# %% [markdown]
# ### A rejected call changes nothing
#
# For every call that must fail, we take three snapshots before it and compare after:
#
# - `hw3.state(engine)`: ref counts, free count, every sequence's mapping and L2 tables;
# - `pool.snapshot()` / `pool.diff(...)`: every byte of the pool (and guard zones around it);
# - `cmem.snapshot()` / `cmem.changes_since(...)`: every `malloc`/`calloc`/`free` call, even an
#   allocation that was freed again before returning.

# %%
pagedlab.graded.require("task1", "task2", "task3", "task4")  # checked in a separate process first
pool = Pool(8 * hw3.BLOCK_SIZE)            # 8 blocks
engine = mm.llm_init(pool.addr, pool.size)
mm.create_sequence(engine, 1, 40)          # 3 blocks
mm.create_sequence(engine, 2, 64)          # 4 blocks, full
print("free blocks:", engine.free_local_blocks)

rejected = {
    "create_sequence(engine, 3, 0)       [phase 1: length <= 0]": lambda: mm.create_sequence(engine, 3, 0),
    "create_sequence(engine, 1, 5)       [phase 2: id 1 is active]": lambda: mm.create_sequence(engine, 1, 5),
    "create_sequence(engine, 3, 17)      [phase 3: 2 blocks, 1 free]": lambda: mm.create_sequence(engine, 3, 17),
    "fork_sequence(engine, 9, 3)         [phase 2: no parent 9]": lambda: mm.fork_sequence(engine, 9, 3),
    "fork_sequence(engine, 1, 2)         [phase 2: id 2 is active]": lambda: mm.fork_sequence(engine, 1, 2),
    "append_kv(engine, 7, 42)            [phase 2: no sequence 7]": lambda: mm.append_kv(engine, 7, 42),
    "free_sequence(engine, 7)            [phase 2: no sequence 7]": lambda: mm.free_sequence(engine, 7),
    "create_sequence(None, 3, 5)         [phase 0: engine NULL]": lambda: mm.create_sequence(None, 3, 5),
}
for call, fn in rejected.items():
    state, pool_snap, heap_snap = hw3.state(engine), pool.snapshot(), cmem.snapshot()
    result = fn()
    heap = cmem.changes_since(heap_snap)
    same = hw3.state(engine) == state and not pool.diff(pool_snap) and not heap
    print(f"{call}  -> {result!s:5}  {'unchanged' if same else 'CHANGED: ' + str(heap)}")

# %% [markdown]
# ## Out of memory: a new page, a copy-on-write, a missing L2 table
#
# `append_kv` is the only call that allocates *during* decoding, and it has three ways to need a
# block. All three must return `-1` with nothing changed when `free_local_blocks == 0`:
#
# | case | why a block is needed | trap |
# |---|---|---|
# | new page | the record starts a new logical block (L2 entry `-1`) | — |
# | copy-on-write | the block is shared (`ref_count > 1`) | the block *exists*, so "is it mapped?" is not enough |
# | missing L2 | record 256 starts logical block 16, behind the NULL pointer `block_table[1]` | allocating the L2 table *before* the probe leaks 64 bytes per failed call |
#
# Sequence 2 above is full (64 records in 4 blocks), and one block is free. We fork sequence 1
# (40 records: its last block is shared after the fork) and take the last free block with a
# 1-record sequence 4. Now the pool is full.

# %%
pagedlab.graded.require("task2", "task3", "task4")
mm.fork_sequence(engine, 1, 3)
mm.create_sequence(engine, 4, 1)
print("free blocks:", engine.free_local_blocks)

cases = {
    "new page (seq 2, record 64)": 2,
    "copy-on-write (seq 3, record 40 in shared block)": 3,
}
for label, sid in cases.items():
    state, pool_snap, heap_snap = hw3.state(engine), pool.snapshot(), cmem.snapshot()
    result = mm.append_kv(engine, sid, 7)
    same = hw3.state(engine) == state and not pool.diff(pool_snap) and not cmem.changes_since(heap_snap)
    print(f"{label:50s} -> {result}  {'unchanged' if same else 'CHANGED'}")

viz.draw_pool(engine, title="a full pool: no free block, sequences 1 and 3 share 3 blocks")
plt.show()

# %%
pagedlab.graded.require("task1", "task2", "task4")
# The missing-L2 case needs 256 records: a 16-block pool filled by one sequence.
big_pool = Pool(16 * hw3.BLOCK_SIZE)
big = mm.llm_init(big_pool.addr, big_pool.size)
mm.create_sequence(big, 1, 256)  # logical blocks 0-15, all through L1 slot 0
print("L1 slots with an L2 table:", sorted(hw3.l2_tables(hw3.find(big, 1))))

heap_snap = cmem.snapshot()
result = mm.append_kv(big, 1, 7)  # record 256 -> logical 16 -> L1 slot 1 (NULL), no block free
print("append_kv ->", result, "| heap:", cmem.changes_since(heap_snap),
      "| L1 slots with an L2 table:", sorted(hw3.l2_tables(hw3.find(big, 1))))

# %% [markdown]
# ## Teardown and leaks
#
# Every `cmem.new`, `cmem.calloc_array` and `cmem.malloc_array` goes into a ledger, so pagedlab
# can print what Valgrind's leak checker would: the blocks still allocated, their sizes and
# **where they were allocated**. An engine with `n` sequences owns
#
# - the `LLMEngine` (40 bytes) and its `ref_count` array (`4 × total_local_blocks` bytes),
# - per sequence: the `Sequence` (40 bytes), its L1 table (16 pointers, 128 bytes) and one L2
#   table per non-NULL L1 slot (16 ints, 64 bytes each).
#
# What it does **not** own: the pool (the caller's) and the dummy head `active_seqs`, which lives
# *inside* the engine struct; `free`-ing it would be an invalid free of an interior pointer.
#
# ### ✏️ Task 5 · llm_destroy
#
# Write `llm_destroy(engine)` in **`exercises/memory_manager.py`**: `-1` for `None`; otherwise
# walk `active_seqs` and destroy every sequence (careful: you free the node you are standing on,
# so read `next` first: `list_for_each` does), free `ref_count`, free the engine, return 0.
#
# The graded cell lists three checks, but Task 5's points come from the first two. The third,
# *a whole session with your own functions*, is **feedback only**: it drives all of your HW3
# functions (Tasks 1–5) and then tears the engine down, so a leak it finds may come from another
# task. It is shown to help you and earns or costs nothing, so `pagedlab grade` counts Task 5 as
# 2 graded checks.

# %%
pagedlab.graded.run("task5");

# %% [markdown]
# ### A planted leak
#
# Here is a teardown written in a hurry. It frees each sequence's L1 table and the Sequence, but
# not the L2 tables the L1 table points to. Run it on a small engine and ask the ledger what is
# left (`leak_report(since)` lists only allocations made after the snapshot).

# %%
pagedlab.graded.require("task1", "task2", "task3", "task4")  # small_session below runs them


def hasty_destroy(engine):
    # BUG (on purpose): forgets the L2 tables behind each L1 slot.
    for node in mm.list_for_each(engine.active_seqs):
        seq = mm.container_of(node)
        cmem.free(seq.block_table)
        cmem.free(seq)
    cmem.free(engine.ref_count)
    cmem.free(engine)
    return 0


def small_session(mm):
    pool = Pool(40 * hw3.BLOCK_SIZE)
    engine = mm.llm_init(pool.addr, pool.size)
    mm.create_sequence(engine, 1, 300)   # 19 blocks: L1 slots 0 and 1
    mm.create_sequence(engine, 2, 20)    # 2 blocks
    mm.fork_sequence(engine, 2, 3)
    mm.append_kv(engine, 3, 99)          # copy-on-write
    return pool, engine


snap = cmem.snapshot()
pool_h, engine_h = small_session(mm)
hasty_destroy(engine_h)
print(cmem.leak_report(snap))
lost = cmem.changes_since(snap).allocated
print(f"\n(cmem.live_allocations() lists all {len(cmem.live_allocations())} live blocks of this Python "
      f"process, e.g. the engines above; leak_report(snap) keeps the {len(lost)} allocated since snap.)")
for block in lost:  # tidy up the planted leak
    cmem.free(block.address)

# %% [markdown]
# Four L2 tables of 64 bytes: two for sequence 1 (it crosses into L1 slot 1), one each for
# sequences 2 and 3, allocated in `new_l2_table`. The report names the line that allocated each
# block, which is usually the best clue for where its `free` belongs. Now the same session with
# your `llm_destroy`:

# %%
pagedlab.graded.require("task1", "task2", "task3", "task4", "task5")
mm = pagedlab.load("memory_manager")
snap = cmem.snapshot()
pool_s, engine_s = small_session(mm)
live = cmem.changes_since(snap).allocated
print(f"after the session: {len(live)} live blocks, {sum(b.size for b in live)} bytes")
print("llm_destroy ->", mm.llm_destroy(engine_s))
print(cmem.leak_report(snap))

# %%
pagedlab.graded.require("task2", "task5")
# The engines of the earlier sections, torn down by your llm_destroy as well.
for e in (engine, big):
    mm.llm_destroy(e)
print("since the start of this notebook:", cmem.leak_report(start))
print("pool bytes are the caller's: still readable, e.g. block 0 word 0 =", hex(pool.words(0)[0] & 0xFFFFFFFF))

# %% [markdown]
# ## Takeaways
#
# - First-fit = lowest free block; holes are filled first, and a sequence's blocks need not be
#   contiguous.
# - Validate in order (arguments → ids → resources) and mutate only when success is certain:
#   a rejected call leaves the ref counts, the tables, the heap and the pool byte-for-byte alike.
# - `append_kv` needs a block for a new page *and* for copy-on-write; the L2 table of a new
#   L1 slot is allocated only once the block is known to exist.
# - Teardown frees L2 tables, L1 tables, sequences, the ref array and the engine — never the
#   dummy head or the pool. The ledger's report names each leaked block's allocation site.
