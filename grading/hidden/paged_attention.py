"""Hidden checks for Tasks 6-9 (instructor only).

Every grading covers every class of each task's domain (pagedlab/checks/README.md, "Domains"):
the classes are fixed here, and `run.seed` only draws the values inside each class (which block
size of the non-powers of two, which lengths past 64 blocks, the data).
"""

from __future__ import annotations

import random

from pagedlab.checks.framework import check, see
from pagedlab.checks.paged_attention import (
    ATTN_HINT,
    RULE_ATTN,
    TOL,
    drive_attention,
    expected_attention,
)
from pagedlab.lazy import lazy_module

# Imported by the drivers when they run: the grader only lists these checks (see the public module).
torch = lazy_module("torch")
batches = lazy_module("pagedlab.batches")
poison = lazy_module("pagedlab.checks.poison")

RULE = "the same rules as the public checks, on scenarios drawn at grading time"

POWERS_OF_TWO = [2, 4, 8, 16, 32, 64, 128]
NOT_POWERS_OF_TWO = [3, 5, 6, 7, 12, 20, 24, 48, 100]


def _positions(rng, gen, blocks, block_size, dtype):
    """Every block's first and last token, plus random ones, in a random order."""
    edges = [b * block_size for b in range(blocks)] + [b * block_size + block_size - 1 for b in range(blocks)]
    extra = torch.randint(0, blocks * block_size, (rng.randrange(1, 40),), generator=gen).tolist()
    chosen = edges + extra
    rng.shuffle(chosen)
    return torch.tensor(chosen, dtype=dtype)


def slot_cases(seed: int):
    """(label, block_size, table, positions): one per class of Task 6's domain."""
    rng, gen = random.Random(seed), torch.Generator().manual_seed(seed)
    cases = []
    for label, block_size, table_dtype, pos_dtype in (
            ("block_size 1", 1, torch.int32, torch.int64),
            ("a power-of-two block size", rng.choice(POWERS_OF_TWO), torch.int64, torch.int32),
            ("a block size that is not a power of two", rng.choice(NOT_POWERS_OF_TWO), torch.int32, torch.int64)):
        blocks = rng.randrange(2, 12)
        table = torch.randperm(blocks + 20, generator=gen)[:blocks].to(table_dtype)
        table = torch.cat([table, torch.full((2,), -1, dtype=table_dtype)])  # -1 padding, never addressed
        cases.append((label, block_size, table, _positions(rng, gen, blocks, block_size, pos_dtype)))
    # Slots past 2**31 from an int32 table: the product must be taken in int64.
    block_size = rng.choice([16, 24, 32])
    high = torch.tensor([2**31 // block_size + rng.randrange(1, 10**6) for _ in range(3)], dtype=torch.int32)
    cases.append(("slots past 2**31 (int32 table)", block_size, high, _positions(rng, gen, 3, block_size, torch.int64)))
    return cases


@check("task6", "slot mapping for block sizes and tables drawn at grading time", rule=RULE, hidden=True)
def slots_random(run):
    pa = run.load("paged_attention")
    for label, block_size, table, positions in slot_cases(run.seed):
        got = pa.slot_mapping(table, positions, block_size)
        see(f"slot_mapping, {label} (block_size {block_size}, {len(positions)} positions)",
            [str(got.dtype), got.tolist()] if isinstance(got, torch.Tensor) else repr(type(got)))


def write_cases(seed: int):
    """(label, cache shape, dtype, slots): padding -1 and other negatives, slot 0 and the cache's
    last slot, one kv head and several, both float dtypes, non-power-of-two blocks."""
    rng = random.Random(seed)
    cases = []
    for label, dtype, block_size, heads in (
            ("float32, one kv head", torch.float32, rng.choice(POWERS_OF_TWO[:5]), 1),
            ("float64, several kv heads, block size not a power of two", torch.float64,
             rng.choice(NOT_POWERS_OF_TWO[:6]), rng.randrange(2, 5))):
        blocks = rng.randrange(2, 9)
        total = blocks * block_size
        # The first and the last slot of the cache, distinct slots in between, in a random order.
        real = [0, total - 1] + rng.sample(range(1, total - 1), rng.randrange(0, total - 2))
        padding = [-1] + [-rng.randrange(2, total + 5) for _ in range(rng.randrange(1, 6))]
        slots = real + padding
        rng.shuffle(slots)
        slots = torch.tensor(slots)
        cases.append((label, (blocks, block_size, heads, rng.choice([8, 24, 64])), dtype, slots))
    cases.append(("only padding tokens", (2, 4, 1, 8), torch.float32, torch.full((3,), -1)))
    return cases


@check("task7", "write_kv with sizes, dtypes and padding drawn at grading time", rule=RULE, hidden=True)
def write_random(run):
    pa = run.load("paged_attention")
    gen = torch.Generator().manual_seed(run.seed)
    for label, shape, dtype, slots in write_cases(run.seed):
        k_cache, v_cache = (torch.full(shape, float("nan"), dtype=dtype).as_subclass(poison.Tripwire) for _ in range(2))
        k = torch.randn(len(slots), *shape[2:], generator=gen, dtype=dtype)
        v = torch.randn(len(slots), *shape[2:], generator=gen, dtype=dtype)
        pa.write_kv(k_cache, v_cache, k, v, slots)
        see(f"k_cache after write_kv ({label}, slots {slots.tolist()})", poison.plain(k_cache))
        see(f"v_cache after write_kv ({label})", poison.plain(v_cache))


def gather_cases(seed: int):
    """(make_paged_batch arguments, table dtype): lengths 1, bs-1, bs, bs+1, a multiple of bs and
    one past 64 blocks in each batch; block size 1, powers of two and other block sizes; float32
    and float64; int32 and int64 tables; shared blocks."""
    rng = random.Random(seed)
    cases = []
    for bs, dtype, kv, shared, table_dtype in (
            (rng.choice([8, 16, 32]), torch.float32, 1, 0, torch.int32),
            (rng.choice([3, 5, 6, 12, 24]), torch.float64, rng.choice([2, 4]), 1, torch.int64),
            (1, torch.float32, rng.choice([1, 2]), 0, torch.int32)):  # one token per block
        lens = [1, bs - 1 or 1, bs, bs + 1, bs * rng.randrange(2, 9), bs * rng.randrange(65, 90) + rng.randrange(bs)]
        rng.shuffle(lens)
        if shared:
            lens = [max(lens)] + lens  # sequence 0 fills the block the others share
        cases.append((dict(seq_lens=lens, num_heads=kv, num_kv_heads=kv, head_size=rng.choice([8, 40]),
                           block_size=bs, dtype=dtype, shared_blocks=shared, seed=seed + bs), table_dtype))
    return cases


@check("task8", "gather_kv of batches drawn at grading time", rule=RULE, hidden=True)
def gather_random(run):
    pa = run.load("paged_attention")
    for i, (kwargs, table_dtype) in enumerate(gather_cases(run.seed)):
        batch = poison.poisoned(batches.make_paged_batch(**kwargs))
        tables = batch.block_tables.to(table_dtype)
        for s, n in enumerate(batch.seq_lens.tolist()):
            k, v = pa.gather_kv(batch.k_cache, batch.v_cache, tables[s], n)
            where = f"batch {i} (block_size {kwargs['block_size']}), sequence {s} of {n} tokens"
            see(f"gathered k of {where}", poison.plain(k))
            see(f"gathered v of {where}", poison.plain(v))


def attention_cases(seed: int):
    """MHA, GQA and MQA; default and custom scales; both dtypes; power-of-two and other block
    sizes; lengths at block edges and past 64 blocks; shared blocks; logits large enough that a
    softmax without its max subtracted overflows."""
    rng = random.Random(seed)
    cases = []
    for i, (kv, group, bs, dtype, shared, q_scale) in enumerate((
            (rng.choice([2, 4]), 1, rng.choice([8, 16, 32]), torch.float32, 0, 1),
            (rng.choice([2, 4]), rng.choice([2, 3, 4, 8]), rng.choice([3, 5, 6, 12, 24]), torch.float64, 1, 1),
            (1, rng.choice([2, 4, 6]), rng.choice([8, 16]), torch.float32, 0, rng.choice([60, 80, 100])))):
        lens = [1, bs, bs + 1, rng.randrange(2, 200), bs * rng.randrange(65, 80) + rng.randrange(bs)]
        if shared:
            lens = [max(lens)] + lens
        # Case 0 uses the default scale on a head size no public check uses; case 1 a drawn scale.
        scale = None if i != 1 else round(rng.uniform(0.01, 0.5), 3)
        head_size = rng.choice([16, 24, 40, 48]) if i == 0 else rng.choice([16, 48, 64])
        heads = kv * group
        cases.append((f"case {i}: {heads}/{kv} heads, block_size {bs}, lengths {lens}, scale {scale}, {dtype}"
                      + (f", q scaled by {q_scale}" if q_scale != 1 else ""),
                      dict(seq_lens=lens, num_heads=heads, num_kv_heads=kv, head_size=head_size,
                           block_size=bs, dtype=dtype, shared_blocks=shared, seed=seed + i, q_scale=q_scale), scale))
    return cases


@check("task9", "paged attention on batches drawn at grading time", rule=RULE_ATTN, hint=ATTN_HINT, hidden=True,
       expected=lambda run: expected_attention(attention_cases(run.seed))(run))
def attention_random(run):
    drive_attention(run, attention_cases(run.seed))


assert TOL  # the same tolerances as the public checks
