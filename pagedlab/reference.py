"""The notebooks' door to the judge side: dense attention (the answer every paged implementation
in the course is checked against), batches that know their expected output, and the empty
engines the harness builds from.

The answers live on the judge side (`pagedlab.grader.trusted`): the check child never imports them, and
the grading set-up makes them root-only. So they are imported only when called, and in a
grader's notebook run (`pagedlab grade --notebooks`) root computes them and sends them back
(`pagedlab.judge_link`). The check child's own modules (`pagedlab.drivers.batches`, `drivers.scenes`)
compute no answer; this module adds that, for notebooks, tests and the instructor's tools.
"""

from __future__ import annotations

from dataclasses import fields

from .drivers import (
    batches,
    scenes,  # noqa: F401 - notebooks 03 and 10 build their engines with it
)
from .drivers.batches import max_relative_error  # noqa: F401 - the notebooks' name

__all__ = ["dense_attention", "causal_mask", "PagedBatch", "make_paged_batch", "max_relative_error", "scenes",
           "empty_engine"]


def empty_engine(total: int):
    """The bytes of the empty engine of `total` blocks (Task 1's answer), which the notebooks'
    engines start from (`scenes`): root's in a grader's notebook run, else the judge side's."""
    from . import judge_link

    if judge_link.active():
        return judge_link.empty_engine(total)
    from .grader.trusted import engines

    return engines.empty(total)


scenes.LOCAL_IMAGES = empty_engine


class PagedBatch(batches.PagedBatch):
    """The notebooks' paged batch: `batches.PagedBatch` (the check child's, which computes no
    answer) plus `expected()` and `holds()`, which ask the judge side."""

    def expected(self, scale: float | None = None):
        """Decode output per sequence from `dense_attention` in float64: ``[num_seqs, num_heads, head_size]``."""
        from . import judge_link

        if judge_link.active():  # a grader's notebook run: root computes it (pagedlab.judge_link)
            return judge_link.batch_expected(self, scale)
        from .grader.trusted.reference import paged_expected

        return paged_expected(self, scale)

    def holds(self, s: int, k, v) -> bool:
        """True when `k` and `v` are sequence `s`'s tokens in order, exactly (compared on the judge
        side; the batch hands out no tokens, so a notebook can check a gather without one)."""
        from . import judge_link

        if judge_link.active():
            return judge_link.batch_holds(self, s, k, v)
        from .grader.trusted.attention import holds

        return holds(self, s, k, v)


def make_paged_batch(seq_lens, **kwargs) -> PagedBatch:  # its text: batches.make_paged_batch's, below
    made = batches.make_paged_batch(seq_lens, **kwargs)
    return PagedBatch(*(getattr(made, f.name) for f in fields(made)))


make_paged_batch.__doc__ = batches.make_paged_batch.__doc__


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
    from .grader.trusted.reference import dense_attention as dense

    return dense(q, k, v, scale, causal=causal)


def causal_mask(q_len: int, kv_len: int, device=None):
    """Boolean ``[q_len, kv_len]``: True where query ``i`` (the last `q_len` tokens) may attend to key ``j``."""
    from .grader.trusted.reference import causal_mask as mask

    return mask(q_len, kv_len, device)
