"""Moved to `pagedlab.sandbox.runner` (the runner sits above `checks` and `grading`); these
names stay importable from here for code written against the old place."""

from ..sandbox.process import run_limited  # noqa: F401
from ..sandbox.runner import GRACE, PACKAGE_PARENT, CheckOutcome, TaskOutcome, plan_for, run_task  # noqa: F401
from ..sandbox.users import USER_ENV, Sandbox, sandbox_user  # noqa: F401
