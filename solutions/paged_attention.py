"""Part B: a paged KV cache in torch, and attention that reads it through block tables.

The cache of one layer is two tensors, ``k_cache`` and ``v_cache``, each
``[num_blocks, block_size, num_kv_heads, head_size]`` (vLLM v1's "NHD" layout). A physical
block holds the keys (or values) of ``block_size`` consecutive tokens of *one* sequence; which
blocks a sequence owns, in order, is its block table row (the same numbers your memory manager
hands out in Part A). Unused entries of a row are ``-1``.

Flatten the first two dimensions and every token has an address, its *slot*:

    slot(p) = block_table[p // block_size] * block_size + p % block_size

Everything in this file is built on that one formula: writing new K/V is a scatter to slots,
reading a sequence back is a gather from slots, and paged attention is dense attention over
the gathered tokens. Tasks 6-9 (graded by ``pagedlab.graded.run("task6")`` ... ``"task9"``).
"""

from __future__ import annotations

import math

import torch


def slot_mapping(block_table: torch.Tensor, positions: torch.Tensor, block_size: int) -> torch.Tensor:
    """Task 6. Slots (int64) of token `positions` of a sequence whose blocks are `block_table`.

    ``block_table``: 1-D integer tensor, one sequence's row (physical block ids, ``-1`` padding).
    ``positions``: 1-D integer tensor of token positions, any order. Every position must fall in
    a mapped block; the result has the shape of `positions`.
    """
    ### BEGIN SOLUTION Task 6: slot mapping
    positions = positions.to(torch.int64)
    blocks = block_table.to(torch.int64)[positions // block_size]
    return blocks * block_size + positions % block_size
    ### END SOLUTION


def write_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             slots: torch.Tensor) -> None:
    """Task 7. Store the keys/values of new tokens in the cache, in place.

    ``k``, ``v``: ``[num_tokens, num_kv_heads, head_size]``; ``slots``: ``[num_tokens]``, where
    token ``i`` goes. A negative slot marks a padding token (a batch padded to one length) and is
    skipped, as in vLLM's ``reshape_and_cache``. Nothing else in the cache may change.
    """
    ### BEGIN SOLUTION Task 7: write K/V into the cache
    # A view with one row per slot: [num_blocks * block_size, num_kv_heads, head_size].
    k_slots = k_cache.view(-1, *k_cache.shape[2:])
    v_slots = v_cache.view(-1, *v_cache.shape[2:])
    keep = slots >= 0
    k_slots[slots[keep]] = k[keep].to(k_cache.dtype)
    v_slots[slots[keep]] = v[keep].to(v_cache.dtype)
    ### END SOLUTION


def gather_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
              seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Task 8. One sequence's keys and values, in token order, as contiguous tensors.

    Returns ``(k, v)``, each ``[seq_len, num_kv_heads, head_size]``: token ``p`` of the sequence
    comes from slot ``slot_mapping(block_table, p, block_size)``, ``block_size = k_cache.shape[1]``. Only the first ``ceil(seq_len /
    block_size)`` entries of `block_table` are used.
    """
    ### BEGIN SOLUTION Task 8: gather a sequence's K/V
    block_size = k_cache.shape[1]
    positions = torch.arange(seq_len, device=k_cache.device)
    slots = slot_mapping(block_table, positions, block_size)
    k = k_cache.view(-1, *k_cache.shape[2:])[slots]
    v = v_cache.view(-1, *v_cache.shape[2:])[slots]
    return k, v
    ### END SOLUTION


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    block_tables: torch.Tensor, seq_lens: torch.Tensor,
                    scale: float | None = None) -> torch.Tensor:
    """Task 9. One decode step of attention for a batch of sequences, reading a paged cache.

    ``q``: ``[num_seqs, num_heads, head_size]``, the newest token of each sequence;
    ``block_tables``: ``[num_seqs, max_blocks_per_seq]``; ``seq_lens``: ``[num_seqs]``, how many
    tokens of each sequence are in the cache (the new one included). Returns ``out`` shaped like
    `q`: for query head ``h``, softmax(scale * q·k) over the sequence's tokens, weighting the
    values of kv head ``h // (num_heads // num_kv_heads)`` (grouped-query attention).
    `scale` defaults to ``1/sqrt(head_size)``. Computes in the dtype of `q`.
    """
    num_seqs, num_heads, head_size = q.shape
    num_kv_heads = k_cache.shape[2]
    if scale is None:
        scale = 1.0 / math.sqrt(head_size)
    out = torch.full_like(q, float("nan"))  # NaN until written: a forgotten row shows
    ### BEGIN SOLUTION Task 9: paged attention in torch
    group = num_heads // num_kv_heads  # query heads per kv head
    for s in range(num_seqs):
        k, v = gather_kv(k_cache, v_cache, block_tables[s], int(seq_lens[s]))
        k, v = k.to(q.dtype), v.to(q.dtype)  # [seq_len, num_kv_heads, head_size]
        # Query head h = kv * group + g reads kv head kv = h // group: view the heads that way.
        q_groups = q[s].reshape(num_kv_heads, group, head_size)
        logits = torch.einsum("kgd,tkd->kgt", q_groups, k) * scale
        probs = torch.softmax(logits, dim=-1)
        out[s] = torch.einsum("kgt,tkd->kgd", probs, v).reshape(num_heads, head_size)
    ### END SOLUTION
    return out
