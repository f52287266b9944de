"""Graded checks for Part B (`paged_attention.py`): Tasks 6-9.

Every check builds its own random data (fixed seeds, never zeros), scatters it over a shuffled
paged cache whose unused slots are NaN, and compares with a float64 answer computed without any
paging (`pagedlab.reference`). A slot read that should not happen shows up as NaN.
"""

from __future__ import annotations

import torch

from ..loader import load
from ..reference import make_paged_batch, max_relative_error
from . import CheckFailure, check, expect

RULE_SLOT = "§5 slot(p) = block_table[p // block_size] * block_size + p % block_size"
RULE_WRITE = "§5 writing K/V scatters the new tokens into the flattened cache at their slots"
RULE_GATHER = "§5 a sequence's K/V is read back through its block table, in token order"
RULE_ATTN = "§5 paged attention equals dense attention over the sequence's tokens (GQA: h // (H / H_kv))"

TOL = {torch.float32: 2e-5, torch.float64: 1e-10}
LENGTHS = lambda bs: [1, bs - 1, bs, bs + 1, 511]  # noqa: E731 - the edge cases of a block


def _module(impl):
    return load("paged_attention", impl)


def _shuffled_table(num_logical: int, num_blocks: int, seed: int, pad: int = 2) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randperm(num_blocks, generator=gen)[:num_logical].to(torch.int32)
    return torch.cat([ids, torch.full((pad,), -1, dtype=torch.int32)])


# --- Task 6 -----------------------------------------------------------------------------------


@check("task6", "slot of every position follows the block table (block sizes 8, 16, 32)", rule=RULE_SLOT)
def slots_follow_the_table(impl):
    pa = _module(impl)
    for block_size in (8, 16, 32):
        table = _shuffled_table(5, 12, seed=block_size)
        positions = torch.arange(5 * block_size)
        got = pa.slot_mapping(table, positions, block_size)
        _expect_slots(got, table, positions, block_size, f"block_size={block_size}, table={table.tolist()}")


@check("task6", "positions in any order, int32 tables, first and last token of a block", rule=RULE_SLOT)
def slots_any_order(impl):
    pa = _module(impl)
    block_size = 16
    table = _shuffled_table(4, 9, seed=7)
    positions = torch.tensor([63, 0, 15, 16, 17, 31, 32, 48, 5], dtype=torch.int32)
    got = pa.slot_mapping(table, positions, block_size)
    _expect_slots(got, table, positions, block_size, f"table={table.tolist()}, positions={positions.tolist()}")


def _expect_slots(got, table, positions, block_size, context):
    want = [int(table[p // block_size]) * block_size + p % block_size for p in positions.tolist()]
    expect(isinstance(got, torch.Tensor), f"slot_mapping must return a tensor ({context})",
           rule=RULE_SLOT, expected="torch.Tensor", actual=type(got).__name__)
    expect(not got.is_floating_point() and tuple(got.shape) == tuple(positions.shape),
           f"slot_mapping must return integer slots shaped like positions ({context})", rule=RULE_SLOT,
           expected=f"integer tensor of shape {tuple(positions.shape)}",
           actual=f"{got.dtype} tensor of shape {tuple(got.shape)}")
    got = got.tolist()
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if g != w:
            p = int(positions[i])
            raise CheckFailure(
                f"wrong slot for position {p} ({context})", rule=RULE_SLOT, expected=w, actual=g,
                hint=f"position {p} is row {p % block_size} of logical block {p // block_size}, "
                     f"which the table maps to physical block {int(table[p // block_size])}")


# --- Task 7 -----------------------------------------------------------------------------------


def _new_cache(num_blocks, block_size, num_kv_heads, head_size, dtype):
    shape = (num_blocks, block_size, num_kv_heads, head_size)
    return (torch.full(shape, float("nan"), dtype=dtype), torch.full(shape, float("nan"), dtype=dtype))


def _expect_cache(cache, slots, rows, name, context):
    """`cache` holds `rows[i]` at `slots[i]` (slots >= 0) and NaN in every other slot."""
    flat = cache.view(-1, *cache.shape[2:])
    written = torch.zeros(flat.shape[0], dtype=torch.bool)
    for i, slot in enumerate(slots.tolist()):
        if slot < 0:
            continue
        written[slot] = True
        if not torch.equal(flat[slot], rows[i].to(cache.dtype)):
            shown = "NaN (never written)" if flat[slot].isnan().any() else "different values"
            raise CheckFailure(f"{name} slot {slot} does not hold token {i}'s {name[0].upper()} ({context})",
                               rule=RULE_WRITE, expected=f"token {i}'s values", actual=shown)
    stray = (~flat[~written].isnan()).flatten(1).any(1)
    if stray.any():
        slot = int(torch.nonzero(~written)[int(torch.nonzero(stray)[0])])
        raise CheckFailure(f"{name} slot {slot} was written but no token maps to it ({context})",
                           rule=RULE_WRITE, expected="slot untouched (still NaN)", actual="overwritten",
                           hint="only the slots listed in `slots` may change; negative slots are padding")


@check("task7", "each new token's K and V land in its slot, nothing else changes", rule=RULE_WRITE)
def write_lands_in_slots(impl):
    pa = _module(impl)
    gen = torch.Generator().manual_seed(70)
    for dtype, (num_kv_heads, head_size) in ((torch.float32, (2, 64)), (torch.float64, (1, 32))):
        k_cache, v_cache = _new_cache(10, 16, num_kv_heads, head_size, dtype)
        slots = torch.randperm(160, generator=gen)[:37]
        k = torch.randn(37, num_kv_heads, head_size, generator=gen, dtype=dtype)
        v = torch.randn(37, num_kv_heads, head_size, generator=gen, dtype=dtype)
        result = pa.write_kv(k_cache, v_cache, k, v, slots)
        context = f"{dtype}, 37 tokens, num_kv_heads={num_kv_heads}, head_size={head_size}"
        expect(result is None, f"write_kv updates the caches in place and returns None ({context})",
               rule=RULE_WRITE, expected=None, actual=type(result).__name__)
        _expect_cache(k_cache, slots, k, "k_cache", context)
        _expect_cache(v_cache, slots, v, "v_cache", context)


@check("task7", "negative slots are padding and are skipped", rule=RULE_WRITE)
def write_skips_padding(impl):
    pa = _module(impl)
    gen = torch.Generator().manual_seed(71)
    k_cache, v_cache = _new_cache(4, 8, 2, 16, torch.float32)
    slots = torch.tensor([5, -1, 17, 3, -1, 30])
    k = torch.randn(6, 2, 16, generator=gen)
    v = torch.randn(6, 2, 16, generator=gen)
    pa.write_kv(k_cache, v_cache, k, v, slots)
    context = f"slots={slots.tolist()}"
    _expect_cache(k_cache, slots, k, "k_cache", context)
    _expect_cache(v_cache, slots, v, "v_cache", context)


# --- Task 8 -----------------------------------------------------------------------------------


@check("task8", "gathered K/V equal the sequence's tokens in order (lengths 1, bs-1, bs, bs+1, 511)",
       rule=RULE_GATHER)
def gather_in_order(impl):
    pa = _module(impl)
    for block_size in (8, 16):
        batch = make_paged_batch(LENGTHS(block_size), num_heads=2, num_kv_heads=2, head_size=32,
                                 block_size=block_size, seed=80 + block_size)
        for s, n in enumerate(batch.seq_lens.tolist()):
            k, v = pa.gather_kv(batch.k_cache, batch.v_cache, batch.block_tables[s], n)
            context = f"block_size={block_size}, sequence {s} of {n} tokens"
            for name, got, want in (("k", k, batch.keys[s]), ("v", v, batch.values[s])):
                _expect_tokens(got, want, name, context)


@check("task8", "gather follows shared blocks (after a fork) and float64 caches", rule=RULE_GATHER)
def gather_shared(impl):
    pa = _module(impl)
    batch = make_paged_batch([40, 45, 33], num_heads=4, num_kv_heads=2, head_size=16, block_size=16,
                             dtype=torch.float64, shared_blocks=2, seed=81)
    for s, n in enumerate(batch.seq_lens.tolist()):
        k, v = pa.gather_kv(batch.k_cache, batch.v_cache, batch.block_tables[s], n)
        context = f"sequence {s} of {n} tokens, table {batch.block_tables[s].tolist()}"
        _expect_tokens(k, batch.keys[s], "k", context)
        _expect_tokens(v, batch.values[s], "v", context)


def _expect_tokens(got, want, name, context):
    expect(isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(want.shape),
           f"gathered {name} has the wrong shape ({context})", rule=RULE_GATHER,
           expected=f"[seq_len, num_kv_heads, head_size] = {list(want.shape)}",
           actual=list(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__)
    if not torch.equal(got.to(want.dtype), want):
        bad = int(torch.nonzero((got.to(want.dtype) != want).flatten(1).any(1))[0])
        nan = bool(got[bad].isnan().any())
        raise CheckFailure(f"gathered {name} differs at token {bad} ({context})", rule=RULE_GATHER,
                           expected=f"token {bad} of the sequence",
                           actual="NaN: an unused slot of the cache was read" if nan else "other values",
                           hint="token p comes from slot_mapping(block_table, p, block_size)")


# --- Task 9 -----------------------------------------------------------------------------------


def _expect_attention(pa, batch, context, scale=None):
    out = pa.paged_attention(batch.q, batch.k_cache, batch.v_cache, batch.block_tables,
                             batch.seq_lens, scale=scale)
    expect(isinstance(out, torch.Tensor) and tuple(out.shape) == tuple(batch.q.shape),
           f"paged_attention returns out shaped like q ({context})", rule=RULE_ATTN,
           expected=list(batch.q.shape),
           actual=list(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__)
    want = batch.expected(scale)
    tol = TOL[batch.q.dtype]
    err = max_relative_error(out, want)
    if err > tol:
        diff = (out.double() - want).abs().nan_to_num(float("inf")).amax(-1)
        s, h = (int(x) for x in torch.nonzero(diff == diff.max())[0])
        raise CheckFailure(
            f"paged_attention differs from dense attention ({context})", rule=RULE_ATTN,
            expected=f"max relative error <= {tol:g}",
            actual=f"{err:.3g}, worst at sequence {s} (length {int(batch.seq_lens[s])}), head {h}",
            hint="NaN means an unused cache slot was read" if err == float("inf") else
                 "check the softmax scale, the kv head of each query head and the sequence length")


@check("task9", "MHA in float64 and float32, lengths 1, bs-1, bs, bs+1, 511", rule=RULE_ATTN)
def attention_mha(impl):
    pa = _module(impl)
    for dtype in (torch.float64, torch.float32):
        batch = make_paged_batch(LENGTHS(16), num_heads=4, head_size=64, block_size=16, dtype=dtype, seed=90)
        _expect_attention(pa, batch, f"{dtype}, 4 heads, head_size 64, block_size 16")


@check("task9", "grouped-query attention: 8/2, 12/4, 16/1 heads", rule=RULE_ATTN)
def attention_gqa(impl):
    pa = _module(impl)
    for num_heads, num_kv_heads, head_size in ((8, 2, 64), (12, 4, 32), (16, 1, 80)):
        batch = make_paged_batch([17, 100, 33], num_heads=num_heads, num_kv_heads=num_kv_heads,
                                 head_size=head_size, block_size=16, seed=91 + num_heads)
        _expect_attention(pa, batch, f"{num_heads} query heads over {num_kv_heads} kv heads, head_size {head_size}")


@check("task9", "blocks shared between sequences, block sizes 8 and 32, a custom scale", rule=RULE_ATTN)
def attention_shared_and_scale(impl):
    pa = _module(impl)
    batch = make_paged_batch([64, 70, 40], num_heads=8, num_kv_heads=4, head_size=32, block_size=8,
                             shared_blocks=4, seed=92)
    _expect_attention(pa, batch, "block_size 8, first 4 blocks shared with sequence 0")
    batch = make_paged_batch([31, 32, 33, 200], num_heads=4, head_size=96, block_size=32, seed=93)
    _expect_attention(pa, batch, "block_size 32, scale 0.3", scale=0.3)
