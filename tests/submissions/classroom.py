"""A generated class for testing `pagedlab grade-class`: one folder per student.

Every student starts from the handed-out exercises/ and writes some files; what each wrote is
built at test time from the current solutions/exercises by substitutions asserted to apply, so
the class never goes stale. Try it by hand:

    python tests/submissions/classroom.py /tmp/class
    pagedlab grade-class /tmp/class --out /tmp/class-out --tasks 1,11,12,13 --no-hidden
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

from pagedlab.spec.manifest import SUBMISSION_FILES

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SOLUTIONS, EXERCISES = ROOT / "solutions", ROOT / "exercises"
FILES = SUBMISSION_FILES  # every task's files, from the manifest
# Four tasks, each reading a different file, none needing torch or a kernel build: grade-class
# runs the same `pagedlab grade` per student whatever the task (torch and kernel tasks are graded
# end to end in test_grading_real), so the class costs seconds per student, not half a minute.
TASKS = ["1", "11", "12", "13"]

STUB_TASK1 = '    # YOUR CODE HERE (Task 1: llm_init)\n    raise NotImplementedError("Task 1: llm_init")\n'

# student -> (file, old text in solutions/, new text): a planted bug in the engine and one in
# the buddy allocator (the copies below carry a third, in prefix_cache.py).
MUTANTS = {
    "dan_mutant_a": ("memory_manager.py", "engine.total_local_blocks = pool_size // BLOCK_SIZE",
                     "engine.total_local_blocks = -(-pool_size // BLOCK_SIZE)"),
    "erin_mutant_b": ("buddy.py", "buddy = offset ^ (1 << order)", "buddy = offset + (1 << order)"),
}

# The copied work: a different bug in prefix_cache.py plus a helper of the first student's own;
# the second student renamed the variables.
COPIED_BUG = ("for block in reversed(blocks):", "for block in blocks:")
COPIED_HELPER = '''

def describe_queue(queue, limit=8):
    """My debugging aid: the first few free blocks, with their hashes and reference counts."""
    shown = []
    count = 0
    for entry in queue:
        if count >= limit:
            shown.append("...")
            break
        label = "#" + str(entry.block_id)
        if entry.block_hash is not None:
            label = label + " h=" + str(entry.block_hash)[:6]
        shown.append(label + " ref=" + str(entry.ref_cnt))
        count = count + 1
    total = len(list(queue))
    return "free queue (" + str(total) + "): " + ", ".join(shown)
'''
RENAMES = {"block": "blk", "blocks": "blks", "queue": "fifo", "shown": "parts", "entry": "item",
           "label": "text", "count": "n_seen", "pool": "allocator"}

# Each student shows one thing: full marks (alice), a stub at the top and one zipped inside
# exercises/ with macOS junk (bob, carol), a wrong answer in the engine and in the buddy allocator
# (dan, erin), a crash and a hang that are the student's failures (ivan, judy), and two copies
# of one prefix_cache.py, one with the names changed, found as the top similar pair (nina, oscar).
KINDS = {"alice_solution": "solution", "bob_stub": "stub", "carol_stub_nested": "stub",
         **{k: "mutant" for k in MUTANTS}, "ivan_crash": "crash", "judy_hang": "hang",
         "nina_copy": "copy", "oscar_copy": "copy"}


def _replace_once(text: str, old: str, new: str, what: str) -> str:
    if text.count(old) != 1:
        raise ValueError(f"{what}: {old!r} occurs {text.count(old)} times")
    return text.replace(old, new)


def _stubs(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        shutil.copyfile(EXERCISES / name, folder / name)
    return folder


def _write(folder: Path, name: str, text: str) -> None:
    (folder / name).write_text(text, encoding="utf-8")


def make_class(dest: Path) -> dict[str, str]:
    """Write the class into `dest` (one folder per student); return student -> kind."""
    dest.mkdir(parents=True, exist_ok=True)
    alice = dest / "alice_solution"
    alice.mkdir()
    for name in FILES:
        shutil.copyfile(SOLUTIONS / name, alice / name)
    _stubs(dest / "bob_stub")
    _stubs(dest / "carol_stub_nested" / "exercises")  # zipped exercises/ folder, macOS junk too
    (dest / "carol_stub_nested" / "__MACOSX").mkdir()
    (dest / "carol_stub_nested" / "__MACOSX" / "._memory_manager.py").write_bytes(b"\0\x05junk")
    for student, (name, old, new) in MUTANTS.items():
        text = _replace_once((SOLUTIONS / name).read_text(), old, new, student)
        _write(_stubs(dest / student), name, text)
    stub = (EXERCISES / "memory_manager.py").read_text()
    _write(_stubs(dest / "ivan_crash"), "memory_manager.py", _replace_once(
        stub, STUB_TASK1, "    import ctypes as _c\n    return _c.string_at(0)  # reads address 0: segfault\n", "crash"))
    # Asleep, not spinning: the time limit is wall time, so the same cut costs no CPU.
    _write(_stubs(dest / "judy_hang"), "memory_manager.py", _replace_once(
        stub, STUB_TASK1, "    import time\n    while True:  # never returns\n        time.sleep(1)\n", "hang"))
    copied = _replace_once((SOLUTIONS / "prefix_cache.py").read_text(), *COPIED_BUG, "copy") + COPIED_HELPER
    _write(_stubs(dest / "nina_copy"), "prefix_cache.py", copied)
    renamed = copied
    for old, new in RENAMES.items():
        renamed = re.sub(rf"(?<![.\w]){old}\b", new, renamed)
    assert renamed != copied
    _write(_stubs(dest / "oscar_copy"), "prefix_cache.py", renamed)
    return dict(KINDS)


if __name__ == "__main__":
    out = Path(sys.argv[1])
    for student, kind in make_class(out).items():
        print(f"{kind:<9} {out / student}")
