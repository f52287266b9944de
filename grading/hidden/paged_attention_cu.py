"""Hidden checks for Task 10 (instructor only): kernel launches on batches drawn from `run.seed`."""

from __future__ import annotations

import random

from pagedlab.checks.framework import check
from pagedlab.checks.paged_attention_cu import HINT, RULE, WHEN, drive_kernel, expected_outputs


def kernel_cases(seed: int):
    """One case per block size 8, 16, 32 (in a drawn order); MHA, GQA and MQA; a head size below
    a warp, one between and one above the 128 threads; lengths 1, bs-1, bs+1, around the 128
    threads, and past 64 blocks; shared blocks and a custom scale. The seed draws values only."""
    rng = random.Random(seed)
    block_sizes = [8, 16, 32]
    rng.shuffle(block_sizes)
    heads = [(rng.choice([2, 4]), 1), (rng.choice([2, 4]), rng.choice([2, 3, 4])), (1, rng.choice([2, 4, 8]))]
    head_sizes = [rng.choice([8, 16, 24]), rng.choice([48, 80, 112]), rng.choice([144, 192, 256])]
    rng.shuffle(head_sizes)
    cases = []
    for i, (bs, (kv, group), hs) in enumerate(zip(block_sizes, heads, head_sizes, strict=True)):
        lens = [1, bs - 1, bs + 1, 128 + rng.choice([-1, 0, 1])]
        if i == 0:
            lens.append(bs * rng.randrange(65, 72) + rng.randrange(bs))  # past 64 blocks
        shared = 2 if i == 1 else 0
        if shared:
            lens = [max(lens) + 2 * bs] + lens  # sequence 0 fills the blocks the others share
        scale = round(rng.uniform(0.01, 0.5), 3) if i == 2 else None
        cases.append((f"case {i}: {kv * group}/{kv} heads, head_size {hs}, block_size {bs}, lengths {lens}, "
                      f"scale {scale}",
                      dict(seq_lens=lens, num_heads=kv * group, num_kv_heads=kv, head_size=hs, block_size=bs,
                           shared_blocks=shared, seed=seed + i), scale))
    return cases


def _schedules(seed: int):
    return ("round_robin", f"random:{seed % 1000}")


@check("task10", "the kernel on batches drawn at grading time", rule=RULE, hint=HINT, when=WHEN, hidden=True,
       expected=lambda run: expected_outputs(kernel_cases(run.seed), _schedules(run.seed))(run))
def kernel_random(run):
    drive_kernel(run, kernel_cases(run.seed), _schedules(run.seed))
