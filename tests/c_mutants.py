"""Planted bugs in copies of solutions/llm_memory.c: the HW3 graded checks must catch each.

The C twin of engine_mutants.py: the same bugs where C has them (first-fit broken, no CoW copy,
leaked L2 tables, memset in create, the 256 limit missing, head insertion, ...) plus the ones only
C can have (double free, use after free, a segfault, an endless loop). Each row says which task's
checks must fail, which check, and what the message must contain: for heap errors, leaks and
crashes that is the C file and line (`llm_memory.c:`), for logic bugs the broken rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mutation import apply

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "llm_memory.c"
C_LINE = "llm_memory.c:"


@dataclass(frozen=True)
class Mutant:
    name: str
    what: str
    old: str
    new: str
    task: str
    must_fail: str            # part of the name of a check that must fail
    markers: tuple = ()       # one of these must be in that check's message
    at: tuple = ()            # if set: the message must name the C line ending one of these texts

    def lines(self, text: str) -> list[int]:
        """1-based lines (of the mutated `text`) where each of the `at` texts ends."""
        return [text[:text.index(a) + len(a)].count("\n") + 1 for a in self.at]


MUTANTS = [
    Mutant("break_at_null_l1", "free stops at the first NULL L1 slot",
           "        if (l2 == NULL)\n            continue;\n        for (int j = 0; j < L2_PT_SIZE; j++)\n            if (l2[j] != UNMAPPED)",
           "        if (l2 == NULL)\n            break;\n        for (int j = 0; j < L2_PT_SIZE; j++)\n            if (l2[j] != UNMAPPED)",
           "task2", "visits all 16 L1 slots", ("never break at a NULL",)),
    Mutant("last_fit", "take_block scans from the top: the highest free block",
           "    for (int block = start; block < engine->total_local_blocks; block++) {",
           "    (void)start;\n    for (int block = engine->total_local_blocks - 1; block >= 0; block--) {",
           "task2", "first-fit", ("first-fit",)),
    Mutant("l2_before_oom_check", "append allocates the L2 table before probing for a free block",
           "    int *l2 = seq->block_table[i];\n    int block = l2 ? l2[j] : UNMAPPED;\n",
           "    if (seq->block_table[i] == NULL)\n        seq->block_table[i] = new_l2_table();\n"
           "    int *l2 = seq->block_table[i];\n    int block = l2 ? l2[j] : UNMAPPED;\n",
           "task4", "L2 table itself is missing", ("L2",)),
    Mutant("skip_cow_copy", "CoW remaps without copying the block",
           "        memcpy(block_address(engine, block), block_address(engine, shared), BLOCK_SIZE);\n", "",
           "task4", "copy-on-write", ("memcpy exactly 64 bytes",)),
    Mutant("cow_copies_60_bytes", "CoW copies 60 bytes instead of 64",
           "block_address(engine, shared), BLOCK_SIZE);", "block_address(engine, shared), BLOCK_SIZE - 4);",
           "task4", "copy-on-write", ("memcpy exactly 64 bytes",)),
    Mutant("cow_keeps_old_ref", "CoW forgets to decrement the shared block's ref",
           "        engine->ref_count[shared]--; /* still >= 1: the other owners keep it */\n", "",
           "task4", "copy-on-write", ("old ref −1",)),
    Mutant("oom_ignores_cow", "the OOM probe only considers new pages",
           "if ((new_page || copy_on_write) && engine->free_local_blocks == 0)",
           "if (new_page && engine->free_local_blocks == 0)",
           "task4", "OOM for copy-on-write", ("−1",)),
    Mutant("create_no_256_limit", "create forgets the 256-block limit",
           "if (needed > MAX_LOGICAL_BLOCKS || needed > engine->free_local_blocks)",
           "if (needed > engine->free_local_blocks)",
           "task2", "more than 256 blocks", ("256",)),
    Mutant("append_no_256_limit", "append forgets the 256-block limit (reads L1[16], past the table)",
           "    if (logical >= MAX_LOGICAL_BLOCKS)\n        return -1;\n", "",
           "task4", "257th logical block", ("logical >= 256", C_LINE)),
    Mutant("insert_at_head", "create inserts at the head of the list",
           "    list_add_tail(&seq->node, &engine->active_seqs);\n",
           "    list_add_tail(&seq->node, engine->active_seqs.next);\n",
           "task2", "tail of active_seqs", ("tail",)),
    Mutant("duplicate_id_allowed", "create accepts an id that is already active",
           "    if (initial_kv_len <= 0 || find_sequence(engine, seq_id) != NULL)",
           "    if (initial_kv_len <= 0)",
           "task2", "already active", ("already active",)),
    Mutant("memset_in_create", "create clears each new block in the pool",
           "        l1[i][j] = block;\n",
           "        l1[i][j] = block;\n        memset(block_address(engine, block), 0, BLOCK_SIZE);\n",
           "task2", "never writes the pool", ("memset",)),
    Mutant("free_keeps_l2", "free leaks the L2 tables",
           "        free(l2);\n", "",
           "task2", "releases the blocks", ("in new_l2_table",), at=("int *table = malloc(L2_PT_SIZE",)),
    Mutant("fork_no_ref_increment", "fork forgets ref +1",
           "                engine->ref_count[from[j]]++;\n", "",
           "task3", "shares every block", ("ref +1",)),
    Mutant("fork_shares_l2", "fork points the child at the parent's L2 tables",
           "        l1[i] = to;\n", "        free(to);\n        l1[i] = from;\n",
           "task3", "own L1 and L2", ("parent's L2",)),
    Mutant("init_malloc_refs", "ref_count from malloc (garbage) instead of calloc",
           "calloc((size_t)engine->total_local_blocks, sizeof *engine->ref_count)",
           "malloc((size_t)engine->total_local_blocks * sizeof *engine->ref_count)",
           "task1", "zeroed heap array", ("calloc",)),
    Mutant("init_no_list", "llm_init leaves active_seqs uninitialised",
           "    list_init(&engine->active_seqs);\n    return engine;", "    return engine;",
           "task1", "empty circular list", ("uninitialised",)),
    Mutant("destroy_leaks_ref_array", "llm_destroy forgets the ref array",
           "    free(engine->ref_count);\n    free(engine);\n", "    free(engine);\n",
           "task5", "whole session", ("in llm_init",), at=("engine->ref_count = calloc(",)),
    Mutant("translation_bytes_not_words", "append writes at offset bytes instead of offset ints",
           "    block_address(engine, block)[offset] = kv_data;\n",
           "    *(int *)((char *)block_address(engine, block) + offset) = kv_data;\n",
           "task4", "613", ("offset*4",)),
    # Bugs only C has: the message must carry the C line.
    Mutant("double_free", "destroy_sequence frees the L1 table twice",
           "    free(seq->block_table);\n    free(seq);\n",
           "    free(seq->block_table);\n    free(seq->block_table);\n    free(seq);\n",
           "task2", "releases the blocks", ("double free",), at=("    free(seq->block_table);\n    free(seq->block_table);",)),
    Mutant("use_after_free", "destroy_sequence frees the Sequence before reading its L1 table",
           "    list_del(&seq->node);\n    for (int i = 0; i < L1_PT_SIZE; i++) {",
           "    list_del(&seq->node);\n    free(seq);\n    for (int i = 0; i < L1_PT_SIZE; i++) {",
           "task2", "releases the blocks", ("freed memory",), at=("int *l2 = seq->block_table[i];",)),
    Mutant("l2_init_off_by_one", "new_l2_table writes one int past the end of the table",
           "    for (int i = 0; i < L2_PT_SIZE; i++)\n        table[i] = UNMAPPED;",
           "    for (int i = 0; i <= L2_PT_SIZE; i++)\n        table[i] = UNMAPPED;",
           "task2", "releases the blocks", ("heap buffer overflow",),
           at=("int *table = malloc(L2_PT_SIZE",)),
    Mutant("wild_write_segfaults", "append writes through a pointer near NULL",
           "    block_address(engine, block)[offset] = kv_data;\n",
           "    ((int *)8)[offset] = kv_data;\n",
           "task4", "613", ("SIGSEGV",), at=("((int *)8)[offset] = kv_data;",)),
    Mutant("first_fit_never_advances", "take_block forgets block++ (loops forever on a taken block)",
           "    for (int block = start; block < engine->total_local_blocks; block++) {",
           "    for (int block = start; block < engine->total_local_blocks; block += 0) {",
           "task4", "new page", ("did not return",), at=("if (engine->ref_count[block] == 0) {", "block < engine->total_local_blocks; block += 0")),
]


def write_mutant(mutant: Mutant, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "llm_memory.c"
    path.write_text(apply(SOLUTION.read_text(), mutant.old, mutant.new, mutant.name))
    return path
