"""Graded checks for Task 14: the v2 split-K kernel in `paged_attention_v2.cu` (notebook 10).

The student's kernel and reduce kernel run unchanged on pagedlab's CPU executor under every
thread schedule, the first of them with the sanitizer on (as for Task 10: a missing barrier or an
unclamped partition end is reported with its line). `out` and all three temporaries are filled
with the unwritten-NaN pattern before each launch and unused cache slots are NaN. The driver records every output in full; the
judge compares it with dense attention in float64 (`pagedlab.drivers.kernel_batch`) computed in its own
process, within 2e-5 relative error as for Task 10. Lengths sit on partition edges
(k * P - 1, k * P, k * P + 1) because that is where a split-K kernel goes wrong; contexts reach
8192 tokens. One check also reads the temporaries: each partition's max, exp-sum and
unnormalised output, against float64, and nothing written for partitions that do not exist.
"""

from __future__ import annotations

import hashlib

from ..kernels import PARTITION_SIZE, V2_KERNEL_FILE, decode_v2_on_executor, unwritten, v2_workspace
from ..spec.catalog import Expected, check
from .hints import When
from .kernel_batch import make_kernel_batch
from .paged_attention_cu import SANITIZER, check_schedules, untouched_stub
from .record import expect

RULE = ("notebook 10, Task 14 · the v2 kernel: paged_attention_v2 + paged_attention_v2_reduce equal "
        "dense attention over each sequence's tokens")
R_TEMP = ("notebook 10, Task 14 · the v2 kernel: for partition p of a sequence, max_logits = max logit, "
          "exp_sums = sum exp(logit - max), tmp_out = sum exp(logit - max) * v (unnormalised); "
          "partitions past the end are never written")
HINT = ""  # every hint of the output checks is conditional: WHEN, and _bug_hints per case
WHEN = (
    When("unwritten", "some of out still holds the NaN it was filled with: the reduce kernel writes out, one "
                      "row of head_size values per (head, sequence) block"),
    When("computed_nan", "NaN computed: something never written was read: a temporary slot of a partition "
                         "that does not exist, a cache slot past the sequence, or shared memory before a barrier"),
)
RESCALE_HINT = ("the partitions were combined without rescaling: multiply partition p's exp-sum and output by "
                "exp(m_p - M), M the largest m_p, in the reduce")
DROPPED_HINT = ("the last partition's tokens are missing: num_partitions = ceil(seq_len / partition_size), "
                "and the last partition runs to seq_len")
SHORT_HINT = ("a token is missing from each partition, its last one: a partition covers the tokens [start, end) "
              "with end = min(start + partition_size, seq_len), one past its last token (t < end, not t < end - 1)")
LAST_TOKEN_HINT = ("the sequence's last token (t = seq_len - 1) is missing: the last partition runs to end = seq_len, "
                   "which is one past the last token")


TOL = 2e-5
LAUNCH_TIMEOUT = 30.0
_HUNG: dict[str, str] = {}


def _case(context, lens, partition_size=PARTITION_SIZE, scale=None, **kwargs):
    return (context, {"seq_lens": list(lens), **kwargs}, scale, partition_size)


def _label(context, schedule):
    return f"v2 output ({context}, schedule {schedule})"


def _launch(run, batch_args, scale, partition_size, schedule, seq_lens, workspace=None, sanitize=False):
    """(out, workspace) or (None, text of the failure). `sanitize`: with the sanitizer on (as
    Task 10), so a race, an out-of-bounds or an uninitialised read is reported with its line;
    a read past the sequence's end is shown against its seq_len (`seq_lens`)."""
    from .. import cuda
    from ..cuda import KernelTimeout

    source = hashlib.sha256(run.kernel_source(V2_KERNEL_FILE).encode()).hexdigest()
    if source in _HUNG:
        return None, f"not launched: the kernel hung earlier ({_HUNG[source]})"
    try:
        with cuda.checking(SANITIZER if sanitize else None), cuda.fibers_only():  # as Task 10
            return decode_v2_on_executor(*batch_args, scale=scale, impl=run.impl, partition_size=partition_size,
                                         workspace=workspace, schedule=schedule, timeout=LAUNCH_TIMEOUT)
    except Exception as exc:  # noqa: BLE001 - compile errors, barrier errors, crashes
        text = f"{type(exc).__name__}: {exc}" + unwritten_past_the_end(exc, seq_lens, partition_size)
        if isinstance(exc, KernelTimeout):
            _HUNG[source] = text.splitlines()[0]
        return None, f"the v2 kernels failed to run: {text}"


def unwritten_past_the_end(exc, seq_lens, partition_size) -> str:
    """For an unwritten `logits[i]` (block (head, seq, partition) of paged_attention_v2) or
    `weights[p]` (block (head, seq) of the reduce): the index against the bound the sequence's
    seq_len sets, in the notebook's terms, as Task 10's checks do for its logits."""
    from ..cuda import UninitializedReadError

    if not isinstance(exc, UninitializedReadError) or not exc.block or exc.index is None:
        return ""
    head, seq, partition = exc.block[:3]
    n, i = seq_lens[seq], exc.index
    if exc.array == "logits":
        start = partition * partition_size
        if start + i < n:  # a logit of this partition not yet written: the barrier advice stands
            return ""
        return (f"\nIn this case: block ({head}, {seq}, {partition}) is query head {head} of sequence {seq}, "
                f"partition {partition}, whose tokens start at t = {partition} * {partition_size} = {start}; "
                f"the sequence's seq_len is {n}. logits[i] holds the score of token t = start + i only for "
                f"t < end = min(start + partition_size, seq_len) = {min(start + partition_size, n)}, and the "
                f"read was at i = {i}: t = {start + i} >= seq_len = {n}, past the sequence's last token. "
                f"Bound the loop by the partition's end (i < end - start).")
    if exc.array == "weights":
        parts = -(-n // partition_size)
        if i < parts:
            return ""
        return (f"\nIn this case: block ({head}, {seq}) of the reduce kernel is query head {head} of sequence "
                f"{seq}, whose seq_len is {n}: it has num_partitions = ceil({n} / {partition_size}) = {parts}, "
                f"weights[p] is written only for p < num_partitions, and the read was at p = {i} >= "
                f"num_partitions = {parts}, a partition past seq_len. Bound the loop by p < num_partitions.")
    return ""


def drive_v2(run, cases, schedules=None, *, temporaries: bool = False) -> None:
    """Every case under every schedule. `temporaries`: also, on the first schedule, every
    partition past a sequence's end (a shorter sequence next to a longer one) stays unwritten."""
    untouched_stub(run.kernel_source(V2_KERNEL_FILE), V2_KERNEL_FILE)
    schedules = schedules or check_schedules()
    for context, kwargs, scale, partition_size in cases:
        args = make_kernel_batch(**kwargs).numpy()
        for schedule in schedules:
            # The sanitizer's report does not depend on the schedule: one checked launch per case.
            out, ws = _launch(run, args, scale, partition_size, schedule, kwargs["seq_lens"],
                              sanitize=schedule == schedules[0])
            if out is None:
                run.see(_label(context, schedule), "failed to run", shown=ws)
                continue
            if temporaries and schedule == schedules[0]:
                past_the_end_unwritten(ws, kwargs["seq_lens"], partition_size, context)
            run.see_array(_label(context, schedule), out, tol=TOL, hint=HINT)


def past_the_end_unwritten(ws, seq_lens, partition_size, context) -> None:
    """The temporaries of the partitions past each sequence's last one hold the unwritten NaN."""
    for s, n in enumerate(seq_lens):
        parts = -(-n // partition_size)
        for name in ("max_logits", "exp_sums", "tmp_out"):
            past = getattr(ws, name)[s, :, parts:]
            expect(unwritten(past).all(), f"{name}[{s}, :, {parts}:] stay unwritten ({context}): sequence {s} has "
                                          f"only {parts} partition{'s' * (parts > 1)}", rule=R_TEMP,
                   actual=f"{int((~unwritten(past)).sum())} elements written",
                   hint="a block whose partition starts at or past its sequence's end returns at once")


def expected_v2(cases, schedules=None) -> Expected:
    """Computed by the judge (`pagedlab.grader.trusted.expectations`)."""
    return Expected("v2_outputs", (cases, schedules))


def _register(name, cases):
    check("task14", name, rule=RULE, hint=HINT, when=WHEN, expected=expected_v2(cases), cases=cases)(drive_v2)


_register("partition edges: lengths k*P-1, k*P, k*P+1 for P = 64 and P = 512", [
    _case("partition_size 64, block_size 16", [1, 63, 64, 65, 127, 128, 129, 191, 192, 193], 64,
          num_heads=2, head_size=32, block_size=16, seed=1400),
    _case("partition_size 512, block_size 16", [511, 512, 513, 1023, 1024, 1025], num_heads=2, num_kv_heads=1,
          head_size=64, block_size=16, seed=1401),
])
_register("long contexts: 8192 and 4097 tokens next to 1 token (P = 512, head_size 128)", [
    _case("lengths 8192, 1, 4097; 4 query heads over 2 kv heads", [8192, 1, 4097], num_heads=4, num_kv_heads=2,
          head_size=128, block_size=16, seed=1402),
])
_register("grouped-query attention 8/2, 12/4, 16/1 across several partitions", [
    _case(f"{h} query heads over {kv} kv heads, partition_size 64", [300, 129], 64, num_heads=h, num_kv_heads=kv,
          head_size=hs, block_size=16, seed=1410 + h)
    for h, kv, hs in ((8, 2, 64), (12, 4, 32), (16, 1, 128))
])
_register("block sizes 8, 16, 32 and head sizes 80, 256; shared blocks and a custom scale", [
    *(_case(f"block_size {bs}, head_size {hs}, partition_size 64", [bs - 1, 2 * 64 + 1, 64 * 3], 64,
            num_heads=2, head_size=hs, block_size=bs, seed=1420 + bs)
      for bs, hs in ((8, 80), (16, 256), (32, 96))),
    _case("first 4 blocks shared with sequence 0, scale 0.05", [200, 150, 70], 64, scale=0.05, num_heads=4,
          head_size=64, block_size=16, shared_blocks=4, seed=1430),
])


# --- the temporaries -----------------------------------------------------------------------------

TEMP_P = 64                 # partition size of the scenario
TEMP_ROOM = 4               # partitions the workspace has room for (as when reused across steps)
TEMP_LENS = [130, 64, 1]    # 3, 1 and 1 partitions
TEMP_BATCH = {"seq_lens": TEMP_LENS, "num_heads": 2, "num_kv_heads": 1, "head_size": 32, "block_size": 16,
              "seed": 1440}
TEMP_SCHEDULE = "round_robin"
TEMP_CONTEXT = "partition_size 64, a workspace with room for 4 partitions per sequence"


def _temp_labels(s):
    n = TEMP_LENS[s]
    parts = -(-n // TEMP_P)
    where = f"sequence {s} (length {n}, {parts} partition{'s' * (parts > 1)})"
    return {name: f"{name}[{s}, :, :{parts}] of {where}" for name in ("max_logits", "exp_sums", "tmp_out")}


def _drive_temporaries(run):
    untouched_stub(run.kernel_source(V2_KERNEL_FILE), V2_KERNEL_FILE)
    batch = make_kernel_batch(**TEMP_BATCH)
    num_seqs, num_heads, head_size = batch.q.shape
    ws = v2_workspace(num_seqs, num_heads, head_size, TEMP_ROOM * TEMP_P, TEMP_P)
    out, ws = _launch(run, batch.numpy(), None, TEMP_P, TEMP_SCHEDULE, TEMP_LENS, workspace=ws, sanitize=True)
    expect(out is not None, "the v2 kernels run", rule=R_TEMP, actual=ws)
    run.see_array(_label(TEMP_CONTEXT, TEMP_SCHEDULE), out, tol=TOL, hint=HINT)
    for s, n in enumerate(TEMP_LENS):
        parts = -(-n // TEMP_P)
        for name, label in _temp_labels(s).items():
            array = getattr(ws, name)
            past = array[s, :, parts:]
            expect(unwritten(past).all(), f"{name}[{s}, :, {parts}:] stay unwritten: sequence {s} has only "
                                          f"{parts} partition{'s' * (parts > 1)}", rule=R_TEMP,
                   actual=f"{int((~unwritten(past)).sum())} elements written",
                   hint="a block whose partition starts at or past its sequence's end returns at once")
            run.see_array(label, array[s, :, :parts], tol=TOL,
                          hint="tmp_out is NOT divided by the exp-sum: the reduce kernel divides once, globally"
                          if name == "tmp_out" else HINT)


check("task14", "temporaries: each partition's max, exp-sum and unnormalised output; nothing past the end",
      rule=R_TEMP, hint=HINT, expected=Expected("v2_temporaries"))(_drive_temporaries)
