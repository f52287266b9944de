"""Drivers of the hidden checks of Tasks 6-9 on drawn scenarios: block sizes, tables, positions
and slots as lists with their dtype names; batches as `make_paged_batch` arguments (the tensor
values come from the batch's `seed`, a number the grader drew for the data alone)."""

from __future__ import annotations

from ...lazy import lazy_module
from ...spec.catalog import scenario_driver
from ..paged_attention import (
    ATTN_HINT,
    RULE_ATTN,
    TOL,
    _attention_label,
    build_batch,
    gather_tokens,
)
from ..record import expect, see

torch = lazy_module("torch")
poison = lazy_module("pagedlab.drivers.poison")


def _tensor(values, dtype: str):
    return torch.tensor(values, dtype=getattr(torch, dtype))


@scenario_driver
def slots(run):
    pa = run.load("paged_attention")
    for case in run.scenario["cases"]:
        table, positions = _tensor(case["table"], case["table_dtype"]), _tensor(case["positions"], case["positions_dtype"])
        got = pa.slot_mapping(table, positions, case["block_size"])
        see(f"slot_mapping, {case['label']} (block_size {case['block_size']}, {len(positions)} positions)",
            [str(got.dtype), got.tolist()] if isinstance(got, torch.Tensor) else repr(type(got)))


@scenario_driver
def write(run):
    pa = run.load("paged_attention")
    gen = torch.Generator().manual_seed(run.scenario["values_seed"])
    for case in run.scenario["cases"]:
        shape, dtype, slots = tuple(case["shape"]), getattr(torch, case["dtype"]), torch.tensor(case["slots"])
        k_cache, v_cache = (torch.full(shape, float("nan"), dtype=dtype).as_subclass(poison.Tripwire) for _ in range(2))
        k = torch.randn(len(slots), *shape[2:], generator=gen, dtype=dtype)
        v = torch.randn(len(slots), *shape[2:], generator=gen, dtype=dtype)
        pa.write_kv(k_cache, v_cache, k, v, slots)
        see(f"k_cache after write_kv ({case['label']}, slots {slots.tolist()})", poison.plain(k_cache))
        see(f"v_cache after write_kv ({case['label']})", poison.plain(v_cache))


@scenario_driver
def gather(run):
    pa = run.load("paged_attention")
    for i, case in enumerate(run.scenario["cases"]):
        kwargs = case["batch"]
        batch = poison.poisoned(build_batch(kwargs))
        tables = batch.block_tables.to(getattr(torch, case["table_dtype"]))
        for s, n in enumerate(batch.seq_lens.tolist()):
            where = f"batch {i} (block_size {kwargs['block_size']}), sequence {s} of {n} tokens"
            gather_tokens(pa, batch, tables[s], n, lambda x, w=where: f"gathered {x} of {w}")


def attention_batch(case):
    """The batch of one attention case; `q_dtype` (when it differs from the caches') casts q."""
    kwargs = dict(case["batch"])
    q_dtype = kwargs.pop("q_dtype", None)
    batch = build_batch(kwargs)
    if q_dtype is not None:
        batch.q = batch.q.to(getattr(torch, q_dtype.removeprefix("torch.")))
    return batch


@scenario_driver
def attention(run):
    """As the public Task 9 checks, on drawn cases; the tolerance is q's dtype's (the output is
    computed in q's dtype whatever the caches' dtype)."""
    pa = run.load("paged_attention")
    for case in run.scenario["cases"]:
        context, scale = case["context"], case["scale"]
        batch = poison.poisoned(attention_batch(case))
        out = pa.paged_attention(batch.q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens,
                                 scale=scale)
        expect(isinstance(out, torch.Tensor) and tuple(out.shape) == tuple(batch.q.shape),
               f"paged_attention returns out shaped like q ({context})", rule=RULE_ATTN,
               expected=list(batch.q.shape),
               actual=list(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__)
        run.see_array(_attention_label(context), poison.plain(out).detach().double(), tol=TOL[str(batch.q.dtype)],
                      rule=RULE_ATTN, hint=ATTN_HINT)
