"""A grading plugin (PAGEDLAB_GRADING_PLUGIN) for tests of the sandbox beneath the student API:
their submissions open sockets on purpose, which the student API (tests/test_student_api.py)
would refuse before the sandbox is reached."""

from pagedlab.guard import audit

audit.ENFORCED = False
