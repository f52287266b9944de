"""The grader: root's side of grading, where no student code runs. In the grading set-up this
folder is root-only (`pagedlab.sandbox.private`), so a check child, which runs as the sandbox user,
can neither import nor read anything here.

One task's way through it (`pipeline.run_task`):

    plan       registry: the task's checks (public ones, the instructor's hidden planners), each
               hidden scenario drawn from the grading's seed as data
    requests   each check as its driver's name and data, plus the empty engines' bytes (trusted)
    children   the check child (`pagedlab.drivers.child`) runs them as the sandbox user
               (`pagedlab.sandbox`); records: its record stream, read as untrusted data
    expected   the reference's records: committed (golden, expected.json) or run at grading time,
               numeric ones from the judge side (trusted)
    judge      each record against the expected one; causes: failures that follow from another
    score      the task's points (`pagedlab.spec.points`); report, results.json

Around it: cli (`pagedlab grade`), submission and intake (the files taken by name), notebooks
(`grade --notebooks`, with judge_service answering the notebook kernel's demo questions),
classroom, class_queue, class_report, array_task and similarity (grading a class), package
(the Gradescope zip). Instructor documentation: grading/README.md at the repository root.
"""
