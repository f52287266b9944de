"""Hidden checks for Tasks 6-9 (instructor only). Shapes, sizes and data come from `run.seed`."""

from __future__ import annotations

import random

import torch

from pagedlab.checks.framework import check, see
from pagedlab.checks.paged_attention import (
    ATTN_HINT,
    RULE_ATTN,
    TOL,
    drive_attention,
    expected_attention,
)
from pagedlab.reference import make_paged_batch

RULE = "the same rules as the public checks, on scenarios drawn at grading time"


@check("task6", "slot mapping for block sizes and tables drawn at grading time", rule=RULE, hidden=True)
def slots_random(run):
    pa = run.load("paged_attention")
    gen = torch.Generator().manual_seed(run.seed)
    for block_size in (run.rng.choice([1, 2, 4, 64]), run.rng.choice([8, 16, 32, 128])):
        blocks = run.rng.randrange(2, 12)
        table = torch.randperm(blocks + 20, generator=gen)[:blocks].to(torch.int32)
        positions = torch.randint(0, blocks * block_size, (run.rng.randrange(1, 60),), generator=gen)
        got = pa.slot_mapping(table, positions, block_size)
        see(f"slot_mapping (block_size {block_size}, {len(positions)} positions)",
            got.tolist() if isinstance(got, torch.Tensor) else repr(type(got)))


@check("task7", "write_kv with sizes, dtypes and padding drawn at grading time", rule=RULE, hidden=True)
def write_random(run):
    pa = run.load("paged_attention")
    gen = torch.Generator().manual_seed(run.seed)
    dtype = run.rng.choice([torch.float32, torch.float64])
    blocks, bs, heads, hs = run.rng.randrange(2, 9), run.rng.choice([4, 8, 16]), run.rng.randrange(1, 4), run.rng.choice([8, 24, 64])
    shape = (blocks, bs, heads, hs)
    k_cache, v_cache = torch.full(shape, float("nan"), dtype=dtype), torch.full(shape, float("nan"), dtype=dtype)
    n = run.rng.randrange(1, blocks * bs)
    slots = torch.randperm(blocks * bs, generator=gen)[:n]
    slots[torch.rand(n, generator=gen) < 0.2] = -1
    k = torch.randn(n, heads, hs, generator=gen, dtype=dtype)
    v = torch.randn(n, heads, hs, generator=gen, dtype=dtype)
    pa.write_kv(k_cache, v_cache, k, v, slots)
    see("k_cache after write_kv", k_cache)
    see("v_cache after write_kv", v_cache)


@check("task8", "gather_kv of batches drawn at grading time", rule=RULE, hidden=True)
def gather_random(run):
    pa = run.load("paged_attention")
    rng = run.rng
    batch = make_paged_batch([rng.randrange(1, 300) for _ in range(rng.randrange(1, 5))],
                             num_heads=2, num_kv_heads=rng.choice([1, 2]), head_size=rng.choice([8, 40]),
                             block_size=rng.choice([4, 8, 16, 32]), shared_blocks=0, seed=run.seed)
    for s, n in enumerate(batch.seq_lens.tolist()):
        k, v = pa.gather_kv(batch.k_cache, batch.v_cache, batch.block_tables[s], n)
        see(f"gathered k of sequence {s}", k)
        see(f"gathered v of sequence {s}", v)


def attention_cases(seed: int):
    rng = random.Random(seed)
    cases = []
    for i in range(3):
        kv = rng.choice([1, 2, 4])
        heads = kv * rng.choice([1, 2, 3, 8])
        bs = rng.choice([4, 8, 16, 32])
        shared = rng.choice([0, 1])
        lens = [rng.randrange(shared * bs + 1, shared * bs + 400) for _ in range(rng.randrange(1, 5))]
        # The first case always uses the default scale on a head size no public check uses.
        scale = None if i == 0 else rng.choice([None, round(rng.uniform(0.01, 0.5), 3)])
        head_size = rng.choice([16, 24, 40, 48]) if i == 0 else rng.choice([16, 48, 64])
        dtype = rng.choice([torch.float32, torch.float64])
        cases.append((f"case {i}: {heads}/{kv} heads, block_size {bs}, lengths {lens}, scale {scale}, {dtype}",
                      dict(seq_lens=lens, num_heads=heads, num_kv_heads=kv, head_size=head_size,
                           block_size=bs, dtype=dtype, shared_blocks=shared, seed=seed + i), scale))
    return cases


@check("task9", "paged attention on batches drawn at grading time", rule=RULE_ATTN, hint=ATTN_HINT, hidden=True,
       expected=lambda run: expected_attention(attention_cases(run.seed))(run))
def attention_random(run):
    drive_attention(run, attention_cases(run.seed))


assert TOL  # the same tolerances as the public checks
