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

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["dense_attention", "causal_mask"]


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


def paged_expected(batch, scale: float | None = None):
    """Decode output of a paged batch (`batches.PagedBatch`) by `dense_attention` in float64:
    ``[num_seqs, num_heads, head_size]``, a torch tensor."""
    from .attention import _sequence_tokens

    rows = []
    for s in range(len(batch.seq_lens)):
        k, v = (torch.from_numpy(t).double() for t in _sequence_tokens(batch, s))
        rows.append(dense_attention(batch.q[s:s + 1].double(), k, v, scale)[0])
    return torch.stack(rows)
