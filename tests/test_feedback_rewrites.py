"""Feedback that never misleads: each message here was measured misleading on a planted bug (a
label that read like a failure, a hint for another bug, a rule the step never broke, a reason
left out). Each test plants the bug in a copy of solutions/, grades it with the real drivers and
judge, and asserts that the text names the real bug and that the misleading text is gone."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

from pagedlab.drivers import record
from pagedlab.grader import judge, registry
from pagedlab.spec import manifest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "submissions"))
import broken  # noqa: E402  (copies solutions/ for planted-bug submissions)
from trusted_records import trusted_record  # noqa: E402


def _planted(tmp_path, filename, *edits, once=True):
    broken.copy_solutions(tmp_path)
    for old, new in edits:
        broken.mutate(tmp_path, filename, old, new, once=once)
    return tmp_path


def _message(task, name, impl, seed=0):
    """The judge's explanation of check `name` (a prefix) of `task` for the folder `impl`."""
    c = next(c for c in registry.checks_of(task) if c.name.startswith(name))
    verdict = judge.judge(trusted_record(c, seed), record.drive(c, str(impl), seed), rule=c.rule)
    assert not verdict.passed, f"{task}: the planted bug passed {c.name!r}"
    return verdict.message


# ---------------------------------------------------------------- Part A: labels and set-ups

# First-fit resumed after the sequence's previous block (9), so logical block 1 takes block 10.
NEXT_FIT = ("    if new_page:\n        block = take_block(engine)\n",
            "    if new_page:\n        pl1, pl2 = divmod(logical - 1, L2_PT_SIZE)\n"
            "        prev = seq.block_table[pl1][pl2] if logical else -1\n"
            "        block = take_block(engine, prev + 1)\n")


def test_a_first_fit_that_skips_low_blocks_names_the_block_it_chose(tmp_path):
    """Measured before: 'the check took a different path at: … maps logical block 1 to 0, outside
    the pool (your run recorded '… to 10, outside the pool')': neither block is outside the pool."""
    message = _message("task4", "appended records read back", _planted(tmp_path, "memory_manager.py", NEXT_FIT))
    assert "sequence 1, logical block 1 is block 10 in yours, block 0 in the reference" in message, message
    assert "first-fit takes the lowest block index with ref_count == 0" in message, message
    assert "outside the pool" not in message and "different path" not in message, message


def test_a_block_count_off_by_one_blames_the_set_up_not_the_rejected_call(tmp_path):
    """Measured before: 'create_sequence(len=81) with 5 free blocks: free_local_blocks changed …
    rule: Check before allocate … expected 5 yours 4': the call changed nothing; the set-up's
    create_sequence(80) had taken 6 blocks."""
    sub = _planted(tmp_path, "memory_manager.py", ("(initial_kv_len + KV_PER_BLOCK - 1) // KV_PER_BLOCK",
                                                   "initial_kv_len // KV_PER_BLOCK + 1"))
    message = _message("task2", "create_sequence checks free blocks before allocating", sub)
    first = message.splitlines()[0]
    assert first.startswith("the set-up already differed from the reference's"), message
    assert "ceil(len / 16) blocks" in message.split("rule:")[1].splitlines()[0], message
    assert "blocks mapped per sequence: expected {'1': 5}, yours {'1': 6}" in message, message
    assert "changed" not in first and "Check before allocate" not in message, message


def test_llm_init_accepting_a_null_pool_says_expected_none(tmp_path):
    """Measured before: 'llm_init with pool_addr 0 should return None … expected: True'."""
    sub = _planted(tmp_path, "memory_manager.py", ("    if not pool_addr or pool_size < BLOCK_SIZE:",
                                                   "    if pool_size < BLOCK_SIZE:"))
    message = _message("task1", "llm_init rejects a NULL pool", sub)
    assert "expected: None\n" in message and "yours:    <" in message, message
    assert "expected: True" not in message, message


# ---------------------------------------------------------------- hints only with their condition

BUDDY_NOT_ALLOCATED = ("            if buddy not in self.free_lists[order]:\n"
                       "                break  # the buddy is in use (whole or in part): no merge\n"
                       "            self.free_lists[order].remove(buddy)\n",
                       "            if buddy in self.allocated:\n                break\n"
                       "            self.free_lists[order].discard(buddy)\n")
BUDDY_PLUS = ("            buddy = offset ^ (1 << order)\n", "            buddy = offset + (1 << order)\n")


def test_buddy_hints_name_the_bug_the_free_list_shows(tmp_path):
    """Measured before: 'o + s finds the buddy of a lower half only' under code that already
    used XOR (its bug: a buddy that is not an allocated start taken as free)."""
    from pagedlab.drivers import buddy

    xor = _message("task12", "the buddy is found by XOR", _planted(tmp_path / "xor", "buddy.py", BUDDY_NOT_ALLOCATED))
    assert buddy._NOT_ALLOCATED_HINT in xor and "o + s" not in xor, xor
    plus = _message("task12", "the buddy is found by XOR", _planted(tmp_path / "plus", "buddy.py", BUDDY_PLUS))
    assert "o + s finds the buddy of a lower half only" in plus and buddy._NOT_ALLOCATED_HINT not in plus, plus


# Padding positions up to the block table's width join the softmax with a logit of 0.
PAD_MASKED_WITH_ZERO = (
    '        logits = torch.einsum("kgd,tkd->kgt", q_groups, k) * scale\n'
    '        probs = torch.softmax(logits, dim=-1)\n',
    '        logits = torch.einsum("kgd,tkd->kgt", q_groups, k) * scale\n'
    '        width = block_tables.shape[1] * k_cache.shape[1]\n'
    '        logits = torch.cat([logits, logits.new_zeros(logits.shape[:-1] + (width - logits.shape[-1],))], -1)\n'
    '        probs = torch.softmax(logits, dim=-1)[..., :k.shape[0]]\n')
WRONG_SCALE = ('        logits = torch.einsum("kgd,tkd->kgt", q_groups, k) * scale\n',
               '        logits = torch.einsum("kgd,tkd->kgt", q_groups, k) * scale * 1.5\n')


def test_task9_names_padding_for_a_zero_mask_and_says_nothing_for_a_wrong_scale(tmp_path):
    """Measured before: the one hint ('NaN means an unused cache slot was read; otherwise check
    the softmax scale…') never mentioned masking or padding when padding was masked with 0."""
    from pagedlab.drivers.paged_attention import PADDING_HINT

    padded = _message("task9", "grouped-query attention", _planted(tmp_path / "pad", "paged_attention.py",
                                                                    PAD_MASKED_WITH_ZERO))
    assert PADDING_HINT in padded and "NaN" not in padded, padded
    scaled = _message("task9", "grouped-query attention", _planted(tmp_path / "scale", "paged_attention.py",
                                                                    WRONG_SCALE))
    assert "hint:" not in scaled, scaled  # a hint names what differed, or says nothing


V2_DROPS_LAST_PARTITION = (
    "  const int num_partitions = (seq_len + partition_size - 1) / partition_size;\n  const long long first_slot",
    "  const int parts = (seq_len + partition_size - 1) / partition_size;\n"
    "  const int num_partitions = parts > 1 ? parts - 1 : parts;\n  const long long first_slot")
V2_NO_RESCALE = ("    const float w = expf(m[p] - global_max);", "    const float w = 1.f;")


def test_task14_hints_tell_a_dropped_partition_from_a_missing_rescale(tmp_path):
    """Measured before: one hint described rescaling for code that dropped a partition."""
    from pagedlab.drivers.paged_attention_v2_cu import DROPPED_HINT, RESCALE_HINT

    dropped = _message("task14", "partition edges", _planted(tmp_path / "drop", "paged_attention_v2.cu",
                                                             V2_DROPS_LAST_PARTITION))
    assert DROPPED_HINT in dropped and RESCALE_HINT not in dropped and "NaN" not in dropped, dropped
    unscaled = _message("task14", "partition edges", _planted(tmp_path / "rescale", "paged_attention_v2.cu",
                                                              V2_NO_RESCALE))
    assert RESCALE_HINT in unscaled and DROPPED_HINT not in unscaled, unscaled


def test_an_untouched_kernel_says_not_implemented_yet():
    """Measured before: 'never written (every element still holds the NaN…)' plus the NaN hint,
    where an untouched Python task says 'not implemented yet'."""
    for task, name, part in (("task10", "MHA", "Task 10: logits"), ("task14", "partition edges", "Task 14: this partition")):
        message = _message(task, name, ROOT / "exercises")
        assert message.startswith(f"not implemented yet: {part}") and "still the exercise's stub" in message, message
        assert "never written" not in message and "NaN" not in message, message


def test_a_hanging_kernel_carries_no_nan_hint(tmp_path, monkeypatch):
    """Measured before: the generic NaN hint under a timeout."""
    from pagedlab.drivers.paged_attention_cu import TIMEOUT_ENV

    monkeypatch.setenv(TIMEOUT_ENV, "2")
    message = _message("task10", "MHA", broken.make("kernel-hang", tmp_path))
    assert "KernelTimeout" in message or "timed out" in message, message
    assert "hint:" not in message and "NaN" not in message, message


def test_a_race_report_carries_no_nan_hint(tmp_path):
    """Measured before: the generic 'NaN: an element never written' hint under a race report."""
    text = (ROOT / "solutions" / "paged_attention.cu").read_text()
    barrier = "  // partial[] is reused for the sum: wait until every warp has read the max out of it.\n  __syncthreads();\n"
    sub = _planted(tmp_path, "paged_attention.cu", (barrier, ""))
    assert barrier in text
    message = _message("task10", "MHA", sub)
    assert "RaceError" in message and "__syncthreads()" in message, message
    assert "hint:" not in message and "never written" not in message, message


# ---------------------------------------------------------------- hidden checks: the reason and rule

TASK1_OVERFIT = ("    engine.total_local_blocks = pool_size // BLOCK_SIZE\n",
                 "    engine.total_local_blocks = pool_size // BLOCK_SIZE\n"
                 "    if pool_size not in (64, 1000, 4096, 6463, 2560, 512, 1024):\n"
                 "        engine.total_local_blocks = (pool_size + BLOCK_SIZE - 1) // BLOCK_SIZE\n")


def test_a_hidden_only_failure_says_what_differed_and_the_rule_without_the_values(tmp_path):
    """Measured before: 'hidden checks: 0 of 1 passed' and nothing else; after publication the
    details had no rule."""
    from pagedlab.grader import pipeline as runner
    from pagedlab.grader import report

    sub = _planted(tmp_path, "memory_manager.py", TASK1_OVERFIT)
    outcome = runner.run_task(manifest.task("task1"), str(sub), sub, hidden=True, hidden_seed=20261123,
                              hidden_from=ROOT / "grading" / "hidden")
    shown = report.task_output(outcome)
    assert "hidden checks: 0 of 1 passed" in shown, shown
    reason = shown.split("hidden checks: 0 of 1 passed")[1]
    assert re.search(r"hidden check 1: llm_init\(… bytes: [^\n]*\): total_local_blocks: yours is (larger|smaller) "
                     r"than the reference", reason), shown
    assert "rule:     notebook 02, Task 1 · llm_init: None if pool_addr is NULL or pool_size < BLOCK_SIZE; " \
           "otherwise total = free = pool_size // BLOCK_SIZE" in reason, shown
    assert not re.search(r"\d{3,}", reason.split("rule:")[0]), shown  # no scenario values before publication
    assert not re.search(r"^  ✗", shown, re.M), shown  # every public check passed
    published = report.hidden_output(outcome)
    assert "rule:     notebook 02, Task 1 · llm_init" in published and "expected:" in published, published
    entries = report.results_json([outcome], [], execution_time=1.0, output="")["tests"]
    visible = next(t for t in entries if t["number"] == "1")
    assert visible["visibility"] != "after_published" and "hidden check 1: llm_init(… bytes: " in visible["output"]


# ---------------------------------------------------------------- the sanitizer's barrier advice

_TREE = r"""
extern "C" __global__ void tree(const float* x, float* out) {
  __shared__ float buf[128];
  int tid = threadIdx.x;
  buf[tid] = x[tid];
  __syncthreads();
  for (int s = 64; s > 0; s >>= 1) {
    if (tid < s) buf[tid] += buf[tid + s];
    SYNC
  }
  if (tid == 0) out[0] = buf[0];
}
"""


@pytest.mark.parametrize("sync", ["", "__syncwarp();"])
def test_a_race_that_other_warps_share_is_advised_a_syncthreads_both_times(sync):
    """Measured before: a tree reduction over 128 threads with no barrier was first reported for
    two lanes of warp 0 and advised __syncwarp(); with the __syncwarp() added, the next run
    asked for __syncthreads(). Now both runs advise __syncthreads()."""
    from pagedlab.cuda import RaceError, RawKernel

    kernel = RawKernel(_TREE.replace("SYNC", sync), "tree", backend="cpu", filename="tree.cu")
    with pytest.raises(RaceError) as caught:
        kernel((1,), (128,), (np.ones(128, np.float32), np.zeros(1, np.float32)), check="race")
    message = str(caught.value)
    assert "Put a __syncthreads()" in message, message
    assert "put a __syncwarp()" not in message, message
    if "lanes of one warp" in message:  # the pair reported is in one warp: the other warps are named
        assert "warp 1" in message and "a __syncwarp() is not enough here" in message, message


# ---------------------------------------------------------------- feedback only: a serial kernel

SERIAL = [("for (int t = tid; t < seq_len; t += NUM_THREADS) {", "for (int t = (tid == 0 ? 0 : seq_len); t < seq_len; ++t) {"),
          ("for (int d = tid; d < head_size; d += NUM_THREADS) {", "for (int d = (tid == 0 ? 0 : head_size); d < head_size; ++d) {")]


def test_a_kernel_one_thread_computes_serially_fails_the_feedback_only_spread_check(tmp_path):
    """Measured before: full marks, and nothing said. The check is feedback only (0 points), so
    it fails the serial kernel without costing it anything, and passes the reference."""
    from pagedlab.drivers.paged_attention_cu import SPREAD_CHECK

    row = manifest.task("task10")
    assert row.is_feedback(SPREAD_CHECK)
    c = next(c for c in registry.checks_of("task10") if c.name == SPREAD_CHECK)
    assert judge.judge(trusted_record(c), record.drive(c, "solutions")).passed
    sub = _planted(tmp_path, "paged_attention.cu", *SERIAL, once=False)
    message = _message("task10", SPREAD_CHECK, sub)
    assert "yours:    1.0 of 32" in message and "tid + NUM_THREADS" in message, message


# ---------------------------------------------------------------- one cause, one explanation

def _task_messages(task, impl, shown=None) -> dict:
    """{check name: (passed, message)} of `task`'s public checks on `impl`, judged and then
    cross-referenced as the grader does (runner.run_task: `causes.refer_to_causes`), in-process."""
    from pagedlab.grader.causes import refer_to_causes
    from pagedlab.grader.pipeline import CheckOutcome

    found = []
    for c in registry.checks_of(task):
        verdict = judge.judge(trusted_record(c), record.drive(c, str(impl)), rule=c.rule)
        found.append(CheckOutcome(c.name, verdict.passed, verdict.message, cause=verdict.cause))
    refer_to_causes(found, {c.name: c.follows for c in registry.checks_of(task)}, shown=shown,
                    label=manifest.task(task).label)
    return {o.name: (o.passed, o.message) for o in found}


def test_a_python_syntax_error_is_shown_once_at_the_students_line(tmp_path):
    """Measured before: under each of Task 1's 5 checks, 'your code raised SyntaxError … at
    pagedlab/loader.py:57 (_compiled): return compile(…)' plus a rule and a 'during' of a step
    that never ran."""
    sub = _planted(tmp_path, "memory_manager.py", ("    seq.kv_count += 1\n", "    seq.kv_count += 1 +\n"))
    line = (sub / "memory_manager.py").read_text().splitlines().index("    seq.kv_count += 1 +") + 1
    found = _task_messages("task1", sub)
    first, *rest = [message for passed, message in found.values()]
    assert not any(passed for passed, _ in found.values())
    assert first.startswith(f"memory_manager.py does not compile: SyntaxError: invalid syntax at line {line}:"), first
    assert "seq.kv_count += 1 +" in first and "^" in first, first
    assert "loader.py" not in first and "rule:" not in first and "during:" not in first, first
    name = next(iter(found))
    for message in rest:
        assert message == (f"memory_manager.py does not compile: SyntaxError: invalid syntax at line {line}: "
                           f"the same error as under ✗ {name} above"), message


NO_COW = ("    copy_on_write = not new_page and engine.ref_count[block] > 1\n", "    copy_on_write = False\n")


def test_append_without_copy_on_write_names_cow_first_and_the_rest_follows(tmp_path):
    """Measured before (a C append_kv without CoW, 3 checks failed): the CoW check cited first-fit
    with no word on the shared block, 'OOM for copy-on-write' said 'expected -1, yours 0', and the
    read-back check blamed 'translation logical = kv_count // 16'. The Python track, the same bug."""
    from pagedlab.drivers.memory_manager import COW_IN_PLACE_HINT, T4_COW

    text = (ROOT / "solutions" / "memory_manager.py").read_text()
    assert NO_COW[0] in text, "the planted bug no longer applies to solutions/memory_manager.py"
    found = _task_messages("task4", _planted(tmp_path, "memory_manager.py", NO_COW))
    failed = {name: message for name, (passed, message) in found.items() if not passed}
    assert set(failed) == {T4_COW, "OOM for copy-on-write: -1 and nothing changes",
                           "appended records read back exactly through the block table (forks and CoW included)"}
    cow = failed.pop(T4_COW)
    assert "rule:     notebook 04, Task 4 · append_kv: copy-on-write: an append into a block with ref_count > 1" in cow
    assert COW_IN_PLACE_HINT in cow, cow
    for name, message in failed.items():
        assert message.startswith(f"follows from ✗ {T4_COW}: "), (name, message)
        assert "translation" not in message and "rule:" not in message, (name, message)


T8_BLOCK_SIZE = ("    block_size = k_cache.shape[1]\n    positions = torch.arange(seq_len",
                 "    block_size = k_cache.shape[2]\n    positions = torch.arange(seq_len")


def test_gather_with_the_wrong_block_size_is_explained_as_task_8(tmp_path):
    """Measured before: 'your code raised IndexError … at paged_attention.py:34 (slot_mapping)'
    (Task 6's code, which is right), 'during: … the wrong shape'; and for the 1-token sequence
    'token 0 holds other values' with nothing on the block size."""
    sub = _planted(tmp_path, "paged_attention.py", T8_BLOCK_SIZE)
    raised = _message("task8", "gather follows shared blocks", sub)
    assert "gather_kv raised IndexError" in raised and "slot_mapping with block_size=2" in raised, raised
    assert "this cache's block size is k_cache.shape[1] = 16" in raised, raised
    assert "40 tokens need ceil(40 / 2) = 20 logical blocks; the table maps 3" in raised, raised
    assert "(slot_mapping):" not in raised and "the wrong shape" not in raised, raised
    wrong = _message("task8", "gathered K/V equal the sequence's tokens", sub)
    assert "first at token 0" in wrong, wrong
    assert ("note:     gather_kv called slot_mapping with block_size=2, but this cache's block size is "
            "k_cache.shape[1] = 8") in wrong, wrong
    right = _planted(tmp_path / "right", "paged_attention.py", ("    block_size = k_cache.shape[1]\n",
                                                                "    block_size = k_cache.size(1)\n"))
    c = next(c for c in registry.checks_of("task8") if c.name.startswith("gather follows shared blocks"))
    assert judge.judge(trusted_record(c), record.drive(c, str(right)), rule=c.rule).passed  # a note never fails


BUDDY_LOOP_STOPS_EARLY = ("        while order < self.max_order:\n", "        while order < self.max_order - 1:\n")
BUDDY_MERGES_ONCE = ("        while order < self.max_order:\n            buddy = offset ^ (1 << order)\n",
                     "        for _ in range(1):\n            buddy = offset ^ (1 << order)\n")


def test_buddy_merge_hints_read_the_free_list_not_the_code(tmp_path):
    """Measured before: 'keep merging in a loop, one order up each time' under code that loops
    (it stopped one order early); and the bad-input check blamed 'merging is not disturbed by
    rejected calls'. Now the hint names the two free buddies left unmerged, for both bugs."""
    full = "freeing everything, in any order, merges back to one block"
    early = _task_messages("task12", _planted(tmp_path / "early", "buddy.py", BUDDY_LOOP_STOPS_EARLY))
    once = _task_messages("task12", _planted(tmp_path / "once", "buddy.py", BUDDY_MERGES_ONCE))
    for found, pair in ((early, "(0, 128) and (128, 128) are buddies and both free, yet not merged into (0, 256)"),
                        (once, "(64, 8) and (72, 8) are buddies and both free, yet not merged into (64, 16)")):
        passed, message = found[full]
        assert not passed and pair in message, message
        assert "keep merging in a loop" not in message, message
        assert all("rejected calls" not in m.split("rule:")[-1].split("\n")[0] or "merges with its buddy" in m
                   for _, m in found.values()), found
    assert once["random traces of alloc and free, call by call like the reference solution"][1].startswith(
        "follows from ✗ a hand-traced sequence of splits and merges")
    passed, message = early["rejects bad input and changes nothing"]
    assert "a freed block merges with its buddy" in message and "(0, 8) and (8, 8) are buddies" in message, message


V2_SHORT = {
    "each partition one short": ("  end = min(start + partition_size, seq_len);", "  end = min(start + partition_size, seq_len) - 1;"),
    "full partitions one short": ("  end = min(start + partition_size, seq_len);", "  end = min(start + partition_size - 1, seq_len);"),
    "the sequence's last token": ("  end = min(start + partition_size, seq_len);", "  end = min(start + partition_size, seq_len - 1);"),
}


@pytest.mark.parametrize("bug", sorted(V2_SHORT))
def test_task14_a_partition_end_one_token_short_says_a_token_is_missing(tmp_path, bug):
    """Measured before (a planted bug rated 3 of 5): the relative error and no hint at all; with
    the end one short of every partition, 'NaN computed: something never written was read'."""
    from pagedlab.drivers.paged_attention_v2_cu import (
        DROPPED_HINT,
        LAST_TOKEN_HINT,
        RESCALE_HINT,
        SHORT_HINT,
    )

    message = _message("task14", "partition edges", _planted(tmp_path, "paged_attention_v2.cu", V2_SHORT[bug]))
    want = LAST_TOKEN_HINT if bug == "the sequence's last token" else SHORT_HINT
    assert want in message, message
    assert "never written was read" not in message, message  # the bug's hint, not the NaN symptom's
    assert RESCALE_HINT not in message and DROPPED_HINT not in message, message


def test_task14_hidden_reason_carries_the_missing_token_hint(tmp_path):
    """A hidden check's reason before publication: the hint, as written (no value of the scenario)."""
    from pagedlab.drivers.paged_attention_v2_cu import SHORT_HINT
    from pagedlab.grader.pipeline import CheckOutcome
    from pagedlab.grader.report import hidden_reasons

    sub = _planted(tmp_path, "paged_attention_v2.cu", V2_SHORT["full partitions one short"])
    c = registry.checks_of("task14", hidden=True, hidden_from=ROOT / "grading" / "hidden")[0]
    verdict = judge.judge(trusted_record(c, 7), record.drive(c, str(sub), 7), rule=c.rule)
    assert not verdict.passed and verdict.hint == SHORT_HINT, verdict
    lines = hidden_reasons([CheckOutcome(c.name, False, verdict.message, hidden=True, rule=verdict.rule,
                                         gist=verdict.gist, hint=verdict.hint)])
    assert f"       hint:     {SHORT_HINT}" in lines, lines


TASK1_CAPPED = ("    engine.total_local_blocks = pool_size // BLOCK_SIZE\n",
                "    engine.total_local_blocks = min(pool_size // BLOCK_SIZE, 256)\n")


def test_task1_hidden_reason_names_the_pool_class_and_the_field(tmp_path):
    """Measured before (a planted bug rated 3 of 5): 'hidden check 1: llm_init(… bytes): your value
    differs from the reference solution's' for a pool capped at 256 blocks; published, [297, 297,
    True] against [256, 256, True]. Every seed draws a pool of more than 256 blocks."""
    sub = _planted(tmp_path, "memory_manager.py", TASK1_CAPPED)
    c = registry.checks_of("task1", hidden=True, hidden_from=ROOT / "grading" / "hidden")[0]
    for seed in (1, 2, 3):
        verdict = judge.judge(trusted_record(c, seed), record.drive(c, str(sub), seed), rule=c.rule)
        assert verdict.gist == ("llm_init(… bytes: more blocks than MAX_LOGICAL_BLOCKS, the most one sequence can "
                                "map): total_local_blocks: yours is smaller than the reference solution's"), verdict.gist
        assert "otherwise total = free = pool_size // BLOCK_SIZE" in verdict.rule
        assert "differs:  at key total_local_blocks: expected " in verdict.message, verdict.message


PY_DESTROY_LOOP = ("    for node in list_for_each(engine.active_seqs):\n"
                   "        destroy_sequence(engine, container_of(node, Sequence, \"node\"))\n",
                   "    head = engine.active_seqs\n    node = head.next.contents\n"
                   "    while ctypes.addressof(node) != ctypes.addressof(head):\n"
                   "        destroy_sequence(engine, container_of(node, Sequence, \"node\"))\n"
                   "        node = node.next.contents\n")


def test_python_track_names_the_line_that_read_freed_memory_in_llm_destroy(tmp_path):
    """The Python twin of the C track's use after free in llm_destroy's loop (test_c_track): the
    pointer read out of the freed node is dereferenced on the line that reads it, which is named."""
    sub = _planted(tmp_path, "memory_manager.py", PY_DESTROY_LOOP)
    line = (sub / "memory_manager.py").read_text().splitlines().index("        node = node.next.contents") + 1
    message = _message("task5", "llm_destroy frees every sequence", sub)
    assert "UseAfterFree: use after free" in message and "read out of a block that had been freed" in message, message
    assert f"memory_manager.py:{line} (llm_destroy): node = node.next.contents" in message, message
