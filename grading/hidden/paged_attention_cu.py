"""Hidden checks for Task 10 (instructor only): kernel launches on batches drawn from `run.seed`."""

from __future__ import annotations

import random

from pagedlab.checks.framework import check
from pagedlab.checks.paged_attention_cu import HINT, RULE, drive_kernel, expected_outputs


def kernel_cases(seed: int):
    rng = random.Random(seed)
    cases = []
    for i in range(2):
        kv = rng.choice([1, 2, 4])
        heads = kv * rng.choice([1, 2, 4])
        bs = rng.choice([8, 16, 32])
        shared = rng.choice([0, 2])
        lens = [rng.randrange(shared * bs + 1, shared * bs + 600) for _ in range(rng.randrange(1, 4))]
        scale = rng.choice([None, round(rng.uniform(0.01, 0.5), 3)])
        hs = rng.choice([16, 48, 64, 128, 192])
        cases.append((f"case {i}: {heads}/{kv} heads, head_size {hs}, block_size {bs}, lengths {lens}, scale {scale}",
                      dict(seq_lens=lens, num_heads=heads, num_kv_heads=kv, head_size=hs, block_size=bs,
                           shared_blocks=shared, seed=seed + i), scale))
    return cases


def _schedules(seed: int):
    return ("round_robin", f"random:{seed % 1000}")


@check("task10", "the kernel on batches drawn at grading time", rule=RULE, hint=HINT, hidden=True,
       expected=lambda run: expected_outputs(kernel_cases(run.seed), _schedules(run.seed))(run))
def kernel_random(run):
    drive_kernel(run, kernel_cases(run.seed), _schedules(run.seed))
