"""Hidden checks for Task 14 (instructor only): v2 launches on batches the grader draws, lengths
near partition edges, judged against float64 dense attention; the child runs
`pagedlab.checks.drawn.paged_attention_v2_cu.v2` on the cases as data."""

from __future__ import annotations

import random

from pagedlab.checks.drawn import paged_attention_v2_cu as drawn
from pagedlab.checks.framework import hidden_scenario
from pagedlab.checks.paged_attention_v2_cu import HINT, RULE, WHEN, expected_v2


def v2_cases(seed: int) -> dict:
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
        cases.append({"context": f"case {i}: {kv * group}/{kv} heads, head_size {hs}, block_size {bs}, partition_size "
                                 f"{partition}, lengths {lens}, scale {scale}",
                      "batch": {"seq_lens": lens, "num_heads": kv * group, "num_kv_heads": kv, "head_size": hs,
                                "block_size": bs, "seed": rng.randrange(2**31)},
                      "scale": scale, "partition_size": partition})
    return {"cases": cases, "schedules": ["round_robin", f"random:{rng.randrange(1000)}"]}


def expected_kernel_v2(run):
    sc = run.scenario
    return expected_v2(drawn.v2_cases(sc), tuple(sc["schedules"]))(run)


@hidden_scenario("task14", "the v2 kernels on batches drawn at grading time", rule=RULE, hint=HINT, when=WHEN, driver=drawn.v2,
                 expected=expected_kernel_v2)
def v2_random(seed):
    return v2_cases(seed)
