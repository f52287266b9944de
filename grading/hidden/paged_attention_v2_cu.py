"""Hidden checks for Task 14 (instructor only): v2 launches on batches drawn from `run.seed`,
lengths near partition edges, judged against float64 dense attention."""

from __future__ import annotations

import random

from pagedlab.checks.framework import check
from pagedlab.checks.paged_attention_v2_cu import HINT, RULE, _case, drive_v2, expected_v2


def v2_cases(seed: int):
    rng = random.Random(seed)
    cases = []
    for i in range(2):
        kv = rng.choice([1, 2, 4])
        heads = kv * rng.choice([1, 2, 4])
        bs = rng.choice([8, 16, 32])
        partition = bs * rng.choice([2, 4, 8, 16])
        lens = [max(1, rng.randrange(1, 6) * partition + rng.choice([-1, 0, 1, rng.randrange(-partition, partition)]))
                for _ in range(rng.randrange(1, 4))]
        hs = rng.choice([16, 48, 64, 128])
        scale = rng.choice([None, round(rng.uniform(0.01, 0.5), 3)])
        cases.append(_case(f"case {i}: {heads}/{kv} heads, head_size {hs}, block_size {bs}, partition_size "
                           f"{partition}, lengths {lens}, scale {scale}", lens, partition, scale,
                           num_heads=heads, num_kv_heads=kv, head_size=hs, block_size=bs, seed=seed + i))
    return cases


def _schedules(seed: int):
    return ("round_robin", f"random:{seed % 1000}")


@check("task14", "the v2 kernels on batches drawn at grading time", rule=RULE, hint=HINT, hidden=True,
       expected=lambda run: expected_v2(v2_cases(run.seed), _schedules(run.seed))(run))
def v2_random(run):
    drive_v2(run, v2_cases(run.seed), _schedules(run.seed))
