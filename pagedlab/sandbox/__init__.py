"""The sandbox: mechanism for running code the grader does not trust, and nothing else.

It knows how to confine a process, not what the process is for: nothing here imports the
drivers or the grader (tests/test_import_rules.py). The grader (`pagedlab.grader.pipeline`) and
the notebooks' graded cells use it from above.

    policy         how a child is confined (CPU time, memory, user, record, network), one value;
                   the instructor's PAGEDLAB_GRADE_* knobs read once (`Policy.from_env`)
    process        run_limited(command, policy): one limited child, its descriptors read back capped
    users          the sandbox users (a pool, one per concurrent job, each locked by its job) and the verified kill step
    workspace      a child's root-only io/ folder and its scratch; link-safe, recursion-free removal
    enter          root's last step inside the child's namespaces: private /tmp, then the sandbox user
    cgroups, ipc   per-job cgroups (memory, pids, kill); the user's System V objects swept
    seal           what a child does to itself before any student byte: non-dumpable, no-new-privs, seccomp
    private        the files a child may never read, made root-only (the grader's folder, solutions)
    trusted_builds root's builds of pagedlab's own runner programs, handed to a child read-only
"""
