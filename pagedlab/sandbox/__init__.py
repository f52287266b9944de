"""Running a submission's code: limited child processes, sandbox users, the task runner.

Both the notebooks' graded cells (`pagedlab.graded.run`) and the grader (`pagedlab grade`) use
this package from above; it uses `checks` (drivers, judge) and `grading.points` (limits) below.

    users      the sandbox users (a pool, one per concurrent job, each locked by its job) and the verified kill step
    usable     whether a sandbox user can run the grader's Python at all (asked before grading)
    workspace  a child's root-only io/ folder and its scratch; link-safe, recursion-free removal
    process    run one limited child (CPU-time limit, namespaces), hand it descriptors, read them back capped
    enter      root's last step inside the child's namespaces: private /tmp, then the sandbox user
    record     parse a child's record as untrusted data
    runner     one task: plan, children, the reference's records, the judge's verdicts
"""
