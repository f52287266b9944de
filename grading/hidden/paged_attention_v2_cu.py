"""Hidden checks for Task 14 (instructor only): v2 launches on batches the grader draws, lengths
near partition edges, judged against float64 dense attention; the child runs
`pagedlab.drivers.drawn.paged_attention_v2_cu.v2` on the cases as data."""

from __future__ import annotations

import random

from pagedlab.drivers.drawn import paged_attention_v2_cu as drawn
from pagedlab.drivers.paged_attention_v2_cu import HINT, RULE, WHEN, expected_v2
from pagedlab.grader.trusted.expectations import outputs
from pagedlab.spec.catalog import hidden_scenario
from pagedlab.spec.domains import domain, logits_context, logits_kwargs


def v2_cases(seed: int) -> dict:
    """Every class of Task 14's domain (`pagedlab.spec.domains`, "task14") in each grading: one
    case per partition class (one block, 2-8 blocks, the default 512, and 1024, past 512), the
    first three one per block size 8, 16, 32 (in a drawn order) and per heads class (MHA, GQA,
    MQA); lengths 1, within one partition, k*P-1, k*P, k*P+1 and (the third) past 64 blocks;
    shared blocks and a custom scale in the second; the logits classes in drawn cases. The seed
    draws values only."""
    rng = random.Random(seed)
    d = domain("task14")
    block_sizes = [k.draw(rng) for k in d.axis("block_size")]
    rng.shuffle(block_sizes)
    heads = {"MHA": lambda: (rng.choice([2, 4]), 1), "GQA": lambda: (rng.choice([2, 4]), rng.choice([2, 3])),
             "MQA": lambda: (1, rng.choice([2, 4, 8]))}
    kinds = [k.name for k in d.axis("heads")]
    partitions = {"one block": lambda bs: bs, "2-8 blocks": lambda bs: bs * rng.choice([2, 4, 8]),
                  "512 (the default)": lambda bs: 512, "1024 (past 512)": lambda bs: 1024}
    logits = list(d.axis("logits"))
    rng.shuffle(logits)
    cases = []
    for i, klass in enumerate(d.axis("partition_size")):
        bs = block_sizes[i] if i < 3 else rng.choice(block_sizes)
        kv, group = heads[kinds[i] if i < 3 else rng.choice(kinds)]()
        partition = partitions[klass.name](bs)
        k = rng.randrange(1, 4) if partition < 1024 else 1
        lens = [1, rng.randrange(1, partition + 1), k * partition - 1 or 1, k * partition, k * partition + 1]
        if i == 2:
            lens.append(bs * rng.randrange(65, 70) + rng.randrange(bs))  # past 64 blocks
        shared = 1 if i == 1 else 0
        if shared:
            lens = [max(lens) + bs] + lens  # sequence 0 fills the block the others share
        hs = rng.choice([16, 48, 64, 128])
        scale = round(rng.uniform(0.01, 0.5), 3) if i == 1 else None
        batch = {"seq_lens": lens, "num_heads": kv * group, "num_kv_heads": kv, "head_size": hs, "block_size": bs,
                 "seed": rng.randrange(2**31), **logits_kwargs(logits[i], rng, hs, scale)}
        if shared:
            batch["shared_blocks"] = shared
        cases.append({"context": f"case {i}: {kv * group}/{kv} heads, head_size {hs}, block_size {bs}, partition_size "
                                 f"{partition}, lengths {lens}, scale {scale}" + logits_context(batch),
                      "batch": batch, "scale": scale, "partition_size": partition})
    return {"cases": cases, "schedules": ["round_robin", f"random:{rng.randrange(1000)}"]}


def expected_kernel_v2(run):
    sc = run.scenario
    return outputs(expected_v2(drawn.v2_cases(sc), tuple(sc["schedules"])), run)


@hidden_scenario("task14", "the v2 kernels on batches drawn at grading time", rule=RULE, hint=HINT, when=WHEN, driver=drawn.v2,
                 expected=expected_kernel_v2)
def v2_random(seed):
    return v2_cases(seed)
