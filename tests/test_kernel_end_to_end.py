"""End to end: the HW3 engine allocates, its block tables place real K/V, the kernel reads them.

The engine (solutions/memory_manager.py) hands out physical blocks of 16 records for prefill,
fork (shared blocks, ref counts) and append (new pages, copy-on-write). Its block tables, read
out by `pagedlab.block_tables`, drive `write_kv` of every token's K/V into a paged cache with
one K/V block per engine block; then the CUDA kernel (CPU executor) and the torch paged
attention must reproduce dense attention over each sequence's tokens (float64 reference, 2e-5
relative error in float32).
"""

import math

import numpy as np
import pytest
import torch

from pagedlab import block_tables as bridge
from pagedlab import hw3
from pagedlab.engine.pool import Pool
from pagedlab.kernels import paged_attention_decode
from pagedlab.loader import load
from pagedlab.reference import dense_attention, max_relative_error

NUM_HEADS, NUM_KV_HEADS, HEAD_SIZE = 8, 2, 64
BLOCK_SIZE = hw3.KV_PER_BLOCK  # one engine block holds the K/V of 16 tokens


@pytest.fixture
def engine_and_tokens():
    mm = load("memory_manager", "solutions")
    pa = load("paged_attention", "solutions")
    pool = Pool(40 * hw3.BLOCK_SIZE)
    engine = mm.llm_init(pool.addr, pool.size)
    gen = torch.Generator().manual_seed(2024)

    def new_tokens(n):
        return (torch.randn(n, NUM_KV_HEADS, HEAD_SIZE, generator=gen, dtype=torch.float64),
                torch.randn(n, NUM_KV_HEADS, HEAD_SIZE, generator=gen, dtype=torch.float64))

    tokens = {}  # seq_id -> (k, v) of every token the sequence holds
    assert mm.create_sequence(engine, 7, 40) is not None  # 3 blocks, the last one half full
    tokens[7] = new_tokens(40)
    assert mm.create_sequence(engine, 3, 16) is not None  # exactly one full block
    tokens[3] = new_tokens(16)
    assert mm.fork_sequence(engine, 7, 9) is not None     # shares all 3 blocks of 7
    tokens[9] = tokens[7]
    # Appends: 9 writes into the shared half-full block (copy-on-write), 3 opens a new page,
    # 7 keeps writing into its own block once 9 has moved away.
    for seq_id, count in ((9, 30), (3, 1), (7, 5)):
        for i in range(count):
            assert mm.append_kv(engine, seq_id, 1000 * seq_id + i) == 0
        k, v = new_tokens(count)
        tokens[seq_id] = (torch.cat([tokens[seq_id][0], k]), torch.cat([tokens[seq_id][1], v]))
    yield mm, pa, engine, tokens
    assert mm.llm_destroy(engine) == 0


def test_kernel_on_the_engines_block_tables_matches_dense_attention(engine_and_tokens):
    mm, pa, engine, tokens = engine_and_tokens
    order = [9, 3, 7]
    tables = bridge.block_table_rows(engine, order, 6)
    lens = bridge.seq_lens(engine, order)
    assert lens.tolist() == [70, 17, 45]
    # Fork shared the two full blocks; copy-on-write gave 9 its own third block.
    assert tables[0, :2].tolist() == tables[2, :2].tolist() and tables[0, 2] != tables[2, 2]

    shape = (engine.total_local_blocks, BLOCK_SIZE, NUM_KV_HEADS, HEAD_SIZE)
    k_cache = torch.full(shape, float("nan"), dtype=torch.float32)
    v_cache = torch.full(shape, float("nan"), dtype=torch.float32)
    for row, seq_id in zip(torch.from_numpy(tables), order, strict=True):
        k, v = tokens[seq_id]
        slots = pa.slot_mapping(row, torch.arange(len(k)), BLOCK_SIZE)
        pa.write_kv(k_cache, v_cache, k.float(), v.float(), slots)

    gen = torch.Generator().manual_seed(7)
    q = torch.randn(len(order), NUM_HEADS, HEAD_SIZE, generator=gen, dtype=torch.float64)
    want = torch.stack([
        dense_attention(q[i:i + 1], tokens[s][0].float().double(), tokens[s][1].float().double())[0]
        for i, s in enumerate(order)
    ])

    out = paged_attention_decode(q.float().numpy(), k_cache.numpy(), v_cache.numpy(), tables, lens,
                                 impl="solutions", backend="cpu")
    assert max_relative_error(out, want) <= 2e-5
    torch_out = pa.paged_attention(q.float(), k_cache, v_cache, torch.from_numpy(tables),
                                   torch.from_numpy(lens))
    assert max_relative_error(torch_out, want) <= 2e-5


def test_a_freed_sequence_leaves_the_others_intact(engine_and_tokens):
    mm, pa, engine, tokens = engine_and_tokens
    assert mm.free_sequence(engine, 7) == 0
    order = [3, 9]
    tables = bridge.block_table_rows(engine, order)
    lens = bridge.seq_lens(engine, order)
    shape = (engine.total_local_blocks, BLOCK_SIZE, NUM_KV_HEADS, HEAD_SIZE)
    k_cache = np.full(shape, np.nan, np.float32)
    v_cache = np.full(shape, np.nan, np.float32)
    for row, seq_id in zip(tables, order, strict=True):
        k, v = (t.float().numpy() for t in tokens[seq_id])
        for p in range(len(k)):
            block = row[p // BLOCK_SIZE]
            k_cache[block, p % BLOCK_SIZE], v_cache[block, p % BLOCK_SIZE] = k[p], v[p]
    q = np.random.default_rng(3).standard_normal((2, NUM_HEADS, HEAD_SIZE)).astype(np.float32)
    out = paged_attention_decode(q, k_cache, v_cache, tables, lens, scale=0.5 / math.sqrt(HEAD_SIZE),
                                 impl="solutions", backend="cpu")
    for i, s in enumerate(order):
        want = dense_attention(torch.from_numpy(q[i:i + 1]).double(), tokens[s][0].float().double(),
                               tokens[s][1].float().double(), scale=0.5 / math.sqrt(HEAD_SIZE))
        assert max_relative_error(out[i:i + 1], want) <= 2e-5
