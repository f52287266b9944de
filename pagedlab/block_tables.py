"""Bridge from the HW3 engine to tensors: sequences → a kernel block table.

The paged-attention kernel of Part C reads `block_tables: int32 [num_seqs, max_blocks_per_seq]`
(row i lists the physical blocks of sequence i in logical order, padded with -1) and
`seq_lens: int32 [num_seqs]`. These helpers read both out of an engine built by anyone's
`memory_manager` (they only walk the C structs), so the kernel runs on block tables produced by
the student's own allocator.
"""

from __future__ import annotations

import numpy as np

from .harness import hw3


def sequences(engine) -> list:
    """The live `Sequence` views of `engine` in list order (head->next first)."""
    return hw3.sequences(engine)


def _pick(engine, seq_ids) -> list:
    seqs = hw3.sequences(engine)
    if seq_ids is None:
        return seqs
    by_id = {s.seq_id: s for s in seqs}
    picked = []
    for sid in seq_ids:
        if sid not in by_id:
            raise ValueError(f"no active sequence with id {sid!r}; active ids: {sorted(by_id)}")
        picked.append(by_id[sid])
    return picked


def block_table_row(seq, max_blocks_per_seq: int | None = None) -> np.ndarray:
    """Physical blocks of `seq` for its `kv_count` records, in logical order, padded with -1."""
    used = hw3.blocks_needed(seq.kv_count)
    width = used if max_blocks_per_seq is None else max_blocks_per_seq
    if used > width:
        raise ValueError(
            f"sequence {seq.seq_id} holds {seq.kv_count} records in {used} blocks, "
            f"more than max_blocks_per_seq={width}"
        )
    table = hw3.mapping(seq)
    row = np.full(width, hw3.UNMAPPED, dtype=np.int32)
    for logical in range(used):
        if logical not in table:
            raise ValueError(
                f"sequence {seq.seq_id}: logical block {logical} holds records "
                f"(kv_count={seq.kv_count}) but is unmapped in its block table"
            )
        row[logical] = table[logical]
    return row


def block_table_rows(engine, seq_ids=None, max_blocks_per_seq: int | None = None) -> np.ndarray:
    """`int32 [num_seqs, max_blocks_per_seq]`: rows in the order of `seq_ids` (default: list
    order), padding -1. `max_blocks_per_seq` defaults to the widest sequence's block count."""
    if max_blocks_per_seq is not None:
        if isinstance(max_blocks_per_seq, bool) or not isinstance(max_blocks_per_seq, (int, np.integer)):
            raise TypeError(f"max_blocks_per_seq must be an int, not {type(max_blocks_per_seq).__name__}")
        if max_blocks_per_seq < 1:
            raise ValueError(f"max_blocks_per_seq must be >= 1, got {max_blocks_per_seq}")
    seqs = _pick(engine, seq_ids)
    width = max_blocks_per_seq
    if width is None:
        width = max([hw3.blocks_needed(s.kv_count) for s in seqs] + [1])
    out = np.full((len(seqs), width), hw3.UNMAPPED, dtype=np.int32)
    for i, seq in enumerate(seqs):
        out[i] = block_table_row(seq, width)
    return out


def seq_lens(engine, seq_ids=None) -> np.ndarray:
    """`int32 [num_seqs]`: kv_count of each sequence, same order as `block_table_rows`."""
    return np.array([s.kv_count for s in _pick(engine, seq_ids)], dtype=np.int32)


def seq_ids(engine) -> list[int]:
    """Ids of the live sequences in list order."""
    return [s.seq_id for s in hw3.sequences(engine)]
