"""Decode attention in float64 numpy: the expected output of the kernel tasks (judge side)."""

from __future__ import annotations

import math

import numpy as np


def decode_attention(q, k, v, scale: float | None = None) -> np.ndarray:
    """One decode query per head over one sequence, in float64.

    ``q [num_heads, head_size]``, ``k`` and ``v [seq_len, num_kv_heads, head_size]``; query head
    ``h`` reads kv head ``h // (num_heads // num_kv_heads)`` (grouped-query attention).
    """
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    num_heads, head_size = q.shape
    group = num_heads // k.shape[1]
    if scale is None:
        scale = 1.0 / math.sqrt(head_size)
    # np.repeat puts kv head j at query heads j*group .. j*group+group-1, the course's rule.
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    logits = np.einsum("hd,nhd->hn", q, k) * float(scale)
    weights = np.exp(logits - logits.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    return np.einsum("hn,nhd->hd", weights, v)


def _sequence_tokens(batch, s: int) -> tuple:
    """Sequence `s`'s keys and values of a paged batch (torch or numpy), in token order, as numpy
    arrays of the cache's dtype. The judge's own reading of the cache: the batches keep no tokens
    in order (the check child builds them), and this is no student API (Task 8 is this reading)."""
    n, table = int(batch.seq_lens[s]), np.asarray(batch.block_tables[s]).astype(np.int64)
    k_cache, v_cache = np.asarray(batch.k_cache), np.asarray(batch.v_cache)
    block_size = k_cache.shape[1]
    rows = np.arange(n)
    blocks = table[rows // block_size]
    return k_cache[blocks, rows % block_size], v_cache[blocks, rows % block_size]


def kernel_expected(batch, scale: float | None = None) -> np.ndarray:
    """The decode output of a `kernel_batch.KernelBatch` in float64: ``[num_seqs, num_heads, head_size]``."""
    return np.stack([decode_attention(batch.q[s], *_sequence_tokens(batch, s), scale)
                     for s in range(len(batch.seq_lens))])


def holds(batch, s: int, k, v) -> bool:
    """True when `k` and `v` are sequence `s`'s tokens of `batch` in order, exactly (dtype too):
    a notebook checks a gather against the judge side's own reading of the cache."""
    want = _sequence_tokens(batch, s)
    got = [np.asarray(x.detach().cpu() if hasattr(x, "detach") else x) for x in (k, v)]
    return all(g.shape == w.shape and g.dtype == w.dtype and np.array_equal(g, w)
               for g, w in zip(got, want, strict=True))
