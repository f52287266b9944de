"""pagedlab: a course on vLLM PagedAttention memory management."""
