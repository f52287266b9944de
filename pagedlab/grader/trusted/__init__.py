"""The judge side: code that computes what a correct implementation returns.

Nothing here is imported by the check child (`pagedlab.drivers.child`), and the grading set-up
(`pagedlab.sandbox.private`) makes this folder root-only, so a submission's code, which runs as
the sandbox user, can neither import nor read it. The judge (the grader, or the notebook's
kernel in the student edition) imports it to compute the expected records of the numeric checks.
"""
