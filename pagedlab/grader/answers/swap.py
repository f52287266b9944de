"""The swap model: what a correct move_group does, from the two engines' states (Task 13,
instructor edition only).

The rules of solutions/swap.py's docstrings in plain Python: first-fit on the target, blocks in
the order met, one copy per distinct block, ref counts kept, nothing changed on failure.
tests/test_swap_model.py compares the reference solution with it on drawn engines.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...drivers.swap import summary
from ...harness import hw3


@dataclass
class Move:
    pairs: list
    src: dict     # summary() after the move
    dst: dict


def expected_move(src: hw3.EngineState, dst: hw3.EngineState, seq_id: int) -> Move | None:
    """What a correct move_group(src, dst, seq_id) does, computed from the two states."""
    seqs = list(src.seqs)
    owned = {entry.seq_id: {b for _, b in entry.mapping} for entry in seqs}
    if seq_id not in owned:
        return None
    # The group: everything reachable from seq_id through shared blocks (a worklist closure).
    members, frontier = {seq_id}, [seq_id]
    while frontier:
        current = frontier.pop()
        linked = [other for other in owned if other not in members and owned[other] & owned[current]]
        members.update(linked)
        frontier.extend(linked)
    reached = set().union(*(owned[m] for m in members))
    group = [entry for entry in seqs if entry.seq_id in members]
    if any(dst.seq(entry.seq_id) is not None for entry in group) or len(reached) > dst.free:
        return None
    src_refs, dst_refs = list(src.refs), list(dst.refs)
    moved: dict[int, int] = {}
    new_group = []
    for s in group:
        mapping = {}
        for logical, block in s.mapping:
            if moved.get(block) is None:
                moved[block] = dst_refs.index(0)
                dst_refs[moved[block]] = 0  # taken below
            mapping[logical] = moved[block]
            dst_refs[moved[block]] += 1
            src_refs[block] -= 1
        new_group.append((s.seq_id, s.kv_count, mapping))
    src_after = {"free": src_refs.count(0), "refs": src_refs,
                 "sequences": [(s.seq_id, s.kv_count, dict(s.mapping)) for s in seqs if s.seq_id not in members]}
    dst_after = {"free": dst_refs.count(0), "refs": dst_refs,
                 "sequences": summary(dst)["sequences"] + new_group}
    return Move(list(moved.items()), src_after, dst_after)
