"""Moved to `pagedlab.drivers.drawn.paged_attention_v2_cu` (the 2026-12 layout); this path forwards there for one release."""

from pagedlab._moved import forward

forward(__name__, "pagedlab.drivers.drawn.paged_attention_v2_cu")
