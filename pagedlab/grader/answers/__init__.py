"""Answer models: small, independent models of Tasks 11, 12 and 13, for the instructor edition only.

Each one is a correct answer to a graded task, so `pagedlab release` leaves this folder out of
the student edition (and its lines are searched for in every released file). Nothing graded
depends on them: the public checks judge from `expected.json`, the hidden ones from the
reference solution run at grading time. They stay for the instructor's tests (the reference
solution is compared with a second, independent implementation) and for the utilization
simulator's default buddy allocator.
"""
