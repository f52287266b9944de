"""Moved to `pagedlab.grader.pipeline` (one task's way from plan to score); these names stay
importable from here for one release. `run_limited` now takes a `pagedlab.sandbox.policy.Policy`."""

from .._moved import warn_moved
from ..grader.pipeline import GRACE, PACKAGE_PARENT, CheckOutcome, TaskOutcome, plan_for, run_task  # noqa: F401
from ..sandbox.process import run_limited  # noqa: F401
from ..sandbox.users import USER_ENV, Sandbox, sandbox_user  # noqa: F401

warn_moved(__name__, "pagedlab.grader.pipeline")
