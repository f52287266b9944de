"""A mutation battery over the task domains (pagedlab/drivers/README.md, "Domains").

Each mutant is a student-like bug that is wrong on one class of its task's domain only (a block
size that is not a power of two, a sequence past 64 blocks, a padding slot other than -1, ...).
Graded with the hidden checks, it must lose its task under every hidden seed, because every
grading draws every class; and it must keep the tasks it does not touch. A submission right on
part of the domain therefore gets one score however often it is regraded.

The fast tests drive the checks in this process (one module load per mutant and check, no child
processes), the hidden checks first under each seed and the public ones (seed-independent) once,
stopping at the first check lost; the slow one grades through `pagedlab grade` as the autograder does.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from pagedlab.drivers import record
from pagedlab.grader import judge, registry
from pagedlab.grader.trusted.expectations import expected_stream

ROOT = Path(__file__).resolve().parent.parent
HIDDEN = ROOT / "grading" / "hidden"
sys.path.insert(0, str(ROOT / "tests"))
from mutation import apply  # noqa: E402


@dataclass(frozen=True)
class Mutant:
    task: str
    domain_class: str  # the class of the task's domain the bug is wrong on
    old: str
    new: str
    # Tasks whose checks run the mutated function and must not lose (slot_mapping's block size 1
    # under gather_kv, fork_sequence under Task 5's session); a task that never calls it cannot.
    spares: tuple[str, ...] = ()
    file: str = "paged_attention.py"


SLOT_RETURN = "    return blocks * block_size + positions % block_size\n"
GATHER_SLOTS = "    slots = slot_mapping(block_table, positions, block_size)\n"

MUTANTS = [
    Mutant("task6", "block sizes that are not powers of two", SLOT_RETURN,
           "    shift = block_size.bit_length() - 1  # block sizes are powers of two (they are not always)\n"
           "    return (blocks << shift) + (positions & (block_size - 1))\n"),
    Mutant("task6", "slots past 2**31 from an int32 table",
           "    blocks = block_table.to(torch.int64)[positions // block_size]\n"
           "    return blocks * block_size + positions % block_size\n",
           "    blocks = block_table[positions // block_size]\n"
           "    return (blocks * block_size + positions % block_size).to(torch.int64)\n"),
    Mutant("task7", "padding slots other than -1", "    keep = slots >= 0\n", "    keep = slots != -1\n"),
    Mutant("task7", "the cache's last slot",
           "    keep = slots >= 0\n", "    keep = (slots >= 0) & (slots < k_slots.shape[0] - 1)\n"),
    Mutant("task8", "lengths that fill their last block (reads the -1 entry after it)",
           "    positions = torch.arange(seq_len, device=k_cache.device)\n" + GATHER_SLOTS
           + "    k = k_cache.view(-1, *k_cache.shape[2:])[slots]\n"
             "    v = v_cache.view(-1, *v_cache.shape[2:])[slots]\n    return k, v\n",
           "    ids = block_table[:seq_len // block_size + 1].long()  # one entry too many when full\n"
           "    return k_cache[ids].flatten(0, 1)[:seq_len], v_cache[ids].flatten(0, 1)[:seq_len]\n"),
    Mutant("task8", "sequences longer than 64 blocks", GATHER_SLOTS,
           "    table = torch.full((64,), -1, dtype=torch.int64)  # room for 64 blocks\n"
           "    table[:min(64, len(block_table))] = block_table[:64]\n"
           "    slots = slot_mapping(table, positions, block_size)\n"),
    Mutant("task8", "block sizes that are not powers of two", GATHER_SLOTS,
           "    shift = block_size.bit_length() - 1\n"
           "    slots = block_table.long()[positions >> shift] * block_size + (positions & (block_size - 1))\n"),
    Mutant("task9", "logits large enough to overflow exp", "        probs = torch.softmax(logits, dim=-1)\n",
           "        e = logits.exp()  # no max subtracted\n        probs = e / e.sum(-1, keepdim=True)\n"),
    Mutant("task9", "grouped-query ratios above 1 with several kv heads",
           "        q_groups = q[s].reshape(num_kv_heads, group, head_size)\n",
           "        q_groups = q[s].reshape(group, num_kv_heads, head_size).transpose(0, 1)  # h % num_kv_heads\n"),
]
MM, BUDDY = "memory_manager.py", "buddy.py"
MUTANTS += [
    Mutant("task1", "pools that are a multiple of 64 plus a remainder",
           "    engine.total_local_blocks = pool_size // BLOCK_SIZE\n",
           "    engine.total_local_blocks = (pool_size + BLOCK_SIZE - 1) // BLOCK_SIZE\n", file=MM),
    Mutant("task1", "a pool of exactly one block", "    if not pool_addr or pool_size < BLOCK_SIZE:\n",
           "    if not pool_addr or pool_size <= BLOCK_SIZE:\n", file=MM),
    Mutant("task2", "the 4096-token maximum", "    if needed > MAX_LOGICAL_BLOCKS or needed > engine.free_local_blocks:\n",
           "    if needed >= MAX_LOGICAL_BLOCKS or needed > engine.free_local_blocks:\n", file=MM),
    Mutant("task2", "negative lengths", "    if initial_kv_len <= 0:\n        return None\n",
           "    if initial_kv_len == 0:\n        return None\n", file=MM),
    Mutant("task4", "appends that cross into the next L2 table",
           "    l1, l2 = divmod(logical, L2_PT_SIZE)\n\n", "    l1, l2 = 0, logical % L2_PT_SIZE\n\n", file=MM),
    Mutant("task4", "int32 extremes", "    if engine is None or not is_c_int(kv_data):\n        return -1\n    seq = find",
           "    if engine is None or not -2**31 < kv_data < 2**31:\n        return -1\n    seq = find", file=MM),
    Mutant("task12", "a request for the whole memory", "        while k <= self.max_order and not self.free_lists[k]:\n",
           "        while k < self.max_order and not self.free_lists[k]:\n", file=BUDDY),
    Mutant("task11", "prompts of whole blocks (the last full block is cached too)",
           "    for start in range(0, len(token_ids) - block_size + 1, block_size):\n",
           "    for start in range(0, len(token_ids) - block_size, block_size):\n", file="prefix_cache.py"),
    Mutant("task13", "an id the swap space already uses",
           "    if any(s.seq_id in taken_ids for s in group):\n        return None\n", "", file="swap.py"),
]
SLOT_START = "    positions = positions.to(torch.int64)\n"
GATHER_START = "    positions = torch.arange(seq_len, device=k_cache.device)\n"
MUTANTS += [
    Mutant("task6", "block size 1", SLOT_START,
           "    if block_size == 1:  # one token per block: the slot is the block id\n"
           "        return block_table[positions]\n" + SLOT_START, spares=("task8",)),
    Mutant("task6", "int64 block tables", "    blocks = block_table.to(torch.int64)[positions // block_size]\n",
           "    blocks = block_table.view(torch.int32).to(torch.int64)[positions // block_size]  # tables are int32\n"),
    Mutant("task8", "block size 1", GATHER_START,
           "    if block_size == 1:  # one token per block: the first seq_len blocks are the tokens\n"
           "        ids = block_table[:seq_len].long()\n"
           "        return k_cache[ids], v_cache[ids]\n" + GATHER_START),
    Mutant("task8", "int64 block tables", GATHER_SLOTS,
           "    slots = slot_mapping(block_table.view(torch.int32), positions, block_size)  # tables are int32\n"),
]
FORK_SKIP = "        if not parent_l2:\n            continue\n"
DESTROY_LOOP = ("    for node in list_for_each(engine.active_seqs):\n"
                "        destroy_sequence(engine, container_of(node, Sequence, \"node\"))\n")
MUTANTS += [  # Tasks 3 and 5: fork_sequence is also called by Task 5's whole-session check
    Mutant("task3", "parents with NULL L1 entries before the first mapped one", FORK_SKIP,
           "        if not parent_l2:\n            break  # the mapped L2 tables come first\n", spares=("task5",), file=MM),
    Mutant("task3", "parents of several L2 tables",
           "    for l1 in range(L1_PT_SIZE):\n        parent_l2 = parent.block_table[l1]\n" + FORK_SKIP
           + "        child_l2 = new_l2_table()\n",
           "    child_l2 = new_l2_table()  # one L2 table holds 16 blocks\n"
           "    for l1 in range(L1_PT_SIZE):\n        parent_l2 = parent.block_table[l1]\n" + FORK_SKIP,
           spares=("task5",), file=MM),
    Mutant("task3", "a new id already in use",
           "    if parent is None or find_sequence(engine, new_seq_id) is not None:\n        return None\n",
           "    if parent is None:\n        return None\n", spares=("task5",), file=MM),
    Mutant("task3", "an unknown parent",
           "    if parent is None or find_sequence(engine, new_seq_id) is not None:\n        return None\n",
           "    if find_sequence(engine, new_seq_id) is not None:\n        return None\n", spares=("task5",), file=MM),
    Mutant("task4", "a last block shared with a fork (copy-on-write)",
           "        engine.ref_count[shared] -= 1  # still >= 1: the other owners keep it\n", "", file=MM),
    Mutant("task4", "a full pool when the last block is shared",
           "    if (new_page or copy_on_write) and engine.free_local_blocks == 0:\n",
           "    if new_page and engine.free_local_blocks == 0:\n", file=MM),
    Mutant("task5", "an engine with no sequence", DESTROY_LOOP,
           "    if list_empty(engine.active_seqs):\n        return 0  # nothing to tear down\n" + DESTROY_LOOP,
           file=MM),
    Mutant("task5", "sequences with NULL L1 entries", DESTROY_LOOP,
           "    for node in list_for_each(engine.active_seqs):  # blocks need no dropping: the engine goes too\n"
           "        seq = container_of(node, Sequence, \"node\")\n"
           "        for l1 in range(L1_PT_SIZE):\n"
           "            if not seq.block_table[l1]:\n"
           "                break  # the mapped L2 tables come first\n"
           "            cmem.free(seq.block_table[l1])\n"
           "        cmem.free(seq.block_table)\n"
           "        cmem.free(seq)\n", file=MM),
]
CU = "paged_attention.cu"
LOGITS_LOOP = """  for (int t = tid; t < seq_len; t += NUM_THREADS) {
    const int block = block_table[t / block_size];
    const float* k = k_cache + block * block_stride + (t % block_size) * token_stride
                     + kv_head * head_size;
    float dot = 0.f;
    for (int d = 0; d < head_size; ++d) {
      dot += q_shared[d] * k[d];
    }
    logits[t] = dot * scale;
    thread_max = fmaxf(thread_max, logits[t]);
  }
"""
MUTANTS += [
    Mutant("task10", "head sizes under a warp (8-24)", LOGITS_LOOP, """  // One warp per token, one lane per dimension: head sizes are at least a warp (not always).
  for (int t = warp; t < seq_len; t += NUM_WARPS) {
    const int block = block_table[t / block_size];
    const float* k = k_cache + block * block_stride + (t % block_size) * token_stride
                     + kv_head * head_size;
    float dot = q_shared[lane] * k[lane];
    for (int d = lane + WARP_SIZE; d < head_size; d += WARP_SIZE) {
      dot += q_shared[d] * k[d];
    }
    dot = warp_sum(dot) * scale;
    if (lane == 0) logits[t] = dot;
    thread_max = fmaxf(thread_max, dot);
  }
""", file=CU),
    Mutant("task10", "head sizes above the 128 threads",
           "  for (int d = tid; d < head_size; d += NUM_THREADS) {\n    float acc = 0.f;\n",
           "  if (tid < head_size) {  // one thread per dimension\n    const int d = tid;\n    float acc = 0.f;\n",
           file=CU),
    Mutant("task10", "sequences past 64 blocks", LOGITS_LOOP,
           "  __shared__ int table[64];  // the sequence's block ids: 64 blocks hold 512-2048 tokens\n"
           "  for (int i = tid; i < (seq_len + block_size - 1) / block_size && i < 64; i += NUM_THREADS) {\n"
           "    table[i] = block_table[i];\n  }\n  __syncthreads();\n"
           + LOGITS_LOOP.replace("block_table[t / block_size]", "table[t / block_size]"), file=CU),
]
IDS = [f"{m.task}: {m.domain_class}" for m in MUTANTS]


@cache
def _trusted(key: str, task: str, seed: int):
    c = registry.find(task, key)
    return expected_stream(c, seed) if c.expected else record.drive(c, "solutions", seed)


def _fails(c, impl: str, task: str, seed: int) -> bool:
    return not judge.judge(_trusted(c.key, task, seed), record.drive(c, impl, seed)).passed


def kept(impl: str, task: str, seeds) -> list[int]:
    """The hidden seeds under which `impl` keeps `task` (passes every check). A grading runs the
    public checks with seed 0 and the hidden ones with its own seed: a public check lost is lost
    in every grading, so the public checks run once, and only if some seed survived the hidden."""
    checks = registry.checks_of(task, hidden=None, hidden_from=HIDDEN)
    hidden = [c for c in checks if c.hidden]
    assert hidden, f"{task} has no hidden check"
    survivors = [s for s in seeds if not any(_fails(c, impl, task, s) for c in hidden)]
    if survivors and any(_fails(c, impl, task, 0) for c in checks if not c.hidden):
        return []
    return survivors


def lost(impl: str, task: str, seed: int) -> list[str]:
    """Every check of `task` (public and hidden, hidden seed `seed`) that `impl` fails."""
    return [c.name for c in registry.checks_of(task, hidden=None, hidden_from=HIDDEN)
            if _fails(c, impl, task, seed if c.hidden else 0)]


def _submission(tmp_path: Path, *mutants: Mutant) -> str:
    text = (ROOT / "solutions" / mutants[0].file).read_text()
    for m in mutants:
        text = apply(text, m.old, m.new, f"{m.task}: {m.domain_class}")
    (tmp_path / mutants[0].file).write_text(text)
    return str(tmp_path)


@pytest.mark.parametrize("mutant", MUTANTS, ids=IDS)
def test_a_bug_on_one_class_loses_its_task_in_every_grading(mutant, tmp_path):
    sub = _submission(tmp_path, mutant)
    survivors = kept(sub, mutant.task, (1, 2))  # two seeds per mutant; the partly right submission gets ten
    assert not survivors, f"{mutant.task} kept under hidden seeds {survivors}"
    for task in mutant.spares:
        assert not lost(sub, task, 1), f"the bug in {mutant.task} also cost {task}"


def test_the_battery_has_one_mutant_per_class():
    assert {"task3", "task5", "task6", "task7", "task8", "task9", "task10"} <= {m.task for m in MUTANTS}
    assert len({(m.task, m.domain_class) for m in MUTANTS}) == len(MUTANTS)


PARTIAL = [MUTANTS[0], MUTANTS[5]]  # shifts and masks (Task 6), a 64-block table (Task 8)


def test_a_partly_right_submission_passes_the_public_checks(tmp_path):
    """What makes the regrade test below meaningful: only hidden classes expose these bugs."""
    sub = _submission(tmp_path, *PARTIAL)
    for task in ("task6", "task8"):
        public = [c for c in registry.checks_of(task) if not c.hidden]
        assert all(judge.judge(_trusted(c.key, task, 0), record.drive(c, sub, 0)).passed for c in public)


def test_a_partly_right_submission_loses_the_same_tasks_under_ten_seeds(tmp_path):
    sub = _submission(tmp_path, *PARTIAL)
    survivors = {task: kept(sub, task, range(10)) for task in ("task6", "task8")}
    assert survivors == {"task6": [], "task8": []}, f"hidden seeds under which the task was kept: {survivors}"


@pytest.mark.slow
def test_graded_by_the_autograder_it_loses_the_task(tmp_path):
    """The same through `pagedlab grade` (child process, sandbox, the hidden seed passed down):
    Task 8, whose 64-block class five gradings in six missed before. One grading: the test above
    covers ten seeds and both tasks in-process, the same drivers and judge (each grading here
    starts torch twice, in the student's child and the reference's)."""
    from pagedlab.grader.cli import grade

    sub = _submission(tmp_path, *PARTIAL)
    graded = grade(sub, tasks=["task8"], hidden_seed=1000, echo=lambda *a: None)
    assert graded["score"] == 0, graded  # the public checks pass (above): the hidden ones took it


V2_FILE = "paged_attention_v2.cu"
V2_BUGS = {  # bug: (old, new, the sanitizer's report the student sees)
    "no barrier before reusing partial[]": (
        "  x = warp_max(lane < NUM_WARPS ? partial[lane] : LOWEST_FLOAT);\n  __syncthreads();\n",
        "  x = warp_max(lane < NUM_WARPS ? partial[lane] : LOWEST_FLOAT);\n", "RaceError"),
    "partition end not clamped to the sequence": (
        "  end = min(start + partition_size, seq_len);", "  end = start + partition_size;", "OutOfBoundsError"),
}


@pytest.mark.slow
@pytest.mark.parametrize("bug", sorted(V2_BUGS))
def test_task14_checks_run_the_sanitizer(bug, tmp_path):
    """As Task 10's do: the report names the hazard and its line, not only NaN in the output."""
    old, new, report = V2_BUGS[bug]
    text = apply((ROOT / "solutions" / V2_FILE).read_text(), old, new, bug)
    (tmp_path / V2_FILE).write_text(text)
    # The first public check that fails, judged in this process (a grade would run all of Task 14).
    verdicts = (judge.judge(_trusted(c.key, "task14", 0), record.drive(c, str(tmp_path)))
                for c in registry.checks_of("task14"))
    message = next((v.message for v in verdicts if not v.passed), None)
    assert message and report in message and f"{V2_FILE}:" in message, message
