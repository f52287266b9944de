"""Dense attention, the answer every paged implementation in the course is checked against, under
the name the notebooks use. It lives on the judge side (`pagedlab.trusted.reference`): the check
child never imports it, and the grading set-up makes it root-only. The batch builders it
re-exports are public (`pagedlab.batches`)."""

from .batches import PagedBatch, make_paged_batch, max_relative_error  # noqa: F401 - the notebooks' names
from .trusted.reference import causal_mask, dense_attention  # noqa: F401

__all__ = ["dense_attention", "causal_mask", "PagedBatch", "make_paged_batch", "max_relative_error"]
