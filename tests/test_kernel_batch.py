"""The kernel checks' numpy batch keeps `make_paged_batch`'s promises, and its float64 answer is
torch's dense attention (the checks of Tasks 10 and 14 judge against it)."""

from __future__ import annotations

import numpy as np

from pagedlab.kernel_batch import make_kernel_batch
from pagedlab.reference import dense_attention


def test_tokens_sit_at_their_table_slots_and_every_other_slot_is_nan():
    batch = make_kernel_batch([1, 15, 16, 17, 40], num_heads=4, num_kv_heads=2, head_size=8, block_size=16, seed=3)
    flat = batch.k_cache.reshape(-1, 2, 8)
    used = np.zeros(len(flat), dtype=bool)
    for s, n in enumerate(batch.seq_lens.tolist()):
        table = batch.block_tables[s]
        assert (table[-(-n // 16):] == -1).all()  # padding past the sequence's last block
        slots = [int(table[p // 16]) * 16 + p % 16 for p in range(n)]
        assert np.array_equal(flat[slots], batch.keys[s])
        used[slots] = True
    assert np.isnan(flat[~used]).all() and not np.isnan(flat[used]).any()
    assert batch.q.dtype == batch.k_cache.dtype == np.float32 and batch.block_tables.dtype == np.int32


def test_shared_blocks_hold_the_first_sequences_tokens():
    batch = make_kernel_batch([48, 40, 20], num_heads=2, head_size=8, block_size=16, shared_blocks=2, seed=5)
    assert (batch.block_tables[1, :2] == batch.block_tables[0, :2]).all()
    assert np.array_equal(batch.keys[1][:32], batch.keys[0][:32])
    assert np.array_equal(batch.values[2][:20], batch.values[0][:20])


def test_the_float64_answer_is_dense_attention_with_grouped_query_heads():
    batch = make_kernel_batch([1, 37, 100], num_heads=8, num_kv_heads=2, head_size=16, block_size=8, seed=9)
    for scale in (None, 0.3):
        got = batch.expected(scale)
        for s in range(3):
            want = dense_attention(batch.q[s:s + 1].astype(np.float64), batch.keys[s].astype(np.float64),
                                   batch.values[s].astype(np.float64), scale)[0]
            assert np.allclose(got[s], want, rtol=0, atol=1e-12)
