"""Graded checks for Part C: the CUDA kernel in `paged_attention.cu` (Task 10).

The student's kernel text runs unchanged on pagedlab's CPU executor, under several thread
schedules (a missing barrier often hides under one order and shows under another). The output
is filled with NaN before every launch and unused cache slots are NaN too, so an element the
kernel never writes, or a slot it should not read, cannot pass. The answer is dense attention
in float64 (`pagedlab.reference`); float32 kernels must agree within 2e-5 relative error.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from ..kernels import KERNEL_FILE, decode_on_executor, unwritten
from ..loader import kernel_source
from ..reference import make_paged_batch, max_relative_error
from . import CheckFailure, check

RULE = "§6.1 paged_attention_v1 equals dense attention over each sequence's tokens"
TOL = 2e-5
LAUNCH_TIMEOUT = 20.0  # seconds per launch (a correct one takes well under 1 s)
_HUNG: dict[str, str] = {}  # kernel source hash -> timeout message: don't wait for it twice


def check_schedules() -> tuple[str, ...]:
    """The executor schedules every kernel check runs under: all of them (round-robin,
    warp 0 first, reversed, seeded random). Each launch takes a fraction of a second."""
    from .. import cuda

    return tuple(cuda.SCHEDULES)


def expect_kernel_matches(impl, batch, context: str, scale=None, schedules=None) -> None:
    """Launch the kernel of `impl` on `batch` under each schedule and compare with float64."""
    from ..cuda import KernelTimeout

    source = hashlib.sha256(kernel_source(KERNEL_FILE, impl).encode()).hexdigest()
    if source in _HUNG:
        raise CheckFailure("the kernel hung in an earlier check, so it was not launched again",
                           rule=RULE, actual=_HUNG[source])
    want = batch.expected(scale)
    args = batch.numpy()
    for schedule in schedules or check_schedules():
        try:
            out = decode_on_executor(*args, scale=scale, impl=impl, schedule=schedule,
                                     timeout=LAUNCH_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - compile errors, barrier errors, crashes
            actual = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, KernelTimeout):
                _HUNG[source] = actual
            raise CheckFailure(f"the kernel failed to run ({context}, schedule {schedule!r})",
                               rule=RULE, actual=actual) from None
        _compare(out, want, batch, context, schedule)


def _compare(out, want, batch, context, schedule):
    err = max_relative_error(out, want)
    if err <= TOL:
        return
    got = torch.from_numpy(np.asarray(out)).double()
    never_written = torch.from_numpy(unwritten(out))
    diff = (got - want).abs().nan_to_num(float("inf")).amax(-1)
    s, h = (int(x) for x in torch.nonzero(diff == diff.max())[0])
    rows = never_written.shape[0] * never_written.shape[1]
    if never_written.all():
        actual = "out was never written (every element still holds the NaN it was filled with)"
        hint = "the kernel returns before writing out: still the stub?"
    elif never_written.any():
        count = int(never_written.any(-1).sum())
        first = [int(x) for x in torch.nonzero(never_written.any(-1))[0]]
        actual = (f"{count} of {rows} (sequence, head) rows were never written, first: sequence "
                  f"{first[0]}, head {first[1]}")
        hint = "every (sequence, head) block must write all head_size elements of its output row"
    elif torch.isnan(got).any():
        count = int(torch.isnan(got).any(-1).sum())
        actual = (f"the kernel wrote NaN in {count} of {rows} (sequence, head) rows, first at "
                  f"sequence {s}, head {h}")
        hint = ("NaN comes from reading something never written: a cache slot outside the "
                "sequence (unused slots hold NaN) or shared memory read before a __syncthreads() "
                "(the executor fills shared memory with NaN)")
    else:
        actual = (f"max relative error {err:.3g}, worst at sequence {s} (length "
                  f"{int(batch.seq_lens[s])}), head {h}")
        hint = ("if only some schedules fail, a barrier is missing; if only GQA fails, check the "
                "kv head; if only some lengths fail, check the loop bounds and the block table row")
    raise CheckFailure(f"kernel output differs from dense attention ({context}, schedule {schedule!r})",
                       rule=RULE, expected=f"max relative error <= {TOL:g}", actual=actual, hint=hint)


@check("task10", "MHA, head sizes 32 to 256, lengths 1, bs-1, bs, bs+1", rule=RULE)
def kernel_head_sizes(impl):
    for i, head_size in enumerate((32, 64, 80, 96, 112, 128, 256)):
        batch = make_paged_batch([1, 15, 16, 17], num_heads=2, head_size=head_size, block_size=16,
                                 seed=100 + i)
        expect_kernel_matches(impl, batch, f"2 heads, head_size {head_size}, block_size 16")


@check("task10", "grouped-query attention: 8/2, 12/4, 16/1 heads", rule=RULE)
def kernel_gqa(impl):
    for num_heads, num_kv_heads, head_size in ((8, 2, 64), (12, 4, 32), (16, 1, 128)):
        batch = make_paged_batch([37, 150], num_heads=num_heads, num_kv_heads=num_kv_heads,
                                 head_size=head_size, block_size=16, seed=110 + num_heads)
        expect_kernel_matches(impl, batch,
                              f"{num_heads} query heads over {num_kv_heads} kv heads, head_size {head_size}")


@check("task10", "block sizes 8, 16, 32 with lengths bs-1, bs, bs+1 and 511", rule=RULE)
def kernel_block_sizes(impl):
    for block_size in (8, 16, 32):
        batch = make_paged_batch([block_size - 1, block_size, block_size + 1, 511], num_heads=4,
                                 num_kv_heads=2, head_size=64, block_size=block_size, seed=120 + block_size)
        expect_kernel_matches(impl, batch, f"block_size {block_size}, 4 query heads over 2 kv heads")


@check("task10", "a 2048-token sequence with head_size 256, next to a 1-token one", rule=RULE)
def kernel_long_sequence(impl):
    batch = make_paged_batch([2048, 1], num_heads=2, num_kv_heads=1, head_size=256, block_size=16, seed=130)
    expect_kernel_matches(impl, batch, "lengths 2048 and 1, head_size 256, block_size 16")


@check("task10", "physical blocks shared between sequences (after a fork) and a custom scale", rule=RULE)
def kernel_shared_blocks_and_scale(impl):
    batch = make_paged_batch([80, 96, 70, 33], num_heads=4, num_kv_heads=4, head_size=64, block_size=16,
                             shared_blocks=3, seed=140)
    expect_kernel_matches(impl, batch, "first 3 blocks shared with sequence 0")
    batch = make_paged_batch([50, 200], num_heads=4, num_kv_heads=2, head_size=96, block_size=16, seed=141)
    expect_kernel_matches(impl, batch, "scale 0.05", scale=0.05)
