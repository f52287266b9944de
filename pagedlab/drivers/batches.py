"""Test data for the attention tasks: a decode batch stored in a paged KV cache.

Public: the check child builds its scenarios with it, and nothing here computes an answer. The
answer a batch is checked against (dense attention) is judge side (`pagedlab.grader.trusted.reference`,
root-only in the grading set-up); the notebooks' batches (`pagedlab.reference.PagedBatch`) add
`expected()` and `holds()`, which ask the judge side.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .kernel_batch import block_layout

__all__ = ["PagedBatch", "make_paged_batch", "max_relative_error"]


@dataclass
class PagedBatch:
    """A decode batch stored in a paged KV cache: the cache, the tables, and nothing else.

    ``k_cache``/``v_cache`` hold every sequence's tokens at the slots its block table gives;
    every other slot is NaN, so code that reads a slot it should not shows it in its output.
    The batch keeps no copy of a sequence's tokens in order: reading them through the block table
    is Task 8, and the check child builds these batches next to the student's code.
    """

    q: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    block_tables: torch.Tensor
    seq_lens: torch.Tensor

    @property
    def block_size(self) -> int:
        return self.k_cache.shape[1]

    def numpy(self) -> tuple:
        """``(q, k_cache, v_cache, block_tables, seq_lens)`` as numpy float32/int32, for the kernel."""
        return tuple(t.numpy() for t in (self.q.float(), self.k_cache.float(), self.v_cache.float(),
                                         self.block_tables, self.seq_lens))


def make_paged_batch(seq_lens, *, num_heads: int = 4, num_kv_heads: int | None = None,
                     head_size: int = 64, block_size: int = 16, dtype=torch.float32,
                     shared_blocks: int = 0, spare_blocks: int = 3, extra_table_columns: int = 1,
                     seed: int = 0) -> PagedBatch:
    """Random sequences of the given lengths in a shuffled paged cache.

    Physical blocks are handed out in a random order (a block table is never the identity), the
    block tables carry `extra_table_columns` of ``-1`` padding, and `spare_blocks` unused blocks
    stay NaN. With ``shared_blocks = n`` every sequence after the first maps its first `n`
    logical blocks to sequence 0's physical blocks and so shares those tokens, as after a fork
    (sequence 0 must hold at least ``n * block_size`` tokens).

    The values are drawn in cache order (block by block, row by row), never in a sequence's token
    order: only the block tables put them in order, so this code hands no one a gather's answer.
    """
    num_kv_heads = num_kv_heads or num_heads
    gen = torch.Generator().manual_seed(seed)
    seq_lens, tables, rows_used = block_layout(seq_lens, block_size, shared_blocks, spare_blocks, extra_table_columns,
                                               lambda n: torch.randperm(n, generator=gen).tolist())
    shape = (len(rows_used), block_size, num_kv_heads, head_size)
    k_cache = torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)
    v_cache = torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)
    for block, used in enumerate(rows_used):
        k_cache[block, used:] = float("nan")
        v_cache[block, used:] = float("nan")
    q = torch.randn(len(seq_lens), num_heads, head_size, generator=gen, dtype=torch.float64).to(dtype)
    return PagedBatch(q, k_cache, v_cache, torch.tensor(tables, dtype=torch.int32),
                      torch.tensor(seq_lens, dtype=torch.int32))


def max_relative_error(actual, expected) -> float:
    """``max |actual - expected| / max |expected|`` (NaN anywhere gives inf)."""
    actual = torch.as_tensor(np.asarray(actual) if not isinstance(actual, torch.Tensor) else actual)
    expected = torch.as_tensor(expected).to(torch.float64)
    diff = (actual.to(torch.float64) - expected).abs()
    if not torch.isfinite(diff).all():
        return float("inf")
    return float(diff.max() / expected.abs().max().clamp_min(1e-30)) if diff.numel() else 0.0
