"""Graded checks for Part B (`paged_attention.py`): Tasks 6-9.

Every check builds its own random data (fixed seeds, never zeros), scatters it over a shuffled
paged cache whose unused slots are NaN, and compares with a float64 answer computed without any
paging (`pagedlab.reference`, on the judge side only). A slot read that should not happen shows up as NaN, and the
caches of Tasks 7-9 are poisoned (`poison.py`): a -1 table entry or a negative slot used as an
index raises, and the block a -1 would wrap to is NaN.
"""

from __future__ import annotations

import operator

from ..lazy import lazy_module
from ..spec.catalog import CheckFailure, Expected, check
from .hints import When
from .record import expect, row_digest, see

# Imported when a driver or an expectation first needs them: the grader of Tasks 6-8 only lists
# these checks (their records are committed), so it never pays torch's import.
torch = lazy_module("torch")
batches = lazy_module("pagedlab.drivers.batches")
poison = lazy_module("pagedlab.drivers.poison")

RULE_SLOT = "notebook 06, The slot of a token: slot(p) = block_table[p // block_size] * block_size + p % block_size"
RULE_WRITE = "notebook 06, Task 7 · write_kv: writing K/V scatters the new tokens into the flattened cache at their slots"
RULE_GATHER = "notebook 07, Gather: a sequence's K/V is read back through its block table, in token order"
RULE_ATTN = "notebook 07, Attention with grouped-query heads: paged attention equals dense attention over the sequence's tokens (GQA: h // (H / H_kv))"

TOL = {"torch.float32": 2e-5, "torch.float64": 1e-10}  # by str(dtype): no torch at import
def attention_tol(batch: dict) -> float:
    """The relative tolerance of one case's output: q's dtype's `TOL` (the output is computed in
    q's dtype), times the case's `q_scale`: large logits carry rounding in proportion to their
    size, which a softmax passes on (as Task 10's `output_tol`; the float32 reference reached 0.8
    of the unscaled tolerance with q scaled 60-100); logits all of one sign (`logit_sign`, 105-200
    in size) 20 times the base tolerance, as Task 10."""
    dtype = str(batch.get("q_dtype", batch.get("dtype", "torch.float32")))
    factor = max(1.0, float(batch.get("q_scale", 1)), 20.0 * bool(batch.get("logit_sign")))
    return TOL[dtype if dtype.startswith("torch.") else f"torch.{dtype}"] * factor


LENGTHS = lambda bs: [1, bs - 1, bs, bs + 1, 511]  # noqa: E731 - the edge cases of a block


def _module(run):
    return run.load("paged_attention")


def _shuffled_table(num_logical: int, num_blocks: int, seed: int, pad: int = 2) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randperm(num_blocks, generator=gen)[:num_logical].to(torch.int32)
    return torch.cat([ids, torch.full((pad,), -1, dtype=torch.int32)])


# --- Task 6 -----------------------------------------------------------------------------------


@check("task6", "slot of every position follows the block table (block sizes 8, 16, 32)", rule=RULE_SLOT)
def slots_follow_the_table(run):
    pa = _module(run)
    for block_size in (8, 16, 32):
        table = _shuffled_table(5, 12, seed=block_size)
        positions = torch.arange(5 * block_size)
        got = pa.slot_mapping(table, positions, block_size)
        _expect_slots(got, table, positions, block_size, f"block_size={block_size}, table={table.tolist()}")


@check("task6", "positions in any order, int32 tables, first and last token of a block", rule=RULE_SLOT)
def slots_any_order(run):
    pa = _module(run)
    block_size = 16
    table = _shuffled_table(4, 9, seed=7)
    positions = torch.tensor([63, 0, 15, 16, 17, 31, 32, 48, 5], dtype=torch.int32)
    got = pa.slot_mapping(table, positions, block_size)
    _expect_slots(got, table, positions, block_size, f"table={table.tolist()}, positions={positions.tolist()}")


def _expect_slots(got, table, positions, block_size, context):
    want = [int(table[p // block_size]) * block_size + p % block_size for p in positions.tolist()]
    expect(isinstance(got, torch.Tensor), f"slot_mapping must return a tensor ({context})",
           rule=RULE_SLOT, expected="torch.Tensor", actual=type(got).__name__)
    expect(got.dtype == torch.int64 and tuple(got.shape) == tuple(positions.shape),
           f"slot_mapping must return int64 slots shaped like positions ({context})", rule=RULE_SLOT,
           expected=f"torch.int64 tensor of shape {tuple(positions.shape)}",
           actual=f"{got.dtype} tensor of shape {tuple(got.shape)}",
           hint="slots index the flattened cache, which can exceed 2**31 elements: vLLM keeps them int64")
    got = got.tolist()
    see(f"slot_mapping: slots of positions {positions.tolist()[:12]}{' …' if len(positions) > 12 else ''} ({context})", got,
        rule=RULE_SLOT)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if g != w:
            p = int(positions[i])
            raise CheckFailure(
                f"wrong slot for position {p} ({context})", rule=RULE_SLOT, expected=w, actual=g,
                hint=f"position {p} is row {p % block_size} of logical block {p // block_size}, "
                     f"which the table maps to physical block {int(table[p // block_size])}")


# --- Task 7 -----------------------------------------------------------------------------------


def _new_cache(num_blocks, block_size, num_kv_heads, head_size, dtype):
    """NaN caches that refuse negative slots: a padding token written anywhere raises."""
    shape = (num_blocks, block_size, num_kv_heads, head_size)
    return tuple(torch.full(shape, float("nan"), dtype=dtype).as_subclass(poison.Tripwire) for _ in range(2))


def _expect_cache(cache, slots, rows, name, context):
    """`cache` holds `rows[i]` at `slots[i]` (slots >= 0) and NaN in every other slot."""
    cache = poison.plain(cache)
    see(f"write_kv: {name} afterwards ({context})", cache, rule=RULE_WRITE)
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
def write_lands_in_slots(run):
    pa = _module(run)
    gen = torch.Generator().manual_seed(70)
    for dtype, (num_kv_heads, head_size) in ((torch.float32, (2, 64)), (torch.float64, (1, 32))):
        k_cache, v_cache = _new_cache(10, 16, num_kv_heads, head_size, dtype)
        slots = torch.randperm(160, generator=gen)[:37]
        k = torch.randn(37, num_kv_heads, head_size, generator=gen, dtype=dtype)
        v = torch.randn(37, num_kv_heads, head_size, generator=gen, dtype=dtype)
        result = pa.write_kv(k_cache, v_cache, k, v, slots)
        context = f"{dtype}, 37 tokens, num_kv_heads={num_kv_heads}, head_size={head_size}"
        expect(result is None, f"write_kv updates the caches in place and returns None ({context})",
               rule=RULE_WRITE, expected="None", actual=type(result).__name__)
        _expect_cache(k_cache, slots, k, "k_cache", context)
        _expect_cache(v_cache, slots, v, "v_cache", context)


@check("task7", "negative slots are padding and are skipped", rule=RULE_WRITE)
def write_skips_padding(run):
    pa = _module(run)
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
def gather_in_order(run):
    pa = _module(run)
    for block_size in (8, 16):
        batch = poison.poisoned(batches.make_paged_batch(LENGTHS(block_size), num_heads=2, num_kv_heads=2, head_size=32,
                                          block_size=block_size, seed=80 + block_size))
        for s, n in enumerate(batch.seq_lens.tolist()):
            context = f"block_size={block_size}, sequence {s} of {n} tokens"
            gather_tokens(pa, batch, batch.block_tables[s], n, lambda x, c=context: f"gather_kv: gathered {x} ({c})")


@check("task8", "gather follows shared blocks (after a fork) and float64 caches", rule=RULE_GATHER)
def gather_shared(run):
    pa = _module(run)
    batch = poison.poisoned(batches.make_paged_batch([40, 45, 33], num_heads=4, num_kv_heads=2, head_size=16, block_size=16,
                                      dtype=torch.float64, shared_blocks=2, seed=81))
    for s, n in enumerate(batch.seq_lens.tolist()):
        context = f"sequence {s} of {n} tokens, table {batch.block_tables[s].tolist()}"
        gather_tokens(pa, batch, batch.block_tables[s], n, lambda x, c=context: f"gather_kv: gathered {x} ({c})")


GATHER_HINT = ("token p comes from slot_mapping(block_table, p, block_size), with block_size = k_cache.shape[1] "
               "(the cache is [num_blocks, block_size, num_kv_heads, head_size])")
GATHER_WHEN = (When("nan_row", "token {row} is NaN: an unused slot of the cache was read (the rest of the last "
                               "block, or the block of a -1 entry)"),)


def gather_tokens(pa, batch, table, seq_len, label):
    """Call the student's gather_kv on one sequence and record its k and v (`see_tokens`;
    `label("k")` names what is recorded). gather_kv usually calls the student's own slot_mapping (Task 6): the
    block sizes it passes are watched, so an error raised down there by a wrong block size is
    explained as Task 8's mistake (which block size, and which the cache has), not as Task 6's."""
    block_size = int(batch.k_cache.shape[1])
    passed, own = [], getattr(pa, "slot_mapping", None)

    def watched(*args, **kwargs):
        size = kwargs.get("block_size", args[2] if len(args) > 2 else None)
        try:
            passed.append(operator.index(size))  # an int, or a 0-d integer tensor
        except TypeError:
            pass
        return own(*args, **kwargs)

    if callable(own):
        pa.slot_mapping = watched
    try:
        k, v = pa.gather_kv(batch.k_cache, batch.v_cache, table, seq_len)
    except Exception as exc:
        wrong = next((b for b in passed if b != block_size), None)
        if wrong is None:
            raise
        mapped = int((table >= 0).sum())
        raise CheckFailure(
            _shape_label(label("k")), rule=RULE_GATHER,
            expected=f"gather_kv returns k and v of [seq_len, num_kv_heads, head_size] = "
                     f"{[seq_len, *batch.k_cache.shape[2:]]}",
            actual=f"gather_kv raised {type(exc).__name__} ({str(exc)[:200]}) after calling slot_mapping with "
                   f"block_size={wrong}, but this cache's block size is k_cache.shape[1] = {block_size} "
                   f"(k_cache is [num_blocks, block_size, num_kv_heads, head_size]). With block_size={wrong}, "
                   f"{seq_len} tokens need ceil({seq_len} / {wrong}) = {-(-seq_len // wrong)} logical blocks; "
                   f"the table maps {mapped}") from None
    finally:
        if callable(own):
            pa.slot_mapping = own
    wrong = next((b for b in passed if b != block_size), None)
    note = "" if wrong is None else (f"gather_kv called slot_mapping with block_size={wrong}, but this cache's block "
                                     f"size is k_cache.shape[1] = {block_size}")
    for name, got in (("k", k), ("v", v)):
        see_tokens(got, batch.k_cache, seq_len, label(name), note=note)


def _shape_label(label: str) -> str:
    return f"{label}: gather_kv returns it shaped [seq_len, num_kv_heads, head_size]"


def see_tokens(got, cache, seq_len, label, note=""):
    """Record gathered K or V token by token (`record.row_digest`), cast to the cache's dtype:
    the batch holds no tokens in order, so the judge compares them with the reference's record
    and names the first token that differs."""
    got = poison.plain(got)
    shape = [seq_len, *cache.shape[2:]]
    expect(isinstance(got, torch.Tensor) and list(got.shape) == shape,
           _shape_label(label), rule=RULE_GATHER,
           expected=f"[seq_len, num_kv_heads, head_size] = {shape}",
           actual=list(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__)
    see(label, row_digest(got.detach().to(cache.dtype), "token"), rule=RULE_GATHER, hint=GATHER_HINT,
        when=GATHER_WHEN, note=note)


# --- Task 9 -----------------------------------------------------------------------------------


def _attention_label(context: str) -> str:
    return f"paged_attention output ({context})"


def build_batch(kwargs):
    """`make_paged_batch(**kwargs)`; `q_scale` multiplies q (large logits: a softmax without
    its max subtracted overflows); `logit_sign` +1 or -1 gives every logit that sign
    (`kernel_batch.signed_logits`)."""
    from .kernel_batch import signed_logits

    kwargs = dict(kwargs)
    q_scale = kwargs.pop("q_scale", 1)
    sign = kwargs.pop("logit_sign", 0)
    if isinstance(kwargs.get("dtype"), str):  # "torch.float64" in the module's case lists
        kwargs["dtype"] = getattr(torch, kwargs["dtype"].removeprefix("torch."))
    batch = batches.make_paged_batch(**kwargs)
    if sign:
        batch.k_cache, batch.q = signed_logits(batch.k_cache, batch.q, sign)
    batch.q = batch.q * q_scale
    return batch


def drive_attention(run, cases) -> None:
    pa = _module(run)
    for context, kwargs, scale in cases:
        batch = poison.poisoned(build_batch(kwargs))
        out = pa.paged_attention(batch.q, batch.k_cache, batch.v_cache, batch.block_tables,
                                 batch.seq_lens, scale=scale)
        expect(isinstance(out, torch.Tensor) and tuple(out.shape) == tuple(batch.q.shape),
               f"paged_attention returns out shaped like q ({context})", rule=RULE_ATTN,
               expected=list(batch.q.shape),
               actual=list(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__)
        run.see_array(_attention_label(context), poison.plain(out).detach().double(), tol=TOL[str(batch.q.dtype)], rule=RULE_ATTN,
                      hint=ATTN_HINT)


ATTN_HINT = ""  # every hint of these checks is conditional (ATTN_WHEN, _padding_hints)
ATTN_WHEN = (When("computed_nan", "NaN means an unused cache slot was read: only positions below seq_len hold "
                                  "the sequence's tokens; the rest of the last block and the -1 padding do not"),)
PADDING_HINT = ("padding took part in the softmax: positions past seq_len (the -1 entries and the rest of the "
                "last block) must get no weight. Masked with a 0 logit they still get exp(0 - max); mask "
                "with -inf, or gather only seq_len tokens")


def expected_attention(cases) -> Expected:
    """The judge side's float64 dense attention of `cases` (`pagedlab.grader.trusted.expectations`)."""
    return Expected("attention", (cases,))


MHA = [(f"{dtype}, 4 heads, head_size 64, block_size 16",
        dict(seq_lens=LENGTHS(16), num_heads=4, head_size=64, block_size=16, dtype=dtype, seed=90), None)
       for dtype in ("torch.float64", "torch.float32")]
GQA = [(f"{h} query heads over {kv} kv heads, head_size {hs}",
        dict(seq_lens=[17, 100, 33], num_heads=h, num_kv_heads=kv, head_size=hs, block_size=16, seed=91 + h), None)
       for h, kv, hs in ((8, 2, 64), (12, 4, 32), (16, 1, 80))]
SHARED_AND_SCALE = [
    ("block_size 8, first 4 blocks shared with sequence 0",
     dict(seq_lens=[64, 70, 40], num_heads=8, num_kv_heads=4, head_size=32, block_size=8, shared_blocks=4, seed=92),
     None),
    ("block_size 32, scale 0.3", dict(seq_lens=[31, 32, 33, 200], num_heads=4, head_size=96, block_size=32, seed=93),
     0.3),
]

for _name, _cases in (("MHA in float64 and float32, lengths 1, bs-1, bs, bs+1, 511", MHA),
                      ("grouped-query attention: 8/2, 12/4, 16/1 heads", GQA),
                      ("blocks shared between sequences, block sizes 8 and 32, a custom scale", SHARED_AND_SCALE)):
    check("task9", _name, rule=RULE_ATTN, hint=ATTN_HINT, when=ATTN_WHEN, expected=expected_attention(_cases),
          cases=_cases)(drive_attention)
