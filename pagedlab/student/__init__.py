"""The student API: everything a student's file may import, and nothing else.

A graded file in `exercises/` may import exactly these (the grader refuses any other import, at
intake with the file and line, and again while the code runs):

- from pagedlab: `pagedlab.student.cmem` (the tracked C heap) and `pagedlab.student.hw3` (the
  HW3 constants, the C structs `ListNode`, `Sequence`, `LLMEngine`, their pointer types,
  `offsetof`, `container_of`, `addr`, `naive_cast`). `pagedlab.cmem` and `pagedlab.hw3` are the
  same two modules under their old names;
- from Python and its libraries: the modules named in `STDLIB` and `THIRD_PARTY` below (torch,
  numpy, math, ctypes for the structs, typing, hashlib, operator, ...).

What student files may not use: any other pagedlab module (the harness that builds engines and
sequences for the checks, `pagedlab.harness`, and the reference models are answers), loading C
libraries through ctypes (`CDLL`, `ctypes.pythonapi`), starting processes (`subprocess`,
`os.system`, `os.exec*`, `fork`), and reading pagedlab's own files. The notebooks and the
checks are not student files: they use the whole library.
"""

from __future__ import annotations

# pagedlab modules a student file may import (the old names are the same module objects).
PAGEDLAB = (
    "pagedlab.student",
    "pagedlab.student.cmem",
    "pagedlab.student.hw3",
    "pagedlab.cmem",
    "pagedlab.hw3",
)

# Standard-library modules a student file may import.
STDLIB = (
    "__future__", "abc", "array", "bisect", "collections", "collections.abc", "copy", "ctypes",
    "dataclasses", "enum", "functools", "hashlib", "heapq", "itertools", "math", "operator",
    "random", "re", "statistics", "string", "struct", "time", "typing",
)

# Third-party modules (and their submodules) a student file may import.
THIRD_PARTY = ("torch", "numpy")


def allowed(module: str) -> bool:
    """Whether a student file may import `module` (a dotted name)."""
    if module == "pagedlab" or module.startswith("pagedlab."):
        return module in PAGEDLAB
    top = module.split(".")[0]
    return module in STDLIB or top in THIRD_PARTY


def listing() -> str:
    """The allowed imports as one line, for refusal messages."""
    return ", ".join(("pagedlab.student.cmem", "pagedlab.student.hw3", "pagedlab.cmem",
                      "pagedlab.hw3") + THIRD_PARTY + STDLIB[1:])
