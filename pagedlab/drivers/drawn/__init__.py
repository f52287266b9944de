"""Drivers of the hidden checks, run on scenarios the grader drew.

A hidden check is two halves in two places. Its *planner* (`grading/hidden/<module>.py`,
instructor only) runs in the grader: it draws the scenario from the grading's seed and returns
it as JSON data (sizes, ids, layouts, op lists, case parameters). Its *driver* lives here, in the
public package, and runs in the sandboxed child on that data alone (`run.scenario`): the child
never holds a hidden seed, a planner or anything that computes an expected record. The reference
run that the judge compares with gets the same data.
"""
