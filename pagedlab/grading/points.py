"""Points, limits and files of each task: a view on the task manifest (`pagedlab/tasks.toml`).

Instructors change points, limits and files in the manifest; this module adds the grader's
machine-wide knobs (time scale, memory cap) and keeps the names the grader reads.
"""

from __future__ import annotations

import os

from ..manifest import BY_ID as BY_TASK
from ..manifest import MAX_SCORE, SUBMISSION_FILES, TABLE, TIME_SCALE_ENV, select, time_scale
from ..manifest import Task as GradedTask

__all__ = ["BY_TASK", "MAX_SCORE", "SUBMISSION_FILES", "TABLE", "GradedTask", "select",
           "TIME_SCALE_ENV", "time_scale", "memory_limit", "feedback_only"]

# Address space of each task's process, GiB (the reference needs under 1; torch and the
# kernel compiler included).
MEMORY_GB = 4.0
MEMORY_ENV = "PAGEDLAB_GRADE_MEMORY_GB"

MEMORY_MANAGER = "memory_manager.py"
PAGED_ATTENTION = "paged_attention.py"
KERNEL = "paged_attention.cu"
PREFIX_CACHE = "prefix_cache.py"
BUDDY = "buddy.py"


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


def feedback_only(task: str, check_name: str) -> bool:
    return BY_TASK[task].is_feedback(check_name)
