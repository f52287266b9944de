"""The check child's side of grading: everything a check process may load, and nothing more.

A driver builds a check's scenario from the data the grader sent, calls the student's code and
records what it saw (`record`); it decides nothing and computes no expected value. The grader
(`pagedlab.grader`) plans the checks, starts `child` as the sandbox user with the plan on its
stdin, and judges the records. Nothing here imports `pagedlab.grader`, so in the grading set-up,
where that folder is root-only, a check child holds no answer (tests/test_import_rules.py).

    child          the check process: seal, read the plan, load the named drivers, run them
    record         Run, Stream, see/expect: what a driver records; drive() runs one driver
    given          which functions of a course file are given, for naming the student's frames
    <task module>  a task's public drivers and checks (memory_manager, swap, paged_attention...)
    drawn/         the drivers of hidden checks, run on a scenario the grader drew
    scenes, poison, batches, kernel_batch
                   builders of HW3 states, poisoned buffers and attention batches, from data
"""
