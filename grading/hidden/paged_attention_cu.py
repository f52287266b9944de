"""Hidden checks for Task 10 (instructor only): kernel launches on batches the grader draws; the
child runs `pagedlab.drivers.drawn.paged_attention_cu.kernel` on the cases as data."""

from __future__ import annotations

import random

from pagedlab.drivers.drawn import paged_attention_cu as drawn
from pagedlab.drivers.paged_attention_cu import HINT, RULE, WHEN, expected_outputs
from pagedlab.grader.trusted.expectations import outputs
from pagedlab.spec.catalog import hidden_scenario
from pagedlab.spec.domains import domain, logits_context, logits_kwargs


def kernel_cases(seed: int) -> dict:
    """Six cases, every class of Task 10's domain (`pagedlab.spec.domains`, "task10") in each
    grading: three main ones, one per block size 8, 16, 32 (in a drawn order) and one per heads
    class (MHA, GQA, MQA), with lengths 1, bs-1, bs+1, around the 128 threads and (the first)
    past 64 blocks and 2048 tokens, shared blocks (the second), a custom scale (the third); then
    three small ones, so that every head size class is launched: the three under a warp (8, 16,
    24), 33-128, 129-255 and 256 (the bound). The logits classes go to drawn cases: mixed signs
    (q unscaled), mixed and large (q scaled), all positive and all negative (every |logit| >= 105).
    The seed draws values only."""
    rng = random.Random(seed)
    d = domain("task10")
    block_sizes = [k.draw(rng) for k in d.axis("block_size")]
    rng.shuffle(block_sizes)
    heads = {"MHA": lambda: (rng.choice([2, 4]), 1), "GQA": lambda: (rng.choice([2, 4]), rng.choice([2, 3, 4])),
             "MQA": lambda: (1, rng.choice([2, 4, 8]))}
    sizes = [k.draw(rng) for k in d.axis("head_size")]
    main_sizes = [sizes[0], sizes[3], sizes[4]]  # 8, 33-128, 129-255 in drawn cases; the rest below
    rng.shuffle(main_sizes)
    logits = list(d.axis("logits"))
    rng.shuffle(logits)
    cases = []
    for i, (bs, kind, hs) in enumerate(zip(block_sizes, [k.name for k in d.axis("heads")], main_sizes, strict=True)):
        kv, group = heads[kind]()
        lens = [1, bs - 1, bs + 1, 128 + rng.choice([-1, 0, 1])]
        if i == 0:
            lens.append(2048 + rng.randrange(1, 200))  # past 64 blocks of 32 and 2048 tokens
        shared = 2 if i == 1 else 0
        if shared:
            lens = [max(lens) + 2 * bs] + lens  # sequence 0 fills the blocks the others share
        scale = round(rng.uniform(0.01, 0.5), 3) if i == 2 else None
        cases.append((bs, kv, group, hs, lens, shared, scale, logits[i]))
    for hs in (sizes[1], sizes[2], sizes[5]):  # 16, 24 (under a warp) and 256
        bs, kv, group = rng.choice(block_sizes), rng.choice([1, 2]), rng.choice([1, 2])
        cases.append((bs, kv, group, hs, [1, bs + 1, rng.randrange(2, 130)], 0, None, logits[3] if hs == 256 else
                      d.axis("logits")["mixed signs"]))
    found = []
    for i, (bs, kv, group, hs, lens, shared, scale, klass) in enumerate(cases):
        batch = dict(seq_lens=lens, num_heads=kv * group, num_kv_heads=kv, head_size=hs, block_size=bs,
                     shared_blocks=shared, seed=rng.randrange(2**31), **logits_kwargs(klass, rng, hs, scale))
        if not shared:
            del batch["shared_blocks"]
        found.append({"context": f"case {i}: {kv * group}/{kv} heads, head_size {hs}, block_size {bs}, lengths {lens}, "
                                 f"scale {scale}" + logits_context(batch),
                      "batch": batch, "scale": scale})
    return {"cases": found, "schedules": ["round_robin", f"random:{rng.randrange(1000)}"]}


def expected_kernel(run):
    sc = run.scenario
    return outputs(expected_outputs(drawn.kernel_cases(sc), tuple(sc["schedules"])), run)


@hidden_scenario("task10", "the kernel on batches drawn at grading time", rule=RULE, hint=HINT, when=WHEN, driver=drawn.kernel,
                 expected=expected_kernel)
def kernel_random(seed):
    return kernel_cases(seed)
