"""Each Task 12 check must catch the bug it targets: plant it in a copy of the solution.

A mutant is a text substitution in solutions/buddy.py; the copy is graded as a submission
folder. For every mutant at least the named check must fail, and the unmutated copy must pass
everything (so a failure is the mutant's doing, not the harness's).
"""

from __future__ import annotations

import mutation
import pytest

from pagedlab.loader import ROOT

SOLUTION = (ROOT / "solutions" / "buddy.py").read_text()

# name -> (old text, new text, substring of a check name that must fail)
MUTANTS = {
    "merge ignores the buddy's state": (
        "            if buddy not in self.free_lists[order]:\n                break",
        "            if False:\n                break",
        "hand-traced"),
    "no rounding (rounds down)": ("order = (n - 1).bit_length()", "order = n.bit_length() - 1", "rounded up"),
    "highest address first": ("offset = min(self.free_lists[k])", "offset = max(self.free_lists[k])",
                              "lowest address"),
    "buddy by addition": ("buddy = offset ^ (1 << order)", "buddy = offset + (1 << order)", "XOR"),
    "merged block keeps the freed offset": ("offset &= ~(1 << order)", "offset = offset", "XOR"),
    # A real single merge (a bare `if` around the loop's body left its `break`: a SyntaxError).
    "merges only once": ("        while order < self.max_order:\n"
                         "            buddy = offset ^ (1 << order)\n"
                         "            if buddy not in self.free_lists[order]:\n"
                         "                break  # the buddy is in use (whole or in part): no merge\n",
                         "        for _ in range(1):\n"
                         "            buddy = offset ^ (1 << order)\n"
                         "            if buddy not in self.free_lists[order]:\n"
                         "                break  # the buddy is in use (whole or in part): no merge\n",
                         "any order"),
    "largest block split first": (
        "        while k <= self.max_order and not self.free_lists[k]:\n            k += 1",
        "        k = self.max_order\n        while k > order and not self.free_lists[k]:\n            k -= 1",
        "smallest free block"),
    "keeps the upper half": ("            self.free_lists[k].add(offset + (1 << k))",
                             "            self.free_lists[k].add(offset)\n            offset += 1 << k",
                             "hand-traced"),
    "failed alloc still records": ("        if k > self.max_order:\n            return None",
                                   "        if k > self.max_order:\n            self.allocated[0] = order\n"
                                   "            return None", "bad input"),
}


def test_unmutated_copy_passes(tmp_path):
    mutation.assert_all_pass(tmp_path / "submission", "buddy.py", SOLUTION, "task12")


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_caught(tmp_path, name):
    old, new, must_fail = MUTANTS[name]
    # The message names what was expected and what the code did.
    mutation.assert_caught(tmp_path / "submission", "buddy.py", SOLUTION, "task12", name, old, new, must_fail,
                           message_markers=("expected", "raised"))


def test_solution_agrees_with_the_answer_model_on_a_full_workload():
    """The reference solution and the instructor's independent model place a long trace identically."""
    import random

    from pagedlab import load
    from pagedlab.grader.answers.buddy import Buddy

    mine, ref = load("buddy", "solutions").BuddyAllocator(4096), Buddy(4096)
    rng, live = random.Random(7), {}
    for _ in range(3000):
        if live and rng.random() < 0.5:
            offset = rng.choice(sorted(live))
            mine.free(offset)
            ref.free(offset, live.pop(offset))
        else:
            n = rng.randint(1, 600)
            got = mine.alloc(n)
            assert got == ref.alloc(n)
            if got is not None:
                live[got] = n
        assert mine.free_slots == ref.free_slots


def test_notebook_draws_the_sequence_the_checks_replay():
    """Notebook 09 asks students to predict the hand-traced sequence; it must be the graded one."""
    import json
    import re

    from pagedlab.drivers.buddy import TRACE_16

    nb = json.loads((ROOT / "notebooks" / "09_prefix_caching_and_utilization.ipynb").read_text())
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    graded = next(i for i, s in enumerate(cells) if 'graded.run("task12")' in s)
    drawn = next(i for i, s in enumerate(cells) if "BuddyAllocator(16)" in s)
    assert drawn > graded, "the cell using the student's allocator must come after its graded cell"
    calls = [(c, int(a)) for c, a in re.findall(r'\("(alloc|free)", (\d+)\)', cells[drawn])]
    assert calls == [(call, arg) for call, arg, *_ in TRACE_16]


def test_notebook_cells_running_the_students_allocator_require_task12_first():
    """Notebook 09's demos and utilization study run the student's own BuddyAllocator in the
    notebook's kernel: each cell that loads it asks for Task 12 first, so an unfinished Task 12
    gets one line naming the task instead of a stub's traceback."""
    import json

    nb = json.loads((ROOT / "notebooks" / "09_prefix_caching_and_utilization.ipynb").read_text())
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    loading = [s for s in cells if 'pagedlab.load("buddy")' in s]
    assert len(loading) >= 2  # the hand-traced drawing and the utilization study
    for source in loading:
        assert 'graded.require("task12")' in source.split('pagedlab.load("buddy")')[0], source[:200]
    # A contiguous run without allocator= would ask for the instructor edition's model, which
    # the student edition does not have.
    import ast

    calls = [node for s in cells for node in ast.walk(ast.parse(s)) if isinstance(node, ast.Call)
             and ast.unparse(node.func) == "sim.simulate"]
    contiguous = [c for c in calls if not (len(c.args) > 2 and getattr(c.args[2], "value", None) == "paged")]
    assert len(contiguous) >= 3
    for call in contiguous:
        assert any(k.arg == "allocator" for k in call.keywords), ast.unparse(call)
