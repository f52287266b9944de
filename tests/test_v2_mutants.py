"""Each planted bug in a copy of solutions/paged_attention_v2.cu is caught by a Task 14 check.

The mutated kernel file is a submission folder; Task 14's public checks run on it in order, each
driven and judged in this process against the committed trusted record, and the first that fails
must name the rule (and, for the bugs listed in MESSAGES, say what went wrong). In-process is
safe here: every launch runs in the Python-free kernel runner, so a crashing mutant ends that
process, not pytest. The graded path (a check child per task) is run on Task 14 by
test_every_check_fails_on_the_untouched_exercise below and by tests/test_grading_real.py.
"""

from __future__ import annotations

import pytest
from trusted_records import trusted_record

from pagedlab import graded as checks
from pagedlab.drivers import record
from pagedlab.grader import judge, registry
from pagedlab.loader import ROOT

SOLUTION = (ROOT / "solutions" / "paged_attention_v2.cu").read_text()

MUTANTS = {
    "missing max correction in the reduce": ("    const float w = expf(m[p] - global_max);",
                                             "    const float w = 1.f;"),
    "rescaled max but exp-sums summed raw": ("    thread_sum += w * l[p];", "    thread_sum += l[p];"),
    "partition count rounded down": (
        "const int num_partitions = (seq_len + partition_size - 1) / partition_size;",
        "const int num_partitions = seq_len / partition_size;"),
    "partition count off by one (one too many)": (
        "const int num_partitions = (seq_len + partition_size - 1) / partition_size;",
        "const int num_partitions = seq_len / partition_size + 1;"),
    "partition end one token short": ("  end = min(start + partition_size, seq_len);",
                                      "  end = min(start + partition_size - 1, seq_len);"),
    "empty partition at k*P still runs": ("  if (start >= seq_len) return;", "  if (start > seq_len) return;"),
    "tmp_out normalised inside the partition": ("    out_vec[d] = acc;\n", "    out_vec[d] = acc / l;\n"),
    "partition max not subtracted": ("    const float e = expf(logits[i] - m);", "    const float e = expf(logits[i]);"),
    "logits indexed by absolute token": ("    logits[t - start] = dot * scale;\n    thread_max = fmaxf(thread_max, logits[t - start]);",
                                         "    logits[t] = dot * scale;\n    thread_max = fmaxf(thread_max, logits[t - start]);"),
    "reduce strides by the sequence's partitions": (
        "const long long first_slot = ((long long)seq * num_heads + head) * max_num_partitions;",
        "const long long first_slot = ((long long)seq * num_heads + head) * num_partitions;"),
    "no barrier before reusing partial[]": (
        "  x = warp_max(lane < NUM_WARPS ? partial[lane] : LOWEST_FLOAT);\n  __syncthreads();\n",
        "  x = warp_max(lane < NUM_WARPS ? partial[lane] : LOWEST_FLOAT);\n"),
    "every partition starts at token 0": ("  start = partition * partition_size;", "  start = 0 * partition;"),
}

MESSAGES = {
    "missing max correction in the reduce": "max relative error",
    "partition count rounded down": "rule:",
    "empty partition at k*P still runs": "stay unwritten",
    "tmp_out normalised inside the partition": "rule:",
}


def first_failure(folder):
    """(name, message) of the first Task 14 check that fails on `folder`, or None."""
    for c in registry.checks_of("task14", hidden=False):
        verdict = judge.judge(trusted_record(c), record.drive(c, str(folder), 0))
        if not verdict.passed:
            return c.name, verdict.message
    return None


def test_unmutated_copy_passes(tmp_path):
    (tmp_path / "paged_attention_v2.cu").write_text(SOLUTION)
    assert first_failure(tmp_path) is None


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_caught(name, tmp_path):
    old, new = MUTANTS[name]
    assert SOLUTION.count(old) == 1, f"mutant {name!r} no longer applies to solutions/paged_attention_v2.cu"
    (tmp_path / "paged_attention_v2.cu").write_text(SOLUTION.replace(old, new))
    caught = first_failure(tmp_path)
    assert caught is not None, f"no Task 14 check catches: {name}"
    assert "rule:" in caught[1] and MESSAGES.get(name, "rule:") in caught[1], caught


def test_at_least_eight_mutants():
    assert len(MUTANTS) >= 8


def test_every_check_fails_on_the_untouched_exercise():
    results = checks.results("task14", "exercises")
    assert results and not any(r.passed for r in results), [r.name for r in results if r.passed]


PAST_SEQ_LEN = {  # a loop bound one too far, and what the report adds (sequence 0 has seq_len 1)
    "partition's logits": ("  for (int i = tid; i < end - start; i += NUM_THREADS) {\n    const float e", "i < end", "i <= end",
                           "partition 0, whose tokens start at t = 0 * 64 = 0; the sequence's seq_len is 1",
                           "the read was at i = 1: t = 1 >= seq_len = 1, past the sequence's last token"),
    "reduce's weights": ("    for (int p = 0; p < num_partitions; ++p) {\n      acc += weights[p]", "p < num", "p <= num",
                         "num_partitions = ceil(1 / 64) = 1",
                         "the read was at p = 1 >= num_partitions = 1, a partition past seq_len"),
}


@pytest.mark.parametrize("loop", sorted(PAST_SEQ_LEN))
def test_a_read_past_seq_len_is_shown_against_the_sequences_seq_len(loop, tmp_path):
    """Task 10's report of an unwritten logit adds the seq_len bound the read crossed;
    Task 14's does the same for a partition's logits and for the reduce's partition weights."""
    anchor, old, new, *said = PAST_SEQ_LEN[loop]
    assert SOLUTION.count(anchor) == 1, f"{loop!r} no longer applies to solutions/paged_attention_v2.cu"
    (tmp_path / "paged_attention_v2.cu").write_text(SOLUTION.replace(anchor, anchor.replace(old, new)))
    edges = next(c for c in registry.checks_of("task14", hidden=False) if c.name.startswith("partition edges"))
    message = judge.judge(trusted_record(edges), record.drive(edges, str(tmp_path), 0)).message
    assert "UninitializedReadError" in message and "no thread wrote this element" in message, message
    assert all(words in message for words in said), message
