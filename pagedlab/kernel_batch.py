"""A decode batch in a paged KV cache, in numpy alone (its dense answer is judge side).

The kernel checks (Tasks 10 and 14) launch the student's CUDA C on numpy arrays and judge the
output against float64 attention. Neither side runs torch code, so neither should pay torch's
import (seconds of CPU per graded process): this is `pagedlab.reference.make_paged_batch`'s
layout and NaN poisoning with numpy's random generator. The decode attention the output is judged
against (`KernelBatch.expected`) is `pagedlab.trusted.attention`, which the check child never
imports.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["KernelBatch", "make_kernel_batch"]


def __getattr__(name: str):
    if name == "decode_attention":  # moved to the judge side; the old name still works there
        from .trusted.attention import decode_attention

        return decode_attention
    raise AttributeError(name)


@dataclass
class KernelBatch:
    """The kernel's five inputs (float32 and int32) and each sequence's tokens as dense arrays.

    ``keys[s]``/``values[s]``: sequence ``s``'s tokens, ``[seq_len, num_kv_heads, head_size]``,
    exactly the float32 values stored at its slots; every other cache slot is NaN.
    """

    q: np.ndarray
    k_cache: np.ndarray
    v_cache: np.ndarray
    block_tables: np.ndarray
    seq_lens: np.ndarray
    keys: list
    values: list

    def numpy(self) -> tuple:
        """``(q, k_cache, v_cache, block_tables, seq_lens)``, in the kernel's argument order."""
        return self.q, self.k_cache, self.v_cache, self.block_tables, self.seq_lens

    def expected(self, scale: float | None = None) -> np.ndarray:
        """Decode output in float64: ``[num_seqs, num_heads, head_size]``."""
        # judge side: root-only where the checks run
        from .trusted.attention import decode_attention

        return np.stack([decode_attention(self.q[s], k, v, scale)
                         for s, (k, v) in enumerate(zip(self.keys, self.values, strict=True))])


def block_plan(seq_lens, block_size: int, shared_blocks: int, spare_blocks: int):
    """(lengths, blocks each sequence needs, blocks each owns, cache blocks in all) of a paged
    batch where every sequence after the first shares sequence 0's first `shared_blocks`.
    Shared by this numpy batch and `pagedlab.reference.make_paged_batch` (torch)."""
    seq_lens = [int(n) for n in seq_lens]
    if min(seq_lens, default=1) < 1:
        raise ValueError(f"every sequence needs at least one token, got {seq_lens}")
    if shared_blocks and seq_lens[0] < shared_blocks * block_size:
        raise ValueError("sequence 0 must fill the blocks it shares")
    need = [-(-n // block_size) for n in seq_lens]
    own = [need[0]] + [max(0, b - shared_blocks) for b in need[1:]]
    return seq_lens, need, own, sum(own) + spare_blocks


def make_kernel_batch(seq_lens, *, num_heads: int = 4, num_kv_heads: int | None = None,
                      head_size: int = 64, block_size: int = 16, shared_blocks: int = 0,
                      spare_blocks: int = 3, extra_table_columns: int = 1, seed: int = 0,
                      q_scale: float = 1.0) -> KernelBatch:
    """Random float32 sequences scattered over a shuffled paged cache (as `make_paged_batch`).

    Physical blocks come in a random order, tables carry `extra_table_columns` of ``-1``, the
    `spare_blocks` unused blocks stay NaN, and with ``shared_blocks = n`` every sequence after
    the first maps its first `n` logical blocks to sequence 0's (as after a fork). `q_scale`
    multiplies q (logits large enough that an exp without the max subtracted overflows).
    """
    seq_lens, need, own, num_blocks = block_plan(seq_lens, block_size, shared_blocks, spare_blocks)
    num_kv_heads = num_kv_heads or num_heads
    rng = np.random.default_rng(seed)
    order = rng.permutation(num_blocks).tolist()
    tables = np.full((len(seq_lens), max(need) + extra_table_columns), -1, dtype=np.int32)
    shape = (num_blocks, block_size, num_kv_heads, head_size)
    k_cache = np.full(shape, np.nan, dtype=np.float32)
    v_cache = np.full(shape, np.nan, dtype=np.float32)
    k_slots = k_cache.reshape(-1, num_kv_heads, head_size)  # views: writing a slot writes the cache
    v_slots = v_cache.reshape(-1, num_kv_heads, head_size)
    keys, values = [], []
    for s, n in enumerate(seq_lens):
        shared = min(shared_blocks, need[s]) if s else 0
        blocks = [int(b) for b in tables[0, :shared]] + [order.pop() for _ in range(need[s] - shared)]
        tables[s, :need[s]] = blocks
        k = rng.standard_normal((n, num_kv_heads, head_size)).astype(np.float32)
        v = rng.standard_normal((n, num_kv_heads, head_size)).astype(np.float32)
        slots = np.array([blocks[p // block_size] * block_size + p % block_size for p in range(n)])
        inherited = min(n, shared * block_size)
        # Tokens in shared blocks are the parent's: read them back instead of inventing new ones.
        k[:inherited] = k_slots[slots[:inherited]]
        v[:inherited] = v_slots[slots[:inherited]]
        k_slots[slots] = k
        v_slots[slots] = v
        keys.append(k)
        values.append(v)
    q = (rng.standard_normal((len(seq_lens), num_heads, head_size)) * q_scale).astype(np.float32)
    return KernelBatch(q, k_cache, v_cache, tables, np.array(seq_lens, dtype=np.int32), keys, values)
