"""vLLM's half-precision kernels run unchanged on the CPU executor: the float16 paged attention
V1 (dtype_float16.cuh's inline PTX), merge_attn_states (fp16, bf16, fp32) and moe_align_sum
(cub::BlockScan, atomics), as written in tests/cuda_kernels/vllm_fp16.cu in vLLM's idioms,
against float64 numpy references, with the checks off and on (no false alarm)."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

from pagedlab.cuda import RawModule

SOURCE = (Path(__file__).parent / "cuda_kernels" / "vllm_fp16.cu").read_text()
HEAD, BLOCK, THREADS = 64, 16, 128
ATTN = f"vllm::paged_attention_v1_kernel<uint16_t, {HEAD}, {BLOCK}, {THREADS}>"
MERGE = {"f2": "vllm::merge_attn_states_kernel<uint16_t, 128>",
         "f4": "vllm::merge_attn_states_kernel<float, 128>",
         "bf16": "vllm::merge_attn_states_kernel<__nv_bfloat16, 128>"}
ALIGN = "vllm::moe::moe_align_block_size_kernel<int32_t>"
SORT = "vllm::moe::count_and_sort_expert_tokens_kernel<int32_t>"
MOE_SUM = "vllm::moe::moe_sum_kernel<float, 2>"
CHECKS = (None, "all")


@functools.cache
def vllm() -> RawModule:
    return RawModule(code=SOURCE, backend="cpu", filename="vllm_fp16.cu",
                     name_expressions=[ATTN, *MERGE.values(), ALIGN, SORT, MOE_SUM]).compile()


# ---- paged attention V1, float16 ------------------------------------------------------------------
def attention_case(rng, lens=(1, 37, 130), num_heads=4, num_kv_heads=2, num_blocks=32):
    x = 16 // 2  # halves per 16 bytes: the K cache's innermost dimension
    max_blocks = -(-max(lens) // BLOCK)
    tables = rng.permutation(num_blocks)[:len(lens) * max_blocks].reshape(len(lens), max_blocks)
    k = rng.standard_normal((num_blocks, num_kv_heads, HEAD // x, BLOCK, x)).astype(np.float16)
    v = rng.standard_normal((num_blocks, num_kv_heads, HEAD, BLOCK)).astype(np.float16)
    q = rng.standard_normal((len(lens), num_heads, HEAD)).astype(np.float16)
    return q, k, v, tables.astype(np.int32), np.array(lens, np.int32)


def attention_reference(q, k, v, tables, lens, scale):
    num_seqs, num_heads, _ = q.shape
    group = num_heads // k.shape[1]
    # K cache [blocks, kv_heads, head/x, block, x] -> [blocks, kv_heads, block, head]
    keys = k.transpose(0, 1, 3, 2, 4).reshape(k.shape[0], k.shape[1], BLOCK, HEAD).astype(np.float64)
    vals = v.transpose(0, 1, 3, 2).astype(np.float64)
    out = np.zeros(q.shape)
    for s in range(num_seqs):
        t = np.arange(lens[s])
        blocks, slots = tables[s, t // BLOCK], t % BLOCK
        for h in range(num_heads):
            kk, vv = keys[blocks, h // group, slots], vals[blocks, h // group, slots]
            logits = kk @ q[s, h].astype(np.float64) * scale
            p = np.exp(logits - logits.max())
            out[s, h] = p @ vv / p.sum()
    return out


@pytest.mark.parametrize("check", CHECKS)
def test_float16_paged_attention_v1_matches_float64(check):
    rng = np.random.default_rng(0)
    q, k, v, tables, lens = attention_case(rng)
    num_seqs, num_heads, _ = q.shape
    out = np.full(q.shape, np.nan, np.float16)
    scale = np.float32(HEAD ** -0.5)
    padded = -(-int(lens.max()) // BLOCK) * BLOCK
    smem = max(padded * 4, (THREADS // 32 // 2) * HEAD * 4)
    vllm().get_function(ATTN)(
        (num_heads, num_seqs), (THREADS,),
        # vLLM's host passes torch halves as uint16_t*: the same bits, viewed
        (out.view(np.uint16), q.view(np.uint16), k.view(np.uint16), v.view(np.uint16), np.int32(k.shape[1]), scale, tables, lens, np.int32(tables.shape[1]),
         np.zeros(0, np.float32), np.int32(num_heads * HEAD), np.int32(k[0].size), np.int32(k[0, 0].size)),
        shared_mem=smem, check=check)
    want = attention_reference(q, k, v, tables, lens, float(scale))
    # V is summed 8 tokens at a time in half precision (mul/add.f16x2), as vLLM does
    np.testing.assert_allclose(out.astype(np.float64), want, atol=4e-3, rtol=4e-3)


# ---- merge_attn_states ---------------------------------------------------------------------------------
def merge_case(rng, tokens=5, heads=3, head=64):
    p_out, s_out = rng.standard_normal((2, tokens, heads, head))
    p_lse, s_lse = rng.standard_normal((2, heads, tokens)) * 3
    p_lse[0, 1], s_lse[1, 2] = np.inf, -np.inf  # a +-inf lse counts as an empty part
    return p_out, s_out, p_lse.astype(np.float32), s_lse.astype(np.float32)


def merge_reference(p_out, s_out, p_lse, s_lse):
    p, s = np.where(np.isinf(p_lse), -np.inf, p_lse).astype(np.float64), np.where(np.isinf(s_lse), -np.inf, s_lse)
    m = np.maximum(p, s)
    pe, se = np.exp(p - m), np.exp(s - m)
    tot = pe + se
    w_p, w_s = (pe / tot).T[:, :, None], (se / tot).T[:, :, None]
    return w_p * p_out + w_s * s_out, np.log(tot) + m


@pytest.mark.parametrize("dtype", sorted(MERGE))
@pytest.mark.parametrize("check", CHECKS)
def test_merge_attn_states_in_every_dtype(dtype, check):
    rng = np.random.default_rng(1)
    p_out, s_out, p_lse, s_lse = merge_case(rng)
    tokens, heads, head = p_out.shape
    if dtype == "bf16":  # numpy has no bfloat16: the raw bits, rounded to nearest even
        def enc(a):
            u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
            return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        def dec(b):
            return (b.astype(np.uint32) << 16).view(np.float32)
        tol = 2 ** -7
    else:
        enc = (lambda a: a.astype(np.float16)) if dtype == "f2" else (lambda a: a.astype(np.float32))
        dec = lambda b: b  # noqa: E731
        tol = 2e-3 if dtype == "f2" else 1e-5
    P, S = enc(p_out), enc(s_out)
    out = np.full(P.shape, 0xFFFF, np.uint16) if dtype == "bf16" else np.full(P.shape, np.nan, P.dtype)
    lse = np.full((heads, tokens), np.nan, np.float32)
    bits = (lambda a: a.view(np.uint16)) if dtype == "f2" else (lambda a: a)  # noqa: E731
    pack = 16 // P.itemsize
    threads = tokens * heads * head // pack
    vllm().get_function(MERGE[dtype])(
        (-(-threads // 128),), (128,),
        (bits(out), lse, bits(P), p_lse, bits(S), s_lse, np.uint32(tokens), np.uint32(heads), np.uint32(head)), check=check)
    want, want_lse = merge_reference(dec(P).astype(np.float64), dec(S).astype(np.float64), p_lse, s_lse)
    np.testing.assert_allclose(dec(out).astype(np.float64), want, atol=tol, rtol=tol)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-5, atol=1e-5)


# ---- moe_align_sum ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("check", CHECKS)
def test_moe_align_block_size_and_sort(check):
    rng = np.random.default_rng(2)
    num_experts, block_size, tokens, topk = 8, 4, 37, 2
    topk_ids = rng.integers(0, num_experts, (tokens, topk)).astype(np.int32)
    topk_ids[3, 1] = num_experts  # an expert of another rank (expert parallelism): skipped
    numel = topk_ids.size
    max_padded = numel + num_experts * (block_size - 1)
    sorted_ids = np.full(max_padded, -7, np.int32)
    expert_ids = np.full(-(-max_padded // block_size), -7, np.int32)
    total = np.full(1, -7, np.int32)
    cumsum = np.full(num_experts + 1, -7, np.int32)
    padded_experts, per_warp = 32, 32
    vllm().get_function(ALIGN)(
        (1,), (1024,),
        (topk_ids, sorted_ids, expert_ids, total, np.int32(num_experts), np.int32(padded_experts),
         np.int32(per_warp), np.int32(block_size), np.uint64(numel), cumsum, np.int32(max_padded)),
        shared_mem=padded_experts * 4, check=check)
    counts = np.bincount(topk_ids.ravel()[topk_ids.ravel() < num_experts], minlength=num_experts)
    padded = -(-counts // block_size) * block_size
    want_cumsum = np.concatenate([[0], np.cumsum(padded)])
    np.testing.assert_array_equal(cumsum, want_cumsum)
    assert total[0] == want_cumsum[-1]
    starts = cumsum.copy()
    vllm().get_function(SORT)((1,), (256,), (topk_ids, sorted_ids, cumsum, np.uint64(numel),
                                            np.int32(num_experts)), check=check)
    np.testing.assert_array_equal(cumsum[:-1], starts[:-1] + counts)  # atomics counted every slot
    flat = topk_ids.ravel()
    for e in range(num_experts):
        seg = sorted_ids[starts[e]:starts[e + 1]]
        # the order within an expert is the atomics' order: compare as sets, then the padding
        np.testing.assert_array_equal(np.sort(seg[:counts[e]]), np.flatnonzero(flat == e))
        assert (seg[counts[e]:] == numel).all()
        np.testing.assert_array_equal(expert_ids[starts[e] // block_size:starts[e + 1] // block_size], e)
    assert (sorted_ids[want_cumsum[-1]:] == numel).all()
    assert (expert_ids[want_cumsum[-1] // block_size:] == 0).all()


@pytest.mark.parametrize("check", CHECKS)
def test_moe_sum_over_topk(check):
    x = np.random.default_rng(3).standard_normal((6, 2, 40)).astype(np.float32)
    out = np.full((6, 40), np.nan, np.float32)
    vllm().get_function(MOE_SUM)((6,), (32,), (out, x, np.int32(40)), check=check)
    np.testing.assert_array_equal(out, x[:, 0] + x[:, 1])
