"""Points, limits and files of each task: a view on the task manifest (`pagedlab/spec/tasks.toml`).

Instructors change points, limits and files in the manifest; this module adds the grader's
machine-wide knobs (time scale, memory cap) and keeps the names the grader reads.
"""

from __future__ import annotations

from .manifest import BY_ID as BY_TASK
from .manifest import (
    MAX_SCORE,
    MEMORY_ENV,
    MEMORY_GB,
    SUBMISSION_FILES,
    TABLE,
    TIME_SCALE_ENV,
    memory_limit,
    select,
    time_scale,
)
from .manifest import Task as GradedTask

__all__ = ["BY_TASK", "MAX_SCORE", "SUBMISSION_FILES", "TABLE", "GradedTask", "select",
           "TIME_SCALE_ENV", "time_scale", "MEMORY_GB", "MEMORY_ENV", "memory_limit", "feedback_only"]

MEMORY_MANAGER = "memory_manager.py"
PAGED_ATTENTION = "paged_attention.py"
KERNEL = "paged_attention.cu"
PREFIX_CACHE = "prefix_cache.py"
BUDDY = "buddy.py"


def feedback_only(task: str, check_name: str) -> bool:
    return BY_TASK[task].is_feedback(check_name)
