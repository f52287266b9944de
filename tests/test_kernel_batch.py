"""The kernel checks' numpy batch keeps `make_paged_batch`'s promises, and its float64 answer is
torch's dense attention (the checks of Tasks 10 and 14 judge against it)."""

from __future__ import annotations

import numpy as np

from pagedlab.drivers.kernel_batch import make_kernel_batch
from pagedlab.grader.trusted.attention import kernel_expected
from pagedlab.reference import dense_attention


def _tokens(batch, s):
    """Sequence `s`'s K and V read through its table (the test's own reading of the slots)."""
    n, bs = int(batch.seq_lens[s]), batch.k_cache.shape[1]
    slots = [int(batch.block_tables[s, p // bs]) * bs + p % bs for p in range(n)]
    return (cache.reshape(-1, *cache.shape[2:])[slots] for cache in (batch.k_cache, batch.v_cache))


def test_tokens_sit_at_their_table_slots_and_every_other_slot_is_nan():
    batch = make_kernel_batch([1, 15, 16, 17, 40], num_heads=4, num_kv_heads=2, head_size=8, block_size=16, seed=3)
    flat = batch.k_cache.reshape(-1, 2, 8)
    used = np.zeros(len(flat), dtype=bool)
    for s, n in enumerate(batch.seq_lens.tolist()):
        table = batch.block_tables[s]
        assert (table[-(-n // 16):] == -1).all()  # padding past the sequence's last block
        slots = [int(table[p // 16]) * 16 + p % 16 for p in range(n)]
        used[slots] = True
    assert np.isnan(flat[~used]).all() and not np.isnan(flat[used]).any()
    assert batch.q.dtype == batch.k_cache.dtype == np.float32 and batch.block_tables.dtype == np.int32


def test_shared_blocks_hold_the_first_sequences_tokens():
    batch = make_kernel_batch([48, 40, 20], num_heads=2, head_size=8, block_size=16, shared_blocks=2, seed=5)
    assert (batch.block_tables[1, :2] == batch.block_tables[0, :2]).all()
    (k0, v0), (k1, _), (_, v2) = (_tokens(batch, s) for s in range(3))
    assert np.array_equal(k1[:32], k0[:32])
    assert np.array_equal(v2[:20], v0[:20])
    assert list(vars(batch)) == ["q", "k_cache", "v_cache", "block_tables", "seq_lens"]  # no tokens in order


def test_the_float64_answer_is_dense_attention_with_grouped_query_heads():
    batch = make_kernel_batch([1, 37, 100], num_heads=8, num_kv_heads=2, head_size=16, block_size=8, seed=9)
    for scale in (None, 0.3):
        got = kernel_expected(batch, scale)
        for s in range(3):
            k, v = (x.astype(np.float64) for x in _tokens(batch, s))
            want = dense_attention(batch.q[s:s + 1].astype(np.float64), k, v, scale)[0]
            assert np.allclose(got[s], want, rtol=0, atol=1e-12)
