"""Dense attention: the answer every paged implementation in the course is checked against.

A paged KV cache changes where keys and values live, never what attention computes. So the
reference ignores blocks altogether: it takes one sequence's keys and values as plain
contiguous tensors and calls torch's `scaled_dot_product_attention`, the same primitive model
code uses. Grouped-query attention (several query heads reading one kv head) is SDPA's
``enable_gqa``, which is exactly the course's rule: query head ``h`` reads kv head
``h // (num_heads // num_kv_heads)``.

Layouts follow the cache (token-major, "NHD"): a sequence's tensors are
``[tokens, heads, head_size]``; a leading batch dimension is allowed when every sequence in the
batch has the same length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from .kernel_batch import block_plan

__all__ = ["dense_attention", "causal_mask", "PagedBatch", "make_paged_batch", "max_relative_error"]


def causal_mask(q_len: int, kv_len: int, device=None) -> torch.Tensor:
    """Boolean ``[q_len, kv_len]``: True where query ``i`` may attend to key ``j``.

    The queries are the *last* ``q_len`` tokens of the sequence (bottom-right alignment), so
    query ``i`` sits at position ``kv_len - q_len + i`` and sees keys ``0 .. that position``.
    One decode query therefore sees every key; a full prefill (``q_len == kv_len``) gets the
    usual lower-triangular mask.
    """
    if q_len > kv_len:
        raise ValueError(f"{q_len} queries cannot be the last tokens of a {kv_len}-token sequence")
    rows = torch.arange(q_len, device=device).unsqueeze(1) + (kv_len - q_len)
    cols = torch.arange(kv_len, device=device).unsqueeze(0)
    return cols <= rows


def dense_attention(q, k, v, scale: float | None = None, *, causal: bool = True):
    """Attention of queries `q` over one sequence's keys `k` and values `v`.

    Shapes: ``q [q_len, num_heads, head_size]``, ``k`` and ``v [kv_len, num_kv_heads,
    head_size]`` (optionally all with the same leading batch dimension). Returns a tensor
    shaped like `q`, of its dtype (float32 or float64; use float64 for a reference).

    ``q_len == 1`` is a decode step (the new token attends to the whole sequence);
    ``q_len == kv_len`` is a prefill with a causal mask. With ``causal=False`` every query sees
    every key. `scale` defaults to ``1/sqrt(head_size)``. numpy arrays are accepted and a numpy
    array is returned.
    """
    as_numpy = isinstance(q, np.ndarray)
    q, k, v = (_as_tensor(x, name) for x, name in ((q, "q"), (k, "k"), (v, "v")))
    if q.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"dense_attention needs float32 or float64 tensors, got q.dtype={q.dtype}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.dim() not in (3, 4) or k.dim() != q.dim() or v.dim() != q.dim():
        raise ValueError(
            "expected q [q_len, num_heads, head_size] and k, v [kv_len, num_kv_heads, head_size] "
            f"(optionally with a batch dimension in front), got q{tuple(q.shape)}, "
            f"k{tuple(k.shape)}, v{tuple(v.shape)}"
        )
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    num_heads, head_size = q.shape[-2], q.shape[-1]
    num_kv_heads = k.shape[-2]
    if k.shape[-1] != head_size:
        raise ValueError(f"q has head_size {head_size} but k has {k.shape[-1]}")
    if q.dim() == 4 and q.shape[0] != k.shape[0]:
        raise ValueError(f"batch sizes differ: q has {q.shape[0]}, k has {k.shape[0]}")
    if num_kv_heads == 0 or num_heads % num_kv_heads:
        raise ValueError(f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})")
    q_len, kv_len = q.shape[-3], k.shape[-3]
    if kv_len == 0:
        raise ValueError("attention over an empty sequence is undefined (kv_len == 0)")
    if scale is None:
        scale = 1.0 / math.sqrt(head_size)

    # SDPA wants [..., heads, tokens, head_size].
    qt, kt, vt = (x.transpose(-3, -2) for x in (q, k, v))
    mask = causal_mask(q_len, kv_len, q.device) if causal and q_len > 1 else None
    out = F.scaled_dot_product_attention(
        qt, kt, vt, attn_mask=mask, scale=float(scale), enable_gqa=num_heads != num_kv_heads
    )
    out = out.transpose(-3, -2).contiguous()
    return out.numpy() if as_numpy else out


def _as_tensor(x, name: str) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, np.ndarray):
        return torch.from_numpy(x)
    raise TypeError(f"{name} must be a torch tensor or a numpy array, got {type(x).__name__}")


# --- test data: a batch of sequences in a paged cache ---------------------------------------


@dataclass
class PagedBatch:
    """A decode batch stored in a paged KV cache, with the dense truth alongside.

    ``k_cache``/``v_cache`` hold every sequence's tokens at the slots its block table gives;
    every other slot is NaN, so code that reads a slot it should not shows it in its output.
    ``keys[s]``/``values[s]`` are sequence ``s``'s tokens as dense ``[seq_len, num_kv_heads,
    head_size]`` tensors, exactly the values stored in the cache (same dtype).
    """

    q: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    block_tables: torch.Tensor
    seq_lens: torch.Tensor
    keys: list
    values: list

    @property
    def block_size(self) -> int:
        return self.k_cache.shape[1]

    def expected(self, scale: float | None = None) -> torch.Tensor:
        """Decode output per sequence from `dense_attention` in float64: ``[num_seqs, num_heads, head_size]``."""
        rows = [dense_attention(self.q[s:s + 1].double(), k.double(), v.double(), scale)[0]
                for s, (k, v) in enumerate(zip(self.keys, self.values, strict=True))]
        return torch.stack(rows)

    def numpy(self) -> tuple:
        """``(q, k_cache, v_cache, block_tables, seq_lens)`` as numpy float32/int32, for the kernel."""
        return tuple(t.numpy() for t in (self.q.float(), self.k_cache.float(), self.v_cache.float(),
                                         self.block_tables, self.seq_lens))


def make_paged_batch(seq_lens, *, num_heads: int = 4, num_kv_heads: int | None = None,
                     head_size: int = 64, block_size: int = 16, dtype=torch.float32,
                     shared_blocks: int = 0, spare_blocks: int = 3, extra_table_columns: int = 1,
                     seed: int = 0) -> PagedBatch:
    """Random sequences of the given lengths scattered over a shuffled paged cache.

    Physical blocks are handed out in a random order (a block table is never the identity), the
    block tables carry `extra_table_columns` of ``-1`` padding, and `spare_blocks` unused blocks
    stay NaN. With ``shared_blocks = n`` every sequence after the first maps its first `n`
    logical blocks to sequence 0's physical blocks and so shares those tokens, as after a fork
    (sequence 0 must hold at least ``n * block_size`` tokens).
    """
    seq_lens, need, own, num_blocks = block_plan(seq_lens, block_size, shared_blocks, spare_blocks)
    num_kv_heads = num_kv_heads or num_heads
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(num_blocks, generator=gen).tolist()
    max_blocks = max(need) + extra_table_columns
    tables = torch.full((len(seq_lens), max_blocks), -1, dtype=torch.int32)
    shape = (num_blocks, block_size, num_kv_heads, head_size)
    k_cache = torch.full(shape, float("nan"), dtype=dtype)
    v_cache = torch.full(shape, float("nan"), dtype=dtype)
    keys, values = [], []
    for s, n in enumerate(seq_lens):
        shared = min(shared_blocks, need[s]) if s else 0
        blocks = [int(b) for b in tables[0, :shared]] + [order.pop() for _ in range(need[s] - shared)]
        tables[s, :need[s]] = torch.tensor(blocks, dtype=torch.int32)
        k = torch.randn(n, num_kv_heads, head_size, generator=gen, dtype=torch.float64).to(dtype)
        v = torch.randn(n, num_kv_heads, head_size, generator=gen, dtype=torch.float64).to(dtype)
        slots = torch.tensor([blocks[p // block_size] * block_size + p % block_size for p in range(n)])
        inherited = min(n, shared * block_size)
        # Tokens in shared blocks are the parent's: read them back instead of inventing new ones.
        k[:inherited] = k_cache.view(-1, num_kv_heads, head_size)[slots[:inherited]]
        v[:inherited] = v_cache.view(-1, num_kv_heads, head_size)[slots[:inherited]]
        k_cache.view(-1, num_kv_heads, head_size)[slots] = k
        v_cache.view(-1, num_kv_heads, head_size)[slots] = v
        keys.append(k)
        values.append(v)
    q = torch.randn(len(seq_lens), num_heads, head_size, generator=gen, dtype=torch.float64).to(dtype)
    return PagedBatch(q, k_cache, v_cache, tables, torch.tensor(seq_lens, dtype=torch.int32), keys, values)


def max_relative_error(actual, expected) -> float:
    """``max |actual - expected| / max |expected|`` (NaN anywhere gives inf)."""
    actual = torch.as_tensor(np.asarray(actual) if not isinstance(actual, torch.Tensor) else actual)
    expected = torch.as_tensor(expected).to(torch.float64)
    diff = (actual.to(torch.float64) - expected).abs()
    if not torch.isfinite(diff).all():
        return float("inf")
    return float(diff.max() / expected.abs().max().clamp_min(1e-30)) if diff.numel() else 0.0
