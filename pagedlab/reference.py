"""Dense attention, the answer every paged implementation in the course is checked against, under
the name the notebooks use. It lives on the judge side (`pagedlab.trusted.reference`): the check
child never imports it, and the grading set-up makes it root-only. The batch builders it
re-exports are public (`pagedlab.batches`)."""

from .trusted.reference import (  # noqa: F401 - the notebooks' and tests' names
    PagedBatch,
    causal_mask,
    dense_attention,
    make_paged_batch,
    max_relative_error,
)

__all__ = ["dense_attention", "causal_mask", "PagedBatch", "make_paged_batch", "max_relative_error"]
