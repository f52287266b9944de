"""The HW3 checks' scenarios as data: engines laid out block by block, built by the harness.

A scenario names its sequences as (id, kv_count, blocks), `blocks` a list (logical i -> block)
or a dict {logical: block} for L1 holes. `layout` turns that into an `hw3.EngineLayout` (which
L1 and L2 slot each block sits at, the ref counts the scenario implies) and `hw3.engine_from`
writes it into new memory. Adding a sequence later builds a new engine from the old one's
snapshot, so no code here changes an engine in place (a student's code cannot borrow it to do
a task's work on its own engine).
"""

from __future__ import annotations

from ..harness import hw3


def tables(blocks) -> tuple:
    """((L1 slot, its 16 L2 entries), ...) for `blocks` (a list or {logical: block})."""
    mapping = dict(enumerate(blocks)) if not isinstance(blocks, dict) else dict(blocks)
    by_slot: dict[int, list[int]] = {}
    for logical, block in sorted(mapping.items()):
        slot, index = divmod(logical, hw3.L2_PT_SIZE)
        by_slot.setdefault(slot, [hw3.UNMAPPED] * hw3.L2_PT_SIZE)[index] = block
    return tuple((slot, tuple(entries)) for slot, entries in sorted(by_slot.items()))


def _added(layout: hw3.EngineLayout, seqs) -> hw3.EngineLayout:
    """`layout` with `seqs` appended at the tail: each entry they map adds one reference."""
    refs, free, added = list(layout.refs), layout.free, []
    for seq_id, kv_count, blocks in seqs:
        entry = hw3.SeqLayout(seq_id, kv_count, tables(blocks))
        for _, entries in entry.tables:
            for block in entries:
                if block != hw3.UNMAPPED:
                    free -= refs[block] == 0
                    refs[block] += 1
        added.append(entry)
    return hw3.EngineLayout(layout.total, free, tuple(refs), layout.seqs + tuple(added))


def layout(total: int, seqs=()) -> hw3.EngineLayout:
    """An engine of `total` blocks holding `seqs` ((id, kv_count, blocks), in list order)."""
    return _added(hw3.EngineLayout(total, total, (0,) * total, ()), seqs)


def engine(pool, seqs=()):
    """A harness-built engine over `pool` (a `Pool`) holding `seqs`."""
    return hw3.engine_from(pool.addr, layout(pool.size // hw3.BLOCK_SIZE, seqs))


def with_sequence(engine, seq_id: int, kv_count: int, blocks, *, release: bool = True):
    """A new engine: `engine`'s snapshot plus one sequence at the tail. `release`: free what the
    harness built for the old one (not when code under test may have moved those parts into
    another engine, as a swap does: then the check's sweep frees them); what other code added to
    it stays allocated until the check's sweep."""
    grown = hw3.engine_from(engine.pool_base_ptr, _added(hw3.snapshot(engine), [(seq_id, kv_count, blocks)]))
    if release:
        hw3.release(engine)
    return grown
