"""The course's contract as data, read by every side: the task manifest (`manifest`, from
tasks.toml), each task's points and limits (`points`), each task's domain (`domains`) and the
catalog of checks (`catalog`: keys, rules, hints, case data). Standard library only: nothing here
imports the grader, the check child or a solution, so either side can read it without reaching
the other (tests/test_import_rules.py)."""
