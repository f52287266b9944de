"""Planted bugs in copies of solutions/memory_manager.py: the HW3 graded checks must catch each.

A mutant is a text substitution on the solution, so the suite follows the solution as it
changes; `apply` refuses a substitution that no longer matches exactly once. The tests grade
each mutant through tests/forked_checks.py, where a mutant that crashes its process (a segfault
through ctypes) fails the check it crashed in.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

# tests/ is on sys.path under pytest
from mutation import apply

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "memory_manager.py"

# (name, what it breaks, old text, new text)
MUTANTS: list[tuple[str, str, str, str]] = [
    ("break_at_null_l1", "free stops at the first NULL L1 slot",
     "        if not l2_table:\n            continue\n        for l2 in range(L2_PT_SIZE):\n            if l2_table[l2] != -1:",
     "        if not l2_table:\n            break\n        for l2 in range(L2_PT_SIZE):\n            if l2_table[l2] != -1:"),
    ("last_fit", "allocates the highest free block",
     "    for block in range(start, engine.total_local_blocks):",
     "    for block in reversed(range(engine.total_local_blocks)):"),
    ("l2_before_oom_check", "append allocates the L2 table before probing for a free block",
     "    l2_table = seq.block_table[l1]\n    block = l2_table[l2] if l2_table else -1\n",
     "    if not seq.block_table[l1]:\n        seq.block_table[l1] = new_l2_table()\n"
     "    l2_table = seq.block_table[l1]\n    block = l2_table[l2] if l2_table else -1\n"),
    ("skip_cow_copy", "CoW remaps without copying the block",
     "        ctypes.memmove(block_address(engine, block), block_address(engine, shared), BLOCK_SIZE)\n",
     ""),
    ("cow_copies_60_bytes", "CoW copies 60 bytes instead of 64",
     "block_address(engine, shared), BLOCK_SIZE)", "block_address(engine, shared), BLOCK_SIZE - 4)"),
    ("cow_keeps_old_ref", "CoW forgets to decrement the shared block's ref",
     "        engine.ref_count[shared] -= 1  # still >= 1: the other owners keep it\n", ""),
    ("cow_on_exclusive_block", "CoW even when the block has ref 1",
     "engine.ref_count[block] > 1", "engine.ref_count[block] >= 1"),
    ("oom_ignores_cow", "the OOM probe only considers new pages",
     "if (new_page or copy_on_write) and engine.free_local_blocks == 0:",
     "if new_page and engine.free_local_blocks == 0:"),
    ("create_no_256_limit", "create forgets the 256-block limit",
     "if needed > MAX_LOGICAL_BLOCKS or needed > engine.free_local_blocks:",
     "if needed > engine.free_local_blocks:"),
    ("append_no_256_limit", "append forgets the 256-block limit",
     "    if logical >= MAX_LOGICAL_BLOCKS:\n        return -1\n", ""),
    ("create_oom_off_by_one", "create refuses a prefill that exactly fits",
     "needed > engine.free_local_blocks:", "needed >= engine.free_local_blocks:"),
    ("insert_at_head", "create inserts at the head of the list",
     "    list_add_tail(seq.node, engine.active_seqs)\n",
     "    list_add_tail(seq.node, engine.active_seqs.next.contents)\n"),
    ("duplicate_id_allowed", "create accepts an id that is already active",
     "    if find_sequence(engine, seq_id) is not None:\n        return None\n    needed", "    needed"),
    ("memset_in_create", "create clears each new block in the pool",
     "        seq.block_table[l1][l2] = block\n",
     "        seq.block_table[l1][l2] = block\n"
     "        ctypes.memset(block_address(engine, block), 0, BLOCK_SIZE)\n"),
    ("create_floor_plus_one", "create computes blocks as len // 16 + 1",
     "(initial_kv_len + KV_PER_BLOCK - 1) // KV_PER_BLOCK", "initial_kv_len // KV_PER_BLOCK + 1"),
    ("l2_zero_filled", "new L2 tables hold 0 instead of -1",
     "        table[i] = -1\n", "        table[i] = 0\n"),
    ("free_count_every_drop", "free count +1 on every ref decrement",
     "    if engine.ref_count[block] == 0:\n        engine.free_local_blocks += 1\n",
     "    engine.free_local_blocks += 1\n"),
    ("no_ref_decrement", "free forgets the ref decrement",
     "    engine.ref_count[block] -= 1\n    if engine.ref_count[block] == 0:",
     "    if engine.ref_count[block] == 1:"),
    ("free_keeps_l2", "free leaks the L2 tables",
     "        cmem.free(l2_table)\n    cmem.free(l1_table)\n", "    cmem.free(l1_table)\n"),
    ("free_no_unlink", "free does not unlink the sequence",
     "    list_del(seq.node)\n    l1_table", "    l1_table"),
    ("fork_no_ref_increment", "fork forgets ref +1",
     "                engine.ref_count[block] += 1\n", ""),
    ("fork_shares_l2", "fork points the child at the parent's L2 tables",
     "        child.block_table[l1] = child_l2\n",
     "        cmem.free(child_l2)\n        child.block_table[l1] = parent_l2\n"),
    ("fork_not_listed", "fork does not put the child on the list",
     "    list_add_tail(child.node, engine.active_seqs)\n    return child", "    return child"),
    ("fork_allows_used_id", "fork accepts an id that is already active",
     "    if parent is None or find_sequence(engine, new_seq_id) is not None:",
     "    if parent is None:"),
    ("translation_bytes_not_words", "append writes at offset bytes instead of offset * 4",
     "+ offset * 4)", "+ offset)"),
    ("append_keeps_kv_count", "append does not advance kv_count",
     "    seq.kv_count += 1\n", ""),
    ("init_no_list", "llm_init leaves active_seqs uninitialised",
     "    list_init(engine.active_seqs)\n    return engine", "    return engine"),
    ("init_ceil_blocks", "llm_init rounds the block count up",
     "engine.total_local_blocks = pool_size // BLOCK_SIZE", "engine.total_local_blocks = -(-pool_size // BLOCK_SIZE)"),
    ("init_accepts_tiny_pool", "llm_init accepts a pool below one block",
     "if not pool_addr or pool_size < BLOCK_SIZE:", "if not pool_addr or pool_size < 0:"),
    ("init_malloc_refs", "ref_count from malloc (garbage) instead of calloc",
     "cmem.calloc_array(engine.total_local_blocks, ctypes.c_int)",
     "cmem.malloc_array(engine.total_local_blocks, ctypes.c_int)"),
    ("destroy_leaks_ref_array", "llm_destroy forgets the ref array",
     "    cmem.free(engine.ref_count)\n    cmem.free(engine)\n", "    cmem.free(engine)\n"),
    ("wild_write_segfaults", "append writes through a pointer near NULL (the interpreter dies)",
     "    record = ctypes.c_int32.from_address(block_address(engine, block) + offset * 4)\n",
     "    record = ctypes.c_int32.from_address(8 + offset * 4)\n"),
    ("create_trusts_its_arguments", "create_sequence skips the C-int validation",
     "    if engine is None or not is_c_int(seq_id) or not is_c_int(initial_kv_len):\n        return None\n    if initial_kv_len <= 0:",
     "    if engine is None:\n        return None\n    if initial_kv_len <= 0:"),
    ("append_trusts_its_record", "append_kv writes any Python int (2**40 wraps around)",
     "    if engine is None or not is_c_int(kv_data):\n        return -1",
     "    if engine is None:\n        return -1"),
    ("destroy_leaks_sequences", "llm_destroy frees only the engine",
     "    for node in list_for_each(engine.active_seqs):\n        destroy_sequence(engine, container_of(node, Sequence, \"node\"))\n",
     ""),
]


def write_mutant(name: str, folder: Path) -> Path:
    spec = {m[0]: m for m in MUTANTS}[name]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "memory_manager.py"
    path.write_text(apply(SOLUTION.read_text(), spec[2], spec[3], name))
    return path


# ---- which tasks a mutated function can cost (read off the solution's fences and calls)

def fenced_function_tasks(path: Path) -> dict[str, str]:
    """Top-level function -> the task of the SOLUTION fence inside it."""
    tree = ast.parse(path.read_text())
    lines = path.read_text().splitlines()
    out = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            body = "\n".join(lines[node.lineno - 1:node.end_lineno])
            found = re.search(r"BEGIN SOLUTION Task (\d+)", body)
            if found:
                out[node.name] = f"task{found.group(1)}"
    return out


def tasks_reaching(path: Path, function: str) -> set[str]:
    """Tasks whose graded (public) functions call `function`, directly or through others."""
    tree = ast.parse(path.read_text())
    calls = {node.name: {c.func.id for c in ast.walk(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
             for node in tree.body if isinstance(node, ast.FunctionDef)}
    fenced = fenced_function_tasks(path)
    reaching = set()
    for public in (name for name in calls if not name.startswith("_")):
        seen, todo = set(), [public]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            todo += [c for c in calls.get(name, ()) if c in calls]
        if function in seen and public in fenced:
            reaching.add(fenced[public])
    return reaching


def function_at(path: Path, old: str) -> str:
    text = path.read_text()
    line = text[:text.index(old)].count("\n") + 1
    tree = ast.parse(text)
    return next(n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.lineno <= line <= n.end_lineno)
