"""Dense attention, the answer every paged implementation in the course is checked against, under
the name the notebooks use. It lives on the judge side (`pagedlab.trusted.reference`): the check
child never imports it, and the grading set-up makes it root-only. So it is imported only when
called, and in a grader's notebook run (`pagedlab grade --notebooks`) it is computed by root and
sent back (`pagedlab.judge_link`). The batch builders re-exported here are public (`pagedlab.batches`).
"""

from .batches import PagedBatch, make_paged_batch, max_relative_error  # noqa: F401 - the notebooks' names

__all__ = ["dense_attention", "causal_mask", "PagedBatch", "make_paged_batch", "max_relative_error"]


def dense_attention(q, k, v, scale: float | None = None, *, causal: bool = True):
    """Attention of queries `q` over one sequence's keys `k` and values `v`, by torch's SDPA.

    Shapes: ``q [q_len, num_heads, head_size]``, ``k`` and ``v [kv_len, num_kv_heads,
    head_size]`` (optionally all with the same leading batch dimension); a tensor shaped like `q`
    comes back, of its dtype (float64 for a reference), a numpy array for numpy inputs. Decode
    (``q_len == 1``) sees every key; a prefill gets the causal mask unless ``causal=False``;
    `scale` defaults to ``1/sqrt(head_size)``.
    """
    from . import judge_link

    if judge_link.active():
        return judge_link.dense_attention(q, k, v, scale, causal)
    from .trusted.reference import dense_attention as dense

    return dense(q, k, v, scale, causal=causal)


def causal_mask(q_len: int, kv_len: int, device=None):
    """Boolean ``[q_len, kv_len]``: True where query ``i`` (the last `q_len` tokens) may attend to key ``j``."""
    from .trusted.reference import causal_mask as mask

    return mask(q_len, kv_len, device)
