"""Test data for the attention tasks: a decode batch stored in a paged KV cache.

Public: the check child builds its scenarios with it. The answer a batch is checked against
(`PagedBatch.expected`, dense attention) lives in `pagedlab.trusted.reference`, which the check child never
imports and the grading set-up makes root-only. `pagedlab.reference` re-exports these names for
the notebooks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .kernel_batch import block_plan

__all__ = ["PagedBatch", "make_paged_batch", "max_relative_error"]


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
        # judge side: root-only where the checks run
        from .trusted.reference import dense_attention

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
