"""A fourth mutation battery: the domain classes the spec names (C-int ids, owners, logit signs,
sizes at and past the bounds), each graded by the hidden checks alone and by the whole grading
(pagedlab/spec/domains.py; pagedlab/drivers/README.md, "Domains").

Every mutant below is a student-like bug, an overfit to the sizes the hidden checks used to draw,
or a bug that only the public checks used to catch. Each is right everywhere but on its class,
and each must lose exactly its task under every hidden seed: with the hidden checks alone (the
second line must stand on its own) and with the public ones too, keeping every other task its
file serves. Before the domain tables (commit 3772485) each of them kept its task under the
hidden checks alone, under the seeds listed in BEFORE; those marked there were caught by a public
check only (the hidden set is the second line and must stand on its own).

Graded through the check server (tests/forked_checks.py): the real drivers and judge, each
folder in a fork, hidden checks planned from grading/hidden/ as the grader plans them (a seed per
grading, one more per hidden check), judged against the reference solution driven on the same
scenario. Three seeds here; more on request (PAGEDLAB_DOMAIN_SEEDS=10: ten more, every task each
seed; run for the commit that added this battery, all passed).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from pagedlab.spec import manifest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from forked_checks import CheckServer  # noqa: E402
from mutation import apply  # noqa: E402

SEEDS = (1, 2, 3)
MM, C, CU, V2 = "memory_manager.py", "llm_memory.c", "paged_attention.cu", "paged_attention_v2.cu"
BUDDY, SWAP, PREFIX = "buddy.py", "swap.py", "prefix_cache.py"


@dataclass(frozen=True)
class Mutant:
    task: str
    domain_class: str  # the class of pagedlab/spec/domains.py the bug is wrong on
    kind: str  # "bug", "overfit" (to a size bound or a drawn range), "public only" (hidden checks missed it)
    old: str
    new: str
    file: str


PY_FIRST_FIT = "        block = take_block(engine, block + 1)  # first-fit, resuming after the last block taken\n"
C_DESTROY = ("    struct list_node *head = &engine->active_seqs;\n    while (head->next != head)\n"
             "        destroy_sequence(engine, container_of(head->next, Sequence, node));\n")
MUTANTS = [
    Mutant("task2", "seq_id: 0, negative", "bug",
           "    if initial_kv_len <= 0:\n        return None\n",
           "    if initial_kv_len <= 0 or seq_id <= 0:  # ids are positive\n        return None\n", MM),
    Mutant("task4", "owners of the last block: many (C, copy only at ref_count == 2)", "bug",
           "engine->ref_count[block] > 1;", "engine->ref_count[block] == 2;", C),
    Mutant("task10", "logits: all negative, large (block max padded with 0.f)", "bug",
           "  row_max = warp_max(lane < NUM_WARPS ? partial[lane] : LOWEST_FLOAT);\n",
           "  row_max = warp_max(lane < NUM_WARPS ? partial[lane] : 0.f);\n", CU),
    Mutant("task2", "first-fit block: 256 and past (a scan of at most 256 blocks)", "overfit", PY_FIRST_FIT,
           "        block = next(b for b in range(block + 1, min(engine.total_local_blocks, 256)) if engine.ref_count[b] == 0)\n"
           "        engine.ref_count[block] = 1\n        engine.free_local_blocks -= 1\n", MM),
    Mutant("task2", "first-fit block: 256 and past (C, a scan of at most 256 blocks)", "overfit",
           "        block = take_block(engine, block + 1);\n",
           "        for (block = block + 1; block < MAX_LOGICAL_BLOCKS && engine->ref_count[block] != 0; block++)\n"
           "            ; /* a sequence maps at most 256 blocks */\n"
           "        engine->ref_count[block]++;\n        engine->free_local_blocks--;\n", C),
    Mutant("task14", "partition_size: 1024 (a __shared__ float logits[512])", "overfit",
           "  extern __shared__ float logits[];          // [partition_size]: this partition's logits\n",
           "  __shared__ float logits[512];  // the default partition\n", V2),
    Mutant("task5", "sequences: 65 and past (C, Sequence *seqs[64])", "overfit", C_DESTROY,
           "    Sequence *seqs[64]; /* a batch holds at most 64 sequences */\n    int n = 0;\n"
           "    struct list_node *head = &engine->active_seqs;\n"
           "    for (struct list_node *node = head->next; node != head && n < 64; node = node->next)\n"
           "        seqs[n++] = container_of(node, Sequence, node);\n"
           "    for (int i = 0; i < n; i++)\n        destroy_sequence(engine, seqs[i]);\n", C),
    Mutant("task12", "memory: 1024 slots and past (orders stop at 512)", "overfit",
           "        while order < self.max_order:\n",
           "        while order < min(self.max_order, 9):  # 512 slots is the largest block\n", BUDDY),
    Mutant("task2", "initial_kv_len: 4096 (the bound, refused)", "overfit",
           "    if needed > MAX_LOGICAL_BLOCKS or needed > engine.free_local_blocks:\n",
           "    if needed >= MAX_LOGICAL_BLOCKS or needed > engine.free_local_blocks:\n", MM),
    Mutant("task2", "initial_kv_len: 4097 (one past the bound, accepted)", "overfit",
           "    if needed > MAX_LOGICAL_BLOCKS or needed > engine.free_local_blocks:\n",
           "    if needed > engine.free_local_blocks:\n", MM),
    Mutant("task4", "kv_count: 4095 (the last record refused)", "public only",
           "    if logical >= MAX_LOGICAL_BLOCKS:\n        return -1\n    l1, l2",
           "    if seq.kv_count >= MAX_LOGICAL_BLOCKS * KV_PER_BLOCK - 1:\n        return -1\n    l1, l2", MM),
    Mutant("task4", "kv_count: 4096 (one past the bound, written)", "public only",
           "    if (logical >= MAX_LOGICAL_BLOCKS)\n        return -1;\n", "", C),
    Mutant("task2", "owners of the blocks freed: two, many (a freed block always free)", "public only",
           "    engine.ref_count[block] -= 1\n    if engine.ref_count[block] == 0:\n        engine.free_local_blocks += 1\n",
           "    engine.ref_count[block] = 0  # the sequence's block is free again\n    engine.free_local_blocks += 1\n", MM),
    Mutant("task2", "free blocks at a create: exactly the blocks needed (refused)", "public only",
           "needed > engine.free_local_blocks:", "needed >= engine.free_local_blocks:", MM),
    Mutant("task4", "free blocks when a block is needed: none: the L2 table missing too (allocated first)", "public only",
           "    int *l2 = seq->block_table[i];\n    int block = l2 ? l2[j] : UNMAPPED;\n",
           "    if (seq->block_table[i] == NULL)\n        seq->block_table[i] = new_l2_table();\n"
           "    int *l2 = seq->block_table[i];\n    int block = l2 ? l2[j] : UNMAPPED;\n", C),
    Mutant("task2", "not a C int (create_sequence trusts its arguments)", "public only",
           "    if engine is None or not is_c_int(seq_id) or not is_c_int(initial_kv_len):\n        return None\n",
           "    if engine is None:\n        return None\n", MM),
    Mutant("task4", "not a C int (append_kv writes any Python int)", "public only",
           "    if engine is None or not is_c_int(kv_data):\n        return -1", "    if engine is None:\n        return -1", MM),
    Mutant("task13", "block id: negative (accepted by copy_blocks)", "public only",
           "not all(is_c_int(b) and 0 <= b < total for b in pair)", "not all(is_c_int(b) and b < total for b in pair)",
           SWAP),
    Mutant("task13", "block id: 1024 and past (copy_blocks flags destinations in 1024 entries)", "overfit",
           "    sources = {s for s, _ in pairs}\n    destinations = [d for _, d in pairs]\n"
           "    if len(set(destinations)) != len(destinations) or sources & set(destinations):\n        return -1\n",
           "    is_destination = [False] * 1024  # one flag per block\n"
           "    for _, d in pairs:\n        if is_destination[d]:\n            return -1\n"
           "        is_destination[d] = True\n"
           "    if any(is_destination[s] for s, _ in pairs):\n        return -1\n", SWAP),
    Mutant("task13", "free blocks on the destination: one fewer (capacity not checked)", "public only",
           "    if len(distinct) > dst.free_local_blocks:\n        return None\n", "", SWAP),
    Mutant("task13", "group: a chain of three (one pass over the list)", "public only",
           "                reached |= blocks[id(s)]\n                grew = True\n",
           "                reached |= blocks[id(s)]\n", SWAP),
    Mutant("task14", "partitions past a sequence's end (they run and write their temporaries)", "public only",
           "  if (start >= seq_len) return;\n", "", V2),
    Mutant("task11", "hash_full_blocks: whole blocks plus a partial one (the partial one hashed)", "public only",
           "    for start in range(0, len(token_ids) - block_size + 1, block_size):\n",
           "    for start in range(0, len(token_ids), block_size):\n", PREFIX),
    Mutant("task11", "hash_fn: one that collides (the parent hash not verified)", "public only",
           "or block.token_ids != token_ids or block.parent_hash != parent_hash:", "or block.token_ids != token_ids:",
           PREFIX),
    Mutant("task11", "room at an allocate: one block short (idle hits not counted)", "public only",
           "if num_new > pool.num_free_blocks - idle_hits:", "if num_new > pool.num_free_blocks:", PREFIX),
]
IDS = [f"{m.task}: {m.domain_class}" for m in MUTANTS]

# Before the domain tables (3772485), graded by the hidden checks alone: the seeds of 1-3 under
# which each mutant kept its task, and whether a public check caught it then.
BEFORE = {
    "task2: seq_id: 0, negative": ((1, 2, 3), False),
    "task4: owners of the last block: many (C, copy only at ref_count == 2)": ((1, 2, 3), False),
    "task10: logits: all negative, large (block max padded with 0.f)": ((1, 3), False),
    "task2: first-fit block: 256 and past (a scan of at most 256 blocks)": ((1, 2, 3), False),
    "task2: first-fit block: 256 and past (C, a scan of at most 256 blocks)": ((1, 2, 3), False),
    "task14: partition_size: 1024 (a __shared__ float logits[512])": ((1, 2, 3), False),
    "task5: sequences: 65 and past (C, Sequence *seqs[64])": ((1, 2, 3), False),
    "task12: memory: 1024 slots and past (orders stop at 512)": ((1, 3), False),
    "task2: initial_kv_len: 4096 (the bound, refused)": ((1, 2, 3), True),
    "task2: initial_kv_len: 4097 (one past the bound, accepted)": ((1, 2, 3), True),
    "task4: kv_count: 4095 (the last record refused)": ((2, 3), True),
    "task4: kv_count: 4096 (one past the bound, written)": ((2, 3), True),
    "task2: owners of the blocks freed: two, many (a freed block always free)": ((1, 2, 3), True),
    "task2: free blocks at a create: exactly the blocks needed (refused)": ((1, 2, 3), True),
    "task4: free blocks when a block is needed: none: the L2 table missing too (allocated first)": ((1, 2, 3), True),
    "task2: not a C int (create_sequence trusts its arguments)": ((1, 2, 3), True),
    "task4: not a C int (append_kv writes any Python int)": ((1, 2, 3), True),
    "task13: block id: negative (accepted by copy_blocks)": ((1, 2, 3), True),
    "task13: block id: 1024 and past (copy_blocks flags destinations in 1024 entries)": ((1, 2, 3), False),
    "task13: free blocks on the destination: one fewer (capacity not checked)": ((1, 2), True),
    "task13: group: a chain of three (one pass over the list)": ((1, 2, 3), True),
    "task14: partitions past a sequence's end (they run and write their temporaries)": ((1, 2, 3), True),
    "task11: hash_full_blocks: whole blocks plus a partial one (the partial one hashed)": ((1, 2, 3), True),
    "task11: hash_fn: one that collides (the parent hash not verified)": ((1, 2, 3), True),
    "task11: room at an allocate: one block short (idle hits not counted)": ((1, 2), True),
}


@pytest.fixture(scope="module")
def server():
    found = CheckServer()
    yield found
    found.close()


def _submission(tmp_path: Path, m: Mutant) -> Path:
    text = apply((ROOT / "solutions" / m.file).read_text(), m.old, m.new, f"{m.task}: {m.domain_class}")
    (tmp_path / m.file).write_text(text)
    return tmp_path


def _tasks_of(m: Mutant) -> list[str]:
    served = "memory_manager.py" if m.file == C else m.file
    return [row.id for row in manifest.TABLE if served in row.files]


def _lost(rows, hidden_only: bool = False) -> set[str]:
    """The tasks with a scored check failed among graded rows (task, name, hidden, passed, message)."""
    return {task for task, name, hidden, passed, _ in rows
            if not passed and not manifest.task(task).is_feedback(name) and (hidden or not hidden_only)}


def _check(server, m: Mutant, folder: Path, seeds, every_task_each_seed: bool) -> None:
    """Under each seed, `m.task` is lost to the hidden checks alone; under the first (or every
    one), exactly `m.task` of the tasks its file serves is lost, to the hidden checks alone and to
    the public and hidden ones together (one grading of them all: the hidden verdicts are read
    off it too)."""
    tasks = _tasks_of(m)
    for n, seed in enumerate(seeds):
        if n == 0 or every_task_each_seed:
            rows = server.checks(folder, tasks, hidden_seed=seed)
            alone, whole = _lost(rows, hidden_only=True), _lost(rows)
            assert alone == {m.task}, f"hidden checks alone, seed {seed}: lost {sorted(alone)}"
            assert whole == {m.task}, f"public and hidden checks, seed {seed}: lost {sorted(whole)}"
        else:
            alone = _lost(server.checks(folder, [m.task], hidden_seed=seed, public=False))
            assert m.task in alone, f"{m.task} kept by the hidden checks alone under seed {seed}"


@pytest.mark.parametrize("mutant", MUTANTS, ids=IDS)
def test_a_mutant_loses_exactly_its_task_in_every_grading(mutant, server, tmp_path):
    """Its task under seeds 1-3 with the hidden checks alone; exactly its task (of those its
    file serves), hidden alone and public with hidden, under the first."""
    _check(server, mutant, _submission(tmp_path, mutant), SEEDS, every_task_each_seed=False)


MORE_SEEDS = int(os.environ.get("PAGEDLAB_DOMAIN_SEEDS", "0"))  # e.g. 10: about 700 CPU-s


@pytest.mark.slow
@pytest.mark.skipif(not MORE_SEEDS, reason="a sweep on request (PAGEDLAB_DOMAIN_SEEDS=10: ten more seeds, "
                                           "about 700 CPU-s, too much for every CI run)")
@pytest.mark.parametrize("mutant", MUTANTS, ids=IDS)
def test_a_mutant_loses_exactly_its_task_under_more_seeds(mutant, server, tmp_path):
    """Exactly its task, hidden alone and with the public checks, under every one of more seeds."""
    seeds = tuple(range(4, 4 + MORE_SEEDS))
    _check(server, mutant, _submission(tmp_path, mutant), seeds, every_task_each_seed=True)


def test_the_battery_has_every_kind_and_each_mutant_won_before():
    """Every mutant kept its task under some seed before the domain tables (BEFORE), a public-only
    one was caught by a public check then, and every kind of mutant and student file is here."""
    assert len({(m.task, m.domain_class) for m in MUTANTS}) == len(MUTANTS)
    assert set(BEFORE) == set(IDS) and all(kept for kept, _ in BEFORE.values())
    assert all(BEFORE[i][1] for m, i in zip(MUTANTS, IDS, strict=True) if m.kind == "public only")
    assert {m.kind for m in MUTANTS} == {"bug", "overfit", "public only"}
    assert {m.file for m in MUTANTS} >= {MM, C, CU, V2, BUDDY, SWAP, PREFIX}
