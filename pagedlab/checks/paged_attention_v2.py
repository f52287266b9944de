"""Graded checks for Task 14: the v2 split-K kernel in `paged_attention_v2.cu` (notebook 10).

The student's kernel and reduce kernel run unchanged on pagedlab's CPU executor under every
thread schedule. `out` and all three temporaries are filled with the unwritten-NaN pattern
before each launch, unused cache slots are NaN, and the answer is dense attention in float64
(`pagedlab.reference`), within 2e-5 relative error, as for Task 10. Lengths sit on partition
edges (k * PARTITION_SIZE - 1, k * PARTITION_SIZE, k * PARTITION_SIZE + 1) because that is where
a split-K kernel goes wrong; contexts reach 8192 tokens.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import torch

from ..kernels import PARTITION_SIZE, V2_KERNEL_FILE, decode_v2_on_executor, unwritten, v2_workspace
from ..loader import kernel_source
from ..reference import make_paged_batch, max_relative_error
from . import CheckFailure, check, expect
from .kernel import check_schedules

RULE = "§7b paged_attention_v2 + reduce equal dense attention over each sequence's tokens"
R_TEMP = ("§7b v2 temporaries: per partition p of a sequence, max_logits = max logit, exp_sums = "
          "sum exp(logit - max), tmp_out = unnormalised sum exp(logit - max) * v; nothing past the end")
TOL = 2e-5
LAUNCH_TIMEOUT = 30.0
_HUNG: dict[str, str] = {}


def expect_v2_matches(impl, batch, context: str, *, partition_size: int = PARTITION_SIZE, scale=None,
                      schedules=None, workspace_partitions: int | None = None):
    """Run v2 + reduce of `impl` on `batch` under each schedule; compare with float64.
    Returns the workspace of the last launch."""
    from ..cuda import KernelTimeout

    source = hashlib.sha256(kernel_source(V2_KERNEL_FILE, impl).encode()).hexdigest()
    if source in _HUNG:
        raise CheckFailure("the v2 kernel hung in an earlier check, so it was not launched again",
                           rule=RULE, actual=_HUNG[source])
    want = batch.expected(scale)
    args = batch.numpy()
    ws = None
    for schedule in schedules or check_schedules():
        workspace = None
        if workspace_partitions is not None:
            num_seqs, num_heads, head_size = args[0].shape
            workspace = v2_workspace(num_seqs, num_heads, head_size, workspace_partitions * partition_size,
                                     partition_size)
        try:
            out, ws = decode_v2_on_executor(*args, scale=scale, impl=impl, partition_size=partition_size,
                                            workspace=workspace, schedule=schedule, timeout=LAUNCH_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - compile errors, barrier errors, crashes
            actual = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, KernelTimeout):
                _HUNG[source] = actual
            raise CheckFailure(f"the v2 kernels failed to run ({context}, schedule {schedule!r})",
                               rule=RULE, actual=actual) from None
        _compare(out, want, batch, context, schedule, partition_size)
    return ws


def _compare(out, want, batch, context, schedule, partition_size):
    err = max_relative_error(out, want)
    if err <= TOL:
        return
    got = torch.from_numpy(np.asarray(out)).double()
    never = torch.from_numpy(unwritten(out))
    rows = never.shape[0] * never.shape[1]
    if never.all():
        actual = "out was never written (every element still holds the NaN it was filled with)"
        hint = "the kernels return before writing: still the stub? out is written by the reduce kernel"
    elif never.any():
        s, h = (int(x) for x in torch.nonzero(never.any(-1))[0])
        actual = f"{int(never.any(-1).sum())} of {rows} (sequence, head) rows never written, first: sequence {s}, head {h}"
        hint = "the reduce kernel must write all head_size elements of every (sequence, head) row"
    elif torch.isnan(got).any():
        s, h = (int(x) for x in torch.nonzero(torch.isnan(got).any(-1))[0])
        actual = (f"NaN in the output, first at sequence {s} (length {int(batch.seq_lens[s])}), head {h}")
        hint = ("NaN comes from reading something never written: a temporary slot of a partition that "
                "does not exist, a cache slot past the sequence, or shared memory before a barrier")
    else:
        diff = (got - want).abs().amax(-1)
        s, h = (int(x) for x in torch.nonzero(diff == diff.max())[0])
        n = int(batch.seq_lens[s])
        actual = (f"max relative error {err:.3g}, worst at sequence {s} (length {n} = "
                  f"{n // partition_size} x {partition_size} + {n % partition_size}), head {h}")
        hint = ("wrong only for several partitions: the reduce must rescale each partition by "
                "exp(m_p - M); wrong at lengths just past a partition edge: the token range or the "
                "partition count")
    raise CheckFailure(f"v2 output differs from dense attention ({context}, schedule {schedule!r})",
                       rule=RULE, expected=f"max relative error <= {TOL:g}", actual=actual, hint=hint)


@check("task14", "partition edges: lengths k*P-1, k*P, k*P+1 for P = 64 and P = 512", rule=RULE)
def v2_partition_edges(impl):
    batch = make_paged_batch([1, 63, 64, 65, 127, 128, 129, 191, 192, 193], num_heads=2, head_size=32,
                             block_size=16, seed=1400)
    expect_v2_matches(impl, batch, "partition_size 64, block_size 16", partition_size=64)
    batch = make_paged_batch([511, 512, 513, 1023, 1024, 1025], num_heads=2, num_kv_heads=1, head_size=64,
                             block_size=16, seed=1401)
    expect_v2_matches(impl, batch, "partition_size 512, block_size 16")


@check("task14", "long contexts: 8192 and 4097 tokens next to 1 token (P = 512, head_size 128)", rule=RULE)
def v2_long_context(impl):
    batch = make_paged_batch([8192, 1, 4097], num_heads=4, num_kv_heads=2, head_size=128, block_size=16,
                             seed=1402)
    expect_v2_matches(impl, batch, "lengths 8192, 1, 4097; 4 query heads over 2 kv heads")


@check("task14", "grouped-query attention 8/2, 12/4, 16/1 across several partitions", rule=RULE)
def v2_gqa(impl):
    for num_heads, num_kv_heads, head_size in ((8, 2, 64), (12, 4, 32), (16, 1, 128)):
        batch = make_paged_batch([300, 129], num_heads=num_heads, num_kv_heads=num_kv_heads,
                                 head_size=head_size, block_size=16, seed=1410 + num_heads)
        expect_v2_matches(impl, batch, f"{num_heads} query heads over {num_kv_heads} kv heads, "
                                       f"partition_size 64", partition_size=64)


@check("task14", "block sizes 8, 16, 32 and head sizes 80, 256; shared blocks and a custom scale", rule=RULE)
def v2_shapes(impl):
    for block_size, head_size in ((8, 80), (16, 256), (32, 96)):
        batch = make_paged_batch([block_size - 1, 2 * 64 + 1, 64 * 3], num_heads=2, head_size=head_size,
                                 block_size=block_size, seed=1420 + block_size)
        expect_v2_matches(impl, batch, f"block_size {block_size}, head_size {head_size}, partition_size 64",
                          partition_size=64)
    batch = make_paged_batch([200, 150, 70], num_heads=4, head_size=64, block_size=16, shared_blocks=4,
                             seed=1430)
    expect_v2_matches(impl, batch, "first 4 blocks shared with sequence 0, scale 0.05", partition_size=64,
                      scale=0.05)


@check("task14", "temporaries: each partition's max, exp-sum and unnormalised output; nothing past the end",
       rule=R_TEMP)
def v2_temporaries(impl):
    partition_size = 64
    lens = [130, 64, 1]
    batch = make_paged_batch(lens, num_heads=2, num_kv_heads=1, head_size=32, block_size=16, seed=1440)
    # A workspace with room for 4 partitions (as when it is reused across decode steps): the
    # kernels must leave the slots of partitions that do not exist alone, and never read them.
    ws = expect_v2_matches(impl, batch, "partition_size 64, a workspace with 4 partitions per sequence",
                           partition_size=partition_size, workspace_partitions=4, schedules=("round_robin",))
    scale = 1.0 / math.sqrt(32)
    for s, n in enumerate(lens):
        k, v = batch.keys[s].double(), batch.values[s].double()
        parts = -(-n // partition_size)
        for h in range(2):
            q = batch.q[s, h].double()
            for p in range(4):
                where = f"sequence {s} (length {n}), head {h}, partition {p}"
                if p >= parts:
                    for name in ("max_logits", "exp_sums"):
                        written = not unwritten(getattr(ws, name)[s, h, p:p + 1]).all()
                        expect(not written, f"{name}[{s}, {h}, {p}] was written, but {where} does not exist",
                               rule=R_TEMP, hint="a block whose partition starts at or past the sequence's "
                                                 "end must return without writing")
                    expect(unwritten(ws.tmp_out[s, h, p]).all(), f"tmp_out[{s}, {h}, {p}] was written, but "
                           f"{where} does not exist", rule=R_TEMP)
                    continue
                tokens = slice(p * partition_size, min((p + 1) * partition_size, n))
                logits = (k[tokens, 0] @ q) * scale
                m = logits.max()
                e = torch.exp(logits - m)
                want = {"max_logits": float(m), "exp_sums": float(e.sum())}
                for name, value in want.items():
                    have = float(getattr(ws, name)[s, h, p])
                    expect(abs(have - value) <= 1e-4 * max(1.0, abs(value)), f"{name}[{s}, {h}, {p}] for {where}",
                           rule=R_TEMP, expected=f"{value:.6g}", actual=f"{have:.6g}")
                o = e @ v[tokens, 0]
                err = max_relative_error(torch.from_numpy(ws.tmp_out[s, h, p].copy()), o)
                expect(err <= 1e-4, f"tmp_out[{s}, {h}, {p}] for {where}", rule=R_TEMP,
                       expected="sum over the partition of exp(logit - max) * v (not divided by the exp-sum)",
                       actual=f"relative error {err:.3g}",
                       hint="leave tmp_out unnormalised: the reduce kernel divides once, by the global sum")
