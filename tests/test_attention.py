"""Part B: the dense reference, the paged-batch test data, the torch solutions and their checks.

Numerics: float64 references, random inputs from fixed seeds, NaN in every cache slot that
should never be read. Tolerances are stated where used.
"""

import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedlab import graded as checks
from pagedlab.loader import ROOT, load
from pagedlab.reference import (
    causal_mask,
    dense_attention,
    make_paged_batch,
    max_relative_error,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from forked_checks import CheckServer  # noqa: E402


def naive_attention(q, k, v, scale, causal=True):
    """Attention written out with explicit loops over heads and queries (float64)."""
    q_len, num_heads, _ = q.shape
    kv_len, num_kv_heads, _ = k.shape
    out = torch.empty_like(q)
    for h in range(num_heads):
        kv = h // (num_heads // num_kv_heads)
        for i in range(q_len):
            last = kv_len - q_len + i if causal else kv_len - 1
            logits = torch.stack([q[i, h] @ k[j, kv] for j in range(last + 1)]) * scale
            w = torch.exp(logits - logits.max())
            w = w / w.sum()
            out[i, h] = sum(w[j] * v[j, kv] for j in range(last + 1))
    return out


def rand(*shape, seed, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# --- reference --------------------------------------------------------------------------------


@pytest.mark.parametrize("num_heads, num_kv_heads", [(4, 4), (8, 2), (6, 1)])
@pytest.mark.parametrize("q_len, kv_len", [(1, 1), (1, 37), (9, 9), (3, 10)])
def test_dense_attention_matches_explicit_loops(num_heads, num_kv_heads, q_len, kv_len):
    q = rand(q_len, num_heads, 16, seed=1)
    k = rand(kv_len, num_kv_heads, 16, seed=2)
    v = rand(kv_len, num_kv_heads, 16, seed=3)
    got = dense_attention(q, k, v)
    want = naive_attention(q, k, v, 1 / math.sqrt(16))
    assert got.shape == q.shape and got.dtype == torch.float64
    assert torch.allclose(got, want, rtol=0, atol=1e-12)


def test_dense_attention_custom_scale_and_no_mask():
    q, k, v = rand(4, 2, 8, seed=4), rand(4, 2, 8, seed=5), rand(4, 2, 8, seed=6)
    got = dense_attention(q, k, v, scale=0.7, causal=False)
    assert torch.allclose(got, naive_attention(q, k, v, 0.7, causal=False), rtol=0, atol=1e-12)
    # Causal differs from full attention for every query but the last.
    causal = dense_attention(q, k, v, scale=0.7)
    assert torch.allclose(causal[-1], got[-1], atol=1e-12)
    assert not torch.allclose(causal[0], got[0], atol=1e-3)


def test_dense_attention_float32_close_to_float64_and_numpy_round_trip():
    q, k, v = rand(1, 8, 64, seed=7), rand(300, 2, 64, seed=8), rand(300, 2, 64, seed=9)
    exact = dense_attention(q, k, v)
    single = dense_attention(q.float(), k.float(), v.float())
    assert single.dtype == torch.float32
    assert max_relative_error(single, exact) < 2e-6
    from_numpy = dense_attention(q.numpy(), k.numpy(), v.numpy())
    assert isinstance(from_numpy, np.ndarray)
    assert np.allclose(from_numpy, exact.numpy(), rtol=0, atol=1e-14)


def test_dense_attention_batched_equals_per_sequence():
    q, k, v = rand(3, 1, 4, 16, seed=10), rand(3, 20, 2, 16, seed=11), rand(3, 20, 2, 16, seed=12)
    batched = dense_attention(q, k, v)
    for b in range(3):
        assert torch.allclose(batched[b], dense_attention(q[b], k[b], v[b]), rtol=0, atol=1e-14)


def test_causal_mask_is_bottom_right_aligned():
    assert causal_mask(3, 3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    assert causal_mask(1, 4).tolist() == [[True] * 4]
    assert causal_mask(2, 4).tolist() == [[True, True, True, False], [True] * 4]


@pytest.mark.parametrize("args, error, words", [
    ((rand(1, 4, 8, seed=0), rand(5, 3, 8, seed=0), rand(5, 3, 8, seed=0)), ValueError, "multiple of num_kv_heads"),
    ((rand(1, 4, 8, seed=0).float(), rand(5, 4, 8, seed=0), rand(5, 4, 8, seed=0)), TypeError, "share one dtype"),
    ((rand(1, 4, 8, seed=0).half(),) * 3, TypeError, "float32 or float64"),
    ((rand(6, 4, 8, seed=0), rand(5, 4, 8, seed=0), rand(5, 4, 8, seed=0)), ValueError, "6 queries"),
    ((rand(1, 4, 8, seed=0), rand(5, 4, 8, seed=0), rand(5, 4, 4, seed=0)), ValueError, "same shape"),
    ((rand(4, 8, seed=0), rand(5, 8, seed=0), rand(5, 8, seed=0)), ValueError, "q [q_len"),
    (([1.0], rand(5, 4, 8, seed=0), rand(5, 4, 8, seed=0)), TypeError, "numpy array"),
])
def test_dense_attention_rejects_bad_input(args, error, words):
    with pytest.raises(error, match=words.replace("[", r"\[")):
        dense_attention(*args)


# --- the paged test data ---------------------------------------------------------------------


def _tokens(batch, s):
    """Sequence `s`'s K and V read through its table, slot by slot (the test's own reading)."""
    bs, n = batch.block_size, int(batch.seq_lens[s])
    row = batch.block_tables[s].tolist()
    k = torch.stack([batch.k_cache[row[p // bs], p % bs] for p in range(n)])
    v = torch.stack([batch.v_cache[row[p // bs], p % bs] for p in range(n)])
    return k, v


def test_make_paged_batch_scatters_tokens_and_poisons_the_rest():
    batch = make_paged_batch([1, 15, 16, 17, 40], num_heads=4, num_kv_heads=2, head_size=8,
                             block_size=16, spare_blocks=3, seed=3)
    bs = batch.block_size
    used = set()
    for s, n in enumerate(batch.seq_lens.tolist()):
        row = batch.block_tables[s].tolist()
        blocks = row[: -(-n // bs)]
        assert all(b >= 0 for b in blocks) and all(b == -1 for b in row[len(blocks):])
        used |= {(blocks[p // bs], p % bs) for p in range(n)}
        k, v = _tokens(batch, s)
        assert not k.isnan().any() and not v.isnan().any() and not torch.equal(k, torch.zeros_like(k))
        assert batch.holds(s, k, v) and not batch.holds(s, v, k)
    for b in range(batch.k_cache.shape[0]):
        for r in range(bs):
            if (b, r) not in used:
                assert batch.k_cache[b, r].isnan().all() and batch.v_cache[b, r].isnan().all()
    assert len(used) == sum(batch.seq_lens.tolist())
    # A shuffled allocation: the tables are not simply 0, 1, 2, ...
    flat = [b for row in batch.block_tables.tolist() for b in row if b >= 0]
    assert flat != sorted(flat)


def test_a_paged_batch_holds_no_tokens_in_sequence_order():
    """The check child builds these batches next to the student's gather_kv: besides the query,
    the caches and the tables there is nothing on it, and its expected answer is still right."""
    import dataclasses

    batch = make_paged_batch([5, 20, 37], num_heads=4, num_kv_heads=2, head_size=16, block_size=8, seed=0)
    assert [f.name for f in dataclasses.fields(batch)] == ["q", "k_cache", "v_cache", "block_tables", "seq_lens"]
    for s in range(3):
        k, v = _tokens(batch, s)
        want = dense_attention(batch.q[s:s + 1].double(), k.double(), v.double())[0]
        assert torch.allclose(batch.expected()[s], want, rtol=0, atol=1e-12)


def test_make_paged_batch_shared_blocks_behave_like_a_fork():
    batch = make_paged_batch([48, 40, 20], num_heads=2, head_size=8, block_size=16, shared_blocks=2, seed=5)
    t = batch.block_tables
    assert t[1, :2].tolist() == t[0, :2].tolist() == t[2, :2].tolist()
    assert t[1, 2] not in t[0].tolist()
    keys = [_tokens(batch, s)[0] for s in range(3)]
    assert torch.equal(keys[1][:32], keys[0][:32])
    assert torch.equal(keys[2], keys[0][:20])
    assert not torch.equal(keys[1][32:], keys[0][32:40])


# --- the torch solution ------------------------------------------------------------------------

SOL = load("paged_attention", "solutions")


def test_slot_mapping_formula():
    table = torch.tensor([7, 2, 9, -1], dtype=torch.int32)
    got = SOL.slot_mapping(table, torch.tensor([0, 3, 4, 11, 5]), 4)
    assert got.tolist() == [28, 31, 8, 39, 9]


@settings(max_examples=40, deadline=None)
@given(block_size=st.sampled_from([1, 2, 4, 8, 16]), seq_len=st.integers(1, 70), seed=st.integers(0, 2**16))
def test_any_sequence_written_through_a_shuffled_table_reads_back_in_order(block_size, seq_len, seed):
    gen = torch.Generator().manual_seed(seed)
    blocks = -(-seq_len // block_size)
    num_blocks = blocks + 2
    table = torch.cat([torch.randperm(num_blocks, generator=gen)[:blocks], torch.tensor([-1])])
    slots = SOL.slot_mapping(table, torch.arange(seq_len), block_size)
    assert len(set(slots.tolist())) == seq_len  # no two tokens share a slot
    k_cache = torch.full((num_blocks, block_size, 1, 4), float("nan"), dtype=torch.float64)
    v_cache = k_cache.clone()
    k = torch.randn(seq_len, 1, 4, generator=gen, dtype=torch.float64)
    SOL.write_kv(k_cache, v_cache, k, -k, slots)
    got_k, got_v = SOL.gather_kv(k_cache, v_cache, table, seq_len)
    assert torch.equal(got_k, k) and torch.equal(got_v, -k)
    assert int((~k_cache.isnan()).any(-1).any(-1).sum()) == seq_len


def test_write_then_gather_round_trip_through_a_table():
    k_cache = torch.full((6, 4, 2, 3), float("nan"))
    v_cache = torch.full((6, 4, 2, 3), float("nan"))
    table = torch.tensor([5, 0, 3, -1])
    k, v = rand(10, 2, 3, seed=20).float(), rand(10, 2, 3, seed=21).float()
    SOL.write_kv(k_cache, v_cache, k, v, SOL.slot_mapping(table, torch.arange(10), 4))
    got_k, got_v = SOL.gather_kv(k_cache, v_cache, table, 10)
    assert torch.equal(got_k, k) and torch.equal(got_v, v)
    assert k_cache[1].isnan().all() and k_cache[3, 2:].isnan().all()


def test_paged_attention_prefill_written_then_decoded_matches_dense():
    """Prefill writes 30 tokens through the table; decode attends over them."""
    bs, H, KH, D, n = 8, 6, 3, 16, 30
    k_cache = torch.full((9, bs, KH, D), float("nan"), dtype=torch.float64)
    v_cache = torch.full_like(k_cache, float("nan"))
    table = torch.tensor([[4, 8, 1, 6, -1]], dtype=torch.int32)
    k, v = rand(n, KH, D, seed=30), rand(n, KH, D, seed=31)
    SOL.write_kv(k_cache, v_cache, k, v, SOL.slot_mapping(table[0], torch.arange(n), bs))
    q = rand(1, H, D, seed=32)
    out = SOL.paged_attention(q, k_cache, v_cache, table, torch.tensor([n]))
    assert torch.allclose(out[0], naive_attention(q, k, v, 1 / math.sqrt(D))[0], rtol=0, atol=1e-12)


# --- graded checks catch planted bugs ----------------------------------------------------------

PY_MUTANTS = {
    # name: (task, original text, replacement)
    "slot ignores the table": ("task6", "blocks = block_table.to(torch.int64)[positions // block_size]",
                               "blocks = positions // block_size"),
    "slot offset hard-coded to 16": ("task6", "positions % block_size", "positions % 16"),
    "slot uses the block id as an offset": ("task6", "blocks * block_size + positions % block_size",
                                            "blocks + positions % block_size"),
    "write does not skip padding": ("task7", "keep = slots >= 0", "keep = slots >= -1"),
    "write forgets V": ("task7", "    v_slots[slots[keep]] = v[keep].to(v_cache.dtype)\n", ""),
    "write puts V into the K cache": ("task7", "v_slots[slots[keep]] = v[keep]", "k_slots[slots[keep]] = v[keep]"),
    "gather off by one token": ("task8", "positions = torch.arange(seq_len,", "positions = 1 + torch.arange(seq_len,"),
    "gather ignores the table": ("task8", "slots = slot_mapping(block_table, positions, block_size)",
                                 "slots = positions"),
    "attention maps query head h to kv head h % num_kv_heads": (
        "task9", "q_groups = q[s].reshape(num_kv_heads, group, head_size)",
        "q_groups = q[s].reshape(group, num_kv_heads, head_size).transpose(0, 1)"),
    "attention forgets the scale": ("task9", "logits = torch.einsum(\"kgd,tkd->kgt\", q_groups, k) * scale",
                                    "logits = torch.einsum(\"kgd,tkd->kgt\", q_groups, k)"),
    "attention skips the last sequence": ("task9", "for s in range(num_seqs):", "for s in range(num_seqs - 1):"),
    "attention drops the newest token": ("task9", "int(seq_lens[s])", "max(1, int(seq_lens[s]) - 1)"),
    "attention uses the default scale always": ("task9", "    if scale is None:\n        scale = 1.0 / math.sqrt(head_size)\n",
                                                "    scale = 1.0 / math.sqrt(head_size)\n"),
}


@pytest.fixture(scope="module")
def server():
    """The planted bugs go through one check server (tests/forked_checks.py): torch and the checks
    imported once, each mutant's drivers in a fork of it, judged by the real judge."""
    found = CheckServer(torch=True)
    yield found
    found.close()


@pytest.mark.parametrize("name", sorted(PY_MUTANTS))
def test_graded_checks_catch_planted_bug(name, tmp_path, server):
    task, old, new = PY_MUTANTS[name]
    text = (ROOT / "solutions" / "paged_attention.py").read_text()
    assert text.count(old) >= 1, f"mutation {name!r} no longer applies to solutions/paged_attention.py"
    (tmp_path / "paged_attention.py").write_text(text.replace(old, new))
    failed = [message for passed, message in server.grade(tmp_path, [task]).values() if not passed]
    assert failed, f"no {task} check catches: {name}"
    assert all("not implemented" not in message for message in failed)


def test_checks_pass_on_solutions_copied_to_a_folder(tmp_path, server):
    shutil.copy(ROOT / "solutions" / "paged_attention.py", tmp_path)
    graded = server.grade(tmp_path, ["task6", "task7", "task8", "task9"])
    assert {task for task, _ in graded} == {"task6", "task7", "task8", "task9"}
    assert all(passed for passed, _ in graded.values()), graded


def test_failure_message_names_rule_expected_and_actual(tmp_path, server):
    """Through the real runner; the server gives the same verdicts and messages."""
    task, old, new = PY_MUTANTS["slot ignores the table"]
    text = (ROOT / "solutions" / "paged_attention.py").read_text().replace(old, new)
    (tmp_path / "paged_attention.py").write_text(text)
    real = checks.results(task, tmp_path)
    message = next(r.message for r in real if not r.passed)
    assert "rule:" in message and "expected:" in message and "yours:" in message
    assert "physical block" in message
    assert server.grade(tmp_path, [task]) == {(task, r.name): (r.passed, r.message) for r in real}
