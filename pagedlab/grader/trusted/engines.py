"""The engines the HW3 checks start from, written as bytes where no student code runs.

An engine of `total` blocks with no sequence is Task 1's answer for a pool of that many blocks:
the code that writes one (the fields, a zeroed ref-count array, the empty circular list) must not
be in the check child, where the submission's code could call it. So it is here, on the judge
side (root-only in the grading set-up): the grader writes each empty engine a check needs as
bytes, sends them with the check's request (`registry.engine_totals` says which), and the child's
harness copies them into heap blocks (`harness.hw3.load`) and derives every other engine of the
scenario from one of them (`harness.hw3.derive`: it copies the engine's own bytes, so nothing
there makes an engine from a block count). Task 1's checks get none.

The image is position-independent, plain JSON data: blocks (size, bytes as hex, "" for zeros),
pointer slots to fill with another block's address plus an offset, and slots that hold the
pool's address, which only the child knows.
"""

from __future__ import annotations

import ctypes

from ...student.hw3 import ListNode, LLMEngine


def empty(total: int) -> dict:
    """The image of an engine of `total` blocks with no sequence: every block free, each ref
    count 0, the list's head pointing at itself."""
    if isinstance(total, bool) or not isinstance(total, int) or total < 1:
        raise ValueError(f"an engine has at least one block, not {total!r}")
    fields = LLMEngine()
    fields.total_local_blocks = fields.free_local_blocks = total
    head = LLMEngine.active_seqs.offset
    return {
        "blocks": [[ctypes.sizeof(LLMEngine), bytes(fields).hex()], [4 * total, ""]],
        "pointers": [[0, LLMEngine.ref_count.offset, 1, 0],
                     [0, head + ListNode.prev.offset, 0, head], [0, head + ListNode.next.offset, 0, head]],
        "pool": [[0, LLMEngine.pool_base_ptr.offset]],
    }


def for_totals(totals) -> dict:
    """{str(total): image} for each block count (a request's "engines")."""
    return {str(total): empty(total) for total in sorted(set(totals))}
