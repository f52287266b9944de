"""The grading table: what each task is worth, how long it may run and what it needs.

One declarative table so an instructor changes points or limits in one place and the README,
the score table and results.json all follow. Task ids and titles come from
`pagedlab.checks.TASKS`; the checks themselves live in `pagedlab/checks/<module>.py`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..checks import TASKS

# Slow machines (a busy 2-core grader) can stretch every limit: PAGEDLAB_GRADE_TIME_SCALE=2.
TIME_SCALE_ENV = "PAGEDLAB_GRADE_TIME_SCALE"
# Address space of each task's process, GiB (the reference needs under 1; torch and the
# kernel compiler included).
MEMORY_GB = 4.0
MEMORY_ENV = "PAGEDLAB_GRADE_MEMORY_GB"

MEMORY_MANAGER = "memory_manager.py"
PAGED_ATTENTION = "paged_attention.py"
KERNEL = "paged_attention.cu"
PREFIX_CACHE = "prefix_cache.py"
BUDDY = "buddy.py"
SWAP = "swap.py"
KERNEL_V2 = "paged_attention_v2.cu"

# The files a student submits (their copy of exercises/).
SUBMISSION_FILES = (MEMORY_MANAGER, PAGED_ATTENTION, KERNEL, PREFIX_CACHE, BUDDY, SWAP, KERNEL_V2)


@dataclass(frozen=True)
class GradedTask:
    """One row of the table.

    `files` are the submission files the task's checks read: a task runs only when all are
    present, and a file's mutation can only cost the tasks that list it. `partial` switches
    from all-or-nothing to points x passed/total (see grading/README.md for why the default is
    all-or-nothing).
    """

    task: str
    points: float
    time_limit: float  # seconds of wall time for the whole task, in its own process
    files: tuple[str, ...]
    partial: bool = False
    visibility: str = "visible"  # Gradescope: visible | hidden | after_due_date | after_published

    @property
    def title(self) -> str:
        return TASKS[self.task]

    @property
    def number(self) -> int:
        return int(self.task.removeprefix("task"))

    def limit(self) -> float:
        """The time limit after PAGEDLAB_GRADE_TIME_SCALE."""
        return self.time_limit * time_scale()


def time_scale() -> float:
    text = os.environ.get(TIME_SCALE_ENV, "").strip()
    if not text:
        return 1.0
    try:
        scale = float(text)
    except ValueError:
        raise ValueError(f"{TIME_SCALE_ENV} must be a positive number, got {text!r}") from None
    if not scale > 0:
        raise ValueError(f"{TIME_SCALE_ENV} must be a positive number, got {text!r}")
    return scale


def memory_limit() -> float:
    """GiB of address space per task process (PAGEDLAB_GRADE_MEMORY_GB overrides MEMORY_GB)."""
    text = os.environ.get(MEMORY_ENV, "").strip()
    try:
        value = float(text) if text else MEMORY_GB
    except ValueError:
        raise ValueError(f"{MEMORY_ENV} must be a number of GiB, got {text!r}") from None
    if not value > 0:
        raise ValueError(f"{MEMORY_ENV} must be positive, got {text!r}")
    return value


# fmt: off
# Limits are ~30x what the reference needs on a busy 2-core machine: they only ever stop code
# that hangs, and their sum (worst case: every task hangs) stays near 10 minutes.
TABLE: tuple[GradedTask, ...] = (
    # Part A: the HW3 memory manager (54 points)
    GradedTask("task1",  8, 30,  (MEMORY_MANAGER,)),
    GradedTask("task2", 14, 30,  (MEMORY_MANAGER,)),
    GradedTask("task3", 12, 30,  (MEMORY_MANAGER,)),
    GradedTask("task4", 14, 30,  (MEMORY_MANAGER,)),
    GradedTask("task5",  6, 30,  (MEMORY_MANAGER,)),
    # Part B: paged KV cache and attention in torch (22 points)
    GradedTask("task6",  4, 60,  (PAGED_ATTENTION,)),
    GradedTask("task7",  5, 60,  (PAGED_ATTENTION,)),
    GradedTask("task8",  5, 60,  (PAGED_ATTENTION,)),
    GradedTask("task9",  8, 60,  (PAGED_ATTENTION,)),
    # Part C: the CUDA kernel, on the CPU executor under several schedules (14 points)
    GradedTask("task10", 14, 150, (KERNEL,)),
    # Part D: prefix caching and the contiguous baseline's buddy allocator (10 points)
    GradedTask("task11", 6, 30,  (PREFIX_CACHE,)),
    GradedTask("task12", 4, 30,  (BUDDY,)),
    # Part E: serving under memory pressure, swap and the v2 kernel (10 points; total 110)
    GradedTask("task13", 5, 30,  (SWAP,)),
    GradedTask("task14", 5, 150, (KERNEL_V2,)),
)
# fmt: on

# Checks that are run and shown but earn no points: (task, start of the check's name).
# Task 5's whole-session check drives every HW3 function of the student, so it fails for a bug in
# llm_init or fork_sequence too; scoring it would charge Task 5 for another task's bug, which
# those tasks' own checks already charge. It stays as feedback (how the pieces work together).
FEEDBACK_ONLY: tuple[tuple[str, str], ...] = (
    ("task5", "a whole session with your own functions"),
)


def feedback_only(task: str, check_name: str) -> bool:
    return any(task == t and check_name.startswith(prefix) for t, prefix in FEEDBACK_ONLY)


BY_TASK = {row.task: row for row in TABLE}
MAX_SCORE = sum(row.points for row in TABLE)


def select(tasks: list[str] | None = None) -> list[GradedTask]:
    """Rows for `tasks` (ids like 'task3' or numbers like '3'), all rows when None."""
    if not tasks:
        return list(TABLE)
    rows = []
    for name in tasks:
        key = name.strip().lower()
        key = f"task{key}" if key.isdigit() else key
        if key not in BY_TASK:
            raise ValueError(f"unknown task {name!r}; known: {', '.join(BY_TASK)}")
        if BY_TASK[key] not in rows:
            rows.append(BY_TASK[key])
    return sorted(rows, key=lambda row: row.number)


def _validate(table: tuple[GradedTask, ...]) -> None:
    seen = set()
    for row in table:
        if row.task not in TASKS:
            raise ValueError(f"grading table names unknown task {row.task!r}")
        if row.task in seen:
            raise ValueError(f"grading table lists {row.task} twice")
        seen.add(row.task)
        if row.points < 0 or row.time_limit <= 0:
            raise ValueError(f"{row.task}: points must be >= 0 and time_limit > 0")
        if not set(row.files) <= set(SUBMISSION_FILES):
            raise ValueError(f"{row.task}: files {row.files} not all in {SUBMISSION_FILES}")


_validate(TABLE)
