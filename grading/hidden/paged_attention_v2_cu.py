"""Hidden checks for Task 14 (instructor only): v2 launches on batches drawn from `run.seed`,
lengths near partition edges, judged against float64 dense attention."""

from __future__ import annotations

import random

from pagedlab.checks.framework import check
from pagedlab.checks.paged_attention_v2_cu import HINT, RULE, WHEN, _case, drive_v2, expected_v2


def v2_cases(seed: int):
    """Partitions of one block, of several blocks and the default 512; block sizes 8, 16, 32 (in
    a drawn order); MHA, GQA and MQA; lengths 1, one partition, k*P-1, k*P, k*P+1 and past 64
    blocks. The seed draws values only."""
    rng = random.Random(seed)
    block_sizes = [8, 16, 32]
    rng.shuffle(block_sizes)
    heads = [(rng.choice([2, 4]), 1), (rng.choice([2, 4]), rng.choice([2, 3])), (1, rng.choice([2, 4, 8]))]
    cases = []
    for i, (bs, (kv, group)) in enumerate(zip(block_sizes, heads, strict=True)):
        partition = (bs, bs * rng.choice([2, 4, 8]), 512)[i]
        k = rng.randrange(1, 4)
        lens = [1, rng.randrange(1, partition + 1), k * partition - 1 or 1, k * partition, k * partition + 1]
        if i == 2:
            lens.append(bs * rng.randrange(65, 70) + rng.randrange(bs))  # past 64 blocks
        hs = rng.choice([16, 48, 64, 128])
        scale = round(rng.uniform(0.01, 0.5), 3) if i == 1 else None
        cases.append(_case(f"case {i}: {kv * group}/{kv} heads, head_size {hs}, block_size {bs}, partition_size "
                           f"{partition}, lengths {lens}, scale {scale}", lens, partition, scale,
                           num_heads=kv * group, num_kv_heads=kv, head_size=hs, block_size=bs, seed=seed + i))
    return cases


def _schedules(seed: int):
    return ("round_robin", f"random:{seed % 1000}")


@check("task14", "the v2 kernels on batches drawn at grading time", rule=RULE, hint=HINT, when=WHEN, hidden=True,
       expected=lambda run: expected_v2(v2_cases(run.seed), _schedules(run.seed))(run))
def v2_random(run):
    drive_v2(run, v2_cases(run.seed), _schedules(run.seed))
