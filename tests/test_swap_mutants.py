"""Each Task 13 check must catch the bug it targets: plant it in a copy of solutions/swap.py.

The copy is graded as a submission folder; for every mutant at least the named check fails
with a message that says what was expected, and the unmutated copy passes everything.
"""

from __future__ import annotations

import mutation
import pytest

from pagedlab.loader import ROOT

SOLUTION = (ROOT / "solutions" / "swap.py").read_text()

CAPACITY = "    if len(distinct) > dst.free_local_blocks:\n        return None\n"
MOVE_START = SOLUTION[SOLUTION.index("\n    moved: dict[int, int] = {}"):SOLUTION.index("                moved[block] = next_free")]

# name -> (old text, new text, substring of a check name that must fail)
MUTANTS = {
    "shared block moved twice": ("            if block not in moved:\n", "            if True:\n",
                                 "shared blocks move once"),
    "ref counts not preserved": ("            dst.ref_count[moved[block]] += 1\n",
                                 "            dst.ref_count[moved[block]] = 1\n", "shared blocks move once"),
    "source refs not dropped": ("            src.ref_count[block] -= 1\n            if src.ref_count[block] == 0:\n"
                                "                src.free_local_blocks += 1\n", "", "one sequence"),
    "records not copied": (
        "                ctypes.memmove(block_address(dst, next_free), block_address(src, block), BLOCK_SIZE)\n",
        "", "records intact"),
    "copies 60 bytes": ("block_address(src, block), BLOCK_SIZE)", "block_address(src, block), BLOCK_SIZE - 4)",
                        "records intact"),
    "wrong block order": ("    for seq in group:\n        unlink(seq)", "    for seq in reversed(group):\n        unlink(seq)",
                          "shared blocks move once"),
    "CPU capacity not checked": (CAPACITY, "", "does not fit"),
    # No probe up front: runs out of room half-way and gives up with some members moved.
    "partial move on failure": (
        CAPACITY + MOVE_START, MOVE_START.replace(
            "                while dst.ref_count[next_free] != 0:",
            "                if dst.free_local_blocks == 0:\n                    return None\n"
            "                while dst.ref_count[next_free] != 0:"),
        "does not fit"),
    "target id not checked": ("    if any(s.seq_id in taken_ids for s in group):\n        return None\n", "",
                              "taken id"),
    "one sequence, not the group": ("    group = sequence_group(src, seq_id)\n",
                                    "    group = [s for s in sequence_group(src, seq_id) if s.seq_id == seq_id]\n",
                                    "moves as a unit"),
    "group not transitive": ("                reached |= blocks[id(s)]\n                grew = True\n",
                             "                reached |= blocks[id(s)]\n", "chain of siblings"),
    "copy_blocks lets a destination be a source": ("    if len(set(destinations)) != len(destinations) or sources & set(destinations):",
                                                    "    if len(set(destinations)) != len(destinations):",
                                                    "before copying any"),
    "copy_blocks copies while checking": (
        "    for pair in pairs:\n        if len(pair) != 2 or not all(is_c_int(b) and 0 <= b < total for b in pair):\n"
        "            return -1\n",
        "    for pair in pairs:\n        if len(pair) != 2 or not all(is_c_int(b) and 0 <= b < total for b in pair):\n"
        "            return -1\n        ctypes.memmove(block_address(engine, pair[1]), block_address(engine, pair[0]), BLOCK_SIZE)\n",
        "before copying any"),
    "copy_blocks touches ref counts": (
        "        ctypes.memmove(block_address(engine, d), block_address(engine, s), BLOCK_SIZE)\n",
        "        ctypes.memmove(block_address(engine, d), block_address(engine, s), BLOCK_SIZE)\n"
        "        engine.ref_count[d] += 1\n", "nothing else"),
}


def test_unmutated_copy_passes(tmp_path):
    mutation.assert_all_pass(tmp_path / "submission", "swap.py", SOLUTION, "task13")


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_caught(tmp_path, name):
    old, new, must_fail = MUTANTS[name]
    mutation.assert_caught(tmp_path / "submission", "swap.py", SOLUTION, "task13", name, old, new, must_fail,
                           message_markers=("expected", "raised", "yours"))


def test_every_check_fails_on_the_untouched_exercise():
    from pagedlab import graded as checks

    results = checks.results("task13", "exercises")
    assert results and not any(r.passed for r in results), [r.name for r in results if r.passed]
