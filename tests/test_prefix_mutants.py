"""Each Task 11 check must catch the bug it targets: plant it in a copy of the solution.

A mutant is a text substitution in solutions/prefix_cache.py; the copy is graded as a
submission folder. For every mutant at least the named checks must fail, and the unmutated
copy must pass everything (so a failure is the mutant's doing, not the harness's).
"""

from __future__ import annotations

import mutation
import pytest

from pagedlab.loader import ROOT

SOLUTION = (ROOT / "solutions" / "prefix_cache.py").read_text()

# name -> (old text, new text, substring of a check name that must fail)
MUTANTS = {
    "head-first free": ("for block in reversed(blocks):", "for block in blocks:", "tail first"),
    "no token verification": (
        "if block is None or block.token_ids != token_ids or block.parent_hash != parent_hash:",
        "if block is None:", "collision"),
    "parent hash not verified": (
        "or block.token_ids != token_ids or block.parent_hash != parent_hash:",
        "or block.token_ids != token_ids:", "collision"),
    "eager eviction on free": (
        "            if block.ref_cnt == 0:\n                self.free_queue.append(block)",
        "            if block.ref_cnt == 0:\n                self.cached.pop(block.block_hash, None)\n"
        "                block.block_hash = None\n                self.free_queue.append(block)",
        "walkthrough"),
    "no eviction on reuse": (
        "            if self.cached.get(block.block_hash) is block:\n                del self.cached[block.block_hash]\n",
        "            pass\n", "walkthrough"),
    "freed blocks go to the head": (
        "        last = self.tail.prev_free\n        block.prev_free, block.next_free = last, self.tail\n"
        "        last.next_free = block\n        self.tail.prev_free = block\n",
        "        first = self.head.next_free\n        block.prev_free, block.next_free = self.head, first\n"
        "        first.prev_free = block\n        self.head.next_free = block\n",
        "free queue: append"),
    "prev link not repaired": ("        block.next_free.prev_free = block.prev_free\n", "", "free queue: append"),
    "remove walks the list": (
        "        if block.prev_free is None or block.next_free is None:",
        "        if block not in list(self):", "O(1)"),
    "hits ignore their own free blocks": (
        "if num_new > pool.num_free_blocks - idle_hits:", "if num_new > pool.num_free_blocks:",
        "does not fit"),
    "whole prompt may hit": ("for i in range((len(prompt) - 1) // size):",
                             "for i in range(len(prompt) // size):", "last token"),
    "hash ignores the parent": ("parent = hash_fn(parent, tuple(token_ids[start:start + block_size]))",
                                "parent = hash_fn(ROOT_HASH, tuple(token_ids[start:start + block_size]))",
                                "chained hashes"),
    "touch forgets the ref count": ("            self.free_queue.remove(block)\n        block.ref_cnt += 1",
                                    "            self.free_queue.remove(block)\n        block.ref_cnt = 1",
                                    "random streams"),
}


def test_unmutated_copy_passes(tmp_path):
    mutation.assert_all_pass(tmp_path / "submission", "prefix_cache.py", SOLUTION, "task11")


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_caught(tmp_path, name):
    old, new, must_fail = MUTANTS[name]
    # The message names what was expected and what the code did.
    mutation.assert_caught(tmp_path / "submission", "prefix_cache.py", SOLUTION, "task11", name, old, new, must_fail,
                           message_markers=("expected", "not implemented", "raised"))
