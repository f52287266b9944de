"""Broken submissions for testing the grader: solutions/ with one thing broken.

Each is made at test time by a text substitution on the current solutions (asserted to apply
exactly once), so they never go stale. To try the grader on one by hand:

    python tests/submissions/broken.py segfault /tmp/segfault
    pagedlab grade --impl /tmp/segfault
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from pagedlab.spec.manifest import SUBMISSION_FILES

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "solutions"
# Every task's files, from the manifest (a new task's file is copied too).
FILES = SUBMISSION_FILES

_KERNEL_FENCE = "  // BEGIN SOLUTION Task 10: logits, scale * q.k for every token, found through the block table\n"

# name -> (file, old text, new text, the only task that may fail)
BROKEN: dict[str, tuple[str, str, str, str]] = {
    "segfault": (  # a NULL read through ctypes in Task 3
        "memory_manager.py", "    ### BEGIN SOLUTION Task 3: fork_sequence\n",
        "    ### BEGIN SOLUTION Task 3: fork_sequence\n    ctypes.string_at(0)\n", "task3"),
    "infinite-loop": (  # Task 4 never returns
        "memory_manager.py", "    logical, offset = divmod(seq.kv_count, KV_PER_BLOCK)\n",
        "    while seq.kv_count >= 0:\n        pass\n    logical, offset = divmod(seq.kv_count, KV_PER_BLOCK)\n",
        "task4"),
    "syntax-error": (  # a class header without its colon
        "prefix_cache.py", "\nclass FreeBlockQueue:", "\nclass FreeBlockQueue", "task11"),
    "kernel-compile-error": (  # a missing semicolon
        "paged_attention.cu", "  __syncthreads();\n  float row_sum", "  __syncthreads()\n  float row_sum", "task10"),
    "kernel-hang": (  # every CUDA thread spins forever (volatile: the compiler may not drop it)
        "paged_attention.cu", _KERNEL_FENCE, _KERNEL_FENCE + "  for (volatile int spin = 1; spin;) {}\n", "task10"),
    "import-error": (
        "paged_attention.py", "import torch\n", "import torch\nimport torchh\n", "task6"),
}


def copy_solutions(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        shutil.copyfile(SOLUTIONS / name, folder / name)
    return folder


def mutate(folder: Path, filename: str, old: str, new: str, *, once: bool = True) -> None:
    path = folder / filename
    text = path.read_text()
    count = text.count(old)
    if (count != 1) if once else (count == 0):
        raise ValueError(f"{old!r} occurs {count} times in solutions/{filename}")
    path.write_text(text.replace(old, new))


def make(name: str, folder: Path) -> Path:
    """solutions/ copied to `folder`, broken as BROKEN[name] says."""
    filename, old, new, _ = BROKEN[name]
    mutate(copy_solutions(folder), filename, old, new)
    return folder


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in BROKEN:
        sys.exit(f"usage: broken.py {{{'|'.join(BROKEN)}}} FOLDER")
    print(make(sys.argv[1], Path(sys.argv[2])))
