"""A decode batch in a paged KV cache, in numpy alone (its dense answer is judge side).

The kernel checks (Tasks 10 and 14) launch the student's CUDA C on numpy arrays and judge the
output against float64 attention. Neither side runs torch code, so neither should pay torch's
import (seconds of CPU per graded process): this is `pagedlab.reference.make_paged_batch`'s
layout and NaN poisoning with numpy's random generator. The decode attention the output is judged
against is `pagedlab.grader.trusted.attention.kernel_expected`, which the check child never imports.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["KernelBatch", "make_kernel_batch"]


@dataclass
class KernelBatch:
    """The kernel's five inputs (float32 and int32), and nothing else.

    Every cache slot no sequence owns is NaN. As `PagedBatch`, the batch keeps no copy of a
    sequence's tokens in order: only the block tables put the cache's rows in order.
    """

    q: np.ndarray
    k_cache: np.ndarray
    v_cache: np.ndarray
    block_tables: np.ndarray
    seq_lens: np.ndarray

    def numpy(self) -> tuple:
        """``(q, k_cache, v_cache, block_tables, seq_lens)``, in the kernel's argument order."""
        return self.q, self.k_cache, self.v_cache, self.block_tables, self.seq_lens


def block_plan(seq_lens, block_size: int, shared_blocks: int, spare_blocks: int):
    """(lengths, blocks each sequence needs, blocks each owns, cache blocks in all) of a paged
    batch where every sequence after the first shares sequence 0's first `shared_blocks`."""
    seq_lens = [int(n) for n in seq_lens]
    if min(seq_lens, default=1) < 1:
        raise ValueError(f"every sequence needs at least one token, got {seq_lens}")
    if shared_blocks and seq_lens[0] < shared_blocks * block_size:
        raise ValueError("sequence 0 must fill the blocks it shares")
    need = [-(-n // block_size) for n in seq_lens]
    own = [need[0]] + [max(0, b - shared_blocks) for b in need[1:]]
    return seq_lens, need, own, sum(own) + spare_blocks


def block_layout(seq_lens, block_size: int, shared_blocks: int, spare_blocks: int, extra_table_columns: int,
                 permutation):
    """(lengths, block tables as lists padded with ``-1``, rows in use of every physical block)
    of a paged batch; `permutation(n)` is a random order of ``range(n)`` from the caller's
    generator (physical blocks are handed out in that order). Shared by this numpy batch and
    `pagedlab.reference.make_paged_batch` (torch)."""
    seq_lens, need, _, num_blocks = block_plan(seq_lens, block_size, shared_blocks, spare_blocks)
    order = list(permutation(num_blocks))
    width = max(need) + extra_table_columns
    tables, rows_used = [], [0] * num_blocks
    for s, n in enumerate(seq_lens):
        shared = min(shared_blocks, need[s]) if s else 0
        blocks = (tables[0][:shared] if s else []) + [int(order.pop()) for _ in range(need[s] - shared)]
        for i, block in enumerate(blocks):  # a shared block is in use as far as its longest user
            rows_used[block] = max(rows_used[block], min(block_size, n - i * block_size))
        tables.append(blocks + [-1] * (width - len(blocks)))
    return seq_lens, tables, rows_used


def signed_logits(k, q, sign: int):
    """Keys and queries whose every dot product has the sign `sign` and is at least head_size in
    size: every key element in [1, ...) and every query element `sign` times one in [1, ...)
    (random, |x| / 4 + 1), so a row's logits are all positive or all negative. Works on numpy
    arrays and torch tensors alike; NaN (unused slots) stays NaN."""
    return abs(k) / 4 + 1, sign * (abs(q) / 4 + 1)


def make_kernel_batch(seq_lens, *, num_heads: int = 4, num_kv_heads: int | None = None,
                      head_size: int = 64, block_size: int = 16, shared_blocks: int = 0,
                      spare_blocks: int = 3, extra_table_columns: int = 1, seed: int = 0,
                      q_scale: float = 1.0, logit_sign: int = 0) -> KernelBatch:
    """Random float32 sequences in a shuffled paged cache (as `make_paged_batch`).

    Physical blocks come in a random order, tables carry `extra_table_columns` of ``-1``, the
    `spare_blocks` unused blocks stay NaN, and with ``shared_blocks = n`` every sequence after
    the first maps its first `n` logical blocks to sequence 0's (as after a fork). `q_scale`
    multiplies q (logits large enough that an exp without the max subtracted overflows). The
    values are drawn in cache order, block by block: only the tables put them in token order.
    `logit_sign` +1 or -1: every logit has that sign (`signed_logits`), none near 0.
    """
    num_kv_heads = num_kv_heads or num_heads
    rng = np.random.default_rng(seed)
    seq_lens, tables, rows_used = block_layout(seq_lens, block_size, shared_blocks, spare_blocks,
                                               extra_table_columns, lambda n: rng.permutation(n).tolist())
    shape = (len(rows_used), block_size, num_kv_heads, head_size)
    k_cache = rng.standard_normal(shape).astype(np.float32)
    v_cache = rng.standard_normal(shape).astype(np.float32)
    q = rng.standard_normal((len(seq_lens), num_heads, head_size))
    if logit_sign:
        k_cache, q = signed_logits(k_cache, q, logit_sign)
    for block, used in enumerate(rows_used):
        k_cache[block, used:] = np.nan
        v_cache[block, used:] = np.nan
    q = (q * q_scale).astype(np.float32)
    return KernelBatch(q, k_cache, v_cache, np.array(tables, dtype=np.int32), np.array(seq_lens, dtype=np.int32))
