"""What the grader judges a check against, computed in the test process.

The grader (pagedlab.grader.pipeline._expected_records) takes a check's computed expectation, the
committed record of a public check, or, for a hidden check, the reference solution run with the
same seed in a child of its own; tests that drive checks in-process take the same, the last one
driven here."""

from __future__ import annotations

from pagedlab.drivers import record
from pagedlab.grader import golden
from pagedlab.grader.trusted.expectations import expected_stream


def trusted_record(c, seed: int = 0):
    if c.expected is not None:
        return expected_stream(c, seed)
    if not c.hidden:
        return golden.record(c.key)
    return record.drive(c, "solutions", seed)
