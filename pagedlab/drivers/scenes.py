"""The HW3 checks' scenarios as data: engines laid out block by block, built by the harness.

A scenario names its sequences as (id, kv_count, blocks), `blocks` a list (logical i -> block)
or a dict {logical: block} for L1 holes. `layout` turns that into an `hw3.EngineLayout` (which
L1 and L2 slot each block sits at, the ref counts the scenario implies).

Every engine starts as the empty engine of the pool's block count, bytes the grader wrote where
no student code runs (`pagedlab.grader.trusted.engines`) and sent with the check's request: the child
holds nothing that makes an engine from a pool's size (Task 1), and a check the grader sent no
engine of that size fails loudly. A process where no submission runs (the notebooks, the tests,
the instructor's tools: no check child's request in force) writes them itself. Sequences, and
every later change of a scenario, come by deriving a new engine from one (`hw3.derive`: the old
one's bytes copied, the layout written), so no code here changes an engine in place (a student's
code cannot borrow it to do a task's work on its own engine) and no engine is ever freed here:
each one a scenario went through stays live, memory of the check's own beside the one under test.
"""

from __future__ import annotations

from ..harness import hw3
from . import record


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


def empty_image(total: int) -> dict:
    """The bytes of the empty engine of `total` blocks: from the running check's request in a
    check child (never written there), else written here by the judge side's code."""
    run = record._current
    if run is not None and run.engines is not None:
        image = run.engines.get(str(total))
        if image is None:
            raise LookupError(f"the grader sent no engine of {total} blocks for this check (its checks "
                              f"module's engine_totals names the block counts its scenes use)")
        return image
    if LOCAL_IMAGES is None:
        raise LookupError(f"no empty engine of {total} blocks here: no check request is in force and this "
                          "process holds no judge side (a notebook gets one with `from pagedlab.reference "
                          "import scenes`)")
    return LOCAL_IMAGES(total)


# Outside a check child the empty engines' bytes come from the judge side, which a process that may
# hold it plugs in here (`pagedlab.reference`: a notebook's kernel asks root in a grader's run): this
# module never imports it, so the check child holds no code that writes an engine.
LOCAL_IMAGES = None


def engine(pool, seqs=()):
    """A harness-built engine over `pool` (a `Pool`) holding `seqs`."""
    total = pool.size // hw3.BLOCK_SIZE
    empty = hw3.load(pool.addr, empty_image(total))
    return hw3.derive(empty, layout(total, seqs)) if seqs else empty


def build(pool, data: hw3.EngineLayout):
    """A harness-built engine over `pool` holding exactly `data` (an `hw3.EngineLayout` written
    out by hand: fields, ref counts, tables, list order)."""
    return hw3.derive(hw3.load(pool.addr, empty_image(data.total)), data)


def with_sequence(engine, seq_id: int, kv_count: int, blocks):
    """A new engine: `engine`'s snapshot plus one sequence at the tail. `engine` stays as it was,
    and allocated, until the check's sweep."""
    return hw3.derive(engine, _added(hw3.snapshot(engine), [(seq_id, kv_count, blocks)]))


def twins(engine) -> tuple:
    """Two new engines holding `engine`'s snapshot, their blocks allocated together in a shuffled
    order (`hw3.twins`): a destroy check destroys one and keeps the other."""
    return hw3.twins(engine, hw3.snapshot(engine))
