"""Hidden checks for Tasks 6-9 (instructor only).

The planners run in the grader and return each scenario as data; the sandboxed child runs the
public drivers of `pagedlab.drivers.drawn.paged_attention` on it. Every grading covers every class
of each task's domain (`pagedlab.spec.domains`; pagedlab/drivers/README.md, "Domains"), and the
seed only draws the values inside each class (which block size of the non-powers of two, which
lengths past 64 blocks, the data). Planning needs no torch.
"""

from __future__ import annotations

import random

from pagedlab.drivers.drawn import paged_attention as drawn
from pagedlab.drivers.paged_attention import (
    ATTN_HINT,
    ATTN_WHEN,
    RULE_ATTN,
    RULE_GATHER,
    RULE_SLOT,
    RULE_WRITE,
    _attention_label,
    attention_tol,
)
from pagedlab.grader.trusted.expectations import padding_hints
from pagedlab.spec.catalog import hidden_scenario
from pagedlab.spec.domains import domain, logits_context, logits_kwargs

RULE = "the same rules as the public checks, on scenarios drawn at grading time"

POWERS_OF_TWO = [2, 4, 8, 16, 32, 64, 128]
NOT_POWERS_OF_TWO = [3, 5, 6, 7, 12, 20, 24, 48, 100]
F32, F64 = "torch.float32", "torch.float64"


def _data_seed(rng) -> int:
    """The seed of a batch's tensor values: drawn here, it tells the child nothing else."""
    return rng.randrange(2**31)


def _positions(rng, blocks, block_size):
    """Every block's first and last token, plus random ones, in a random order."""
    edges = [b * block_size for b in range(blocks)] + [b * block_size + block_size - 1 for b in range(blocks)]
    chosen = edges + [rng.randrange(blocks * block_size) for _ in range(rng.randrange(1, 40))]
    rng.shuffle(chosen)
    return chosen


def slot_cases(seed: int):
    """One case per block_size class of Task 6's domain (the table and positions dtypes spread
    over them), then slots past 2**31 from an int32 table, then a table past 1024 blocks read
    at past 1024 positions."""
    rng = random.Random(seed)
    d = domain("task6")
    dtypes = {"1": ("int32", "int64"), "a power of two": ("int64", "int32"), "not a power of two": ("int32", "int64")}
    cases = []
    for klass in d.axis("block_size"):
        block_size = klass.draw(rng)
        table_dtype, pos_dtype = dtypes[klass.name]
        blocks = rng.randrange(2, 12)
        table = rng.sample(range(blocks + 20), blocks) + [-1, -1]  # -1 padding, never addressed
        cases.append({"label": f"block_size {klass.name}", "block_size": block_size, "table": table,
                      "table_dtype": table_dtype, "positions": _positions(rng, blocks, block_size),
                      "positions_dtype": pos_dtype})
    # Slots past 2**31 from an int32 table: the product must be taken in int64.
    block_size = rng.choice([16, 24, 32])
    high = [2**31 // block_size + rng.randrange(1, 10**6) for _ in range(3)]
    cases.append({"label": "slots past 2**31 (int32 table)", "block_size": block_size, "table": high,
                  "table_dtype": "int32", "positions": _positions(rng, 3, block_size), "positions_dtype": "int64"})
    # A table past 1024 blocks, its every block's first and last token: past 1024 positions.
    blocks = d.axis("block_table length")["past 1024 blocks"].draw(rng)
    block_size = rng.choice([2, 3, 4])
    table = rng.sample(range(blocks + 50), blocks) + [-1]
    cases.append({"label": "a table past 1024 blocks", "block_size": block_size, "table": table,
                  "table_dtype": rng.choice(["int32", "int64"]), "positions": _positions(rng, blocks, block_size),
                  "positions_dtype": rng.choice(["int32", "int64"])})
    return {"cases": cases}


@hidden_scenario("task6", "slot mapping for block sizes and tables drawn at grading time", rule=RULE_SLOT,
                 driver=drawn.slots)
def slots_random(seed):
    return slot_cases(seed)


def write_cases(seed: int):
    """Padding -1 and other negatives, slot 0 and the cache's last slot, one kv head and several,
    both float dtypes, non-power-of-two blocks, a batch past 1024 tokens, a batch of padding only."""
    rng = random.Random(seed)
    d = domain("task7")
    cases = []
    for label, dtype, block_size, heads, blocks in (
            ("float32, one kv head", "float32", rng.choice(POWERS_OF_TWO[:5]), 1, rng.randrange(2, 9)),
            ("float64, several kv heads, block size not a power of two", "float64",
             rng.choice(NOT_POWERS_OF_TWO[:6]), d.axis("num_kv_heads")["several"].draw(rng), rng.randrange(2, 9)),
            ("float32, past 1024 tokens", "float32", rng.choice([8, 16]), 1, 140)):
        total = blocks * block_size
        # The first and the last slot of the cache, distinct slots in between, in a random order.
        many = d.axis("tokens")["past 1024"].draw(rng) if blocks == 140 else rng.randrange(0, total - 2)
        real = [0, total - 1] + rng.sample(range(1, total - 1), min(many, total - 2))
        padding = [-1] + [-rng.randrange(2, total + 5) for _ in range(rng.randrange(1, 6))]
        slots = real + padding
        rng.shuffle(slots)
        cases.append({"label": label, "shape": [blocks, block_size, heads, rng.choice([8, 24, 64]) if blocks < 140 else 8],
                      "dtype": dtype, "slots": slots})
    cases.append({"label": "only padding tokens", "shape": [2, 4, 1, 8], "dtype": "float32", "slots": [-1, -1, -1]})
    return {"cases": cases, "values_seed": _data_seed(rng)}


@hidden_scenario("task7", "write_kv with sizes, dtypes and padding drawn at grading time", rule=RULE_WRITE,
                 driver=drawn.write)
def write_random(seed):
    return write_cases(seed)


def gather_cases(seed: int):
    """Lengths 1, bs-1, bs, bs+1, a multiple of bs and one past 64 blocks in each batch; block
    size 1, powers of two and other block sizes; float32 and float64; int32 and int64 tables;
    shared blocks; past 1024 tokens (the past-64-blocks length of the first batch)."""
    rng = random.Random(seed)
    cases = []
    for bs, dtype, kv, shared, table_dtype in (
            (rng.choice([16, 32]), F32, 1, 0, "int32"),
            (rng.choice([3, 5, 6, 12, 24]), F64, rng.choice([2, 4]), 1, "int64"),
            (1, F32, rng.choice([1, 2]), 0, "int32")):  # one token per block
        long = bs * rng.randrange(65, 90) + rng.randrange(bs)
        lens = [1, bs - 1 or 1, bs, bs + 1, bs * rng.randrange(2, 9), max(long, 1025 + rng.randrange(60))]
        rng.shuffle(lens)
        if shared:
            lens = [max(lens)] + lens  # sequence 0 fills the block the others share
        cases.append({"batch": dict(seq_lens=lens, num_heads=kv, num_kv_heads=kv, head_size=rng.choice([8, 40]),
                                    block_size=bs, dtype=dtype, shared_blocks=shared, seed=_data_seed(rng)),
                      "table_dtype": table_dtype})
    return {"cases": cases}


@hidden_scenario("task8", "gather_kv of batches drawn at grading time", rule=RULE_GATHER, driver=drawn.gather)
def gather_random(seed):
    return gather_cases(seed)


def attention_cases(seed: int):
    """MHA, GQA and MQA; default and custom scales; every dtype pair of q and the caches (computed
    in q's dtype); power-of-two and other block sizes; lengths at block edges and past 64 blocks;
    shared blocks; every logits class (mixed signs, mixed and large, all positive, all negative:
    a softmax without its max subtracted overflows or underflows) in a float32-q case: four
    cases, one per dtype pair, and a fifth, float32, for the fourth logits class."""
    rng = random.Random(seed)
    d = domain("task9")
    large = [k for k in d.axis("logits") if k.name != "mixed signs"]  # to the float32-q cases 2, 3, 4
    rng.shuffle(large)
    cases = []
    for i, (kv, group, bs, dtype, q_dtype, shared) in enumerate((
            (rng.choice([2, 4]), 1, rng.choice([8, 16, 32]), F32, F64, 0),
            (rng.choice([2, 4]), rng.choice([2, 3, 4, 8]), rng.choice([3, 5, 6, 12, 24]), F64, F64, 1),
            (1, rng.choice([2, 4, 6]), rng.choice([8, 16]), F32, F32, 0),
            (rng.choice([1, 2]), rng.choice([1, 2]), rng.choice([4, 8, 12]), F64, F32, 0),
            (rng.choice([1, 2]), rng.choice([1, 2]), rng.choice([8, 16]), F32, F32, 0))):
        lens = ([1, bs, bs + 1, rng.randrange(2, 200)] + ([bs * rng.randrange(65, 80) + rng.randrange(bs)]
                                                          if i < 3 else []))
        if shared:
            lens = [max(lens)] + lens
        # Case 0 uses the default scale on a head size no public check uses; case 1 a drawn scale.
        scale = None if i != 1 else round(rng.uniform(0.01, 0.5), 3)
        head_size = rng.choice([16, 24, 40, 48]) if i in (0, 3) else rng.choice([16, 48, 64])
        klass = large[i - 2] if i >= 2 else d.axis("logits")["mixed signs"]
        heads = kv * group
        batch = dict(seq_lens=lens, num_heads=heads, num_kv_heads=kv, head_size=head_size, block_size=bs,
                     dtype=dtype, shared_blocks=shared, seed=_data_seed(rng), **logits_kwargs(klass, rng, head_size, scale))
        if q_dtype != dtype:
            batch["q_dtype"] = q_dtype
        cases.append({"context": f"case {i}: {heads}/{kv} heads, block_size {bs}, lengths {lens}, scale {scale}, "
                                 f"{dtype}" + (f", q in {q_dtype}" if q_dtype != dtype else "") + logits_context(batch),
                      "batch": batch, "scale": scale})
    return {"cases": cases}


def expected_attention(run):
    """The trusted side: float64 dense attention of every case, within q's dtype's tolerance,
    and the padding hint's trigger."""
    # torch: only Task 9's judging pays its import
    from pagedlab.grader.trusted.reference import paged_expected

    found = []
    for c in run.scenario["cases"]:
        batch, tol = drawn.attention_batch(c), attention_tol(c["batch"])
        found.append((_attention_label(c["context"]), paged_expected(batch, c["scale"]).numpy(), tol,
                      padding_hints(batch, c["scale"], tol)))
    return found


@hidden_scenario("task9", "paged attention on batches drawn at grading time", rule=RULE_ATTN, hint=ATTN_HINT, when=ATTN_WHEN,
                 driver=drawn.attention, expected=expected_attention)
def attention_random(seed):
    return attention_cases(seed)
