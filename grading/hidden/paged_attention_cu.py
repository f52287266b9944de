"""Hidden checks for Task 10 (instructor only): kernel launches on batches the grader draws; the
child runs `pagedlab.checks.drawn.paged_attention_cu.kernel` on the cases as data."""

from __future__ import annotations

import random

from pagedlab.checks.drawn import paged_attention_cu as drawn
from pagedlab.checks.framework import hidden_scenario
from pagedlab.checks.paged_attention_cu import HINT, RULE, WHEN, expected_outputs

UNDER_A_WARP = [8, 16, 24]


def kernel_cases(seed: int) -> dict:
    """Three cases, one per block size 8, 16, 32 (in a drawn order): MHA, GQA and MQA; a head size
    under a warp, one between and one above the 128 threads; lengths 1, bs-1, bs+1, around the
    128 threads, and past 64 blocks and 2048 tokens; shared blocks, a custom scale, and logits
    large enough to overflow exp (q scaled 40-60x). Then two small cases, so that every head
    size under a warp (8, 16, 24) is launched in every grading. The seed draws values only."""
    rng = random.Random(seed)
    block_sizes = [8, 16, 32]
    rng.shuffle(block_sizes)
    under = list(UNDER_A_WARP)
    rng.shuffle(under)
    heads = [(rng.choice([2, 4]), 1), (rng.choice([2, 4]), rng.choice([2, 3, 4])), (1, rng.choice([2, 4, 8]))]
    head_sizes = [under[0], rng.choice([48, 80, 112]), rng.choice([144, 192, 256])]
    rng.shuffle(head_sizes)
    cases = []
    for i, (bs, (kv, group), hs) in enumerate(zip(block_sizes, heads, head_sizes, strict=True)):
        lens = [1, bs - 1, bs + 1, 128 + rng.choice([-1, 0, 1])]
        if i == 0:
            lens.append(2048 + rng.randrange(1, 200))  # past 64 blocks of 32 and 2048 tokens
        shared = 2 if i == 1 else 0
        if shared:
            lens = [max(lens) + 2 * bs] + lens  # sequence 0 fills the blocks the others share
        scale = round(rng.uniform(0.01, 0.5), 3) if i == 2 else None
        q_scale = rng.randrange(40, 61) if i == 0 else 1
        cases.append((f"case {i}: {kv * group}/{kv} heads, head_size {hs}, block_size {bs}, lengths {lens}, "
                      f"scale {scale}" + (f", q scaled by {q_scale}" if q_scale != 1 else ""),
                      dict(seq_lens=lens, num_heads=kv * group, num_kv_heads=kv, head_size=hs, block_size=bs,
                           shared_blocks=shared, seed=rng.randrange(2**31), q_scale=q_scale), scale))
    for i, hs in enumerate(under[1:], start=3):
        bs, kv, group = rng.choice([8, 16, 32]), rng.choice([1, 2]), rng.choice([1, 2])
        lens = [1, bs + 1, rng.randrange(2, 130)]
        cases.append((f"case {i}: {kv * group}/{kv} heads, head_size {hs}, block_size {bs}, lengths {lens}, scale None",
                      dict(seq_lens=lens, num_heads=kv * group, num_kv_heads=kv, head_size=hs, block_size=bs,
                           seed=rng.randrange(2**31)), None))
    return {"cases": [{"context": c, "batch": b, "scale": s} for c, b, s in cases],
            "schedules": ["round_robin", f"random:{rng.randrange(1000)}"]}


def expected_kernel(run):
    sc = run.scenario
    return expected_outputs(drawn.kernel_cases(sc), tuple(sc["schedules"]))(run)


@hidden_scenario("task10", "the kernel on batches drawn at grading time", rule=RULE, hint=HINT, when=WHEN, driver=drawn.kernel,
                 expected=expected_kernel)
def kernel_random(seed):
    return kernel_cases(seed)
